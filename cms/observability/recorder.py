"""The recorder of the dashboard and the request log: two sinks (`MinuteCounters`, `RequestLogBuffer`)
that a process adds to its `Signals`, and the task that flushes them to Redis.

Every FLUSH_INTERVAL_S seconds the task drains both sinks into one pipelined round trip (HINCRBY into
the minute hashes, LPUSH + LTRIM of the request log); once a minute it first samples the gauges (job
queue depth, realtime connections). A request never waits for Redis: the sinks only add to memory.
When Redis is down (or slower than FLUSH_TIMEOUT_S), what was drained is dropped, never queued: the
figures of those seconds are lost, memory stays bounded, and one warning is logged per outage.
`stop()` ends the task with a last flush.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from redis.asyncio import Redis

from cms.observability import request_log, timeline
from cms.observability.request_log import RequestLogBuffer
from cms.observability.signals import Signals, Sink
from cms.observability.timeline import MinuteCounters, minute_of

log = logging.getLogger("cms.observability")

FLUSH_INTERVAL_S = 5.0
"""How often (seconds) a process writes what it recorded to Redis."""
FLUSH_TIMEOUT_S = 2.0
"""How long one flush (or reading the log size, or sampling the gauges) may wait, in seconds."""
STOP_RECANCEL_S = 0.5
"""`stop` cancels the flush task again after this many seconds while it has not ended."""

GaugeSampler = Callable[[], Awaitable[Mapping[str, int]]]
"""Samples the gauges: {timeline.QUEUE_DEPTH: jobs waiting, timeline.REALTIME_CONNECTIONS: this process's streams}."""


class Recorder:
    """This process's recorder for database `db` on `redis`: add `sinks` to the process's Signals
    (`attach`), `start()` the flush task, `stop()` it (with a last flush). `log_size()` reads the
    `request_log_size` setting (0 = off); `gauges()` samples the gauges once a minute (None: no gauges);
    `now()` is the time in epoch seconds (tests move it)."""

    def __init__(self, redis: Redis, db: str, *, log_size: Callable[[], Awaitable[int]],
                 gauges: GaugeSampler | None = None, now: Callable[[], float] = time.time,
                 flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self._redis = redis
        self._db = db
        self._log_size = log_size
        self._gauges = gauges
        self._now = now
        self._flush_interval_s = flush_interval_s
        self.counters = MinuteCounters(now)
        self.log = RequestLogBuffer()
        self._sampled_minute: int | None = None
        self._log_was_on = True
        self._failing = False
        self._task: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self.dropped_flushes = 0
        """Flushes whose figures were dropped because Redis failed."""

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks to add to the process's Signals."""
        return (self.counters, self.log)

    def attach(self, signals: Signals) -> None:
        """Add the sinks to `signals`."""
        for sink in self.sinks:
            signals.add(sink)

    def detach(self, signals: Signals) -> None:
        """Remove the sinks from `signals`."""
        for sink in self.sinks:
            signals.remove(sink)

    async def _sample_gauges(self) -> None:
        minute = minute_of(self._now())
        if self._gauges is None or minute == self._sampled_minute:
            return
        self._sampled_minute = minute
        try:
            sample = await asyncio.wait_for(self._gauges(), FLUSH_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a gauge that cannot be read is a gap in its chart
            log.debug("observability: gauges not sampled", exc_info=True)
            return
        for name, value in sample.items():
            self.counters.gauge(name, int(value))

    async def _read_log_size(self) -> int:
        try:
            size = int(await asyncio.wait_for(self._log_size(), FLUSH_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - settings unreadable: keep the size last read
            return self.log.size
        return min(max(size, 0), request_log.MAX_SIZE)

    async def flush(self) -> bool:
        """Sample the gauges (once a minute) and write what was recorded in one pipelined round trip.
        Returns False when Redis failed (what was drained is dropped), True otherwise."""
        async with self._flush_lock:
            await self._sample_gauges()
            size = await self._read_log_size()
            self.log.resize(size)
            minutes, samples = self.counters.drain(), self.log.drain()
            turned_off = size == 0 and self._log_was_on
            self._log_was_on = size > 0
            if not minutes and not samples and not turned_off:
                return True
            pipe = self._redis.pipeline(transaction=False)
            timeline.write(pipe, self._db, minutes)
            request_log.write(pipe, self._db, samples, size)
            try:
                await asyncio.wait_for(pipe.execute(), FLUSH_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - Redis down: drop, never queue
                self.dropped_flushes += 1
                if not self._failing:
                    log.warning("observability: Redis failed; dashboard figures and request log entries are "
                                "dropped until it answers", exc_info=True)
                self._failing = True
                if turned_off:
                    self._log_was_on = True  # delete the log on the next flush
                return False
            if self._failing:
                log.info("observability: Redis answers again; recording resumed")
            self._failing = False
            return True

    async def _run(self) -> None:
        while self._task is not None:  # `stop` clears it
            await asyncio.sleep(self._flush_interval_s)
            try:
                await self.flush()
            except Exception:  # noqa: BLE001 - the task must outlive any one failure
                log.exception("observability: flush failed")

    def start(self) -> None:
        """Start the flush task (on the running loop); a second call does nothing."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cms-observability-flush")

    async def stop(self) -> None:
        """Stop the flush task and flush what is left (bounded by FLUSH_TIMEOUT_S per step)."""
        task, self._task = self._task, None
        while task is not None and not task.done():
            # again until it ends: `asyncio.wait_for` (3.11) may swallow a cancel that meets its inner
            # task's completion, and the loop would then sleep on
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_RECANCEL_S)
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.error("observability: the flush task failed", exc_info=task.exception())
        await self.flush()
