"""The catalog (cms.services.caching.catalog) on a real MongoDB and Redis: what each look-up reads,
counted as MongoDB `find` commands (a command listener on the client) and Redis `MGET`s (the
server's own command statistics)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring
from redis.asyncio import Redis

from cms.clock import new_id, utcnow
from cms.errors import NotFound
from cms.models import Collection
from cms.runtime.embedded import free_port
from cms.services.caching.catalog import Catalog, Fresh
from cms.services.caching.definition_cache import DefinitionCache, request_scope
from cms.store.collections import CollectionRepository


class Finds(monitoring.CommandListener):
    """Counts the `find` commands a client sends."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find":
            self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@dataclass
class Setting:
    """A catalog over a fresh database, its collection `posts`, and what to count with."""

    catalog: Catalog
    repository: CollectionRepository
    posts: Collection
    finds: Finds
    redis: Redis
    epoch_key: str

    async def mgets(self) -> int:
        """How many MGETs the Redis server has answered so far."""
        stats: dict[str, Any] = await self.redis.info("commandstats")
        return int(stats.get("cmdstat_mget", {}).get("calls", 0))


@pytest.fixture
async def setting(mongodb_url: str, redis_url: str) -> AsyncIterator[Setting]:
    finds = Finds()
    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_url, tz_aware=True, event_listeners=[finds])
    redis = Redis.from_url(redis_url)
    name = f"test_{uuid.uuid4().hex[:12]}"
    repository = CollectionRepository(mongo[name])
    now = utcnow()
    posts = Collection(id=new_id(), name="posts", type="base", fields=(), created=now, updated=now)
    await repository.insert(posts)
    epoch_key = f"test:{uuid.uuid4().hex[:8]}:catalog"
    await redis.set(epoch_key, 1)  # started: each read of it is one MGET
    try:
        yield Setting(Catalog(repository, DefinitionCache(redis, epoch_key)), repository, posts, finds, redis,
                      epoch_key)
    finally:
        await redis.delete(epoch_key)
        await mongo.drop_database(name)
        await mongo.close()
        await redis.aclose()


async def test_look_ups_read_the_database_once_per_epoch_and_name_what_is_missing(setting: Setting) -> None:
    catalog, posts, finds = setting.catalog, setting.posts, setting.finds
    assert await catalog.by_id(posts.id) == posts
    assert await catalog.find_by_id(posts.id) == posts
    assert await catalog.by_name("posts") == posts
    assert await catalog.by_name("posts") == posts
    assert finds.count == 2  # one by id, one by name
    await setting.redis.incr(setting.epoch_key)  # another replica changed the catalog
    assert await catalog.by_name("posts") == posts and finds.count == 3

    assert await catalog.find_by_id(new_id()) is None
    with pytest.raises(NotFound) as by_id:
        await catalog.by_id(new_id())
    with pytest.raises(NotFound) as by_name:
        await catalog.by_name("nope")
    assert (by_id.value.detail, by_name.value.detail) == ("Collection not found", "Collection 'nope' not found")


async def test_a_peek_reads_no_epoch_and_a_look_up_under_an_epoch_keeps_it_for_the_request(
        setting: Setting) -> None:
    """The hot read path: PEEK answers from the cache without a Redis round trip, with the epoch the
    definition was loaded under; `by_name(name, epoch=...)` loads under an epoch read elsewhere and
    the request keeps it."""
    catalog = setting.catalog
    with request_scope():
        before = await setting.mgets()
        found, loaded_under = await catalog.by_name_and_epoch("posts", fresh=Fresh.PEEK)  # a miss: reads the epoch
        assert found == setting.posts and loaded_under is not None
        assert await setting.mgets() == before + 1 and setting.finds.count == 1
    newer = str(await setting.redis.incr(setting.epoch_key))
    with request_scope():
        before = await setting.mgets()
        assert await catalog.by_name_and_epoch("posts", fresh=Fresh.PEEK) == (setting.posts, loaded_under)
        assert await setting.mgets() == before  # the caller compares the epoch; none was read here
        assert await catalog.by_name("posts", epoch=newer) == setting.posts
        assert setting.finds.count == 2  # loaded again under the newer epoch
        assert await catalog.by_name_and_epoch("posts") == (setting.posts, newer)  # the request's epoch
        assert await setting.mgets() == before and setting.finds.count == 2
    before = await setting.mgets()
    assert await catalog.by_name_and_epoch("posts") == (setting.posts, newer)  # outside a request: read now
    assert await setting.mgets() == before + 1 and setting.finds.count == 2


async def test_existence_is_never_cached_and_an_unmoved_epoch_vouches_for_it(setting: Setting) -> None:
    catalog, posts, finds = setting.catalog, setting.posts, setting.finds
    with request_scope():
        _, epoch = await catalog.by_name_and_epoch("posts")  # the request's epoch
        await setting.redis.incr(setting.epoch_key)  # meanwhile, a change elsewhere
        assert await catalog.exists(posts.id, since_epoch=epoch) and finds.count == 2  # read now: moved
    _, epoch = await catalog.by_name_and_epoch("posts")
    assert await catalog.find_by_id(posts.id) == posts and finds.count == 4
    await setting.repository.delete(posts.id)  # as a delete does, before it moves the epoch
    assert await catalog.find_by_id(posts.id) == posts  # the cache still holds it under this epoch
    assert not await catalog.exists(posts.id) and finds.count == 5  # the sweep's check reads the database
    assert await catalog.exists(posts.id, since_epoch=epoch) and finds.count == 5  # no drop can have come yet
    assert await catalog.move_epoch()
    assert not await catalog.exists(posts.id, since_epoch=epoch) and finds.count == 6
    assert await catalog.find_by_id(posts.id) is None


async def test_without_a_cache_or_without_redis_every_look_up_reads_the_database(setting: Setting) -> None:
    posts, finds = setting.posts, setting.finds
    dead = Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
    try:
        for catalog, acknowledged in ((Catalog(setting.repository), True),
                                      (Catalog(setting.repository, DefinitionCache(dead, "dead")), False)):
            before = finds.count
            assert await catalog.by_name_and_epoch("posts", fresh=Fresh.PEEK) == (posts, None)
            assert await catalog.by_name_and_epoch("posts") == (posts, None)
            assert await catalog.exists(posts.id, since_epoch="42")
            assert finds.count == before + 3
            assert await catalog.move_epoch() is acknowledged  # no cache: nothing to move
    finally:
        await dead.aclose()
