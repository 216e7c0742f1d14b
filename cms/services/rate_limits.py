"""Rate limiting in Redis, so limits hold across replicas (decisions.md, Limits).

The algorithm is the `limits` library's moving window over its async Redis storage. Two kinds:
- general: `rate_limit_per_minute` (setting, default 600) requests per window per client IP;
- auth: 10 attempts per window per (action, client IP, identifier) on login, register, OTP,
  password reset and refresh.
Both are switched off by the `rate_limit_enabled` setting.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from limits import RateLimitItemPerSecond
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from cms.services.settings import SettingsService

AUTH_LIMIT = 10
DEFAULT_WINDOW_S = 60


@dataclass(frozen=True)
class RateLimitDecision:
    """The outcome of one hit: `remaining` hits left in the window, `reset_after_s` until the
    oldest hit leaves it (whole seconds, at least 1)."""

    allowed: bool
    limit: int
    remaining: int
    reset_after_s: int


class RateLimitService:
    """Counts hits in Redis under `key_prefix`; `window_s` is the window length in seconds."""

    def __init__(self, redis_url: str, settings: SettingsService, *, key_prefix: str = "cms:ratelimit",
                 window_s: int = DEFAULT_WINDOW_S) -> None:
        self._storage = RedisStorage(f"async+{redis_url}", implementation="redispy", key_prefix=key_prefix)
        self._limiter = MovingWindowRateLimiter(self._storage)
        self._settings = settings
        self._window_s = window_s

    async def _enabled_and_limit(self) -> tuple[bool, int]:
        values = await self._settings.values()
        return bool(values["rate_limit_enabled"]), int(values["rate_limit_per_minute"])

    async def hit_general(self, ip: str) -> RateLimitDecision | None:
        """Count one request of `ip`; None when rate limiting is switched off."""
        enabled, per_window = await self._enabled_and_limit()
        if not enabled:
            return None
        return await self._hit(per_window, "general", ip)

    async def hit_auth(self, action: str, ip: str, identifier: str) -> RateLimitDecision | None:
        """Count one auth attempt (`action` e.g. "login") by `ip` for `identifier` (e.g. the email,
        lower-cased); None when rate limiting is switched off."""
        enabled, _ = await self._enabled_and_limit()
        if not enabled:
            return None
        return await self._hit(AUTH_LIMIT, f"auth:{action}", ip, identifier.strip().lower())

    async def _hit(self, amount: int, *identifiers: str) -> RateLimitDecision:
        item = RateLimitItemPerSecond(amount, self._window_s)
        allowed = await self._limiter.hit(item, *identifiers)
        stats = await self._limiter.get_window_stats(item, *identifiers)
        reset_after_s = max(1, math.ceil(stats.reset_time - time.time()))
        return RateLimitDecision(allowed, amount, stats.remaining, reset_after_s)

    async def reset(self) -> None:
        """Forget every counter (tests, and an operator unlocking everyone)."""
        await self._storage.reset()
