"""OTP login of auth collections: a 6-digit code emailed to the user (spec: Auth collection
endpoints, Authentication 6; decisions.md: Limits, Errors).

A code is valid 10 minutes, works once, and 5 tries (right or wrong) use it up; only its hash is
stored. A request is queued (`send_otp` job) and answered with the same message whether or not the
address exists. OTP works only while the collection's `otp_enabled` is true (403 `otp_disabled`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

from cms.clock import new_id
from cms.errors import NotFound, OtpDisabled, OtpInvalid
from cms.models import CollectionUser, LoginResult, OtpCode
from cms.security.codes import constant_time_equals, hash_token, new_otp_code
from cms.services.delivery.events import AuditEvent
from cms.services.identity.collection_users import CollectionUsers
from cms.services.identity.credentials import normalize_email
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.login import Login
from cms.services.origin import current_origin
from cms.store.otp_codes import OtpCodeRepository

OTP_LIFETIME_S = 600
OTP_MAX_ATTEMPTS = 5
OTP_REQUESTED_MESSAGE = "If an account with this email exists, a login code has been sent to it."


def code_hash(code_id: str, code: str) -> str:
    """What is stored for a code: SHA-256 of the code salted with its id (hex)."""
    return hash_token(f"{code_id}:{code}")


class OtpService:
    """Issues, emails and checks OTP login codes; a successful check starts a session."""

    def __init__(self, deps: IdentityDeps, login: Login, codes: OtpCodeRepository) -> None:
        self._deps = deps
        self._login = login
        self._codes = codes

    @staticmethod
    def _require_enabled(system: CollectionUsers) -> None:
        if not system.collection.otp_enabled:
            raise OtpDisabled()

    async def request(self, system: CollectionUsers, email: str) -> None:
        """Queue a code for `email`, with the request's origin. Does not look the address up, so it
        answers alike either way. Raises OtpDisabled (403) unless the collection's `otp_enabled`."""
        self._require_enabled(system)
        await self._deps.jobs.enqueue_otp(system.collection.id, email, current_origin().to_json())

    async def send_code(self, collection_id: str, email: str) -> bool:
        """The job's work: if `email` is a user of the collection (and OTP is still enabled there),
        store a new code (older ones stop working) and queue the email. Returns whether one was sent."""
        try:
            system = await self._deps.systems.collection_by_id(collection_id)
        except NotFound:
            return False
        user = await system.find_by_email(email)
        if not system.collection.otp_enabled or user is None or not user.email:
            return False
        now = self._deps.clock()
        code, code_id = new_otp_code(), new_id()
        await self._codes.void_unused(collection_id, user.id, now)
        await self._codes.insert(OtpCode(
            id=code_id, collection_id=collection_id, user_id=user.id, code_hash=code_hash(code_id, code),
            created=now, expires_at=now + timedelta(seconds=OTP_LIFETIME_S),
        ))
        await self._deps.mailer.send_otp(user.email, code)
        return True

    async def verify(self, system: CollectionUsers, email: str, code: str, *, ip: str = "",
                     user_agent: str = "") -> LoginResult:
        """Check the newest code of `email` and start a session; the address counts as verified.

        Raises OtpDisabled (403) or OtpInvalid (400, the same for an unknown address, no code, a
        wrong, expired, used or used-up code). Each failure is audited (`otp_failed`); the fifth try
        of a code is its last."""
        self._require_enabled(system)
        email = normalize_email(email)
        user = await system.find_by_email(email)
        collection_id = system.collection.id
        current = await self._codes.latest_unused(collection_id, user.id) if user else None
        if user is None or current is None or self._deps.clock() >= current.expires_at:
            await self._failed(system, email, user, "no valid code")
        claimed = await self._codes.claim_attempt(current.id, OTP_MAX_ATTEMPTS)
        if claimed is None:
            await self._failed(system, email, user, "code used up")
        if not constant_time_equals(claimed.code_hash, code_hash(claimed.id, code)):
            if claimed.attempts >= OTP_MAX_ATTEMPTS:
                await self._codes.mark_used(claimed.id, self._deps.clock())
            await self._failed(system, email, user, "wrong code")
        if not await self._codes.mark_used(claimed.id, self._deps.clock()):
            await self._failed(system, email, user, "code used up")
        user = await system.set_verified(user)
        return await self._login.signed_in(system, user, method="otp", ip=ip, user_agent=user_agent)

    async def _failed(self, system: CollectionUsers, email: str, user: CollectionUser | None,
                      reason: str) -> NoReturn:
        await self._deps.events.emit([AuditEvent(
            "otp_failed", user_id=user.id if user else None,
            details={"email": email, "audience": system.audience, "reason": reason},
        )])
        raise OtpInvalid()
