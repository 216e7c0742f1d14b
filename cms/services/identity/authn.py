"""Authentication: one place that turns a presented credential into a Principal (decisions.md,
Identity and tokens), called once per request by the API's principal middleware.

Credentials: an access token of the admin table (audience `admin`), an access token of an auth
collection (audience `collection:<id>`), or an API key (`cms_...`, in `X-API-Key` or as a bearer
token). A JWT's signature is verified before its audience picks the user system, which then checks
the rest (type, expiry, active session, user still there).

A realtime subscription outlives its request: `reference` turns the credential into a
`CredentialRef` (the session, or the key's hash, never the secret) that `revalidate` checks again
whenever the session epoch moves (decisions.md, Realtime: a revoked session or deleted API key stops
its events).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cms.errors import Unauthorized
from cms.models import Principal
from cms.security.codes import hash_token
from cms.security.tokens import ACCESS, TokenCodec
from cms.services.identity.api_keys import ApiKeyService, is_api_key
from cms.services.identity.sessions import UserSessions


@dataclass(frozen=True)
class CredentialRef:
    """What stands behind a principal, kept instead of the credential: for a token, its `audience`,
    `session_id`, `user_id` and `expires_at` (the access token's `exp`, aware UTC); for an API key,
    `key_hash` (SHA-256 hex of the secret)."""

    audience: str = ""
    session_id: str = ""
    user_id: str = ""
    expires_at: datetime | None = None
    key_hash: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (`from_json` reads it back)."""
        return {"audience": self.audience, "session_id": self.session_id, "user_id": self.user_id,
                "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
                "key_hash": self.key_hash}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CredentialRef:
        """The reference `to_json` wrote. Raises KeyError, TypeError or ValueError on anything else."""
        expires = body["expires_at"]
        return cls(audience=str(body["audience"]), session_id=str(body["session_id"]), user_id=str(body["user_id"]),
                   expires_at=None if expires is None else datetime.fromisoformat(expires),
                   key_hash=str(body["key_hash"]))


class Authenticator:
    """Resolves credentials of every kind with the user systems and the API key service."""

    def __init__(self, codec: TokenCodec, sessions: UserSessions, api_keys: ApiKeyService) -> None:
        self._codec = codec
        self._sessions = sessions
        self._api_keys = api_keys

    async def authenticate(self, credential: str) -> Principal:
        """The principal behind `credential` (a bearer token or an API key). Raises Unauthorized
        when it is not valid anywhere (bad, expired, revoked, unknown audience)."""
        if is_api_key(credential):
            return await self._api_keys.authenticate(credential)
        return await self._sessions.authenticate(credential, self._codec.verified_audience(credential))

    async def reference(self, credential: str) -> tuple[Principal, CredentialRef]:
        """The principal behind `credential` (as `authenticate`) and the reference `revalidate`
        checks it by later. Raises Unauthorized."""
        principal = await self.authenticate(credential)
        if is_api_key(credential):
            return principal, CredentialRef(key_hash=hash_token(credential))
        audience = self._codec.verified_audience(credential)
        claims = self._codec.decode(credential, typ=ACCESS, audience=audience)
        return principal, CredentialRef(audience=audience, session_id=claims.sid, user_id=claims.sub,
                                        expires_at=claims.exp)

    async def revalidate(self, ref: CredentialRef) -> Principal:
        """The principal behind `ref` now (its user's current role, email, verification). Raises
        Unauthorized when the session was revoked or the key deleted, the user is gone, or the token
        or key has expired."""
        if ref.key_hash:
            return await self._api_keys.authenticate_hash(ref.key_hash)
        if ref.expires_at is not None and self._codec.now() >= ref.expires_at:
            raise Unauthorized("Token has expired")
        return await self._sessions.principal_of_session(ref.audience, ref.user_id, ref.session_id)
