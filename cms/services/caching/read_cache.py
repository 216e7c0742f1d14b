"""The response cache of record reads (issue "Fast reads"): serialized bodies of `GET` one record
and `GET` a list page, in Redis, shared by every replica, never stale.

Exactness comes from versions, not from expiry. Redis holds a version per collection name
(`<prefix>:v:<name>`) and one epoch (`<prefix>:epoch`). Every record write bumps its collection's
version through the record-event seam (`on_record_events`, subscribed to the EventBus, which runs
after the write commits and before its response is sent); every collection change (schema, rules,
rename, delete) and every restore bumps the epoch. An entry is stored with the stamp
`<epoch>.<version>` it was computed under and served only while the stamp is current; one `MGET`
reads the stamp and the entry together, so a hit costs one Redis round trip. Entries also carry a
TTL (`ttl_s`) as a backstop; Redis memory is bounded by its `maxmemory` policy (docs/operations/scaling.md). Counters
start at a random value (`counters.start_counters`, through `read_counters`), so a cache Redis that evicts
(`allkeys-lru`) or restarts never brings a counter back to a value an old entry was stamped with.

An entry's key is a hash of everything the body depends on: the collection, the kind of read and
its parameters, and the access decision the caller's rules bound to (`access.Access.decision`, the
MongoDB query with the caller's values in it). Two callers share an entry only when their rules
bound to the same query, so a response computed under a rule that reads `@request.*` is never
served to a caller it was not computed for.

Redis failures never fail a read: the cache is skipped (and the failure logged, at most once a
minute); a failed bump is logged too, and the TTL bounds how long an entry written before it lives.

Identical reads that arrive while one is running wait for its result instead of running their own
(`single_flight.SingleFlight`, per process, keyed like the cache).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.services.caching.change_log import ChangeLog
from cms.services.caching.counters import REDIS_TIMEOUT_S, FailOpen, counter_text
from cms.services.delivery.events import CollectionEvent, RecordEvent

log = logging.getLogger("cms.read_cache")

DEFAULT_TTL_S = 300
"""Backstop lifetime of a cache entry, in seconds (versions make entries exact before that)."""
MAX_ENTRY_BYTES = 1 << 20
"""Largest body kept in the cache, in bytes (a page of 100 large records may be bigger; it is
served, not stored)."""

@dataclass(frozen=True)
class CachedBody:
    """A response body: `body` (JSON bytes), `etag` (a strong ETag, quoted, derived from the key and
    the stamp, so it changes with every write to the collection), `shared` (True when every
    caller gets this body for this request: proxies may cache it) and `language`, the locale its
    localized fields answer (the `Content-Language`; decisions.md, Localized fields)."""

    body: bytes
    etag: str
    shared: bool
    language: str | None = None


def canonical(value: Any) -> str:
    """A deterministic text for a query document or parameter: dict keys in order as given (their
    order is meaningful in MongoDB sorts), type-tagged scalars, datetimes in ISO form and compiled
    patterns with their flags. Raises TypeError for a value of another type."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, datetime):
        return f"dt:{value.isoformat()}"
    if isinstance(value, re.Pattern):
        return f"re:{value.flags}:{value.pattern!r}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{canonical(k)}={canonical(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    raise TypeError(f"cannot make a cache key of {type(value).__name__}")


def stamp_epoch(stamp: str) -> str:
    """The epoch part of a stamp `<epoch>.<version>` from `ReadCache.lookup`."""
    return stamp.partition(".")[0]


def entry_key(collection: str, kind: str, *parts: Any) -> str:
    """The hash naming one cached read: `kind` (`list` or `get`) of `collection` with `parts`
    (parameters and the bound access decision). Raises TypeError (see `canonical`)."""
    digest = hashlib.sha256(canonical([collection, kind, *parts]).encode()).hexdigest()
    return f"{collection}:{kind}:{digest[:40]}"


