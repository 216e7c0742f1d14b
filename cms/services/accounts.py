"""Admin-table users: register, login, refresh, me, logout, email verification
(spec: Admin authentication, Authentication 1-5; decisions.md: Identity and tokens)."""

from __future__ import annotations

import asyncio
import logging

from cms.clock import Clock, new_id, utcnow
from cms.errors import BadRequest, InvalidCredentials, Unauthorized, ValidationFailed
from cms.models import ADMIN_AUDIENCE, ROLE_ADMIN, ROLE_USER, AdminUser, LoginResult, Principal, TokenPair
from cms.security.passwords import PasswordPolicy, hash_password, verify_dummy, verify_password
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


class AccountService:
    """The built-in users table; every method raises CmsError subclasses only."""

    def __init__(
        self,
        users: AdminUserRepository,
        sessions: SessionService,
        one_time_tokens: OneTimeTokens,
        mailer: Mailer,
        settings: SettingsService,
        *,
        clock: Clock = utcnow,
    ) -> None:
        self._users = users
        self._sessions = sessions
        self._one_time_tokens = one_time_tokens
        self._mailer = mailer
        self._settings = settings
        self._clock = clock

    async def register(self, email: str, password: str, password_confirm: str | None = None, name: str = "") -> AdminUser:
        """Create a user with role `user`, unverified, and queue its verification email.
        Raises ValidationFailed (policy, confirmation) or AlreadyExists (email taken)."""
        policy = (await self._settings.auth()).password_policy
        check_password(policy, password, password_confirm)
        user = await self._create(email, password, role=ROLE_USER, verified=False, name=name)
        await self._send_verification(user)
        return user

    async def create_admin(self, email: str, password: str, name: str = "") -> AdminUser:
        """Create a verified user with role `admin` (CLI and ADMIN_* bootstrap). Raises like register."""
        policy = (await self._settings.auth()).password_policy
        check_password(policy, password, None)
        return await self._create(email, password, role=ROLE_ADMIN, verified=True, name=name)

    async def ensure_admin(self, email: str, password: str) -> bool:
        """Create the admin if no admin exists yet; True when one was created."""
        if await self._users.count_admins() > 0:
            return False
        await self.create_admin(email, password)
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
        user = await self._users.get_by_email(normalize_email(email))
        if user is None:
            await asyncio.to_thread(verify_dummy, password)
            raise InvalidCredentials()
        if not await asyncio.to_thread(verify_password, user.password_hash, password):
            raise InvalidCredentials()
        auth = await self._settings.auth()
        _, pair = await self._sessions.start(
            user.id, ADMIN_AUDIENCE, access_lifetime_s=auth.access_lifetime_s,
            refresh_lifetime_s=auth.refresh_lifetime_s, user_agent=user_agent, ip=ip,
        )
        return LoginResult(user=user, token=pair, message=None, requires_2fa=False)

    async def refresh(self, refresh_token: str) -> TokenPair:
        """Rotate a refresh token (see SessionService.refresh). Raises Unauthorized."""
        auth = await self._settings.auth()
        return await self._sessions.refresh(
            refresh_token, ADMIN_AUDIENCE,
            access_lifetime_s=auth.access_lifetime_s, refresh_lifetime_s=auth.refresh_lifetime_s,
        )

    async def authenticate(self, access_token: str) -> Principal:
        """The principal behind an admin-audience access token. Raises Unauthorized."""
        claims, session = await self._sessions.authenticate(access_token, ADMIN_AUDIENCE)
        user = await self._users.get(claims.sub)
        if user is None:
            raise Unauthorized("User no longer exists")
        return Principal(kind="admin_user", user_id=user.id, role=user.role, session_id=session.id)

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

    async def verify_email(self, token: str) -> AdminUser:
        """Spend a verification token and mark the user verified. Raises TokenInvalid / TokenExpired."""
        spent = await self._one_time_tokens.consume(token, VERIFY_EMAIL)
        if spent.audience != ADMIN_AUDIENCE:
            raise BadRequest("This token belongs to an auth collection; pass its collection")
        user = await self._users.get(spent.user_id)
        if user is None:
            raise BadRequest("The user no longer exists")
        await self._users.update(user.id, self._clock(), verified=True)
        return await self.me(Principal(kind="admin_user", user_id=user.id, role=user.role))

    async def resend_verification(self, principal: Principal) -> bool:
        """Queue a new verification email (older links stop working). False if already verified."""
        user = await self.me(principal)
        if user.verified:
            return False
        await self._send_verification(user)
        return True

    async def _send_verification(self, user: AdminUser) -> None:
        token = await self._one_time_tokens.issue(VERIFY_EMAIL, user.id, ADMIN_AUDIENCE)
        await self._mailer.send_verification(user.email, token)
