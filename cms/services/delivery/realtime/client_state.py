"""A realtime client's state as Redis keeps it (decisions.md, Realtime), and who the client is bound to.

The state (`keys.realtime_client`) is `{topics, ref, owner}`: the topics as subscribed, the reference of
the credential behind them (None: anonymous) and the client's owner, the `owner_of` the principal of its
first POST with credentials (None until then). The owner never changes: a later POST, or a resume that
carries credentials, of another principal is refused by the stream's Lua scripts (`stream.ClientBound`),
atomically with the change it would have made, on whichever replica it arrives.

A client id is a secret like a token: it is never logged. `client_tag` names a client in a log line
without revealing its id.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import orjson

from cms.models import Principal
from cms.services.identity.authn import CredentialRef

log = logging.getLogger("cms.realtime")

TAG_LENGTH = 12
"""Hex characters of a client's log tag (48 bits of its SHA-256: enough to tell clients apart in a log)."""


def owner_of(principal: Principal | None) -> str | None:
    """The owner a client of `principal` is bound to: `admin:<user id>` for an admin-table user and for an
    API key (whose principal is the admin-table user who made it), `collection:<collection id>:<user id>`
    for an auth-collection user; None for anonymous (which binds nothing)."""
    if principal is None:
        return None
    if principal.kind == "collection_user":
        return f"collection:{principal.collection_id}:{principal.user_id}"
    return f"admin:{principal.user_id}"


def client_tag(client_id: str) -> str:
    """What a log line names client `client_id` by: `rt-` and the first TAG_LENGTH hex digits of its
    SHA-256 (the same client always gets the same tag; the id cannot be read back from it)."""
    return "rt-" + hashlib.sha256(client_id.encode()).hexdigest()[:TAG_LENGTH]


@dataclass(frozen=True)
class ClientState:
    """`topics` (texts as subscribed), `ref` (the credential behind them; None: anonymous) and `owner`
    (`owner_of` the principal the client is bound to; None: not bound yet)."""

    topics: tuple[str, ...] = ()
    ref: CredentialRef | None = None
    owner: str | None = None

    def encode(self) -> bytes:
        """The stored JSON: `{topics, ref, owner}`."""
        return orjson.dumps({"topics": list(self.topics), "ref": None if self.ref is None else self.ref.to_json(),
                             "owner": self.owner})

    @classmethod
    def decode(cls, stored: bytes, client_id: str) -> ClientState:
        """The state stored as `stored`; an unreadable one is logged (by `client_tag`) and reads as no
        subscriptions (its owner, which the Lua scripts read themselves, is not needed here)."""
        try:
            raw = orjson.loads(stored)
            topics = tuple(t for t in raw.get("topics", []) if isinstance(t, str))
            ref = None if raw.get("ref") is None else CredentialRef.from_json(raw["ref"])
            owner = raw.get("owner")
            return cls(topics, ref, owner if isinstance(owner, str) else None)
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("realtime client %s: unreadable state; no subscriptions", client_tag(client_id))
            return cls()
