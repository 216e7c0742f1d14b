"""API keys (spec: API key; decisions.md: Identity and tokens): created by admin-table users,
acting for them on records and files with `read` and/or `write` scope.

The secret (`cms_` + 32 random bytes, URL-safe) is returned once, at creation, and stored only as
its SHA-256. A deleted (revoked) or expired key is refused at once on every replica: each request
looks the key up by its hash (one `_id` read). `last_used` is written at most once a minute.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from cms.clock import Clock, new_id, utcnow
from cms.errors import NotFound, Unauthorized, ValidationFailed
from cms.models import ApiKey, Principal
from cms.security.codes import API_KEY_PREFIX, hash_token, new_api_key
from cms.services import access
from cms.services.delivery.events import AuditEvent, EventBus
from cms.store.admin_users import AdminUserRepository
from cms.store.api_keys import ApiKeyRepository

SCOPES = ("read", "write")
MAX_NAME_LENGTH = 100
MAX_KEY_LENGTH = 200
"""A presented value longer than this is not a key (refused without a look-up)."""
TOUCH_INTERVAL = timedelta(seconds=60)


def is_api_key(credential: str) -> bool:
    """Whether `credential` has the form of an API key (`cms_` prefix), not of a JWT."""
    return credential.startswith(API_KEY_PREFIX)


class ApiKeyService:
    """Create, list and revoke keys; resolve a presented key to its Principal."""

    def __init__(self, keys: ApiKeyRepository, users: AdminUserRepository, events: EventBus, *,
                 clock: Clock = utcnow, on_revoked: Callable[[], Awaitable[None]] | None = None) -> None:
        self._keys = keys
        self._users = users
        self._events = events
        self._clock = clock
        self._on_revoked = on_revoked

    async def create(self, principal: Principal, name: str, scopes: Sequence[str],
                     expires_at: datetime | None) -> tuple[ApiKey, str]:
        """A new key of the calling admin-table user and its secret (shown only now). Raises
        Forbidden (not an admin-table user) or ValidationFailed (empty or long name, scopes not a
        non-empty subset of read/write, `expires_at` not in the future; naive means UTC)."""
        access.require_admin_table(principal, "API keys")
        name = name.strip()
        if not name or len(name) > MAX_NAME_LENGTH:
            raise _invalid("name", f"Must be 1 to {MAX_NAME_LENGTH} characters.")
        if not scopes or any(s not in SCOPES for s in scopes):
            raise _invalid("scopes", "Must be a non-empty list of: read, write.")
        now = self._clock()
        if expires_at is not None:
            expires_at = expires_at.replace(tzinfo=UTC) if expires_at.tzinfo is None else expires_at.astimezone(UTC)
            if expires_at <= now:
                raise _invalid("expires_at", "Must be in the future.")
        secret = new_api_key()
        key = ApiKey(id=new_id(), name=name, scopes=tuple(s for s in SCOPES if s in scopes), user_id=principal.user_id,
                     created=now, key_hash=hash_token(secret), expires_at=expires_at)
        await self._keys.insert(key)
        await self._events.emit([AuditEvent(
            "api_key_created", user_id=principal.user_id,
            details={"api_key_id": key.id, "name": key.name, "scopes": list(key.scopes)})])
        return key, secret

    async def list_keys(self, principal: Principal) -> list[ApiKey]:
        """The caller's keys (an admin: every key), oldest first. Raises Forbidden."""
        access.require_admin_table(principal, "API keys")
        return await self._keys.find(user_id=access.owner_scope(principal))

    async def revoke(self, principal: Principal, key_id: str) -> None:
        """Delete a key of the caller (an admin: any key); it stops working at once. Raises
        Forbidden or NotFound."""
        access.require_admin_table(principal, "API keys")
        key = await self._keys.get(key_id)
        if key is None or not access.manages(principal, key.user_id):
            raise NotFound("API key not found")
        await self._keys.delete(key.id)
        if self._on_revoked is not None:  # realtime streams re-check their credentials (session epoch)
            await self._on_revoked()
        await self._events.emit([AuditEvent(
            "api_key_revoked", user_id=principal.user_id,
            details={"api_key_id": key.id, "name": key.name, "owner": key.user_id})])

    async def authenticate(self, secret: str) -> Principal:
        """The principal (kind `api_key`, acting for the key's user with that user's current role)
        behind a presented key. Raises Unauthorized for an unknown, revoked or expired key, or one
        whose user no longer exists."""
        if len(secret) > MAX_KEY_LENGTH:
            raise Unauthorized("Invalid API key")
        return await self.authenticate_hash(hash_token(secret))

    async def authenticate_hash(self, key_hash: str) -> Principal:
        """As `authenticate`, for the key whose SHA-256 hex digest is `key_hash` (a realtime stream
        re-checks the key of its subscriptions with it, never holding the secret). Raises Unauthorized."""
        key = await self._keys.by_hash(key_hash)
        now = self._clock()
        if key is None:
            raise Unauthorized("Invalid API key")
        if key.expires_at is not None and now >= key.expires_at:
            raise Unauthorized("API key has expired")
        user = await self._users.get(key.user_id)
        if user is None:
            raise Unauthorized("The API key's user no longer exists")
        if key.last_used is None or now - key.last_used > TOUCH_INTERVAL:
            await self._keys.touch(key.key_hash, now)
        return Principal(kind="api_key", user_id=user.id, role=user.role, scopes=key.scopes, email=user.email,
                         verified=user.verified)


def _invalid(field_name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid {field_name}: {message}", errors={field_name: [message]})
