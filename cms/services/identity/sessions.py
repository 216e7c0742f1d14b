"""A signed-in user's sessions, for every user system: authenticate an access token, log out, list
the active sessions, revoke one or all (spec: Auth collection endpoints `sessions`; decisions.md:
Identity and tokens). Revocation holds on every replica at once: sessions live in MongoDB (and a
replica's cached sessions go with the session epoch, `SessionService`).
"""

from __future__ import annotations

from cms.errors import NotFound, Unauthorized
from cms.models import ADMIN_AUDIENCE, Principal, Session, audience_collection_id
from cms.services.access import require_admin
from cms.services.delivery.events import AuditEvent
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.systems import U, UserSystem


class UserSessions:
    """Session management for signed-in users of any system."""

    def __init__(self, deps: IdentityDeps) -> None:
        self._deps = deps

    async def authenticate(self, access_token: str, audience: str) -> Principal:
        """The principal behind an access token whose (verified) audience is `audience`: the token's
        type and expiry, an active session and an existing user are required. Raises Unauthorized."""
        if audience != ADMIN_AUDIENCE and audience_collection_id(audience) is None:
            raise Unauthorized("Token is not valid here")
        claims, session = await self._deps.sessions.authenticate(access_token, audience)
        return await self._deps.sessions.principal(session.id,
                                              lambda: self._deps.systems.principal(audience, claims.sub, session.id))

    async def principal_of_session(self, audience: str, user_id: str, session_id: str) -> Principal:
        """The principal of the active session `session_id` of `user_id` in the user system
        `audience`, without a token (both cached under the session epoch). Raises Unauthorized
        (revoked, another user's, user or collection gone)."""
        await self._deps.sessions.active(session_id, user_id)
        return await self._deps.sessions.principal(session_id,
                                              lambda: self._deps.systems.principal(audience, user_id, session_id))

    async def logout(self, principal: Principal) -> None:
        """Revoke the caller's session: its access and refresh tokens stop working at once."""
        if principal.session_id is not None:
            await self._deps.sessions.revoke(principal.session_id)
            await self._deps.events.emit([AuditEvent("logout", user_id=principal.user_id,
                                                details={"session_id": principal.session_id})])

    async def active(self, system: UserSystem[U], user: U) -> list[Session]:
        """The user's active sessions, newest first."""
        return await self._deps.sessions.list_active(user.id, system.audience)

    async def revoke(self, system: UserSystem[U], user: U, session_id: str) -> None:
        """Revoke one of the user's sessions (its tokens stop working at once). Raises NotFound (no
        active session of the user has this id)."""
        if not await self._deps.sessions.revoke(session_id, user_id=user.id):
            raise NotFound("Session not found")
        await self._deps.events.emit([AuditEvent("session_revoked", user_id=user.id,
                                            details={"audience": system.audience, "session_id": session_id})])

    async def revoke_all(self, system: UserSystem[U], user: U, *, by: Principal | None = None) -> int:
        """Revoke every session of the user, the current one included; returns how many. `by`: an
        admin acting on the user (admin UI), who is then the audit entry's user (the target in
        its details). Raises Forbidden when `by` is not an admin."""
        details: dict[str, object] = {"audience": system.audience, "all": True}
        if by is not None:
            require_admin(by)
            details["target_user_id"] = user.id
        count = await self._deps.sessions.revoke_all(user.id, system.audience)
        await self._deps.events.emit([AuditEvent("session_revoked", user_id=by.user_id if by is not None else user.id,
                                            details={**details, "count": count})])
        return count
