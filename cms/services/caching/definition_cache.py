"""In-process cache of what every request reads and few change: collection definitions (by name and
by id) and each collection's active webhooks (issue "Fast reads", item 6: no database round trip
per request for what rarely changes).

Exact across replicas through one Redis counter, the catalog epoch (the read cache's epoch key,
`keys.catalog_epoch`): every collection change and every restore bumps it (the read cache's
collection-event subscriber, the backup service's `on_restored`), and every webhook change bumps
it through `invalidate`. A cached value is used only while the epoch it was loaded under is still
the epoch. A request reads the epoch once, the first time it needs it, and keeps it for the rest
of the request (`request_scope`, opened by the API's request middleware), so a request
that starts after a change's response never sees the definition from before it; outside a request
scope (workers, scripts) every look-up reads the epoch.

Collection definitions are looked up through `catalog.Catalog`, which names how current each
look-up must be. The record read path goes one step further (`peek`, `Fresh.PEEK`): it computes its
cache key from the cached definition and checks that definition's epoch against the epoch the read
cache's one `MGET` returns anyway, so a warm read costs one Redis round trip and no MongoDB round
trip at all.

Concurrent misses of one entry under one epoch share one load (`SingleFlight`), so an entry that
expires under load costs one query, not one per waiting request.

`current_epoch` reads the epoch afresh, for the check a create makes after its insert lands
(`Catalog.exists`: an epoch that has not moved since the collection was looked up
means no delete or restore dropped its records before the insert).

Without Redis nothing is served from here (every look-up goes to MongoDB, and the failure is
logged at most once a minute). Entries live at most `max_age_s` in any case: the backstop for an
epoch bump that failed while Redis was away. At most MAX_ENTRIES are kept (names a client makes up
are cached as missing too, so the table is emptied when full).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from redis.asyncio import Redis

from cms.services.caching.counters import FailOpen, counter_text
from cms.services.caching.single_flight import SingleFlight

log = logging.getLogger("cms.definition_cache")

MAX_AGE_S = 5.0
"""Longest an entry is served, in seconds, whatever the epoch says (backstop for a failed bump)."""
MAX_ENTRIES = 10_000
"""Most entries kept per process; the table is emptied when a new one would exceed it."""

T = TypeVar("T")

_scope: ContextVar[dict[str, str] | None] = ContextVar("cms_epochs", default=None)


@contextmanager
def request_scope() -> Iterator[None]:
    """Within this block (one request), each epoch is read at most once (all of them in one `MGET`)."""
    token = _scope.set({})
    try:
        yield
    finally:
        _scope.reset(token)


def remember_epoch(key: str, epoch: str) -> None:
    """Keep `epoch`, just read from Redis under `key`, as the current request's (no-op outside a
    scope)."""
    epochs = _scope.get()
    if epochs is not None:
        epochs[key] = epoch


class DefinitionCache:
    """Epoch-checked in-process values (see the module docstring). `epoch_key` is the Redis key of
    the epoch that guards them (the catalog epoch; the session epoch for `SessionService`);
    `companions` are other caches' epoch keys read in the same `MGET`, so a request that needs
    several pays one round trip; `clock` gives monotonic seconds; `on_lookup(hit)` is told of every
    `get` (a value served from here or loaded) and of every `peek` that found a value (the
    `definition` and `session` caches' signals, cms.observability)."""

    def __init__(self, redis: Redis, epoch_key: str, *, companions: tuple[str, ...] = (),
                 max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic,
                 on_lookup: Callable[[bool], None] | None = None) -> None:
        self._on_lookup = on_lookup
        self._redis = redis
        self._epoch_key = epoch_key
        self._keys = (epoch_key, *companions)
        self._max_age_s = max_age_s
        self._clock = clock
        self._entries: dict[Hashable, tuple[str, float, Any]] = {}
        self._loads = SingleFlight()
        self._counters = FailOpen(log, "definition cache epoch %s failed (definitions are read from MongoDB): %r")

    async def epoch(self) -> str | None:
        """The epoch: the one this request already read, else read from Redis now (with the
        companions, and kept for the request). None when Redis failed (then nothing may be served or stored)."""
        epochs = _scope.get()
        if epochs is not None and self._epoch_key in epochs:
            return epochs[self._epoch_key]
        return await self.current_epoch()

    async def current_epoch(self) -> str | None:
        """The epoch read from Redis now, whatever this request read before: for a check that must
        see every change made until this moment (`Catalog.exists`). The request
        keeps it, and the companions, for its later look-ups (newer is never wrong for them).
        None when Redis failed."""
        raw = await self._counters.read(self._redis, self._keys, len(self._keys))
        if raw is None:
            return None
        for key, value in zip(self._keys, raw, strict=True):
            remember_epoch(key, counter_text(value))
        return counter_text(raw[0])

    def remember(self, epoch: str) -> None:
        """Keep `epoch`, just read from Redis some other way (the read cache's `MGET`), as this
        request's epoch of this cache."""
        remember_epoch(self._epoch_key, epoch)

    async def get(self, key: Hashable, load: Callable[[], Awaitable[T]], *, epoch: str | None = None) -> T:
        """The value under `key` if it was loaded under the current epoch (`epoch` when the caller
        has just read it, else `self.epoch()`), else `load()`, kept under that epoch. `load` must
        read the database after the epoch was read (it is called after). Concurrent misses of one
        key under one epoch share one `load()` (`SingleFlight`): an entry that expires under load
        costs one query, not one per waiting request (a caller that joins may get a value loaded
        before it read the epoch, under that same epoch, as a kept entry is). Raises what `load`
        raises."""
        if epoch is None:
            epoch = await self.epoch()
        if epoch is None:
            if self._on_lookup is not None:
                self._on_lookup(False)
            return await load()
        entry = self._entries.get(key)
        if entry is not None and entry[0] == epoch and self._clock() - entry[1] < self._max_age_s:
            if self._on_lookup is not None:
                self._on_lookup(True)
            value: T = entry[2]
            return value
        if self._on_lookup is not None:
            self._on_lookup(False)
        current = epoch

        async def load_and_keep() -> T:
            loaded = await load()
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = (current, self._clock(), loaded)
            return loaded

        return await self._loads.run((key, epoch), load_and_keep)

    def peek(self, key: Hashable) -> tuple[str, Any] | None:
        """`(epoch, value)` cached under `key` if not older than `max_age_s`, unchecked against the
        current epoch: the caller must compare that epoch with one it reads before relying on it."""
        entry = self._entries.get(key)
        if entry is None or self._clock() - entry[1] >= self._max_age_s:
            return None
        if self._on_lookup is not None:
            self._on_lookup(True)
        return entry[0], entry[2]

    def update(self, key: Hashable, value: Any) -> None:
        """Replace the value cached under `key`, if any, keeping its epoch and age (e.g. a session
        whose `last_used` was just written)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries[key] = (entry[0], entry[1], value)

    def forget(self) -> None:
        """Drop every entry of this process (after a change made here, whatever Redis does)."""
        self._entries.clear()

    async def invalidate(self) -> bool:
        """After a change of what is cached here (e.g. a webhook): bump the epoch, so every replica
        reloads, and drop this process's entries. Returns whether Redis acknowledged the bump; a
        failure is logged, not raised (entries elsewhere then live out `max_age_s`)."""
        self.forget()
        return await self._counters.bump(self._redis, [self._epoch_key])
