"""Where a client keeps its sign-in: the token pair, who signed in, and which user system issued them."""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Callable
from typing import Any

ADMIN_AUTH_PATH = "/api/v1/auth"
"""The admin table's auth endpoints; an auth collection's are `/api/v1/collections/{name}/auth`."""


def token_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, read without checking its signature (the service checks it): `{sub, sid, exp, ...}`.

    Returns `{}` for a value that is not a JWT (an API key, garbage)."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


Listener = Callable[["AuthStore"], None]


class AuthStore:
    """The signed-in state of one client: `token` (access JWT), `refresh_token`, `record` (the user as the
    login answered it: an admin-table user or an auth collection's record) and `auth_path` (the user system's
    prefix, `ADMIN_AUTH_PATH` or `/api/v1/collections/{name}/auth`, which refreshes go to).

    Subclass it and override `save`/`clear` to persist elsewhere (a file, a keyring). Thread-safe; each
    listener of `on_change` is called after every change, in the changing thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.token: str = ""
        self.refresh_token: str = ""
        self.record: dict[str, Any] | None = None
        self.auth_path: str = ADMIN_AUTH_PATH

    @property
    def expires_at(self) -> float | None:
        """The access token's `exp` (Unix seconds), or None without a token or an `exp` claim."""
        exp = token_claims(self.token).get("exp") if self.token else None
        return float(exp) if isinstance(exp, int | float) else None

    def is_valid(self, *, margin_s: float = 0.0) -> bool:
        """Whether an access token is held that expires more than `margin_s` seconds from now."""
        expires_at = self.expires_at
        return expires_at is not None and expires_at - margin_s > time.time()

    def save(self, token: str, refresh_token: str, record: dict[str, Any] | None = None,
             auth_path: str | None = None) -> None:
        """Keep a new token pair (a login or a refresh); `record` and `auth_path` stay unless given."""
        with self._lock:
            self.token, self.refresh_token = token, refresh_token
            if record is not None:
                self.record = record
            if auth_path is not None:
                self.auth_path = auth_path
        self._notify()

    def clear(self) -> None:
        """Forget the sign-in (logout, or a refresh the service refused)."""
        with self._lock:
            self.token, self.refresh_token, self.record = "", "", None
            self.auth_path = ADMIN_AUTH_PATH
        self._notify()

    def on_change(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(store)` after each `save` and `clear`; returns the function that stops it."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(self)
