"""The change log of the read cache's versions (cms.services.caching.change_log) against a real Redis:
one entry per bump, in version order, read back exactly, and "cannot say" (None) whenever an entry is
missing, too many ids were changed, or the counter restarted."""

from __future__ import annotations

import uuid

from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.services.caching.change_log import LOG_MAX_ENTRIES, LOG_MAX_IDS, ChangeLog


def log_of(redis: Redis) -> tuple[ChangeLog, str]:
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    return ChangeLog(redis, prefix=prefix, ttl_s=60), prefix


async def version(redis: Redis, prefix: str, name: str) -> int:
    return int(await redis.get(keys.read_cache_version(prefix, name)))


async def test_each_bump_logs_its_ids_under_its_version(redis: Redis) -> None:
    changes, prefix = log_of(redis)
    assert await changes.bump({"posts": ["a"], "tags": ["t1"]})
    first = await version(redis, prefix, "posts")
    assert first > 2 ** 53  # a random start: Lua must not round it
    assert await changes.bump({"posts": ["b", "c", "b"]})
    assert await changes.bump({"posts": ["a"]})
    last = await version(redis, prefix, "posts")
    assert last == first + 2
    assert await changes.changed_since("posts", first, last) == {"a", "b", "c"}
    assert await changes.changed_since("posts", first + 1, last) == {"a"}
    assert await changes.changed_since("posts", last, last) == set()
    assert await changes.changed_since("posts", first - 1, last) == {"a", "b", "c"}
    assert await changes.changed_since("posts", first - 2, last) is None  # before the log began
    assert await changes.changed_since("posts", last, first) is None  # a counter that went back
    assert await changes.changed_since("posts", first, first + LOG_MAX_ENTRIES + 1) is None


async def test_a_large_batch_or_a_missing_entry_cannot_be_told(redis: Redis) -> None:
    changes, prefix = log_of(redis)
    await changes.bump({"posts": ["a"]})
    start = await version(redis, prefix, "posts")
    await changes.bump({"posts": [f"id{i}" for i in range(LOG_MAX_IDS + 1)]})
    assert await changes.changed_since("posts", start, start + 1) is None
    await changes.bump({"posts": ["b"]})
    assert await changes.changed_since("posts", start + 1, start + 2) == {"b"}
    await redis.incr(keys.read_cache_version(prefix, "posts"))  # a bump that logged nothing
    await changes.bump({"posts": ["c"]})
    assert await changes.changed_since("posts", start + 2, start + 4) is None
    assert await changes.changed_since("posts", start + 3, start + 4) == {"c"}
    await redis.delete(keys.read_cache_changes(prefix, "posts"))  # evicted
    assert await changes.changed_since("posts", start + 3, start + 4) is None
