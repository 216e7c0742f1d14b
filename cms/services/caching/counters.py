"""Counters in Redis: the epochs and versions that say whether something cached is still current
(docs/operations/scaling.md, "Read cache", "Definitions and sessions are cached in each process", and the settings
version of "Connections"). One scheme for all of them:

- a counter is read with the values it guards in one `MGET` (`read_counters`);
- a missing counter (never started, evicted by an `allkeys-lru` cache Redis, lost in a restart) is
  started at a random value below 2**COUNTER_START_BITS (`start_counters`, `SET NX`), so it never
  comes back with a value something was stamped with before, and read again;
- a change bumps it with INCR, starting it first when missing (`bump_counters`), in one round trip;
- each step waits at most REDIS_TIMEOUT_S seconds (or the caller's `timeout_s`).

`FailOpen` wraps reads and bumps for the caches, which never fail a request on Redis: a failure or
a time-out gives None (read) or False (bump) and a warning, at most one every
FAILURE_LOG_INTERVAL_S seconds. The key names themselves are in `cms/redis_keys.py`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis

COUNTER_START_BITS = 62
"""A missing epoch or version counter starts at a random value below 2**62 (then only grows by INCR)."""
REDIS_TIMEOUT_S = 0.5
"""How long a counter read or bump may wait for Redis, in seconds, by default."""
FAILURE_LOG_INTERVAL_S = 60.0
"""At most one warning per this many seconds while Redis fails (per `FailOpen`)."""


def counter_text(value: Any) -> str:
    """A counter (epoch or version) as text from a Redis reply (bytes, str or int). None (the
    counter is missing: Redis evicted it, lost it in a restart, or it was never started) gives a
    text that never matches anything, so nothing is served or shared under it; `start_counters`
    ends that state."""
    if value is None:
        return f"unset-{secrets.token_hex(8)}"
    return value.decode() if isinstance(value, bytes) else str(value)


async def start_counters(redis: Redis, keys: Sequence[str]) -> None:
    """Start each counter of `keys` that does not exist at a random value (`SET NX`; one round
    trip). A counter lost to eviction (`allkeys-lru`) or to a Redis restart thus never comes back
    with a value it had before, so an entry stamped with an old value is never taken for current.
    Redis errors propagate."""
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.set(key, secrets.randbits(COUNTER_START_BITS), nx=True)
        await pipe.execute()


async def read_counters(redis: Redis, keys: Sequence[str], counters: int,
                        timeout_s: float = REDIS_TIMEOUT_S) -> list[Any]:
    """The values of `keys` (one `MGET`; bytes, None for a missing key), the first `counters` of
    which are counters: when one of those is missing (first use, or Redis lost it), the missing
    ones are started (`start_counters`) and the keys read again. Each step waits at most
    `timeout_s` seconds (TimeoutError); Redis errors propagate."""
    # asyncio.timeout, not wait_for: no task per call (this is on every request's path)
    async with asyncio.timeout(timeout_s):
        values: list[Any] = await redis.mget(keys)
    missing = [key for key, value in zip(keys[:counters], values, strict=False) if value is None]
    if missing:
        async with asyncio.timeout(timeout_s):
            await start_counters(redis, missing)
            values = await redis.mget(keys)
    return values


async def bump_counters(redis: Redis, keys: Sequence[str], timeout_s: float | None = REDIS_TIMEOUT_S) -> None:
    """INCR each counter of `keys` (a missing one is started first, as `start_counters`); one
    round trip of at most `timeout_s` seconds (TimeoutError). `timeout_s=None` leaves the bound to
    the pool's socket time-out (`DATABASE_TIMEOUT_S`, redis's TimeoutError: a 503 in the API).
    Redis errors propagate."""
    async with asyncio.timeout(timeout_s):
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.set(key, secrets.randbits(COUNTER_START_BITS), nx=True)
                pipe.incr(key)
            await pipe.execute()


class FailOpen:
    """Counter reads and bumps that never raise, for the caches (a request never fails on them).
    A Redis error or a time-out (`timeout_s` seconds a step) is logged on `logger` as a warning
    with `message % (what, exc)`, at most once every `interval_s` seconds of `clock` (monotonic
    seconds), and gives the documented fallback."""

    def __init__(self, logger: logging.Logger, message: str, *, timeout_s: float = REDIS_TIMEOUT_S,
                 interval_s: float = FAILURE_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._message = message
        self.timeout_s = timeout_s
        self._interval_s = interval_s
        self._clock = clock
        self._last_log: float | None = None

    async def read(self, redis: Redis, keys: Sequence[str], counters: int) -> list[Any] | None:
        """`read_counters(redis, keys, counters)`, or None when Redis failed or was too slow."""
        try:
            return await read_counters(redis, keys, counters, self.timeout_s)
        except Exception as exc:  # the database still answers: never fail a request on a counter
            self.failed("read", exc)
            return None

    async def bump(self, redis: Redis, keys: Sequence[str], what: str = "bump") -> bool:
        """`bump_counters(redis, keys)`; whether Redis acknowledged it (False, and logged as
        `what`, when it failed or was too slow). No keys: True at once."""
        if not keys:
            return True
        try:
            await bump_counters(redis, keys, self.timeout_s)
        except Exception as exc:
            self.failed(what, exc)
            return False
        return True

    def failed(self, what: str, exc: BaseException) -> None:
        """Log that `what` (e.g. "read", "write") failed with `exc`, unless a warning was logged
        less than `interval_s` seconds ago."""
        now = self._clock()
        if self._last_log is None or now - self._last_log >= self._interval_s:
            self._last_log = now
            self._logger.warning(self._message, what, exc)
