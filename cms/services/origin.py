"""The request behind a change: who sent it, from where and with what client (decisions.md, Audit context).

The API's and the admin UI's middleware set a `RequestOrigin` once per request, after the principal
is known, in a ContextVar; it follows every asyncio task started from the request (a backup job of
the serving process) and is captured by each audit event when the event is created, so an entry
written after a commit, or held by `EventBus.unit`, keeps it. A job queued for a worker carries it
as a JSON-safe argument (`to_json` / `from_json`) and runs under it (`origin_scope`). Outside any
request (a worker's sweep, a start-up bootstrap) the origin is `NO_ORIGIN`: every field empty.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RequestOrigin:
    """Who caused a change: `user_id` of the request's principal (None when anonymous), the client's
    `ip_address` (after TRUSTED_PROXIES), its `user_agent` (empty when none was sent) and the
    `request_id` (`X-Request-Id`). Every field empty: no request behind it."""

    user_id: str | None = None
    ip_address: str = ""
    user_agent: str = ""
    request_id: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict of the four fields (a job argument)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RequestOrigin:
        """The origin `to_json` gave; missing or non-string values read as empty (None: NO_ORIGIN)."""
        if not data:
            return NO_ORIGIN
        user_id = data.get("user_id")
        return cls(user_id=user_id if isinstance(user_id, str) else None,
                   **{key: value if isinstance(value := data.get(key), str) else ""
                      for key in ("ip_address", "user_agent", "request_id")})


NO_ORIGIN = RequestOrigin()
_current: ContextVar[RequestOrigin] = ContextVar("cms_request_origin", default=NO_ORIGIN)


def current_origin() -> RequestOrigin:
    """The origin of the request this task serves (or was started from); NO_ORIGIN outside one."""
    return _current.get()


@contextmanager
def origin_scope(origin: RequestOrigin) -> Iterator[RequestOrigin]:
    """Run the block (and the tasks it starts) under `origin`; the previous one is back afterwards."""
    token = _current.set(origin)
    try:
        yield origin
    finally:
        _current.reset(token)
