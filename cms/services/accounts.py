"""Admin-table users: register, login, refresh, me, logout, email verification and the user side
of a password reset (spec: Admin authentication, Authentication 1-5; decisions.md: Identity and tokens)."""

from __future__ import annotations

import asyncio
import logging
from typing import NoReturn

from cms.clock import Clock, new_id, utcnow
from cms.errors import AlreadyExists, InvalidCredentials, TokenInvalid, Unauthorized, ValidationFailed
from cms.models import ADMIN_AUDIENCE, ROLE_ADMIN, ROLE_USER, AdminUser, LoginResult, Principal, TokenPair
from cms.security.passwords import (
    PasswordPolicy,
    hash_password,
    is_unicode_text,
    needs_rehash,
    verify_dummy,
    verify_password,
)
from cms.services.audit import AuditService
from cms.services.mail import Mailer
from cms.services.one_time_tokens import VERIFY_EMAIL, OneTimeTokens
from cms.services.sessions import SessionService
from cms.services.settings import SettingsService
from cms.store.admin_users import AdminUserRepository

log = logging.getLogger("cms.accounts")


def normalize_email(email: str) -> str:
    """Emails are compared and stored trimmed and lower-cased."""
    return email.strip().lower()


def check_password(policy: PasswordPolicy, password: str, confirm: str | None, field: str = "password") -> None:
    """Apply the password policy and the optional confirmation. Raises ValidationFailed (422)."""
    problems = policy.violations(password)
    if problems:
        raise ValidationFailed("Password does not meet the policy", errors={field: problems})
    if confirm is not None and confirm != password:
        raise ValidationFailed("Passwords do not match", errors={"password_confirm": ["Does not match."]})


def check_text(**values: str) -> None:
    """Refuse values that are not valid Unicode text (lone surrogates). Raises ValidationFailed (422)
    naming each such field."""
    bad = {name: ["Must be valid Unicode text."] for name, value in values.items() if not is_unicode_text(value)}
    if bad:
        raise ValidationFailed("Text is not valid Unicode", errors=bad)


async def check_login_password(password_hash: str | None, password: str) -> tuple[bool, str | None]:
    """Check a login password with one argon2 verification whether or not the account exists: with
    no hash (unknown email, or an account without a password) `password` is checked against the
    dummy hash, so every failure takes about the same time (no timing oracle).

    Returns `(matches, upgraded)`: `upgraded` is a new hash of `password` when it matched a hash made
    with other hasher parameters (store it while the password is known), else None."""
    if not password_hash:
        await asyncio.to_thread(verify_dummy, password)
        return False, None
    if not await asyncio.to_thread(verify_password, password_hash, password):
        return False, None
    if needs_rehash(password_hash):
        return True, await asyncio.to_thread(hash_password, password)
    return True, None


