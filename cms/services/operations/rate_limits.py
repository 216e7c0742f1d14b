"""Rate limiting in Redis, so limits hold across replicas (decisions.md, Limits).

The algorithm is the `limits` library's moving window over its async Redis storage. Three kinds:
- general: `rate_limit_per_minute` (setting, default 600) requests per window per client IP;
- auth: 10 attempts per window per (action, client IP, identifier) on login, register, OTP,
  password reset and refresh;
- mail: MAIL_PER_MINUTE and MAIL_PER_HOUR emails per (endpoint, address) on the endpoints that
  send mail (verification resend, password reset, OTP, email change), whatever the client IP,
  so nobody can flood a mailbox; the first call of each endpoint always sends.
All are switched off by the `rate_limit_enabled` setting. A refusal is audited (`rate_limited`,
through an AuditEvent on the bus) once per limit, client IP, identifier and window (`refused`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter
from redis.asyncio import Redis

from cms.observability.signals import Signals
from cms.services.delivery.events import AuditEvent, EventBus
from cms.services.operations.settings import SettingsService
from cms.services.origin import current_origin

log = logging.getLogger("cms.ratelimit")

AUTH_LIMIT = 10
DEFAULT_WINDOW_S = 60
MAIL_PER_MINUTE = 1
MAIL_PER_HOUR = 5
MAIL_MINUTE_WINDOW_S = 60
MAIL_HOUR_WINDOW_S = 3600


@dataclass(frozen=True)
class RateLimitDecision:
    """The outcome of one hit: `remaining` hits left in the window, `reset_after_s` until the
    oldest hit leaves it (whole seconds, at least 1); `window_s` is the window's length."""

    allowed: bool
    limit: int
    remaining: int
    reset_after_s: int
    window_s: int


LIMITER_TIMEOUT_S = 2.0
"""Seconds one rate-limit check may wait for Redis before the request goes on unlimited."""


