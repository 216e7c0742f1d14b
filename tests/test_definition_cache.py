"""The epoch-checked in-process cache (cms.services.caching.definition_cache) against a real Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio import Redis

from cms.runtime.embedded import free_port
from cms.services.caching import counters, definition_cache
from cms.services.caching.definition_cache import DefinitionCache, request_scope


class Loader:
    """Counts loads and returns the current `value`."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.loads = 0

    async def __call__(self) -> str:
        self.loads += 1
        return self.value


def keys() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"test:{tag}:catalog", f"test:{tag}:sessions"


async def test_a_value_is_loaded_once_per_epoch_and_again_after_a_bump(redis: Redis) -> None:
    catalog, _ = keys()
    cache, load = DefinitionCache(redis, catalog), Loader("v1")
    assert await cache.get("k", load) == "v1"
    assert await cache.get("k", load) == "v1"
    assert load.loads == 1

    load.value = "v2"
    await redis.incr(catalog)  # another replica's change
    assert await cache.get("k", load) == "v2"
    assert load.loads == 2


async def test_invalidate_bumps_the_epoch_for_other_processes(redis: Redis) -> None:
    catalog, _ = keys()
    here, there = DefinitionCache(redis, catalog), DefinitionCache(redis, catalog)
    load = Loader("old")
    assert await there.get("k", load) == "old"
    start = int(await redis.get(catalog))  # started by the first read
    load.value = "new"
    await here.invalidate()
    assert await there.get("k", load) == "new"
    assert int(await redis.get(catalog)) == start + 1


async def test_a_request_reads_each_epoch_once_and_companions_in_the_same_read(redis: Redis) -> None:
    catalog, sessions = keys()
    definitions = DefinitionCache(redis, catalog, companions=(sessions,))
    validity = DefinitionCache(redis, sessions, companions=(catalog,))
    with request_scope():
        first = await definitions.epoch()
        first_sessions = await validity.epoch()  # read by the same MGET
        await redis.incr(catalog)
        await redis.incr(sessions)
        assert await definitions.epoch() == first  # the request keeps the epoch it read first
        assert await validity.epoch() == first_sessions
    assert first is not None and first_sessions is not None
    with request_scope():
        assert await validity.epoch() == str(int(first_sessions) + 1)
        assert await definitions.epoch() == str(int(first) + 1)
    assert await definitions.epoch() == str(int(first) + 1)  # outside a request every call reads Redis
    await redis.incr(catalog)
    assert await definitions.epoch() == str(int(first) + 2)


async def test_entries_expire_after_max_age_whatever_the_epoch(redis: Redis) -> None:
    catalog, _ = keys()
    now = [100.0]
    cache, load = DefinitionCache(redis, catalog, max_age_s=5.0, clock=lambda: now[0]), Loader("v")
    await cache.get("k", load)
    now[0] += 4.9
    await cache.get("k", load)
    assert load.loads == 1
    assert cache.peek("k") == (await cache.epoch(), "v")
    now[0] += 0.2
    assert cache.peek("k") is None
    await cache.get("k", load)
    assert load.loads == 2


async def test_without_redis_every_lookup_loads(redis_url: str) -> None:
    dead = Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
    try:
        cache, load = DefinitionCache(dead, "test:dead"), Loader("v")
        assert await cache.epoch() is None
        assert await cache.get("k", load) == "v"
        assert await cache.get("k", load) == "v"
        assert load.loads == 2
        assert cache.peek("k") is None
        await cache.invalidate()  # logged, not raised
    finally:
        await dead.aclose()


async def test_the_table_is_bounded(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(definition_cache, "MAX_ENTRIES", 3)
    catalog, _ = keys()
    cache = DefinitionCache(redis, catalog)
    for index in range(3):
        await cache.get(index, Loader(str(index)))
    assert cache.peek(0) is not None
    await cache.get(3, Loader("3"))  # a fourth empties the table first
    assert [cache.peek(i) is not None for i in range(4)] == [False, False, False, True]


async def test_update_keeps_the_epoch_and_forget_drops_everything(redis: Redis) -> None:
    catalog, _ = keys()
    cache = DefinitionCache(redis, catalog)
    await cache.get("k", Loader("a"))
    cache.update("k", "b")
    cache.update("missing", "x")
    assert cache.peek("k") == (await cache.epoch(), "b")
    assert cache.peek("missing") is None
    cache.forget()
    assert cache.peek("k") is None


async def test_a_lost_epoch_restarts_at_a_value_it_never_had(redis: Redis) -> None:
    """A cache Redis may evict (`allkeys-lru`) or lose counters in a restart: a counter that comes
    back starts at a random value, so a value cached under the old one is never taken for current."""
    catalog, _ = keys()
    cache, load = DefinitionCache(redis, catalog), Loader("before")
    await cache.get("k", load)
    before = await cache.epoch()
    assert before is not None and 0 < int(before) < 2 ** counters.COUNTER_START_BITS
    await redis.delete(catalog)  # evicted
    load.value = "after"
    assert await cache.get("k", load) == "after"
    assert await cache.epoch() not in (before, str(int(before) + 1), "0", "1")
    await redis.delete(catalog)
    await cache.invalidate()  # a bump of a lost counter starts it first too
    assert int(await redis.get(catalog)) not in (1, int(before) + 1)


async def test_concurrent_misses_share_one_load(redis: Redis) -> None:
    catalog, _ = keys()
    cache, release = DefinitionCache(redis, catalog), asyncio.Event()
    loads = 0

    async def slow_load() -> str:
        nonlocal loads
        loads += 1
        await release.wait()
        return f"v{loads}"

    # the epoch given: every caller reaches the cache in its first step, before the load ends
    waiting = [asyncio.ensure_future(cache.get("k", slow_load, epoch="7")) for _ in range(20)]
    await asyncio.sleep(0)
    assert loads == 1 and not any(task.done() for task in waiting)
    release.set()
    assert await asyncio.gather(*waiting) == ["v1"] * 20
    assert loads == 1
    assert await cache.get("k", slow_load, epoch="8") == "v2"  # another epoch loads again
    assert await cache.get("other", slow_load, epoch="8") == "v3"  # and so does another key
