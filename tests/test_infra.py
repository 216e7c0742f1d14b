"""One set of network clients per process (issue 11, item 4): every Redis connection a process
opens belongs to its one pool (or is that client's one pipelined connection, cms.redis_pipe), a
worker builds its services on its own pool, and closing returns every connection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from cms.config import Config
from cms.infra import redis_client_name
from cms.wiring import open_services
from workers.settings import build_worker


@pytest.fixture
async def watcher(config: Config) -> AsyncIterator[Redis]:
    """A client of its own on the test's Redis, to count the process's connections."""
    assert config.redis_url
    client = Redis.from_url(config.redis_url)
    yield client
    await client.aclose()


async def named_connections(watcher: Redis, config: Config) -> int:
    """Connections on the server named as the processes on `config`'s database name theirs."""
    name = redis_client_name(config)
    return sum(1 for entry in await watcher.client_list() if entry.get("name") == name)


async def other_connections(watcher: Redis, config: Config) -> int:
    """Connections on the server not named so (a client opened without the process's pool)."""
    name = redis_client_name(config)
    return sum(1 for entry in await watcher.client_list() if entry.get("name") != name)


async def until_named_connections(watcher: Redis, config: Config, expected: int, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while (count := await named_connections(watcher, config)) != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return count


def pool_size(redis: Redis) -> int:
    """The client's open connections: its pool's and its pipelined one (cms.redis_pipe)."""
    pool = redis.connection_pool
    # redis-py's pool lists its connections in these two attributes only (no public accessor)
    connections = [*pool._available_connections, *pool._in_use_connections]  # noqa: SLF001 - see above
    return sum(1 for connection in connections if connection.is_connected) + getattr(redis, "pipe_connections", 0)


async def test_the_rate_limiter_settings_and_cache_share_the_one_pool_and_close_it(config: Config, watcher: Redis):
    others = await other_connections(watcher, config)
    async with open_services(config) as services:
        await services.settings.set("rate_limit_enabled", True)
        # concurrent work from every Redis user forces the pool to open several connections
        await asyncio.gather(*(services.rate_limits.hit_general(f"192.0.2.{n}") for n in range(8)),
                             *(services.rate_limits.hit_auth("login", "192.0.2.1", f"u{n}@x.test") for n in range(8)),
                             *(services.settings.values() for _ in range(4)), services.redis.ping())
        opened = pool_size(services.redis)
        assert opened >= 2  # the short commands' pipelined connection and the pool's
        # every connection of the process on the server is one of the pool's: no second client
        assert await named_connections(watcher, config) == opened
        assert await other_connections(watcher, config) == others
    assert await until_named_connections(watcher, config, 0) == 0


async def test_a_worker_builds_its_services_on_its_own_pool(config: Config, watcher: Redis):
    worker = build_worker(config, burst=True, handle_signals=False, poll_delay_s=0.01)
    await worker.async_run()
    try:
        services = worker.ctx["services"]
        assert services.redis is worker.pool
        await services.settings.values()
        assert await named_connections(watcher, config) == pool_size(worker.pool) >= 1
    finally:
        await worker.close()
    assert await until_named_connections(watcher, config, 0) == 0


async def test_a_worker_lent_the_services_pool_leaves_it_open(config: Config):
    async with open_services(config) as services:
        worker = build_worker(config, services=services, burst=True, handle_signals=False, poll_delay_s=0.01)
        await worker.async_run()
        await worker.close()
        assert await services.redis.ping()
        await services.redis.set("cms:test:lent", "still-open")
        assert await services.redis.get("cms:test:lent") == b"still-open"
        await services.redis.delete("cms:test:lent")
