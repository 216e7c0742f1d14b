"""Domain values passed between store, services and api: frozen dataclasses, no I/O.

Datetimes are aware UTC. Ids are UUID4 strings (`cms.clock.new_id`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

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
class Validation:
    """Validation keys of a field definition (decisions.md, Records).

    `min`/`max` bound the length of text and the value of numbers; `pattern` is a regex for text.
    """

    required: bool = False
    min: float | None = None
    max: float | None = None
    pattern: str | None = None
    unique: bool = False


@dataclass(frozen=True)
class FieldSpec:
    """One field of a collection schema.

    `type` is one of `cms.services.content.fields.FIELD_TYPES`. `values`/`max_select` apply to select,
    `collection_id`/`max_select`/`cascade_delete` to relation, `max_select` to file.
    `cascade_delete`: deleting a target record deletes the records that point to it (otherwise
    the reference is removed from them).
    """

    name: str
    type: str
    validation: Validation = Validation()
    values: tuple[str, ...] | None = None
    max_select: int | None = None
    collection_id: str | None = None
    cascade_delete: bool = False


SIGNED_IN_RULE = '@request.auth.id != ""'
"""The default create, update and delete rule of a base collection: any signed-in principal."""
OWN_RECORD_RULE = "id = @request.auth.id"
"""The default list, view, update and delete rule of an auth collection: the user's own record."""


@dataclass(frozen=True)
class AccessRules:
    """The five access rules of a collection (decisions.md, Access rules): each is None (admins
    only), "" (everyone, anonymous callers included) or an expression of the rule grammar
    (`filters.grammar.parse_rule`), kept verbatim as it was set."""

    list_rule: str | None = ""
    view_rule: str | None = ""
    create_rule: str | None = SIGNED_IN_RULE
    update_rule: str | None = SIGNED_IN_RULE
    delete_rule: str | None = SIGNED_IN_RULE

    def rule(self, action: str) -> str | None:
        """The rule of `action` (list, view, create, update or delete). Raises AttributeError
        for another action."""
        value: str | None = getattr(self, f"{action}_rule")
        return value


BASE_RULES = AccessRules()
"""The rules of a base collection created without rules: today's behaviour (public reads,
signed-in writes)."""
AUTH_RULES = AccessRules(list_rule=OWN_RECORD_RULE, view_rule=OWN_RECORD_RULE, create_rule=None,
                         update_rule=OWN_RECORD_RULE, delete_rule=OWN_RECORD_RULE)
"""The rules of an auth collection created without rules: each user reaches only their own record;
users come from register."""


def default_rules(collection_type: str) -> AccessRules:
    """The rules a collection of `collection_type` (`base` or `auth`) gets when none are given."""
    return AUTH_RULES if collection_type == "auth" else BASE_RULES


@dataclass(frozen=True)
class Collection:
    """A user-defined collection; `version` grows by one on every update (schema cache key)."""

    id: str
    name: str
    type: str
    fields: tuple[FieldSpec, ...]
    created: datetime
    updated: datetime
    version: int = 1
    otp_enabled: bool = False
    mfa_enabled: bool = False
    oauth_enabled: bool = False
    rules: AccessRules = BASE_RULES

    def field(self, name: str) -> FieldSpec | None:
        """The schema field called `name`, or None."""
        return next((f for f in self.fields if f.name == name), None)


@dataclass(frozen=True)
class Record:
    """A record: system fields plus the values of its collection's fields in `data`."""

    id: str
    created: datetime
    updated: datetime
    data: dict[str, Any]


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: `page` is 1-based, `total` counts every match."""

    items: list[T]
    total: int
    page: int
    per_page: int


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
class AuditEntry:
    """One audit log entry (decisions.md, Audit events): `severity` info | warning | critical."""

    id: str
    event_type: str
    severity: str
    created: datetime
    user_id: str | None = None
    ip_address: str = ""
    user_agent: str = ""
    details: dict[str, Any] = field(default_factory=dict)


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
class Webhook:
    """A webhook (spec: Webhook): POSTs the record events `events` (create/update/delete) of the
    collection `collection_name` (id `collection_id`) to `url`, signed when `secret` is set, retried
    up to `retry_count` times. `created_by` / `created_by_role` are the admin-table user who made it
    (deliveries carry only records that user may view)."""

    id: str
    url: str
    collection_name: str
    collection_id: str
    events: tuple[str, ...]
    active: bool
    retry_count: int
    created: datetime
    updated: datetime
    created_by: str = ""
    created_by_role: str = ROLE_USER
    secret: str | None = field(default=None, repr=False)

    @property
    def signed(self) -> bool:
        """Whether deliveries are signed (a secret is set)."""
        return bool(self.secret)


@dataclass(frozen=True)
class WebhookDelivery:
    """One delivery of one event to one webhook: `body` is the exact JSON text sent on every
    attempt; `id` is the delivery id (`X-Webhook-Delivery`, `webhook-id`), stable across retries.
    Deliveries travel in outbox batches (`cms.store.webhooks.OutboxBatch`), which carry the status;
    `status`, `enqueued_at` and `done_at` here are read only from outbox entries written before
    batching (one delivery per document)."""

    id: str
    webhook_id: str
    event: str
    collection: str
    record_id: str
    body: str
    created: datetime
    status: str = "pending"
    enqueued_at: datetime | None = None
    done_at: datetime | None = None


@dataclass(frozen=True)
class DeliveryAttempt:
    """A delivery log entry (spec: Webhook delivery log entry): one attempt of a delivery.
    `attempt` is 1 for the first; `response_body` holds at most 2 KiB; `error` says why an attempt
    failed without a status (time-out, connection, refused address)."""

    id: str
    webhook_id: str
    delivery_id: str
    event_type: str
    record_id: str
    url: str
    status_code: int | None
    response_body: str
    attempt: int
    success: bool
    duration_ms: int
    error: str | None
    created: datetime


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


@dataclass(frozen=True)
class StoredFile:
    """A file attached to a record (spec: Files), its bytes in GridFS.

    `size` is in bytes; `sha256` is the hex SHA-256 of the bytes, computed while uploading;
    `collection` is the collection's name and `collection_id` its id; `content_type` is a
    validated `type/subtype` (with an optional charset)."""

    id: str
    filename: str
    content_type: str
    size: int
    collection_id: str
    collection: str
    record_id: str
    sha256: str
    created: datetime
