"""Signing in, for every user system: password login, the second factor when it is on (`mfa.py`),
starting a session after the proofs (password, OTP, 2FA), and refresh-token rotation (spec: Admin
authentication, Auth collection endpoints, Authentication 1-5; decisions.md: Identity and tokens,
Two-factor login, Response shapes).
"""

from __future__ import annotations

from typing import NoReturn

from cms.errors import InvalidCredentials
from cms.models import LoginResult, TokenPair
from cms.security.passwords import is_unicode_text
from cms.services.delivery.events import AuditEvent
from cms.services.identity.credentials import check_login_password, normalize_email
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.mfa import TwoFactor
from cms.services.identity.systems import U, UserSystem

SECOND_FACTOR_MESSAGE = "Two-factor authentication required: send a code with the mfa_token to 2fa/verify."


class Login:
    """Password login, sessions started after a proof, and refresh; token lifetimes come from the
    settings (`settings.auth()`)."""

    def __init__(self, deps: IdentityDeps, two_factor: TwoFactor) -> None:
        self._deps = deps
        self._two_factor = two_factor

    async def signed_in(self, system: UserSystem[U], user: U, *, method: str, ip: str = "",
                        user_agent: str = "") -> LoginResult:
        """The login response once the first factor (`method`: password, otp) is proven: a session,
        or, when the user's second factor is required, `requires_2fa` with an `mfa_token` and no
        session (decisions.md, Two-factor login)."""
        if await self._two_factor.required(system, user):
            mfa_token = await self._two_factor.challenge(system, user)
            return LoginResult(user=user, token=None, message=SECOND_FACTOR_MESSAGE, requires_2fa=True,
                               mfa_token=mfa_token)
        return await self.start_session(system, user, method=method, ip=ip, user_agent=user_agent)

    async def second_step(self, system: UserSystem[U], mfa_token: str, code: str, *, ip: str = "",
                          user_agent: str = "") -> LoginResult:
        """Complete a login with its `mfa_token` and a code (`2fa/verify`): the normal login
        response and a session. Raises what `TwoFactor.complete` raises."""
        user = await self._two_factor.complete(system, mfa_token, code)
        return await self.start_session(system, user, method="2fa", ip=ip, user_agent=user_agent)

    async def password(self, system: UserSystem[U], email: str, password: str, *, ip: str = "",
                       user_agent: str = "") -> LoginResult:
        """Check the password and start a session. Raises InvalidCredentials, the same (and in about
        the same time: one argon2 verification either way) for an unknown email and a wrong
        password; the failure is audited (`login_failed`). A hash made with older argon2 parameters
        is replaced while the password is known."""
        email = normalize_email(email)
        user = await system.find_by_email(email)
        matches, upgraded = await check_login_password(user.password_hash if user else None, password)
        if user is None or not matches:
            await self._failed(system, email, user.id if user else None)
        if upgraded is not None:
            await system.set_password_hash(user.id, upgraded)
        return await self.signed_in(system, user, method="password", ip=ip, user_agent=user_agent)

    async def _failed(self, system: UserSystem[U], email: str, user_id: str | None) -> NoReturn:
        await self._deps.events.emit([AuditEvent(
            "login_failed", user_id=user_id,
            details={"email": email if is_unicode_text(email) else "", "audience": system.audience},
        )])
        raise InvalidCredentials()

    async def start_session(self, system: UserSystem[U], user: U, *, method: str, ip: str = "",
                            user_agent: str = "") -> LoginResult:
        """Start a session for a user who proved who they are (`method`: password, otp) and return
        the login response `{user, token, message: None, requires_2fa: False}`; audits `login_success`
        (for `user`, from the request's origin). `ip` and `user_agent` are kept on the session (its
        listing shows them)."""
        auth = await self._deps.settings.auth()
        _, pair = await self._deps.sessions.start(
            user.id, system.audience, access_lifetime_s=auth.access_lifetime_s,
            refresh_lifetime_s=auth.refresh_lifetime_s, user_agent=user_agent, ip=ip,
        )
        await self._deps.events.emit([AuditEvent("login_success", user_id=user.id,
                                            details={"audience": system.audience, "method": method})])
        return LoginResult(user=user, token=pair, message=None, requires_2fa=False)

    async def refresh(self, system: UserSystem[U], refresh_token: str) -> TokenPair:
        """Rotate a refresh token of `system` (see SessionService.refresh). Raises Unauthorized
        (invalid, expired, spent, revoked, or of another user system)."""
        auth = await self._deps.settings.auth()
        return await self._deps.sessions.refresh(
            refresh_token, system.audience, access_lifetime_s=auth.access_lifetime_s,
            refresh_lifetime_s=auth.refresh_lifetime_s, reuse_interval_s=auth.refresh_reuse_interval_s,
        )
