"""The board of slow query shapes every replica writes to and any replica's admin reads (issue 38, item 3;
cms.services.content.slow_queries): one entry per collection and query shape, in the queue's Redis.

- `slow_queries(db)` is a hash of entry id -> JSON `{collection_id, shape, count, max_ms, last_ms,
  last_seen}` (`shape`: the `QueryShape` as a JSON text, `last_seen` epoch seconds), and
  `slow_queries_seen(db)` a sorted set of the entry ids by `last_seen`.
- `note` adds one slow run in one Lua script (so two replicas noting the same shape never lose a count):
  count + 1, the longest and the last duration, the time; then the oldest entries past MAX_SLOW_QUERIES go.
- `entries` first drops those not seen for SLOW_QUERY_RETENTION_S, then reads every entry (at most
  MAX_SLOW_QUERIES); `remove` drops one.

The entry id is a digest of the collection id and the shape's text: the same on every replica.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.models import QueryShape, SlowQuery

log = logging.getLogger("cms.slow_queries")

MAX_SLOW_QUERIES = 200
"""Most entries on the board (every replica's, every collection's); the least recently seen go first."""
SLOW_QUERY_RETENTION_S = 7 * 24 * 3600
"""Seconds an entry stays on the board after it was last seen."""
ENTRY_ID_LENGTH = 24
"""Hex characters of an entry id (a SHA-256 prefix)."""

_NOTE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local entry
if raw then entry = cjson.decode(raw) else
  entry = {collection_id = ARGV[2], shape = ARGV[3], count = 0, max_ms = 0}
end
local duration = tonumber(ARGV[4])
entry.count = entry.count + 1
if duration > entry.max_ms then entry.max_ms = duration end
entry.last_ms = duration
entry.last_seen = tonumber(ARGV[5])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(entry))
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[6])
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #oldest, 2 do redis.call('HDEL', KEYS[1], oldest[i]) end
end
return entry.count
"""


def entry_id(collection_id: str, shape: QueryShape) -> str:
    """The board's id of `shape`'s entry for `collection_id` (ENTRY_ID_LENGTH hex characters)."""
    return hashlib.sha256(f"{collection_id}\0{shape.text}".encode()).hexdigest()[:ENTRY_ID_LENGTH]


def shape_json(shape: QueryShape) -> str:
    """`shape` as the JSON text an entry keeps."""
    return json.dumps({"text": shape.text, "equality": list(shape.equality), "ranges": list(shape.ranges),
                       "sort": list(shape.sort)}, separators=(",", ":"))


def shape_from_json(raw: Any) -> QueryShape | None:
    """The `QueryShape` of an entry's `shape` text, or None when it is not one."""
    try:
        data = json.loads(raw)
        names = {key: tuple(data.get(key, ())) for key in ("equality", "ranges", "sort")}
        if not isinstance(data["text"], str) or not all(isinstance(n, str) for v in names.values() for n in v):
            return None
        return QueryShape(text=data["text"], **names)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


class SlowQueryBoard:
    """The board of database `db` on `redis` (module docstring). Redis errors propagate (the caller
    decides: a note is dropped, a read is a 503)."""

    def __init__(self, redis: Redis, db: str) -> None:
        self._redis = redis
        self._entries = keys.slow_queries(db)
        self._seen = keys.slow_queries_seen(db)
        self._note = redis.register_script(_NOTE)

    async def note(self, collection_id: str, shape: QueryShape, duration_ms: float, at: float) -> int:
        """Add one slow run of `shape` on `collection_id` that took `duration_ms` ms, at `at` (epoch
        seconds); returns the entry's count."""
        count = await self._note(keys=[self._entries, self._seen],
                                 args=[entry_id(collection_id, shape), collection_id, shape_json(shape),
                                       round(duration_ms, 1), at, MAX_SLOW_QUERIES])
        return int(count)

    async def entries(self, now: float) -> list[SlowQuery]:
        """Every entry seen within SLOW_QUERY_RETENTION_S of `now` (epoch seconds), in no order, each
        with `collection` empty and no suggestion (the service fills them in); older ones are dropped."""
        expired = await self._redis.zrangebyscore(self._seen, "-inf", now - SLOW_QUERY_RETENTION_S)
        if expired:
            await self._drop([self._text(i) for i in expired])
        raw = await cast("Awaitable[dict[Any, Any]]", self._redis.hgetall(self._entries))
        found = [_entry(self._text(key), value) for key, value in raw.items()]
        return [entry for entry in found if entry is not None]

    async def get(self, entry: str) -> SlowQuery | None:
        """The entry `entry`, or None."""
        raw = await cast("Awaitable[Any]", self._redis.hget(self._entries, entry))
        return None if raw is None else _entry(entry, raw)

    async def remove(self, entry: str) -> bool:
        """Drop the entry `entry`; whether it was there."""
        return await self._drop([entry]) > 0

    async def _drop(self, ids: list[str]) -> int:
        pipe = self._redis.pipeline(transaction=True)
        pipe.hdel(self._entries, *ids)
        pipe.zrem(self._seen, *ids)
        removed, _ = await pipe.execute()
        return int(removed)

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)


def _entry(key: str, raw: Any) -> SlowQuery | None:
    """An entry read back, or None (logged) when it is not one."""
    try:
        data: Mapping[str, Any] = json.loads(raw)
        shape = shape_from_json(data["shape"])
        if shape is None:
            raise ValueError("no shape")
        return SlowQuery(id=key, collection_id=str(data["collection_id"]), collection="", shape=shape,
                         count=int(data["count"]), max_ms=float(data["max_ms"]), last_ms=float(data["last_ms"]),
                         last_seen=datetime.fromtimestamp(float(data["last_seen"]), UTC))
    except (TypeError, ValueError, KeyError) as exc:
        log.warning("slow queries: entry %s is unreadable (%r); left out", key, exc)
        return None
