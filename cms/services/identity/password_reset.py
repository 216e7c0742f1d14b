"""Password reset, for every user system (spec: Admin authentication rules 1-2, States and
transitions, Errors rules 2 and 4; decisions.md: Response shapes).

A request never looks the address up while the client waits: it is queued (`send_password_reset`
job), so the answer and its timing are the same whether or not the address exists. The job finds
the user and emails a link carrying a one-time token (1 hour, single use) whose audience names the
user system. Spending it sets the new password, marks the address verified (the link proved it) and
revokes every session and every other unspent link (an email change, a verification) of that user.
"""

from __future__ import annotations

from cms.errors import TokenInvalid
from cms.services.delivery.events import AuditEvent
from cms.services.identity.credentials import Credentials, new_password_hash, normalize_email
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.one_time_tokens import PASSWORD_RESET
from cms.services.origin import current_origin

RESET_REQUESTED_MESSAGE = "If an account with this email exists, a password reset link has been sent to it."


class PasswordReset:
    """Requests (queued), link emails (in the worker) and resets."""

    def __init__(self, deps: IdentityDeps, credentials: Credentials) -> None:
        self._deps = deps
        self._credentials = credentials

    async def request(self, email: str, collection_name: str | None = None) -> None:
        """Queue a reset for `email` among the admin-table users, or among the users of the auth
        collection `collection_name`, with the request's origin (the job audits under it). Does not
        look the address up and hashes nothing, so it takes the same time either way. Raises NotFound
        only for an unknown or non-auth collection."""
        systems = self._deps.systems
        system = systems.admin if collection_name is None else await systems.collection(collection_name)
        await self._deps.jobs.enqueue_password_reset(system.audience, email, current_origin().to_json())

    async def send_link(self, audience: str, email: str) -> bool:
        """The job's work: if `email` is a user of the user system `audience`, issue a reset token
        (older unused ones stop working) and queue the email with its link. Every request is written
        to the audit log (`password_reset_requested`, with `known` false for an unknown address) with
        the current origin: the job runs under the request's (`origin_scope`; decisions.md, Audit
        context). Returns whether an email was queued."""
        email = normalize_email(email)
        system = await self._deps.systems.by_audience(audience)
        user = await system.find_by_email(email) if system is not None else None
        await self._deps.events.emit([AuditEvent(
            "password_reset_requested", user_id=user.id if user else None,
            details={"email": email, "audience": audience, "known": user is not None},
        )])
        if user is None or not user.email:
            return False
        token = await self._deps.one_time_tokens.issue(PASSWORD_RESET, user.id, audience)
        await self._deps.mailer.send_password_reset(user.email, token)
        return True

    async def reset(self, token: str, new_password: str, password_confirm: str | None = None) -> None:
        """Spend a reset token and set `new_password` for its user, in the user system the token
        belongs to; every session and every other unspent emailed link of that user is revoked and the address
        counts as verified.

        The password is checked before the token is spent, so a refused password leaves the link
        usable. Raises ValidationFailed (policy: errors `{"new_password": [...]}`, confirmation),
        TokenInvalid (unknown, used, replaced by a newer request, user or collection gone) or
        TokenExpired (1 hour)."""
        await self._credentials.check_policy(new_password, password_confirm, field="new_password")
        spent = await self._deps.one_time_tokens.consume(token, PASSWORD_RESET)
        password_hash = await new_password_hash(new_password)
        system = await self._deps.systems.by_audience(spent.audience)
        user = await system.get(spent.user_id) if system is not None else None
        if system is None or user is None:
            raise TokenInvalid("The user of this token no longer exists")
        await system.set_password_hash(user.id, password_hash)
        await system.set_verified(user)
        await self._deps.sessions.revoke_all(user.id, spent.audience)
        await self._deps.one_time_tokens.void_all(user.id)  # e.g. an email change asked with a stolen password
        await self._deps.events.emit([AuditEvent("password_reset_completed", user_id=spent.user_id,
                                            details={"audience": spent.audience})])
