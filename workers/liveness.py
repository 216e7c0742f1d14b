"""What keeps jobs moving through faults (decisions.md, Workers and Redis).

- Short job locks. arq claims a job with the key `arq:in-progress:<job id>`, which keeps other
  workers off it, and sets it to live for the longest job time-out + 10 s (130 s here). A killed
  worker's job would wait that long. `ReconnectingWorker` claims with LOCK_TTL_S instead, and the
  hooks refresh the lock every LOCK_REFRESH_EVERY_S while the job runs (`on_job_start` adds it to
  the worker's running jobs and sets it to LOCK_TTL_S; `hold_job_locks`, on_startup, refreshes), so
  a killed worker's locks lapse within LOCK_TTL_S and another worker runs its jobs again (as a
  retry: `job_try` > 1, which the webhook batch job turns into a re-run that reads the log first).
  That covers a job claimed but not yet started too: arq starts up to `max_jobs` jobs per poll, and
  a claim precedes on_job_start by a few Redis round trips, a window in which a SIGKILL used to
  leave arq's 130 s claim behind (issue 37, item 5). The hooks are arq's own, so
  `arq workers.WorkerSettings` (arq's own Worker class) refreshes locks the same way, but its claims
  keep arq's 130 s until on_job_start: a job claimed in that window of a killed worker waits 130 s.
- Reconnecting. arq's poll loop ends, and `cms worker` with it, at the first Redis error.
  `ReconnectingWorker.main` runs the loop again after a capped exponential back-off
  (`reconnect_delay_s`); running jobs go on meanwhile, and the outbox in MongoDB keeps what could
  not be queued for the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from arq import Worker
from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("cms.workers")

LOCK_TTL_S = 15.0
"""Seconds a running job's lock lives without a refresh: how long a killed worker's jobs wait
before another worker may run them (decisions.md asks for 30 s at most)."""
LOCK_REFRESH_EVERY_S = 3.0
"""Seconds between refreshes of the running jobs' locks; a worker whose event loop stalls for
LOCK_TTL_S - LOCK_REFRESH_EVERY_S seconds may see a job of its own started again elsewhere."""
RECONNECT_MIN_S = 0.5
RECONNECT_MAX_S = 10.0
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError)
"""What Redis raises when it is unreachable, restarting or loading its AOF (BusyLoadingError is a
ConnectionError)."""

_RUNNING = "running_job_ids"
_REFRESHER = "job_lock_refresher"


def reconnect_delay_s(failures: int) -> float:
    """Seconds to wait after `failures` (>= 1) Redis failures in a row: 0.5, 1, 2, 4, 8, then 10."""
    return float(min(RECONNECT_MIN_S * 2 ** (failures - 1), RECONNECT_MAX_S))


async def _expire_locks(redis: ArqRedis, job_ids: Iterable[str]) -> None:
    """Set the locks of `job_ids` to live LOCK_TTL_S from now (a lock already gone stays gone)."""
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.pexpire(in_progress_key_prefix + job_id, int(LOCK_TTL_S * 1000))
        await pipe.execute()


async def _refresh_locks(redis: ArqRedis, running: set[str]) -> None:
    """Refresh the locks of `running` every LOCK_REFRESH_EVERY_S seconds until cancelled; a Redis
    failure is logged and the next round tries again."""
    while True:
        await asyncio.sleep(LOCK_REFRESH_EVERY_S)
        if not running:
            continue
        try:
            await _expire_locks(redis, list(running))
        except RedisError as exc:
            log.warning("could not refresh the locks of %d running jobs: %s", len(running), exc)


def hold_job_locks(ctx: dict[str, Any]) -> None:
    """Start refreshing the locks of the worker's running jobs (on_startup; once per worker, also
    when a reconnect runs on_startup again). `ctx` is the worker's context, with `redis`."""
    ctx.setdefault(_RUNNING, set())
    refresher = ctx.get(_REFRESHER)
    if refresher is None or refresher.done():
        ctx[_REFRESHER] = asyncio.create_task(_refresh_locks(ctx["redis"], ctx[_RUNNING]))


async def release_job_locks(ctx: dict[str, Any]) -> None:
    """Stop refreshing (on_shutdown)."""
    refresher = ctx.pop(_REFRESHER, None)
    if refresher is not None:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher


async def on_job_start(ctx: dict[str, Any]) -> None:
    """arq's on_job_start: the job's lock now lives LOCK_TTL_S and is refreshed while it runs."""
    running: set[str] | None = ctx.get(_RUNNING)
    if running is None:  # a worker whose on_startup is not ours
        return
    running.add(ctx["job_id"])
    try:
        await _expire_locks(ctx["redis"], [ctx["job_id"]])
    except RedisError as exc:  # the lock keeps arq's longer life; the job runs anyway
        log.warning("could not shorten the lock of job %s: %s", ctx["job_id"], exc)


async def on_job_end(ctx: dict[str, Any]) -> None:
    """arq's on_job_end (before arq deletes the lock): stop refreshing the job's lock."""
    running: set[str] | None = ctx.get(_RUNNING)
    if running is not None:
        running.discard(ctx["job_id"])


class ReconnectingWorker(Worker):
    """arq's Worker whose claims on jobs live LOCK_TTL_S (arq's: the longest job time-out + 10 s),
    and whose poll loop outlives Redis outages: a Redis connection error or time-out (at start-up,
    in the loop, or in finishing a job) is logged and the loop starts again after
    `reconnect_delay_s` (on_startup runs again: it hands on what the outbox kept). A burst worker
    (tests) still stops at the first error. Takes arq Worker's arguments."""

    _redis_failures = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # arq sets `arq:in-progress:<job id>` to live this long when it claims a job, before the job
        # starts (on_job_start); a claim of a worker killed in between lapses after LOCK_TTL_S too.
        self.in_progress_timeout_s = LOCK_TTL_S

    async def main(self) -> None:
        """Run arq's loop; after a Redis failure, back off and run it again, until cancelled
        (SIGTERM or SIGINT) or, for a burst worker, until the queue is empty."""
        while True:
            try:
                await super().main()
                return
            except REDIS_DOWN as exc:
                if self.burst:
                    raise
                self._redis_failures += 1
                delay_s = reconnect_delay_s(self._redis_failures)
                log.warning("Redis unreachable (%s: %s); the worker tries again in %.1f s",
                            type(exc).__name__, exc, delay_s)
                self._forget_jobs_failed_by_redis()
                await asyncio.sleep(delay_s)

    def _forget_jobs_failed_by_redis(self) -> None:
        """Drop the finished job tasks that a Redis failure ended (arq could not record their
        outcome; their lock lapses and they run again), so that the next poll after Redis is back
        does not raise their error once more, as arq's loop does with a failed task."""
        for job_id, task in list(self.tasks.items()):
            if task.done() and not task.cancelled() and isinstance(task.exception(), REDIS_DOWN):
                log.warning("job %s was cut by the Redis failure; it runs again once its lock lapses", job_id)
                del self.tasks[job_id]

    async def heart_beat(self) -> None:
        """arq's heart beat, at the end of every poll that reached Redis: also ends a back-off."""
        await super().heart_beat()
        if self._redis_failures:
            log.warning("Redis reachable again after %d failed attempts; the worker goes on", self._redis_failures)
            self._redis_failures = 0
