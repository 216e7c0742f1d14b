"""Who is calling and the records of the identity systems: principals and audiences, admin-table
users, collection users, sessions, one-time tokens and codes, login answers, API keys.

Frozen dataclasses, no I/O; re-exported by `cms.models`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cms.models.content import Record

ADMIN_AUDIENCE = "admin"
ROLE_ADMIN = "admin"
ROLE_USER = "user"

PrincipalKind = Literal["admin_user", "collection_user", "api_key"]


def collection_audience(collection_id: str) -> str:
    """The JWT `aud` of an auth collection's users: `collection:<collection id>`."""
    return f"collection:{collection_id}"


def audience_collection_id(audience: str) -> str | None:
    """The collection id of an audience `collection:<collection id>`; None for any other audience."""
    prefix = collection_audience("")
    collection_id = audience.removeprefix(prefix)
    return collection_id if audience.startswith(prefix) and collection_id else None


@dataclass(frozen=True)
class Principal:
    """Who is calling: an admin-table user, an auth-collection user or an API key.

    `user_id` is the acting user (for an API key, the admin-table user who made it);
    `session_id` is the session behind a bearer token (None for API keys); `collection_id` and
    `collection_name` name the auth collection of a `collection_user`; `email` and `verified` are
    the acting user's, for access rules (`@request.auth.email`, `@request.auth.verified`).
    """

    kind: PrincipalKind
    user_id: str
    role: str = ROLE_USER
    session_id: str | None = None
    collection_id: str | None = None
    scopes: tuple[str, ...] = ()
    collection_name: str = ""
    email: str = ""
    verified: bool = False

    @property
    def is_admin(self) -> bool:
        """True for an admin-table user with role `admin`."""
        return self.kind == "admin_user" and self.role == ROLE_ADMIN


@dataclass(frozen=True)
class AdminUser:
    """A row of the built-in users table (admin-dashboard access)."""

    id: str
    email: str
    role: str
    verified: bool
    name: str
    created: datetime
    updated: datetime
    password_hash: str = field(repr=False, default="")


@dataclass(frozen=True)
class Session:
    """One login: tokens are valid only while `revoked_at` is None.

    `refresh_jti` is the jti of the one refresh token that may still be spent (rotation).
    `previous_refresh_jti` is the jti that the last rotation spent and `refresh_rotated_at` when
    (UTC); both are None until the first refresh, and serve the `refresh_reuse_interval_s` grace.
    """

    id: str
    user_id: str
    audience: str
    refresh_jti: str
    created: datetime
    last_used: datetime
    user_agent: str = ""
    ip: str = ""
    revoked_at: datetime | None = None
    previous_refresh_jti: str | None = None
    refresh_rotated_at: datetime | None = None


@dataclass(frozen=True)
class OneTimeToken:
    """A single-use emailed token (stored by its SHA-256 hash in `id`).

    `purpose`: "verify_email" | "password_reset" | "email_change"; `data` carries extras
    such as the new address of an email change.
    """

    id: str
    purpose: str
    user_id: str
    audience: str
    created: datetime
    expires_at: datetime
    used_at: datetime | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenPair:
    """The token object of the spec; `expires_in` is the access token's lifetime in seconds."""

    access_token: str
    refresh_token: str
    expires_in: int
    token_type: str = "bearer"


@dataclass(frozen=True)
class LoginResult:
    """A login response: the user, the nested token object, a message and the 2FA flag; with
    `requires_2fa`, `token` is None and `mfa_token` is what `2fa/verify` takes."""

    user: Any
    token: TokenPair | None
    message: str | None = None
    requires_2fa: bool = False
    mfa_token: str | None = None


@dataclass(frozen=True)
class CollectionUser:
    """A user of an auth collection: its record (whose `data` holds `email`, lower-cased, and
    `verified`, next to the schema fields) and its password hash, which is stored apart from the
    record so no record read (list, export, webhook payload) can ever carry it."""

    collection_id: str
    record: Record
    password_hash: str = field(repr=False, default="")

    @property
    def id(self) -> str:
        """The user id: the id of its record."""
        return self.record.id

    @property
    def email(self) -> str:
        """The user's email address (lower-cased); empty for a record created without one."""
        return str(self.record.data.get("email", ""))

    @property
    def verified(self) -> bool:
        """Whether the email address is verified."""
        return bool(self.record.data.get("verified", False))


@dataclass(frozen=True)
class OtpCode:
    """An emailed one-time login code, stored by its hash (`code_hash`).

    `attempts` counts verification tries (right or wrong); the code is void once `used_at` is set,
    once `attempts` reaches the limit, or at `expires_at`."""

    id: str
    collection_id: str
    user_id: str
    code_hash: str
    created: datetime
    expires_at: datetime
    attempts: int = 0
    used_at: datetime | None = None


@dataclass(frozen=True)
class ApiKey:
    """An API key (spec: API key): acts for the admin-table user `user_id` on records and files,
    with `scopes` ("read": GET/HEAD, "write": POST/PATCH/DELETE). Only the SHA-256 `key_hash` of
    the secret is stored; the secret is shown once, at creation. `expires_at` None never expires;
    `last_used` is written at most once a minute."""

    id: str
    name: str
    scopes: tuple[str, ...]
    user_id: str
    created: datetime
    key_hash: str = field(repr=False, default="")
    expires_at: datetime | None = None
    last_used: datetime | None = None
