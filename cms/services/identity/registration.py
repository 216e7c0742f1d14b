"""Registration, for every user system, and the admin table's bootstrap (spec: Admin
authentication, Auth collection endpoints `register`; decisions.md: Running it, ADMIN_EMAIL).
"""

from __future__ import annotations

import logging
from typing import Any

from cms.errors import AlreadyExists
from cms.models import ROLE_ADMIN, AdminUser
from cms.services.delivery.events import AuditEvent
from cms.services.identity.credentials import Credentials, check_text, normalize_email
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.systems import U, UserSystem
from cms.services.identity.verification import Verification

log = logging.getLogger("cms.identity")


class Registration:
    """Creates users: self-registration (unverified, a verification email queued) in any system,
    and verified admins (CLI, ADMIN_* bootstrap)."""

    def __init__(self, deps: IdentityDeps, credentials: Credentials, verification: Verification) -> None:
        self._deps = deps
        self._credentials = credentials
        self._verification = verification

    async def register(self, system: UserSystem[U], email: str, password: str, password_confirm: str | None,
                       data: dict[str, Any]) -> U:
        """Create an unverified user with the system's own fields in `data` (admin table: `name`;
        auth collection: its schema fields), queue the verification email, audit `register`.
        Raises ValidationFailed (password policy or confirmation, text that is not valid Unicode,
        the system's fields), AlreadyExists (the address is taken, in any case) or NotFound."""
        await self._credentials.check_policy(password, password_confirm)
        check_text(email=email)
        user = await system.create(email, password, data, verified=False)
        await self._verification.send(system, user)
        await self._deps.events.emit([AuditEvent("register", user_id=user.id, details={"audience": system.audience})])
        return user

    async def create_admin(self, email: str, password: str, name: str = "") -> AdminUser:
        """Create a verified admin-table user with role `admin`. Raises like `register`."""
        await self._credentials.check_policy(password, None)
        check_text(email=email)
        return await self._deps.systems.admin.create(email, password, {"name": name, "role": ROLE_ADMIN}, verified=True)

    async def ensure_admin(self, email: str, password: str) -> bool:
        """Create the admin if no admin exists yet; True when one was created. Replicas starting at
        once may all see no admin: the one whose insert loses (the address is taken) returns False."""
        if await self._deps.systems.admin.count_admins() > 0:
            return False
        try:
            await self.create_admin(email, password)
        except AlreadyExists:
            return False
        log.info("bootstrap admin %s created", normalize_email(email))
        return True
