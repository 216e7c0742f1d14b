"""Single-use emailed tokens: verification (24 h), password reset (1 h), email change.

The raw token goes into the emailed link only; the store keeps its SHA-256 hash
(spec: States and transitions; decisions.md: used -> 400 token_invalid, expired -> 400 token_expired).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cms.clock import Clock, utcnow
from cms.errors import TokenExpired, TokenInvalid
from cms.models import OneTimeToken
from cms.security.codes import hash_token, new_token
from cms.store.one_time_tokens import OneTimeTokenRepository

VERIFY_EMAIL = "verify_email"
PASSWORD_RESET = "password_reset"
EMAIL_CHANGE = "email_change"
LIFETIMES_S = {VERIFY_EMAIL: 24 * 3600, PASSWORD_RESET: 3600, EMAIL_CHANGE: 24 * 3600}


class OneTimeTokens:
    """Issues and consumes single-use tokens; a new token of a purpose voids the user's older ones."""

    def __init__(self, repository: OneTimeTokenRepository, *, clock: Clock = utcnow) -> None:
        self._repository = repository
        self._clock = clock

    async def issue(self, purpose: str, user_id: str, audience: str, data: dict[str, Any] | None = None) -> str:
        """Store a new token for `purpose` (valid `LIFETIMES_S[purpose]` seconds); returns the raw token."""
        now = self._clock()
        await self._repository.void_unused(user_id, purpose, now)
        raw = new_token()
        await self._repository.insert(
            OneTimeToken(
                id=hash_token(raw), purpose=purpose, user_id=user_id, audience=audience, created=now,
                expires_at=now + timedelta(seconds=LIFETIMES_S[purpose]), data=data or {},
            )
        )
        return raw

    async def void_all(self, user_id: str) -> None:
        """Void every unspent token of the user, of every purpose: the links already mailed stop
        working (a password reset, an email change or a takeover by a verified owner ends them)."""
        await self._repository.void_unused(user_id, None, self._clock())

    async def audience_of(self, raw: str, purpose: str) -> str | None:
        """The user system (`aud`) of an unspent token of `purpose`, without spending it; None when
        there is no such unspent token."""
        token = await self._repository.get(hash_token(raw), purpose)
        return token.audience if token is not None and token.used_at is None else None

    async def consume(self, raw: str, purpose: str, *, audience: str | None = None) -> OneTimeToken:
        """Spend a token of `purpose` (and of `audience`, the user system, when given).

        Raises TokenInvalid (unknown, other purpose or audience, already used) or TokenExpired;
        a refused token is left as it was, so it still works where it belongs."""
        token = await self._repository.get(hash_token(raw), purpose)
        if token is None or token.used_at is not None:
            raise TokenInvalid()
        if audience is not None and token.audience != audience:
            raise TokenInvalid()
        now = self._clock()
        if now >= token.expires_at:
            raise TokenExpired()
        if not await self._repository.mark_used(token.id, now):
            raise TokenInvalid()
        return token
