"""Infra: the network clients of one process, opened and closed in one place (issue 11, item 4).

One `AsyncMongoClient`, one Redis pool plus one pipelined connection for the short commands of
the request path (cms.redis_pipe) (shared by arq's queue, the rate limiter, the settings and
read caches), one `aiohttp.ClientSession` for outgoing HTTP, and the clock. Every client has
explicit connect and operation time-outs (`DATABASE_TIMEOUT_S`), so a stalled MongoDB or Redis
fails a request with 503 within seconds instead of holding it (decisions.md, Running it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from arq.connections import ArqRedis, RedisSettings
from pymongo import AsyncMongoClient
from redis.asyncio import ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cms import redis_keys as keys
from cms.clock import Clock, utcnow
from cms.config import Config
from cms.observability import tracing
from cms.observability.signals import Signals
from cms.redis_pipe import PipedCommands, PipedRedis
from cms.services.delivery.webhook_sender import connector as guarded_connector
from cms.store.client import Capabilities, Database, detect_capabilities, ensure_indexes, open_client

REDIS_CONNECT_TIMEOUT_S = 5
"""Seconds to open one Redis connection."""
REDIS_CONNECT_RETRIES = 3
"""Start-up tries to reach Redis, REDIS_RETRY_DELAY_S apart, before the process gives up."""
REDIS_RETRY_DELAY_S = 1.0
REDIS_MAX_CONNECTIONS = 200
"""Connections one process's pool may hold; a request beyond waits for none but fails (503)."""
MONGODB_CONNECT_TIMEOUT_S = 10
"""Upper bound, in seconds, for finding and connecting to MongoDB (lower if DATABASE_TIMEOUT_S is)."""


def redis_settings(url: str) -> RedisSettings:
    """arq connection settings for a redis:// URL, with explicit connect time-outs (seconds)."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_timeout = REDIS_CONNECT_TIMEOUT_S
    settings.conn_retries = REDIS_CONNECT_RETRIES
    return settings


def redis_client_name(config: Config) -> str:
    """The name (CLIENT SETNAME) of every Redis connection of a process on `config`'s database."""
    return keys.client_name(config.mongodb_db)


def _pool(config: Config, url: str) -> ConnectionPool:
    """A connection pool for `url`: connect time-out REDIS_CONNECT_TIMEOUT_S, every command bounded
    by `config.database_timeout_s` seconds, at most REDIS_MAX_CONNECTIONS connections, each named
    `redis_client_name(config)`."""
    return ConnectionPool.from_url(url, socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
                                   socket_timeout=config.database_timeout_s, client_name=redis_client_name(config),
                                   max_connections=REDIS_MAX_CONNECTIONS)


class PipedArqRedis(PipedCommands, ArqRedis):  # type: ignore[misc]
    """arq's client with the short commands on a pipelined connection (cms.redis_pipe)."""


def open_redis(config: Config) -> ArqRedis:
    """The process's one Redis pool for `config.redis_url` (not yet connected): connect time-out
    REDIS_CONNECT_TIMEOUT_S, every command bounded by `config.database_timeout_s` seconds (arq sets
    no read time-out, and a stalled Redis must fail fast, 503), connections named
    `redis_client_name` in CLIENT LIST, jobs enqueued on `config.queue_name`; the short commands
    of the request path go over one pipelined connection (cms.redis_pipe) unless tracing is on
    (the instrumentation makes a span of each command of the pool). Closing it with
    `aclose()` closes the pool."""
    assert config.redis_url, "redis_url must be set"
    redis = PipedArqRedis(_pool(config, config.redis_url), default_queue_name=config.queue_name)
    redis.auto_close_connection_pool = True
    _pipe_unless_traced(redis)
    return redis


def open_cache_redis(config: Config) -> Redis:
    """The pool for `config.cache_redis_url` (not yet connected, and not required at start-up: the
    cache and epochs fail open, reads then go to MongoDB), named and bounded like `open_redis`'s.
    Closing it with `aclose()` closes the pool."""
    assert config.cache_redis_url, "cache_redis_url must be set"
    cache = PipedRedis(connection_pool=_pool(config, config.cache_redis_url))
    cache.auto_close_connection_pool = True
    _pipe_unless_traced(cache)
    return cache