class RateLimitService:
    """Counts hits in Redis under `key_prefix`, over the connections of `redis` (the process's one
    pool; this service opens no client of its own). `window_s` is the general and auth window in
    seconds, `mail_minute_window_s` / `mail_hour_window_s` the two mail windows (tests shorten
    them). Each check gives up after `timeout_s` seconds with TimeoutError (callers fail open).
    `signals`: told of every refusal (`Signals.rate_limited`, with the limit's kind)."""

    def __init__(self, redis: Redis, settings: SettingsService, *, key_prefix: str,
                 window_s: int = DEFAULT_WINDOW_S, mail_minute_window_s: int = MAIL_MINUTE_WINDOW_S,
                 mail_hour_window_s: int = MAIL_HOUR_WINDOW_S, timeout_s: float = LIMITER_TIMEOUT_S,
                 events: EventBus | None = None, signals: Signals | None = None) -> None:
        self._signals = signals
        # A limiter that cannot answer within `timeout_s` seconds fails open (the API's middlewares)
        # rather than holding every request while Redis stalls.
        self._storage = RedisStorage("async+redis://", implementation="redispy", key_prefix=key_prefix,
                                     connection_pool=redis.connection_pool)  # type: ignore[arg-type]
        self._limiter = MovingWindowRateLimiter(self._storage)
        self._settings = settings
        self._events = events
        self._window_s = window_s
        self._timeout_s = timeout_s
        self._mail_items = (RateLimitItemPerSecond(MAIL_PER_MINUTE, mail_minute_window_s),
                            RateLimitItemPerSecond(MAIL_PER_HOUR, mail_hour_window_s))

    async def _enabled_and_limit(self) -> tuple[bool, int]:
        values = await self._settings.values()
        return bool(values["rate_limit_enabled"]), int(values["rate_limit_per_minute"])

    async def hit_general(self, ip: str, *, cost: int = 1) -> RateLimitDecision | None:
        """Count `cost` requests of `ip` (a batch's requests after the first: decisions.md, Batch
        writes), all or none: refused when fewer than `cost` remain. None when rate limiting is
        switched off."""
        enabled, per_window = await self._enabled_and_limit()
        if not enabled:
            return None
        async with asyncio.timeout(self._timeout_s):
            return await self._hit(per_window, "general", ip, cost=cost)

    async def hit_auth(self, action: str, ip: str, identifier: str) -> RateLimitDecision | None:
        """Count one auth attempt (`action` e.g. "login") by `ip` for `identifier` (a token, a user id,
        or an address as `normalize_email` makes it, perhaps after a "<collection>:" prefix; the
        request schemas' `EmailText` loads addresses so); None when rate limiting is switched off."""
        enabled, _ = await self._enabled_and_limit()
        if not enabled:
            return None
        async with asyncio.timeout(self._timeout_s):
            return await self._hit(AUTH_LIMIT, f"auth:{action}", ip, identifier)

    async def hit_mail(self, endpoint: str, address: str, *, user_id: str | None = None) -> RateLimitDecision | None:
        """Count one email that `endpoint` (e.g. "forgot_password", "shop:otp_request") is about to
        send to `address` (normalised by `normalize_email`, as `hit_auth`'s addresses) and, if given,
        for the user `user_id`. Each key may receive MAIL_PER_MINUTE per minute window and
        MAIL_PER_HOUR per hour window. A refused call consumes neither window, so a client hammering
        the endpoint does not use up its hour.
        Returns the decision (refused: `reset_after_s` until every exhausted window frees), or None
        when rate limiting is switched off. Redis errors and TimeoutError propagate (the caller
        fails open)."""
        enabled, _ = await self._enabled_and_limit()
        if not enabled:
            return None
        async with asyncio.timeout(self._timeout_s):
            return await self._hit_mail(endpoint, address, user_id)

    async def _hit_mail(self, endpoint: str, address: str, user_id: str | None) -> RateLimitDecision:
        keys: list[tuple[str, ...]] = [("mail", endpoint, "address", address)]
        if user_id is not None:
            keys.append(("mail", endpoint, "user", user_id))
        checks: list[tuple[RateLimitItem, tuple[str, ...]]] = [(item, key) for key in keys for item in self._mail_items]
        refused = [(item, key) for item, key in checks if not await self._limiter.test(item, *key)]
        if not refused:
            # test-then-hit is not atomic: a concurrent call may take the last slot in between,
            # so each hit is checked too (it only ever adds an entry when one is free)
            for item, key in checks:
                if not await self._limiter.hit(item, *key):
                    refused.append((item, key))
                    break
        if refused:
            return await self._refusal(refused)
        minute, _ = self._mail_items
        return RateLimitDecision(True, minute.amount, 0, minute.get_expiry(), minute.get_expiry())

    async def _refusal(self, refused: list[tuple[RateLimitItem, tuple[str, ...]]]) -> RateLimitDecision:
        # the call can only succeed once every exhausted window has freed a slot
        worst_item, worst_reset_s = refused[0][0], 0.0
        for item, key in refused:
            stats = await self._limiter.get_window_stats(item, *key)
            if stats.reset_time - time.time() >= worst_reset_s:
                worst_item, worst_reset_s = item, stats.reset_time - time.time()
        reset_after_s = max(1, math.ceil(worst_reset_s))
        return RateLimitDecision(False, worst_item.amount, 0, reset_after_s, worst_item.get_expiry())

    async def _hit(self, amount: int, *identifiers: str, cost: int = 1) -> RateLimitDecision:
        item = RateLimitItemPerSecond(amount, self._window_s)
        allowed = await self._limiter.hit(item, *identifiers, cost=cost)
        stats = await self._limiter.get_window_stats(item, *identifiers)
        reset_after_s = max(1, math.ceil(stats.reset_time - time.time()))
        return RateLimitDecision(allowed, amount, stats.remaining, reset_after_s, self._window_s)

    async def first_refusal(self, kind: str, ip: str, identifier: str, window_s: int) -> bool:
        """True the first time the limit `kind` (e.g. "auth:login") refuses (`ip`, `identifier`)
        within `window_s` seconds, False for every later refusal in that time; so a flood of
        refused requests is audited once per key and window. Redis errors and TimeoutError propagate."""
        digest = hashlib.sha256(f"{kind}\0{ip}\0{identifier}".encode()).hexdigest()
        # INCR + EXPIRE on the first increment, in one Lua call: the SET NX EX of this key
        async with asyncio.timeout(self._timeout_s):
            return await self._storage.incr(f"audited:{digest}", max(1, window_s)) == 1

    async def refused(self, kind: str, ip: str, identifier: str, window_s: int, *, path: str) -> None:
        """Audit a refusal by the limit `kind` ("general", "auth:login", "mail:otp") of (`ip`,
        `identifier`) on the request `path`: `rate_limited` with details `{limit, path}`, under the
        current request origin, the first time in `window_s` seconds (`first_refusal`). When Redis
        cannot tell, the refusal is audited anyway (an extra entry beats a missing one). Every refusal
        is signalled (`Signals.rate_limited(kind)`). Never raises for Redis errors."""
        if self._signals is not None:
            self._signals.rate_limited(kind)
        try:
            first = await self.first_refusal(kind, ip, identifier, window_s)
        except Exception:
            log.warning("rate limiter unavailable; refusal audited without de-duplication", exc_info=True)
            first = True
        if first and self._events is not None:
            # whom it concerns: the refused caller (None when anonymous), from the request's origin
            await self._events.emit([AuditEvent("rate_limited", user_id=current_origin().user_id,
                                                details={"limit": kind, "path": path})])

    async def reset(self) -> None:
        """Forget every counter (tests, and an operator unlocking everyone)."""
        await self._storage.reset()
