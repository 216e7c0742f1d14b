"""Email verification, for every user system (spec: States and transitions, "User (admin or auth
collection)"): a one-time link (24 h, single use; a newer one voids older ones) marks the address
verified. The token's audience names the user system it was issued for.
"""

from __future__ import annotations

from cms.errors import TokenInvalid
from cms.models import Principal
from cms.services.access import require_admin
from cms.services.delivery.events import AuditEvent
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.one_time_tokens import VERIFY_EMAIL
from cms.services.identity.systems import U, UserSystem


class Verification:
    """Sends verification links and spends them."""

    def __init__(self, deps: IdentityDeps) -> None:
        self._deps = deps

    async def send(self, system: UserSystem[U], user: U) -> None:
        """Issue a verification token (older unused ones stop working) and queue the email."""
        token = await self._deps.one_time_tokens.issue(VERIFY_EMAIL, user.id, system.audience)
        await self._deps.mailer.send_verification(user.email, token, collection=system.collection_name)

    async def resend(self, system: UserSystem[U], user: U) -> bool:
        """Queue a new link; False (nothing sent) when the address is already verified."""
        if user.verified:
            return False
        await self.send(system, user)
        return True

    async def verify(self, system: UserSystem[U], token: str) -> U:
        """Spend a verification token of `system` and mark its user verified; audits `email_verified`.
        The audience is checked before the token is spent, so another system's link stays usable on
        its own endpoint. Raises TokenInvalid (unknown, used, replaced, of another system, user gone)
        or TokenExpired (24 h)."""
        spent = await self._deps.one_time_tokens.consume(token, VERIFY_EMAIL, audience=system.audience)
        user = await system.get(spent.user_id)
        if user is None:
            raise TokenInvalid("The user of this token no longer exists")
        user = await system.set_verified(user)
        await self._deps.events.emit([AuditEvent("email_verified", user_id=user.id,
                                                 details={"audience": system.audience})])
        return user

    async def mark_verified(self, system: UserSystem[U], user: U, by: Principal) -> None:
        """An admin marks the user's address verified without a link (admin UI); audited as
        `email_verified` with the admin as its user and the target in its details. Raises Forbidden
        when `by` is not an admin."""
        require_admin(by)
        await system.set_verified(user)
        await self._deps.events.emit([AuditEvent(
            "email_verified", user_id=by.user_id,
            details={"audience": system.audience, "target_user_id": user.id, "by_admin": True})])

    async def verify_any(self, token: str) -> None:
        """Spend a verification token of whichever system issued it (`POST /auth/verify-email`).
        Raises TokenInvalid (unknown, used, or of a collection that no longer exists) or TokenExpired."""
        audience = await self._deps.one_time_tokens.audience_of(token, VERIFY_EMAIL)
        system = await self._deps.systems.by_audience(audience) if audience else self._deps.systems.admin
        if system is None:  # the collection is gone, and its user system with it
            raise TokenInvalid()
        await self.verify(system, token)