def _pipe_unless_traced(client: PipedCommands) -> None:
    """Give `client` its pipelined connection, unless tracing is on: then every command goes
    through the pool, whose commands OpenTelemetry's instrumentation makes spans of."""
    if not tracing.active():
        client.open_pipe()


async def _reach(redis: ArqRedis) -> None:
    """Ping until Redis answers, REDIS_CONNECT_RETRIES tries; the last error propagates."""
    for attempt in range(1, REDIS_CONNECT_RETRIES + 1):
        try:
            await redis.ping()
            return
        except (RedisConnectionError, RedisTimeoutError):
            if attempt == REDIS_CONNECT_RETRIES:
                raise
            await asyncio.sleep(REDIS_RETRY_DELAY_S)


class LentRedis(ArqRedis):
    """An ArqRedis over another client's connection pool. Closing it (an arq Worker closes its
    pool on exit) leaves the shared pool open: its owner, `open_infra`, closes it."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        """Release this client only; the shared connection pool stays open."""
        await super().aclose(close_connection_pool=False)


def lend(pool: ArqRedis) -> ArqRedis:
    """A client over `pool`'s connections that an arq Worker may close without closing `pool`."""
    return LentRedis(pool.connection_pool, job_serializer=pool.job_serializer,
                     job_deserializer=pool.job_deserializer, default_queue_name=pool.default_queue_name,
                     expires_extra_ms=pool.expires_extra_ms)


@dataclass(frozen=True)
class Infra:
    """The open clients of one process; `db` is `config.mongodb_db` on `mongo`, `capabilities`
    what that server was found to support."""

    config: Config
    mongo: AsyncMongoClient[dict[str, Any]]
    db: Database
    capabilities: Capabilities
    redis: ArqRedis
    cache_redis: Redis
    """The Redis of the response cache and the definition and session epochs: `redis` itself unless
    `CACHE_REDIS_URL` names another (which may evict; reads never fail on it)."""
    http: aiohttp.ClientSession
    clock: Clock
    signals: Signals
    """What this process reports about itself (cms.observability.signals); made here, before the
    MongoDB client, whose command listener reports to it when metrics are on."""


@asynccontextmanager
async def open_infra(config: Config, *, clock: Clock = utcnow, redis: ArqRedis | None = None,
                     use_transactions: bool = True) -> AsyncIterator[Infra]:
    """Open MongoDB (ensuring the service's own indexes and detecting capabilities), Redis and the
    outgoing HTTP session; close them in reverse order on exit, also when opening fails halfway.

    `redis`: an open pool to use (an arq Worker's own, from `open_redis`); it is not closed here.
    `use_transactions`: False makes `capabilities.transactions` False whatever the server supports,
    so the process behaves as on a standalone server (tests of that case on a replica set).
    `config.mongodb_url` and `config.redis_url` must be set (embedded servers fill them in):
    ValueError if not. Driver errors propagate when a server does not answer within its time-out."""
    if not config.mongodb_url or not config.redis_url:
        raise ValueError("open_infra needs mongodb_url and redis_url")
    signals = Signals()
    async with AsyncExitStack() as stack:
        mongo = open_client(config.mongodb_url, timeout_s=min(MONGODB_CONNECT_TIMEOUT_S, config.database_timeout_s),
                            operation_timeout_s=config.database_timeout_s,
                            on_command=signals.mongo_command if config.metrics_enabled else None)
        stack.push_async_callback(mongo.close)
        db = mongo[config.mongodb_db]
        await ensure_indexes(db)
        capabilities = await detect_capabilities(db)
        if not use_transactions:
            capabilities = replace(capabilities, transactions=False)
        if redis is None:
            redis = open_redis(config)
            stack.push_async_callback(redis.aclose)
            await _reach(redis)
        cache_redis: Redis = redis
        if config.cache_redis_url and config.cache_redis_url != config.redis_url:
            cache_redis = open_cache_redis(config)
            stack.push_async_callback(cache_redis.aclose)
        allow_private = config.embedded or config.webhook_allow_private
        http = aiohttp.ClientSession(connector=guarded_connector(allow_private=allow_private),
                                     trace_configs=tracing.client_trace_configs())
        stack.push_async_callback(http.close)
        yield Infra(config=config, mongo=mongo, db=db, capabilities=capabilities, redis=redis,
                    cache_redis=cache_redis, http=http, clock=clock, signals=signals)