class ReadCache:
    """Versioned response cache in Redis (see the module docstring). `prefix` namespaces the keys
    (one per database); `switch()` (e.g. the `read_cache_enabled` setting) is asked on every
    lookup and store: False makes the lookup a miss that stores nothing (identical concurrent
    reads still share one query). Bumps happen whatever the switch
    says, so turning the cache back on never serves an entry older than a write. `on_lookup(hit)`
    is told of every look-up made while the switch is on (a Redis failure is a miss): the
    `read` cache's signal (cms.observability)."""

    def __init__(self, redis: Redis, *, prefix: str, ttl_s: int = DEFAULT_TTL_S,
                 switch: Callable[[], Awaitable[bool]] | None = None,
                 on_lookup: Callable[[bool], None] | None = None) -> None:
        self._on_lookup = on_lookup
        self._redis = redis
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._switch = switch
        self._counters = FailOpen(log, "read cache %s failed (reads go to the database): %r")
        self.changes = ChangeLog(redis, prefix=prefix, ttl_s=ttl_s)
        """Which records each version bump changed (`change_log`): view collections read it."""

    def _version_key(self, collection: str) -> str:
        return keys.read_cache_version(self._prefix, collection)

    async def lookup(self, collection: str, key: str,
                     related: Sequence[str] = ()) -> tuple[str | None, bytes | None]:
        """The current stamp of `collection` and the body stored under `key` if it was computed
        under that stamp: `(stamp, body)`; `(stamp, None)` on a miss, and always while the switch is
        off (the stamp still lets identical reads share one query, `SingleFlight`); `(None, None)`
        when Redis failed (then nothing may be shared or stored either). `related`: the other
        collections the body shows records of (an `expand`); their versions join the stamp
        (`<epoch>.<version>.<related versions...>`), read in the same `MGET`, so a write to any of
        them makes the entry stale too."""
        names = [keys.read_cache_epoch(self._prefix), self._version_key(collection)]
        names.extend(self._version_key(name) for name in related)
        on = self._switch is None or await self._switch()
        if on:
            names.append(keys.read_cache_entry(self._prefix, key))
        counters = 2 + len(related)
        values = await self._counters.read(self._redis, names, counters)
        if values is None:  # the database still answers: never fail a read on the cache
            if on and self._on_lookup is not None:
                self._on_lookup(False)
            return None, None
        stamp = ".".join(counter_text(v) for v in values[:counters])
        entry = values[counters] if on else None
        body: bytes | None = None
        if entry is not None:
            stored_stamp, _, stored = bytes(entry).partition(b"|")
            body = stored if stored_stamp.decode() == stamp else None
        if on and self._on_lookup is not None:
            self._on_lookup(body is not None)
        return stamp, body

    async def store(self, key: str, stamp: str, body: bytes) -> None:
        """Keep `body` under `key`, computed under `stamp` (from `lookup`), for `ttl_s` seconds.
        Bodies over MAX_ENTRY_BYTES are not kept, nor anything while the switch is off. Redis
        failures are logged."""
        if len(body) > MAX_ENTRY_BYTES or (self._switch is not None and not await self._switch()):
            return
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                await self._redis.set(keys.read_cache_entry(self._prefix, key), stamp.encode() + b"|" + body,
                                      ex=self._ttl_s)
        except Exception as exc:
            self._counters.failed("write", exc)

    async def bump(self, collections: Sequence[str]) -> None:
        """Make every entry of `collections` stale (INCR their versions). Redis failures are logged."""
        versions = [self._version_key(name) for name in sorted(set(collections))]
        await self._counters.bump(self._redis, versions, "version bump")

    async def bump_all(self) -> bool:
        """Make every entry stale (INCR the epoch, which is also the catalog epoch of the
        definition cache): collection changes and restores. Returns whether Redis acknowledged
        it; a failure is logged, not raised."""
        return await self._counters.bump(self._redis, [keys.read_cache_epoch(self._prefix)], "epoch bump")

    async def on_record_events(self, events: Sequence[RecordEvent]) -> None:
        """EventBus subscriber: a record write bumps its collection's version, logging the ids it
        changed (`ChangeLog.bump`)."""
        changed: dict[str, list[str]] = {}
        for event in events:
            changed.setdefault(event.collection, []).append(event.record_id)
        await self.changes.bump(changed)

    async def on_collection_events(self, events: Sequence[CollectionEvent]) -> None:
        """EventBus subscriber: a schema, rule or name change, or a delete, bumps the epoch."""
        if events:
            await self.bump_all()


def etag_of(key: str, stamp: str | None, body: bytes) -> str:
    """The ETag of a response: from the key and stamp when the cache knows the stamp (so a 304 needs
    no database query), else from the body."""
    source = f"{key}|{stamp}".encode() if stamp is not None else body
    return '"' + hashlib.sha256(source).hexdigest()[:32] + '"'
