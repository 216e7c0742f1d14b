"""Password reset for admin-table users and auth-collection users (spec: Admin authentication
rules 1-2, States and transitions, Errors rules 2 and 4; decisions.md: Response shapes).

A request never looks the address up while the client waits: it is queued (`send_password_reset`
job), so the answer and its timing are the same whether or not the address exists. The job finds
the user and emails a link carrying a one-time token (1 hour, single use) whose audience names the
user system. Spending it sets the new password and revokes every session of that user.
"""

from __future__ import annotations

import asyncio

from cms.errors import TokenInvalid
from cms.jobs import JobQueue
from cms.models import ADMIN_AUDIENCE, AdminUser, CollectionUser, audience_collection_id, collection_audience
from cms.security.passwords import hash_password
from cms.services.accounts import AccountService, check_password, normalize_email
from cms.services.audit import AuditService
from cms.services.collection_auth import CollectionAuthService
from cms.services.mail import Mailer
from cms.services.one_time_tokens import PASSWORD_RESET, OneTimeTokens
from cms.services.settings import SettingsService

RESET_REQUESTED_MESSAGE = "If an account with this email exists, a password reset link has been sent to it."


class PasswordResetService:
    """Requests (queued), link emails (in the worker) and resets, for every user system."""

    def __init__(
        self,
        accounts: AccountService,
        collection_auth: CollectionAuthService,
        one_time_tokens: OneTimeTokens,
        jobs: JobQueue,
        mailer: Mailer,
        settings: SettingsService,
        audit: AuditService,
    ) -> None:
        self._accounts = accounts
        self._collection_auth = collection_auth
        self._one_time_tokens = one_time_tokens
        self._jobs = jobs
        self._mailer = mailer
        self._settings = settings
        self._audit = audit

    async def request(self, email: str, collection_name: str | None = None, *, ip: str = "",
                      user_agent: str = "") -> None:
        """Queue a reset for `email` among the admin-table users, or among the users of the auth
        collection `collection_name`. Does not look the address up and hashes nothing, so it takes
        the same time either way. Raises NotFound only for an unknown or non-auth collection."""
        audience = ADMIN_AUDIENCE
        if collection_name is not None:
            collection = await self._collection_auth.auth_collection(collection_name)
            audience = collection_audience(collection.id)
        await self._jobs.enqueue_password_reset(audience, email, ip, user_agent)

    async def send_link(self, audience: str, email: str, *, ip: str = "", user_agent: str = "") -> bool:
        """The job's work: if `email` is a user of the user system `audience`, issue a reset token
        (older unused ones stop working) and queue the email with its link. Every request is written
        to the audit log (`password_reset_requested`, with `known` false for an unknown address).
        Returns whether an email was queued."""
        email = normalize_email(email)
        user: AdminUser | CollectionUser | None = None
        if audience == ADMIN_AUDIENCE:
            user = await self._accounts.find_by_email(email)
        else:
            collection_id = audience_collection_id(audience)
            if collection_id is not None:
                user = await self._collection_auth.find_by_email(collection_id, email)
        await self._audit.record(
            "password_reset_requested", user_id=user.id if user else None, ip_address=ip,
            user_agent=user_agent, details={"email": email, "audience": audience, "known": user is not None},
        )
        if user is None or not user.email:
            return False
        token = await self._one_time_tokens.issue(PASSWORD_RESET, user.id, audience)
        await self._mailer.send_password_reset(user.email, token)
        return True

    async def reset(self, token: str, new_password: str, password_confirm: str | None = None, *, ip: str = "",
                    user_agent: str = "") -> None:
        """Spend a reset token and set `new_password` for its user, in the user system the token
        belongs to; every session of that user is revoked and the address counts as verified.

        The password is checked before the token is spent, so a refused password leaves the link
        usable. Raises ValidationFailed (policy: errors `{"new_password": [...]}`, confirmation),
        TokenInvalid (unknown, used, replaced by a newer request, user gone) or TokenExpired (1 hour)."""
        policy = (await self._settings.auth()).password_policy
        check_password(policy, new_password, password_confirm, field="new_password")
        spent = await self._one_time_tokens.consume(token, PASSWORD_RESET)
        password_hash = await asyncio.to_thread(hash_password, new_password)
        if spent.audience == ADMIN_AUDIENCE:
            done = await self._accounts.complete_password_reset(spent.user_id, password_hash)
        else:
            done = await self._collection_auth.complete_password_reset(spent.audience, spent.user_id,
                                                                      password_hash)
        if not done:
            raise TokenInvalid("The user of this token no longer exists")
        await self._audit.record("password_reset_completed", user_id=spent.user_id, ip_address=ip,
                                 user_agent=user_agent, details={"audience": spent.audience})
