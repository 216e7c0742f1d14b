"""Single-flight (issue "Fast reads", item 3: one query for many callers): identical concurrent
calls share one run. Used by the read cache (list and get bodies) and the definition cache
(collection definitions, sessions), so a cache miss under load costs one database query, not one
per waiting request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class SingleFlight:
    """Identical concurrent calls share one run: `run(key, work)` awaits the run already in flight
    for `key`, or starts `work()`. Errors reach every waiter, except a cancellation: when the
    caller running `work()` is cancelled (its client went away), the others are not; one of them
    runs `work()` again. Per process."""

    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Future[Any]] = {}
        self._callers = 0

    async def run(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        """The result of `work()` for `key`, shared with concurrent callers of the same key. Raises
        what `work()` raises, and CancelledError only when this caller is cancelled."""
        self._callers += 1
        try:
            return await self._shared(key, work)
        finally:
            self._callers -= 1

    def waiting(self) -> int:
        """How many callers are inside `run` now, of every key: the one running each `work()` and
        those that joined it (monitoring, tests)."""
        return self._callers

    async def _shared(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        while (running := self._running.get(key)) is not None:
            try:
                result: T = await asyncio.shield(running)
                return result
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if running.cancelled() and task is not None and not task.cancelling():
                    continue  # the caller running it was cancelled, not this one: run it again
                raise
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        try:
            value = await work()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        else:
            future.set_result(value)
            return value
        finally:
            del self._running[key]
