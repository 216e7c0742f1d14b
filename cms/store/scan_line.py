"""The line of list queries of one process (issue 31, item 2: cold queries stay bounded).

On the embedded server every list query but an `_id` look-up reads every document of its collection,
and scans slow each other down almost linearly; on MongoDB an unindexed filter does the same. So a
process runs at most `slots` scans at once (`LIST_SCAN_SLOTS`, default SCAN_SLOTS), lets at most
`max_waiting` more wait, and refuses the rest at once with 503 `service_unavailable` and a
`Retry-After` header: when the line is full, or when the wait it predicts (the scans ahead of the
caller times the mean scan time, over the slots) would pass `max_wait_s`; a caller that waits
anyway gives up after `max_wait_s`. Clients are told to come back instead of queueing for seconds
behind scans whose callers have most likely given up. Point reads (`get`, `find_by_ids`) take no
slot and are never refused here.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from cms.errors import ServiceUnavailable

SCAN_SLOTS = 4
"""Scans (list `find`s and `count`s) one process runs at once by default (`LIST_SCAN_SLOTS`)."""
SCAN_MAX_WAITING = 16
"""Callers that may wait for a slot at once; the next is refused at once (503)."""
SCAN_MAX_WAIT_S = 2.0
"""Longest wait for a slot, in seconds: a caller whose predicted wait is longer is refused at once,
and one that waited this long gives up (503)."""
SCAN_TIME_WEIGHT = 0.2
"""Weight of the latest scan in the running mean of scan times (exponentially weighted)."""


class ScanLine:
    """A semaphore of `slots` scans with a bounded, time-limited queue (see the module docstring).
    `clock` gives monotonic seconds. Per process; safe for the coroutines of one event loop."""

    def __init__(self, slots: int = SCAN_SLOTS, *, max_waiting: int = SCAN_MAX_WAITING,
                 max_wait_s: float = SCAN_MAX_WAIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.max_waiting = max_waiting
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._free = asyncio.Semaphore(slots)
        self._waiting = 0
        self._mean_scan_s: float | None = None

    @property
    def waiting(self) -> int:
        """How many callers wait for a slot now (monitoring, tests)."""
        return self._waiting

    @property
    def mean_scan_s(self) -> float | None:
        """The running mean of scan times in seconds (None before the first scan ended)."""
        return self._mean_scan_s

    def predicted_wait_s(self) -> float:
        """How long a caller arriving now would wait for a slot, in seconds: 0 when one is free, else
        the scans ahead of it (those waiting, and itself) times the mean scan time, over the slots."""
        if not self._free.locked():
            return 0.0
        return (self._waiting + 1) * (self._mean_scan_s or 0.0) / self.slots

    def busy(self, wait_s: float) -> ServiceUnavailable:
        """The refusal of a caller who would wait about `wait_s` seconds: 503 with `Retry-After`
        (whole seconds, at least 1)."""
        error = ServiceUnavailable("The database is busy with other list queries; retry shortly")
        error.headers["Retry-After"] = str(max(1, math.ceil(wait_s)))
        return error

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the block (a scan), timing it. Raises ServiceUnavailable (503,
        `Retry-After`) when `max_waiting` callers wait already, when the predicted wait passes
        `max_wait_s`, or when no slot freed within `max_wait_s`."""
        if self._free.locked():
            predicted = self.predicted_wait_s()
            if self._waiting >= self.max_waiting or predicted > self.max_wait_s:
                raise self.busy(predicted or self.max_wait_s)
            self._waiting += 1
            try:
                async with asyncio.timeout(self.max_wait_s):  # Semaphore.acquire is cancel-safe
                    await self._free.acquire()
            except TimeoutError:
                raise self.busy(self.predicted_wait_s() or self.max_wait_s) from None
            finally:
                self._waiting -= 1
        else:
            await self._free.acquire()
        started = self._clock()
        try:
            yield
        finally:
            self._free.release()
            elapsed = self._clock() - started
            mean = self._mean_scan_s
            self._mean_scan_s = elapsed if mean is None else mean + SCAN_TIME_WEIGHT * (elapsed - mean)

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Take every free slot for the block, so scans that start meanwhile wait (bounded as in
        `slot`) until it ends: for maintenance that needs the database to itself for a moment, and
        for tests that hold queries."""
        held = 0
        try:
            while not self._free.locked():
                await self._free.acquire()
                held += 1
            yield
        finally:
            for _ in range(held):
                self._free.release()
