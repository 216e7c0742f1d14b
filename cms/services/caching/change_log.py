"""Which records each version bump of a collection changed (decisions.md, Aggregation and view
collections: a view is current at the next read, and a read after one write need not read the whole
source again).

The read cache's version of a collection (`<prefix>:v:<name>`, `counters.py`) grows by one per
record-event batch (`ReadCache.on_record_events`). Here the same step, one Lua script run per
collection, also appends `<version>|<id>,<id>,...` to the collection's change log
(`keys.read_cache_changes`): the ids of the records that batch created, changed or deleted, or `*`
for a batch of more than LOG_MAX_IDS. Redis runs each script alone, so the log's entries follow the
versions one by one. The log keeps the last LOG_MAX_ENTRIES entries and lives as long as the read
cache's entries (`ttl_s`) after the last write.

`changed_since(name, since, until)` answers the ids changed by the bumps after version `since` up to
`until` (and any later ones already logged), or None when the log cannot say: an entry is missing
(trimmed, expired, evicted, a counter that restarted at a new random value), a `*` batch, more than
LOG_MAX_ENTRIES versions apart, or Redis failed. The caller then reads the whole source again.
Reading the records by those ids afterwards gives their state as of at least `until`: a write is
logged after it is stored, so an id read twice is harmless and one never missed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, cast

from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.services.caching.counters import COUNTER_START_BITS, REDIS_TIMEOUT_S, FailOpen

log = logging.getLogger("cms.read_cache")

LOG_MAX_IDS = 100
"""Most ids one entry lists; a larger batch is logged as `*` (readers then read the whole source)."""
LOG_MAX_ENTRIES = 1000
"""Entries one collection's log keeps (the latest)."""
ALL = "*"

# KEYS: the version counter, the log. ARGV: a random start, the entry's ids, LOG_MAX_ENTRIES, TTL (s).
# The version is read back with GET: Lua numbers are doubles, and counters pass 2**53.
_BUMP = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
redis.call('INCR', KEYS[1])
local version = redis.call('GET', KEYS[1])
redis.call('RPUSH', KEYS[2], version .. '|' .. ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
redis.call('EXPIRE', KEYS[2], ARGV[4])
return version
"""


class ChangeLog:
    """The change logs of every collection under the read cache's `prefix` (see the module docstring),
    kept `ttl_s` seconds after the last write."""

    def __init__(self, redis: Redis, *, prefix: str, ttl_s: int) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._bump = redis.register_script(_BUMP)
        self._failures = FailOpen(log, "change log %s failed (views read their source again): %r")

    async def bump(self, changes: Mapping[str, Sequence[str]]) -> bool:
        """Bump the version of each collection of `changes` (name -> the ids its batch changed) and log
        the ids (one script run per collection, sent together). Returns whether Redis acknowledged it (a
        failure is logged)."""
        if not changes:
            return True
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):  # one EVALSHA each, sent together
                await asyncio.gather(*(self._bump_one(name, ids) for name, ids in sorted(changes.items())))
        except Exception as exc:
            self._failures.failed("version bump", exc)
            return False
        return True

    async def _bump_one(self, name: str, ids: Sequence[str]) -> None:
        distinct = list(dict.fromkeys(ids))
        listed = len(distinct) <= LOG_MAX_IDS and not any("," in i or "|" in i for i in distinct)
        names = [keys.read_cache_version(self._prefix, name), keys.read_cache_changes(self._prefix, name)]
        await self._bump(keys=names, args=[secrets.randbits(COUNTER_START_BITS), ",".join(distinct) if listed else ALL,
                                           LOG_MAX_ENTRIES, self._ttl_s])

    async def changed_since(self, name: str, since: int, until: int) -> set[str] | None:
        """The ids of the records of collection `name` changed by the bumps after version `since` up to
        `until` (and by any later ones logged already); None when the log cannot say (see the module
        docstring). Empty when `since == until`."""
        if until == since:
            return set()
        wanted = until - since
        if wanted < 0 or wanted > LOG_MAX_ENTRIES:
            return None
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                reading = self._redis.lrange(keys.read_cache_changes(self._prefix, name),
                                             -min(LOG_MAX_ENTRIES, wanted + 64), -1)
                entries = await cast(Awaitable[list[Any]], reading)
        except Exception as exc:
            self._failures.failed("read", exc)
            return None
        found: set[int] = set()
        changed: set[str] = set()
        for raw in entries:
            version_text, _, ids = (raw.decode() if isinstance(raw, bytes) else str(raw)).partition("|")
            version = int(version_text)
            if version <= since:
                continue
            if ids == ALL:
                return None
            found.add(version)
            changed.update(i for i in ids.split(",") if i)
        if any(version not in found for version in range(since + 1, until + 1)):
            return None
        return changed
