"""The pipelined Redis connection of the request path (cms.redis_pipe) against real redis-servers:
the same replies as redis-py's pool, the commands of concurrent callers on one connection, and
redis-py's failure contract (time-outs, lost connections, error replies, cancelled callers)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cms.redis_pipe import MAX_BUFFERED_BYTES, PipedRedis
from cms.runtime.children import ChildServer
from cms.runtime.embedded import start_redis
from tests.test_stalled_database import paused


def piped(url: str, **pool_kwargs: object) -> PipedRedis:
    pool_kwargs.setdefault("socket_timeout", 5)
    client = PipedRedis(connection_pool=ConnectionPool.from_url(url, client_name="cms:pipe-test", **pool_kwargs))
    client.auto_close_connection_pool = True
    client.open_pipe()
    return client


def fresh(name: str) -> str:
    return f"test:pipe:{uuid.uuid4().hex[:8]}:{name}"


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[ChildServer]:
    with start_redis(tmp_path / "redis") as server:
        yield server


@pytest.fixture
async def pipe(redis_url: str) -> AsyncIterator[PipedRedis]:
    async with piped(redis_url, socket_timeout=5) as client:
        yield client


async def connections_received(redis: Redis) -> int:
    return int((await redis.info("stats"))["total_connections_received"])


async def test_piped_commands_answer_as_redis_py_does(pipe: PipedRedis, redis: Redis) -> None:
    key, number, missing = fresh("key"), fresh("number"), fresh("missing")
    assert await pipe.set(key, b"value", ex=60) is True
    assert await pipe.set(key, b"other", nx=True) is None  # SET's reply callback: None when NX refused
    assert await pipe.set(key, b"next", get=True) == b"value"  # an option the callback reads
    assert await pipe.get(key) == b"next"
    assert await pipe.mget([key, missing]) == [b"next", None]
    assert await pipe.getrange(key, 1, 2) == b"ex"
    assert await pipe.incrby(number, 5) == 5 and await pipe.incr(number) == 6
    assert await pipe.exists(key, missing) == 1
    assert await pipe.expire(key, 100) is True and 0 < await redis.ttl(key) <= 100
    assert await pipe.delete(key, number) == 2
    assert await redis.mget([key, number]) == [None, None]


async def test_concurrent_callers_share_one_connection_and_each_gets_its_own_reply(
        redis_url: str, redis: Redis) -> None:
    keys = [fresh(f"k{i}") for i in range(300)]
    await redis.mset({key: f"value-{i}" for i, key in enumerate(keys)})
    before = await connections_received(redis)
    async with piped(redis_url) as client:
        replies = await asyncio.gather(*(client.get(key) for key in keys))
        assert replies == [f"value-{i}".encode() for i in range(len(keys))]
        # the pool would have opened a connection per concurrent caller
        assert await connections_received(redis) - before == 1
        names = [entry["name"] for entry in await redis.client_list()]
        assert "cms:pipe-test" in names  # the connection is named like the pool's


async def test_an_error_reply_fails_its_command_only(pipe: PipedRedis) -> None:
    text, number = fresh("text"), fresh("number")
    await pipe.set(text, b"not a number")
    results = await asyncio.gather(pipe.incrby(text, 1), pipe.incrby(number, 2), return_exceptions=True)
    assert isinstance(results[0], ResponseError) and "not an integer" in str(results[0])
    assert results[1] == 2
    assert await pipe.get(text) == b"not a number"


async def test_a_script_flushed_from_the_server_is_loaded_again(pipe: PipedRedis, redis: Redis) -> None:
    key = fresh("script")
    script = pipe.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert await script(keys=[key], args=[3]) == 3
    await redis.script_flush()  # as a Redis restart without persistence of scripts does
    assert await script(keys=[key], args=[4]) == 7  # NOSCRIPT is NoScriptError: redis-py's Script reloads


async def test_other_commands_keep_the_pool(pipe: PipedRedis) -> None:
    key = fresh("list")
    async with pipe.pipeline(transaction=True) as transaction:
        transaction.rpush(key, b"a", b"b")
        transaction.lrange(key, 0, -1)
        assert await transaction.execute() == [2, [b"a", b"b"]]
    assert await pipe.execute_command("LRANGE", key, 0, -1) == [b"a", b"b"]  # not piped: the pool


async def test_a_caller_that_gives_up_leaves_the_connection_in_step(own_redis: ChildServer) -> None:
    """The late-reply path of the pipelined connection: a command whose caller gave up is still
    answered by Redis; that reply is read and dropped, so every later reply goes to its own caller."""
    async with piped(own_redis.url, socket_timeout=10) as client:
        keys = [fresh(f"k{i}") for i in range(4)]
        for i, key in enumerate(keys):
            assert await client.set(key, str(i).encode()) is True  # SET is piped: the connection is open now
        assert client.pipe_connections == 1
        with paused(own_redis):  # the commands are written; their replies wait for the server
            before = asyncio.ensure_future(client.get(keys[0]))
            await asyncio.sleep(0)  # its GET is queued first
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):  # the caller's own bound, shorter than the socket's
                    await client.get(keys[1])
            after = asyncio.ensure_future(client.get(keys[2]))
            await asyncio.sleep(0)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):  # the last in line gives up too: its reply comes alone
                    await client.get(keys[3])
        # the abandoned GETs are answered between the others; each reply reaches its own caller
        assert list(await asyncio.wait_for(asyncio.gather(before, after), 5)) == [b"0", b"2"]
        assert await client.get(keys[1]) == b"1"
        assert await asyncio.gather(*(client.get(key) for key in keys)) == [b"0", b"1", b"2", b"3"]
        assert client.pipe_connections == 1  # the same connection, not one opened again


async def test_a_stalled_redis_times_out_and_the_next_command_connects_again(own_redis: ChildServer) -> None:
    async with piped(own_redis.url, socket_timeout=0.5) as client:
        key = fresh("stall")
        await client.set(key, b"kept")
        with paused(own_redis):
            started = time.monotonic()
            with pytest.raises(RedisTimeoutError):
                await client.get(key)
            assert time.monotonic() - started < 3
        assert await client.get(key) == b"kept"


async def test_a_lost_connection_fails_the_commands_in_flight_and_is_opened_again(tmp_path: Path) -> None:
    server = start_redis(tmp_path / "redis")
    try:
        async with piped(server.url, socket_timeout=30) as client:
            key = fresh("kept")
            await client.set(key, b"1")  # connected; the append-only file keeps it
            os.kill(server.process.pid, signal.SIGSTOP)
            in_flight = asyncio.ensure_future(client.get(key))
            await asyncio.sleep(0.2)
            os.kill(server.process.pid, signal.SIGKILL)  # the server dies with the command unanswered
            started = time.monotonic()
            with pytest.raises(RedisConnectionError):
                await in_flight
            assert time.monotonic() - started < 5  # at once, not after the 30 s socket time-out
            server.stop()
            with pytest.raises(RedisConnectionError):
                await client.get(key)  # nobody listens
            server = start_redis(tmp_path / "redis")  # a new server on the same socket
            assert await client.incr(fresh("after")) == 1  # the same client connects again
    finally:
        server.stop()


async def test_a_killed_connection_is_opened_again_by_the_next_command(pipe: PipedRedis,
                                                                      redis: Redis) -> None:
    key = fresh("killed")
    await pipe.set(key, b"before")
    killed = 0
    for entry in await redis.client_list():
        if entry["name"] == "cms:pipe-test":
            killed += await redis.client_kill_filter(_id=entry["id"])
    assert killed >= 1
    deadline = time.monotonic() + 5
    while True:  # the loss is seen when the socket's close is read; a command in between may fail
        try:
            assert await pipe.get(key) == b"before"
            break
        except RedisConnectionError:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)


async def test_password_and_database_of_the_url_are_used(own_redis: ChildServer) -> None:
    admin = Redis.from_url(own_redis.url)
    try:
        port = int((await admin.config_get("port"))["port"])
        await admin.config_set("requirepass", "s3cret")
        await admin.execute_command("AUTH", "s3cret")
        async with piped(f"redis://:s3cret@127.0.0.1:{port}/5") as client:
            key = fresh("db5")
            await client.set(key, b"in five")
            await admin.select(5)
            assert await admin.get(key) == b"in five"
        async with piped(f"redis://:wrong@127.0.0.1:{port}/0") as wrong:
            with pytest.raises(RedisConnectionError):
                await wrong.get("anything")
    finally:
        await admin.aclose()


async def test_a_caller_that_gives_up_while_connecting_does_not_fail_the_others(own_redis: ChildServer) -> None:
    async with piped(own_redis.url, socket_timeout=10) as client:
        key = fresh("patient")
        with paused(own_redis):  # the kernel accepts the connection; its set-up waits for the server
            impatient = asyncio.ensure_future(asyncio.wait_for(client.get(key), 0.1))
            await asyncio.sleep(0.01)
            patient = asyncio.ensure_future(client.get(key))  # no bound of its own but the socket's
            with pytest.raises(TimeoutError):
                await impatient
            await asyncio.sleep(0.2)
        assert await patient is None  # the connection the impatient caller started serves it


async def test_closing_while_connecting_leaves_no_connection(redis_url: str, redis: Redis) -> None:
    client = piped(redis_url, socket_timeout=5)
    waiting = asyncio.ensure_future(client.get(fresh("closing")))
    await asyncio.sleep(0)  # the connect has started
    await client.aclose()
    with pytest.raises(RedisConnectionError):
        await waiting
    deadline = time.monotonic() + 5
    while any(entry["name"] == "cms:pipe-test" for entry in await redis.client_list()):
        assert time.monotonic() < deadline, "the pipelined connection outlived aclose()"
        await asyncio.sleep(0.05)
    assert client.pipe_connections == 0


async def test_a_redis_that_stops_reading_bounds_the_bytes_waiting(own_redis: ChildServer) -> None:
    async with piped(own_redis.url, socket_timeout=2) as client:
        await client.set(fresh("warm"), b"1")
        body = os.urandom(1024 * 1024)

        async def store(n: int) -> BaseException | None:
            try:
                await client.set(fresh(f"big{n}"), body)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                return exc
            return None

        with paused(own_redis):
            started = time.monotonic()
            outcomes = await asyncio.gather(*(store(n) for n in range(48)))  # 48 MiB for a 32 MiB bound
            assert time.monotonic() - started < 10
        refused = [o for o in outcomes if isinstance(o, RedisConnectionError) and "waiting" in str(o)]
        assert len(refused) >= 48 - MAX_BUFFERED_BYTES // len(body)  # refused at once, not buffered
        assert all(o is not None for o in outcomes)  # the rest timed out: the server never read them
        assert await client.get(fresh("after")) is None  # and the client works again


@pytest.mark.parametrize("pool_kwargs", [{"decode_responses": True}, {"socket_timeout": None}],
                         ids=["decoding", "no-time-out"])
async def test_what_the_pipe_does_not_do_keeps_the_pool(redis_url: str, redis: Redis,
                                                       pool_kwargs: dict[str, object]) -> None:
    key = fresh("pool")
    await redis.set(key, b"v")
    async with piped(redis_url, **pool_kwargs) as client:
        replies = await asyncio.gather(*(client.get(key) for _ in range(20)))
        assert set(replies) == ({"v"} if pool_kwargs.get("decode_responses") else {b"v"})
        assert client.pipe_connections == 0
