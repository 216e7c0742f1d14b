"""A lock in Redis shared by every replica: one backup or restore at a time (decisions.md, Backups), one
schema apply at a time (decisions.md, Schema as code).

- Taken with `SET key "<what>:<token>" NX PX ttl`: the token is random per holder, so only the holder
  renews or releases it. While the work runs, the lock is renewed every `renew_every_s` (a Lua
  compare-and-`PEXPIRE`); a holder that dies leaves it to expire `ttl_s` later.
- Released by a compare-and-delete Lua script, so a holder whose lock expired meanwhile (and was
  taken by another) never deletes the other's lock.
- The work runs in a task of its own: a caller that is cancelled (an HTTP client that disconnects
  mid-restore) stops waiting, but the work goes on to its end holding the lock, and only then is the
  lock released. A restore's switch of collections is never left half done by a disconnect.
- A caller either is refused at once while another holds the lock (`refusal`: BadRequest for backups,
  Conflict for schema applies) or waits for it (`run(..., wait_s=...)`: replicas applying SCHEMA_FILE
  at start-up), polling every WAIT_POLL_S.
- Redis not answering when the lock is taken is ServiceUnavailable (503): there is no fallback to a
  process lock, which would let two replicas restore at once exactly when Redis is away (and the
  restore's cache epochs, in Redis too, could not be bumped).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cms.errors import BadRequest, CmsError, ServiceUnavailable

log = logging.getLogger("cms.locks")

T = TypeVar("T")

LOCK_TTL_S = 30.0
"""Seconds the lock outlives its last renewal (a holder killed with SIGKILL blocks others this long)."""
LOCK_RENEW_EVERY_S = 10.0
"""Seconds between renewals while the work runs."""
WAIT_POLL_S = 0.2
"""Seconds between two tries of a caller that waits for the lock."""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class SharedLock:
    """The lock `key` on `redis` (module docstring); `ttl_s` and `renew_every_s` in seconds; `refusal` is the
    error class a caller gets while another holds the lock."""

    def __init__(self, redis: Redis, key: str, *, ttl_s: float = LOCK_TTL_S,
                 renew_every_s: float = LOCK_RENEW_EVERY_S, refusal: type[CmsError] = BadRequest) -> None:
        self._redis = redis
        self._key = key
        self._refusal = refusal
        self._ttl_ms = int(ttl_s * 1000)
        self._renew_every_s = renew_every_s
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._running: set[asyncio.Task[object]] = set()  # strong references: a task outlives its caller

    async def run(self, what: str, work: Callable[[], Awaitable[T]], *, wait_s: float = 0.0,
                  shield: bool = True) -> T:
        """Run `work()` holding the lock, in a task of its own, and return its result (or raise its error).

        `what` names the work ("backup", "restore", "schema apply") to whoever is refused meanwhile.
        While another holder has the lock, waits up to `wait_s` seconds for it (0: not at all), then raises
        the lock's `refusal` ("A restore is running ..."; BadRequest unless told). Raises
        ServiceUnavailable when Redis does not answer. If the caller is cancelled, the work goes on
        and the lock is released when it ends; with `shield` False (work that may stop anywhere, such
        as the start-up index sync), the work is cancelled with it and the lock released."""
        value = f"{what}:{secrets.token_hex(16)}".encode()
        deadline = time.monotonic() + wait_s
        while True:
            try:
                taken = await self._redis.set(self._key, value, nx=True, px=self._ttl_ms)
                holder = None if taken else await self._redis.get(self._key)
            except (RedisConnectionError, RedisTimeoutError):
                raise ServiceUnavailable(f"A {what} needs Redis (its lock is shared by every replica), "
                                         "which does not answer; retry shortly") from None
            if taken:
                break
            if time.monotonic() >= deadline:
                running = holder.decode(errors="replace").partition(":")[0] if holder else what
                raise self._refusal(f"A {running} is running; try again when it is done")
            await asyncio.sleep(WAIT_POLL_S)
        task = asyncio.create_task(self._hold(value, work))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await (asyncio.shield(task) if shield else task)

    async def _hold(self, value: bytes, work: Callable[[], Awaitable[T]]) -> T:
        renewing = asyncio.create_task(self._keep(value))
        try:
            return await work()
        finally:
            renewing.cancel()
            try:
                await self._release(keys=[self._key], args=[value])
            except RedisError as exc:
                log.warning("could not release the lock %s (it expires within %.0f s): %r",
                            self._key, self._ttl_ms / 1000, exc)

    async def _keep(self, value: bytes) -> None:
        """Renew the lock every `renew_every_s` until cancelled; a renewal that fails is logged."""
        while True:
            await asyncio.sleep(self._renew_every_s)
            try:
                kept = await self._renew(keys=[self._key], args=[value, self._ttl_ms])
            except RedisError as exc:
                log.warning("could not renew the lock %s: %r", self._key, exc)
                continue
            if not kept:
                log.error("the lock %s was lost while its work runs (Redis restarted or the process stalled "
                          "for %.0f s); another replica may start the same work", self._key, self._ttl_ms / 1000)
                return

    async def wait_idle(self) -> None:
        """Wait for every work started by this process to end (at shutdown, so none is cut off)."""
        while self._running:
            await asyncio.wait(set(self._running))