class AccountService:
    """The built-in users table; every method raises CmsError subclasses only."""

    def __init__(
        self,
        users: AdminUserRepository,
        sessions: SessionService,
        one_time_tokens: OneTimeTokens,
        mailer: Mailer,
        settings: SettingsService,
        audit: AuditService,
        *,
        clock: Clock = utcnow,
    ) -> None:
        self._audit = audit
        self._users = users
        self._sessions = sessions
        self._one_time_tokens = one_time_tokens
        self._mailer = mailer
        self._settings = settings
        self._clock = clock

    async def register(self, email: str, password: str, password_confirm: str | None = None,
                       name: str = "") -> AdminUser:
        """Create a user with role `user`, unverified, and queue its verification email.
        Raises ValidationFailed (policy, confirmation, text that is not valid Unicode) or
        AlreadyExists (email taken, compared case-insensitively)."""
        policy = (await self._settings.auth()).password_policy
        check_password(policy, password, password_confirm)
        check_text(email=email, name=name)
        user = await self._create(email, password, role=ROLE_USER, verified=False, name=name)
        await self._send_verification(user)
        await self._audit.record("register", user_id=user.id, details={"audience": ADMIN_AUDIENCE})
        return user

    async def create_admin(self, email: str, password: str, name: str = "") -> AdminUser:
        """Create a verified user with role `admin` (CLI and ADMIN_* bootstrap). Raises like register."""
        policy = (await self._settings.auth()).password_policy
        check_password(policy, password, None)
        check_text(email=email, name=name)
        return await self._create(email, password, role=ROLE_ADMIN, verified=True, name=name)

    async def ensure_admin(self, email: str, password: str) -> bool:
        """Create the admin if no admin exists yet; True when one was created. Replicas starting at
        once may all see no admin: the one whose insert loses (the address is taken) returns False."""
        if await self._users.count_admins() > 0:
            return False
        try:
            await self.create_admin(email, password)
        except AlreadyExists:
            return False
        log.info("bootstrap admin %s created", normalize_email(email))
        return True

    async def _create(self, email: str, password: str, *, role: str, verified: bool, name: str) -> AdminUser:
        now = self._clock()
        user = AdminUser(
            id=new_id(), email=normalize_email(email), role=role, verified=verified, name=name,
            created=now, updated=now, password_hash=await asyncio.to_thread(hash_password, password),
        )
        await self._users.insert(user)
        return user

    async def login(self, email: str, password: str, *, user_agent: str = "", ip: str = "") -> LoginResult:
        """Check the password and start a session. Raises InvalidCredentials, the same (and in
        about the same time) for an unknown email and a wrong password."""
        email = normalize_email(email)
        user = await self._users.get_by_email(email) if is_unicode_text(email) else None
        matches, upgraded = await check_login_password(user.password_hash if user else None, password)
        if user is None or not matches:
            await self._login_failed(email, user.id if user else None, ip, user_agent)
        if upgraded is not None:
            await self._users.update(user.id, self._clock(), password_hash=upgraded)
        auth = await self._settings.auth()
        _, pair = await self._sessions.start(
            user.id, ADMIN_AUDIENCE, access_lifetime_s=auth.access_lifetime_s,
            refresh_lifetime_s=auth.refresh_lifetime_s, user_agent=user_agent, ip=ip,
        )
        await self._audit.record("login_success", user_id=user.id, ip_address=ip, user_agent=user_agent,
                                 details={"audience": ADMIN_AUDIENCE})
        return LoginResult(user=user, token=pair, message=None, requires_2fa=False)

    async def _login_failed(self, email: str, user_id: str | None, ip: str, user_agent: str) -> NoReturn:
        """Record a failed attempt (for the audit log) and raise InvalidCredentials."""
        await self._audit.record(
            "login_failed", user_id=user_id, ip_address=ip, user_agent=user_agent,
            details={"email": email if is_unicode_text(email) else "", "audience": ADMIN_AUDIENCE},
        )
        raise InvalidCredentials()

    async def refresh(self, refresh_token: str) -> TokenPair:
        """Rotate a refresh token (see SessionService.refresh). Raises Unauthorized."""
        auth = await self._settings.auth()
        return await self._sessions.refresh(
            refresh_token, ADMIN_AUDIENCE,
            access_lifetime_s=auth.access_lifetime_s, refresh_lifetime_s=auth.refresh_lifetime_s,
            reuse_interval_s=auth.refresh_reuse_interval_s,
        )

    async def authenticate(self, access_token: str) -> Principal:
        """The principal behind an admin-audience access token. Raises Unauthorized."""
        claims, session = await self._sessions.authenticate(access_token, ADMIN_AUDIENCE)
        user = await self._users.get(claims.sub)
        if user is None:
            raise Unauthorized("User no longer exists")
        return Principal(kind="admin_user", user_id=user.id, role=user.role, session_id=session.id,
                         email=user.email, verified=user.verified)

    async def principal_of(self, user_id: str) -> Principal | None:
        """The admin-table user `user_id` as a principal (current role, email, verified; no
        session), or None when there is no such user. Used to apply access rules on a user's
        behalf outside a request (webhook deliveries)."""
        user = await self._users.get(user_id)
        if user is None:
            return None
        return Principal(kind="admin_user", user_id=user.id, role=user.role, email=user.email, verified=user.verified)

    async def me(self, principal: Principal) -> AdminUser:
        """The calling admin-table user. Raises Unauthorized for other principals."""
        if principal.kind != "admin_user":
            raise Unauthorized("Not an admin-table user token")
        user = await self._users.get(principal.user_id)
        if user is None:
            raise Unauthorized("User no longer exists")
        return user

    async def logout(self, principal: Principal) -> None:
        """Revoke the caller's session: its access and refresh tokens stop working at once."""
        if principal.session_id is not None:
            await self._sessions.revoke(principal.session_id)
            await self._audit.record("logout", user_id=principal.user_id, details={"session_id": principal.session_id})

    async def verify_email(self, token: str) -> AdminUser:
        """Spend a verification token and mark the user verified. Raises TokenInvalid / TokenExpired."""
        # The audience is checked before the token is spent: an auth collection's link sent here
        # must stay usable on its own endpoint.
        spent = await self._one_time_tokens.consume(token, VERIFY_EMAIL, audience=ADMIN_AUDIENCE)
        user = await self._users.get(spent.user_id)
        if user is None:
            raise TokenInvalid("The user of this token no longer exists")
        await self._users.update(user.id, self._clock(), verified=True)
        await self._audit.record("email_verified", user_id=user.id, details={"audience": ADMIN_AUDIENCE})
        return await self.me(Principal(kind="admin_user", user_id=user.id, role=user.role))

    async def resend_verification(self, principal: Principal) -> bool:
        """Queue a new verification email (older links stop working). False if already verified."""
        user = await self.me(principal)
        if user.verified:
            return False
        await self._send_verification(user)
        return True

    async def find_by_email(self, email: str) -> AdminUser | None:
        """The admin-table user with this address (compared lower-cased), or None."""
        email = normalize_email(email)
        return await self._users.get_by_email(email) if is_unicode_text(email) else None

    async def complete_password_reset(self, user_id: str, password_hash: str) -> bool:
        """Store the new hash, mark the address verified (the reset link proved it) and revoke every
        session of the user. False when the user is gone (the flow is in password_resets.py)."""
        user = await self._users.get(user_id)
        if user is None:
            return False
        await self._users.update(user.id, self._clock(), password_hash=password_hash, verified=True)
        await self._sessions.revoke_all(user.id, ADMIN_AUDIENCE)
        return True

    async def _send_verification(self, user: AdminUser) -> None:
        token = await self._one_time_tokens.issue(VERIFY_EMAIL, user.id, ADMIN_AUDIENCE)
        await self._mailer.send_verification(user.email, token)
