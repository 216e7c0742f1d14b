"""Two-factor login with TOTP (RFC 6238, `pyotp`), for every user system (issue 14, item 1; spec:
Authentication 5 `requires_2fa`, setting `mfa_enabled`; decisions.md: Two-factor login (TOTP)).

- `setup` makes a secret (pending until a code from it turns 2FA on) and returns it with its
  `otpauth://` URL and that URL as a QR code in SVG (`segno`).
- `enable {code}` turns 2FA on and returns RECOVERY_CODE_COUNT one-time recovery codes, once; only
  their SHA-256 hashes are kept.
- With 2FA on and the system's `mfa_enabled` (the setting for admin-table users, the collection's
  own attribute for auth collections), a login that proved the first factor gets no session but an
  `mfa_token` (JWT `typ: mfa`, MFA_TOKEN_LIFETIME_S, accepted by `2fa/verify` only); `verify`
  spends it with a code and the login completes with a session.
- A code is accepted within TOTP_DRIFT_STEPS steps (30 s each) of the server's time and only for a
  time step later than the last accepted one, so no code works twice. MFA_MAX_ATTEMPTS wrong codes
  void an `mfa_token`; MAX_USER_FAILURES wrong codes within FAILURE_WINDOW_S, over every token and
  client address, make further codes 429 until the window ends. Every step is audited:
  `mfa_enabled`, `mfa_disabled`, `mfa_failed` and `mfa_recovery_used` (the last two as warnings).
- Setup and enable are refused (403) while the system's `mfa_enabled` is off: a factor that login
  would ignore must not look like protection.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

import pyotp
import segno

from cms.clock import new_id
from cms.errors import BadRequest, Forbidden, OtpInvalid, RateLimited, TokenExpired, TokenInvalid, Unauthorized
from cms.security.codes import constant_time_equals, hash_token
from cms.security.tokens import MFA, TokenCodec
from cms.services.delivery.events import AuditEvent
from cms.services.identity.credentials import Credentials
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.systems import U, UserSystem
from cms.store.mfa import MfaRepository

MFA_TOKEN_LIFETIME_S = 300
"""How long the second step of a login may wait (seconds)."""
MFA_MAX_ATTEMPTS = 5
"""Wrong codes that void an `mfa_token`."""
TOTP_DRIFT_STEPS = 1
"""Time steps (30 s each) a code may be early or late."""
RECOVERY_CODE_COUNT = 10
RECOVERY_CODE_BYTES = 5
"""Each recovery code is 10 hex digits, shown as `xxxxx-xxxxx`."""
MAX_USER_FAILURES = 10
FAILURE_WINDOW_S = 900
"""Wrong codes one user may get within this many seconds, over all tokens and client addresses;
beyond that every code is refused with 429 until the window ends."""
MAX_CODE_LENGTH = 64
"""Longer `code` values are refused before any work."""
ISSUER = "CMS"
"""The issuer an authenticator app shows next to the account."""
QR_SCALE = 4

_TOTP_CODE = re.compile(r"\d{6}")
_RECOVERY_CODE = re.compile(r"[0-9a-f]{10}")


@dataclass(frozen=True)
class TotpSetup:
    """What `2fa/setup` returns: the base32 `secret`, its `otpauth_url` and that URL as `qr_svg`."""

    secret: str
    otpauth_url: str
    qr_svg: str


def _normalized_recovery_code(code: str) -> str | None:
    """A recovery code as stored (lower-case hex, no dash), or None when `code` is not one."""
    compact = code.strip().replace("-", "").lower()
    return compact if _RECOVERY_CODE.fullmatch(compact) else None


def _new_recovery_codes() -> list[str]:
    codes = [secrets.token_hex(RECOVERY_CODE_BYTES) for _ in range(RECOVERY_CODE_COUNT)]
    return [f"{code[:5]}-{code[5:]}" for code in codes]


class TwoFactor:
    """TOTP factors and the second step of a login, for any user system; every method raises
    CmsError subclasses only."""

    def __init__(self, deps: IdentityDeps, repository: MfaRepository, codec: TokenCodec,
                 credentials: Credentials) -> None:
        self._deps = deps
        self._repository = repository
        self._codec = codec
        self._credentials = credentials

    # --- the factor -----------------------------------------------------------------------------

    async def setup(self, system: UserSystem[U], user: U) -> TotpSetup:
        """A new secret for `user`, pending until `enable` proves it; nothing is enabled yet.
        Raises Forbidden (the system's `mfa_enabled` is off: a factor would be ignored at login) or
        BadRequest when 2FA is already on (turn it off first)."""
        await self._require_switch(system)
        factor = await self._repository.factor(system.audience, user.id)
        if factor is not None and factor.get("enabled"):
            raise BadRequest("Two-factor authentication is already enabled; disable it first")
        secret = pyotp.random_base32()
        await self._repository.set_pending(system.audience, user.id, secret, self._deps.clock())
        url = pyotp.TOTP(secret).provisioning_uri(name=user.email, issuer_name=ISSUER)
        svg = await asyncio.to_thread(lambda: segno.make(url, error="m").svg_inline(scale=QR_SCALE))
        return TotpSetup(secret=secret, otpauth_url=url, qr_svg=svg)

    async def enable(self, system: UserSystem[U], user: U, code: str) -> list[str]:
        """Turn 2FA on with a code from the pending secret; returns the recovery codes (shown once).
        Raises Forbidden (`mfa_enabled` off), OtpInvalid (no pending secret, or a wrong code) or
        BadRequest (already on)."""
        await self._require_switch(system)
        factor = await self._repository.factor(system.audience, user.id)
        if factor is not None and factor.get("enabled"):
            raise BadRequest("Two-factor authentication is already enabled")
        secret = factor.get("pending_secret") if factor else None
        step = self._matching_step(str(secret), code) if secret else None
        if secret is None or step is None:
            await self._failed(system, user.id, "enable: wrong code")
        codes = _new_recovery_codes()
        hashes = [hash_token(_normalized_recovery_code(c) or "") for c in codes]
        if not await self._repository.enable(system.audience, user.id, str(secret), step, hashes, self._deps.clock()):
            raise BadRequest("Two-factor authentication is already enabled")
        await self._deps.events.emit([AuditEvent("mfa_enabled", user_id=user.id,
                                                 details={"audience": system.audience})])
        return codes

    async def disable(self, system: UserSystem[U], user: U, password: str, code: str) -> None:
        """Turn 2FA off; needs the current password and a code (TOTP or recovery). Raises
        ValidationFailed (wrong password: `errors.password`), OtpInvalid (wrong, replayed or used
        code) or BadRequest (2FA is not on)."""
        await self._credentials.require_password(system, user, password, "password")
        factor = await self._repository.factor(system.audience, user.id)
        if factor is None or not factor.get("enabled"):
            raise BadRequest("Two-factor authentication is not enabled")
        await self._check_code(system, user.id, factor, code, "disable")
        await self._repository.delete(system.audience, user.id)
        await self._deps.events.emit([AuditEvent("mfa_disabled", user_id=user.id,
                                                 details={"audience": system.audience})])

    async def forget(self, system: UserSystem[U], user_id: str) -> None:
        """Drop the user's factor, if any (the account is being secured by another proof)."""
        await self._repository.delete(system.audience, user_id)

    async def forget_audience(self, audience: str) -> int:
        """Drop every factor of a deleted user system (`UserSystems.on_forgotten`); returns how many."""
        return await self._repository.delete_audience(audience)

    @staticmethod
    async def _require_switch(system: UserSystem[U]) -> None:
        if not await system.mfa_enabled():
            raise Forbidden("Two-factor login is switched off for these users")

    # --- the second step of a login -------------------------------------------------------------

    async def required(self, system: UserSystem[U], user: U) -> bool:
        """Whether `user`'s login needs the second step: 2FA on for the user and the system's switch on."""
        if not await system.mfa_enabled():
            return False
        factor = await self._repository.factor(system.audience, user.id)
        return bool(factor and factor.get("enabled"))

    async def challenge(self, system: UserSystem[U], user: U) -> str:
        """A new `mfa_token` for `user` (single use, MFA_TOKEN_LIFETIME_S)."""
        challenge_id = new_id()
        token, claims = self._codec.issue(sub=user.id, sid=challenge_id, typ=MFA, aud=system.audience,
                                          lifetime_s=MFA_TOKEN_LIFETIME_S)
        await self._repository.insert_challenge(challenge_id, system.audience, user.id,
                                                claims.exp + timedelta(seconds=1))
        return token

    async def complete(self, system: UserSystem[U], mfa_token: str, code: str) -> U:
        """Spend `mfa_token` with a code (TOTP or recovery) and return its user, whose login may now
        start a session. Raises TokenInvalid (bad, spent, voided or of another system), TokenExpired,
        or OtpInvalid (a wrong, replayed or used code; the MFA_MAX_ATTEMPTS-th voids the token)."""
        try:
            claims = self._codec.decode(mfa_token, typ=MFA, audience=system.audience, check_expiry=False)
        except Unauthorized as exc:
            raise TokenInvalid() from exc
        if self._deps.clock() >= claims.exp:
            raise TokenExpired()
        challenge = await self._repository.claim_attempt(claims.sid, MFA_MAX_ATTEMPTS)
        if challenge is None or challenge["user_id"] != claims.sub:
            raise TokenInvalid()
        user = await system.get(claims.sub)
        factor = await self._repository.factor(system.audience, claims.sub)
        if user is None or factor is None or not factor.get("enabled"):
            raise TokenInvalid()
        await self._check_code(system, user.id, factor, code, "login")
        if not await self._repository.spend_challenge(claims.sid, self._deps.clock()):
            raise TokenInvalid()
        return user

    # --- codes ----------------------------------------------------------------------------------

    def _matching_step(self, secret: str, code: str) -> int | None:
        """The time step within the drift window whose TOTP code is `code`, or None."""
        code = code.strip()
        if not _TOTP_CODE.fullmatch(code):
            return None
        totp = pyotp.TOTP(secret)
        current = totp.timecode(self._deps.clock())
        for step in (current, *(current + d for n in range(1, TOTP_DRIFT_STEPS + 1) for d in (-n, n))):
            if constant_time_equals(totp.generate_otp(step), code):
                return step
        return None

    async def _check_code(self, system: UserSystem[U], user_id: str, factor: dict[str, Any], code: str,
                          during: str) -> None:
        """Accept a TOTP code of a later step than the last accepted one, or an unused recovery
        code (spent, and audited `mfa_recovery_used`). Raises OtpInvalid otherwise (audited `mfa_failed`)."""
        now = self._deps.clock()
        since = factor.get("failures_since")
        if (int(factor.get("failures", 0)) >= MAX_USER_FAILURES and isinstance(since, datetime)
                and now - since < timedelta(seconds=FAILURE_WINDOW_S)):
            retry_after_s = max(1, int((since + timedelta(seconds=FAILURE_WINDOW_S) - now).total_seconds()))
            raise RateLimited("Too many wrong codes for this account; try again later", retry_after_s=retry_after_s)
        code = code[:MAX_CODE_LENGTH]
        step = self._matching_step(str(factor.get("secret", "")), code)
        if step is not None:
            if await self._repository.claim_step(system.audience, user_id, step):
                await self._cleared(system, user_id, factor)
                return
            await self._failed(system, user_id, f"{during}: replayed code")
        recovery = _normalized_recovery_code(code)
        if recovery is not None and await self._repository.use_recovery_code(system.audience, user_id,
                                                                              hash_token(recovery)):
            await self._cleared(system, user_id, factor)
            await self._deps.events.emit([AuditEvent("mfa_recovery_used", user_id=user_id,
                                                details={"audience": system.audience, "during": during})])
            return
        await self._failed(system, user_id, f"{during}: wrong code")

    async def _cleared(self, system: UserSystem[U], user_id: str, factor: dict[str, Any]) -> None:
        if factor.get("failures"):
            await self._repository.clear_failures(system.audience, user_id)

    async def _failed(self, system: UserSystem[U], user_id: str, reason: str) -> NoReturn:
        now = self._deps.clock()
        await self._repository.count_failure(system.audience, user_id, now, now - timedelta(seconds=FAILURE_WINDOW_S))
        await self._deps.events.emit([AuditEvent("mfa_failed", user_id=user_id,
                                            details={"audience": system.audience, "reason": reason})])
        raise OtpInvalid()
