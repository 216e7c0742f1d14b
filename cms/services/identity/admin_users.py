"""The admin table as a user system (`AdminUsers`; spec: Admin authentication; decisions.md:
Identity and tokens). The flows take it as a `UserSystem` (cms.services.identity.systems)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.models import ADMIN_AUDIENCE, ROLE_USER, AdminUser, Principal
from cms.security.passwords import is_unicode_text
from cms.services.access import ADMIN_TABLE_TOKEN_ONLY
from cms.services.identity.credentials import check_text, new_password_hash, normalize_email
from cms.services.operations.settings import SettingsService
from cms.store.admin_users import AdminUserRepository


class AdminUsers:
    """The admin table as a user system (UserSystem[AdminUser]). `data` at creation: `name`, and
    `role` (ROLE_USER unless the bootstrap path says ROLE_ADMIN; clients never set it)."""

    audience = ADMIN_AUDIENCE
    collection_name = None
    foreign_token_message = ADMIN_TABLE_TOKEN_ONLY

    def __init__(self, users: AdminUserRepository, settings: SettingsService, *, clock: Clock = utcnow,
                 changed: Callable[[], Awaitable[None]] | None = None) -> None:
        self._users = users
        self._settings = settings
        self._clock = clock
        self._changed = changed

    async def _after_change(self) -> None:
        """A user changed: principals cached from the old values go (`SessionService.invalidate`)."""
        if self._changed is not None:
            await self._changed()

    async def mfa_enabled(self) -> bool:
        """The global `mfa_enabled` setting."""
        return (await self._settings.auth()).mfa_enabled

    async def oauth_enabled(self) -> bool:
        """The global `oauth_enabled` setting."""
        return (await self._settings.auth()).oauth_enabled

    def owns(self, principal: Principal) -> bool:
        """Admin-table users (not API keys acting for them)."""
        return principal.kind == "admin_user"

    async def get(self, user_id: str) -> AdminUser | None:
        """The user with this id, or None."""
        return await self._users.get(user_id)

    async def find_by_email(self, email: str) -> AdminUser | None:
        """The user with this address, or None."""
        email = normalize_email(email)
        return await self._users.get_by_email(email) if is_unicode_text(email) else None

    async def count_admins(self) -> int:
        """How many users have role admin."""
        return await self._users.count_admins()

    async def create(self, email: str, password: str, data: dict[str, Any], *, verified: bool) -> AdminUser:
        """Store a new user (see the class). Raises ValidationFailed (name not Unicode text) or AlreadyExists."""
        name = str(data.get("name", ""))
        check_text(name=name)
        now = self._clock()
        user = AdminUser(id=new_id(), email=normalize_email(email), role=str(data.get("role", ROLE_USER)),
                         verified=verified, name=name, created=now, updated=now,
                         password_hash=await new_password_hash(password))
        await self._users.insert(user)
        return user

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        """Store a new password hash."""
        await self._users.update(user_id, self._clock(), password_hash=password_hash)
        await self._after_change()

    async def set_verified(self, user: AdminUser) -> AdminUser:
        """The user, verified."""
        if user.verified:
            return user
        now = self._clock()
        await self._users.update(user.id, now, verified=True)
        await self._after_change()
        return replace(user, verified=True, updated=now)

    async def set_email(self, user_id: str, email: str) -> AdminUser | None:
        """Change and verify the address. Raises AlreadyExists."""
        await self._users.update(user_id, self._clock(), email=normalize_email(email), verified=True)
        await self._after_change()
        return await self._users.get(user_id)

    def principal(self, user: AdminUser, session_id: str | None) -> Principal:
        """An `admin_user` principal with the user's current role."""
        return Principal(kind="admin_user", user_id=user.id, role=user.role, session_id=session_id,
                         email=user.email, verified=user.verified)

    async def principal_of(self, user_id: str) -> Principal | None:
        """The user `user_id` as a principal (current role, email, verified; no session), or None
        when there is no such user. Applies access rules on a user's behalf outside a request
        (webhook deliveries)."""
        user = await self._users.get(user_id)
        return None if user is None else self.principal(user, None)
