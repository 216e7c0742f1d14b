"""The epoch and version counters (cms.services.caching.counters) against a real Redis, and the
Redis key names (cms.redis_keys), which deployments hold data under."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from cms import redis_keys as keys
from cms.runtime.embedded import free_port, start_redis
from cms.services.caching.counters import (
    COUNTER_START_BITS,
    FailOpen,
    bump_counters,
    counter_text,
    read_counters,
    start_counters,
)
from tests.test_stalled_database import paused

log = logging.getLogger("tests.counters")


def fresh(name: str) -> str:
    return f"test:{uuid.uuid4().hex[:8]}:{name}"


def started(value: object) -> int:
    """The counter's value, checked to be one `start_counters` could have set (or one INCR past)."""
    assert isinstance(value, bytes)
    number = int(value)
    assert 0 <= number <= 2 ** COUNTER_START_BITS
    return number


@pytest.mark.parametrize("name, expected", [
    (keys.client_name("db1"), "cms:db1"),
    (keys.settings_version("db1"), "cms:settings:version:db1"),
    (keys.session_epoch("db1"), "cms:sessions:epoch:db1"),
    (keys.read_cache_prefix("db1"), "cms:rc:db1"),
    (keys.catalog_epoch("db1"), "cms:rc:db1:epoch"),
    (keys.read_cache_epoch("cms:rc:db1"), "cms:rc:db1:epoch"),
    (keys.read_cache_version("cms:rc:db1", "posts"), "cms:rc:db1:v:posts"),
    (keys.read_cache_entry("cms:rc:db1", "posts:get:ab12"), "cms:rc:db1:e:posts:get:ab12"),
    (keys.read_cache_ids("cms:rc:db1", "posts"), "cms:rc:db1:ids:posts"),
    (keys.rate_limit_prefix("db1"), "cms:ratelimit:db1"),
    (keys.admin_ui_refresh("db1", "beef"), "cms:admin-ui:refresh:db1:beef"),
    (keys.admin_ui_refresh_lock("db1", "beef"), "cms:admin-ui:refresh:db1:beef:lock"),
    (keys.realtime_stream("db1"), "cms:rt:db1:events"),
    (keys.realtime_floor("db1"), "cms:rt:db1:floor"),
    (keys.realtime_client("db1", "c1"), "cms:rt:db1:client:c1"),
    (keys.realtime_active("db1"), "cms:rt:db1:active"),
    (keys.backup_lock("db1"), "cms:backups:lock:db1"),
    (keys.thumbnail_lock("db1", "f1.100x100.webp"), "cms:thumbs:lock:db1:f1.100x100.webp"),
    (keys.dashboard_minute("db1", 29_000_000), "cms:obs:db1:m:29000000"),
    (keys.request_log("db1"), "cms:obs:db1:log"),
    (keys.request_log_routes("db1"), "cms:obs:db1:routes"),
    (keys.slow_queries("db1"), "cms:slowq:db1"),
    (keys.slow_queries_seen("db1"), "cms:slowq:db1:seen"),
    (keys.index_sync_lock("db1"), "cms:indexes:lock:db1"),
], ids=["client", "settings", "sessions", "rc-prefix", "catalog", "rc-epoch", "rc-version", "rc-entry", "rc-ids",
        "ratelimit", "refresh", "refresh-lock", "rt-stream", "rt-floor", "rt-client", "rt-active",
        "backup-lock", "thumbnail-lock", "dashboard-minute", "request-log", "request-log-routes", "slow-queries",
        "slow-queries-seen", "index-sync-lock"])
def test_key_names_stay_what_deployments_hold_data_under(name: str, expected: str) -> None:
    assert name == expected


async def test_a_missing_counter_is_started_at_a_random_value_and_read_again(redis: Redis) -> None:
    epoch, version, entry = fresh("epoch"), fresh("version"), fresh("entry")
    await redis.set(version, 41)
    values = await read_counters(redis, [epoch, version, entry], 2)
    assert started(values[0]) == started(await redis.get(epoch))  # started, and what was read is stored
    assert values[1:] == [b"41", None]  # a counter that exists is left; an entry is never started
    assert not await redis.exists(entry)
    other = fresh("epoch")
    await start_counters(redis, [epoch, other])
    assert values[0] == await redis.get(epoch)  # SET NX: a started counter keeps its value
    assert started(await redis.get(other)) != started(values[0])  # 1 in 2**62 to collide


async def test_bump_moves_a_counter_by_one_and_starts_a_missing_one(redis: Redis) -> None:
    epoch, lost = fresh("epoch"), fresh("lost")
    (before,) = await read_counters(redis, [epoch], 1)
    await bump_counters(redis, [epoch])
    assert started(await redis.get(epoch)) == started(before) + 1
    await bump_counters(redis, [lost])  # a counter Redis lost comes back at a random value, then INCR
    assert started(await redis.get(lost)) not in (0, 1)


async def test_fail_open_reads_and_bumps_give_their_values_while_redis_answers(redis: Redis) -> None:
    counters, epoch = FailOpen(log, "%s failed: %r"), fresh("epoch")
    values = await counters.read(redis, [epoch], 1)
    assert values is not None
    assert await counters.bump(redis, [epoch]) is True
    assert int(await redis.get(epoch)) == started(values[0]) + 1
    assert await counters.bump(redis, []) is True


async def test_an_unreachable_redis_gives_the_fallbacks_and_one_warning_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    counters = FailOpen(log, "counters %s failed: %r", clock=lambda: now[0])
    dead = Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
    try:
        with caplog.at_level(logging.WARNING, logger=log.name):
            assert await counters.read(dead, ["test:dead"], 1) is None
            assert await counters.bump(dead, ["test:dead"], "epoch bump") is False
            now[0] += 59.0
            counters.failed("write", ConnectionError("down"))
            assert [r.getMessage().split(":")[0] for r in caplog.records] == ["counters read failed"]
            now[0] += 1.0
            assert await counters.bump(dead, ["test:dead"], "epoch bump") is False
        assert [r.getMessage().split(":")[0] for r in caplog.records] == ["counters read failed",
                                                                          "counters epoch bump failed"]
        with pytest.raises(RedisConnectionError):  # the raw functions raise; settings relies on that
            await bump_counters(dead, ["test:dead"])
    finally:
        await dead.aclose()


async def test_a_redis_that_does_not_answer_gives_the_fallbacks_within_the_time_out(tmp_path: Path) -> None:
    """A stalled Redis (SIGSTOP: connections stay open, nothing answers) costs a read or a bump its
    time-out, then the fallback; the raw functions raise TimeoutError. (A bump that timed out may
    still land when Redis resumes: its command was sent.)"""
    timeout_s, slack_s = 0.3, 1.5
    counters = FailOpen(log, "counters %s failed: %r", timeout_s=timeout_s)
    with start_redis(tmp_path / "redis") as server:
        stalled = Redis.from_url(server.url, socket_timeout=30)  # the socket time-out is not what fires
        try:
            epoch = fresh("epoch")
            assert await counters.read(stalled, [epoch], 1) is not None  # connected while it answers
            with paused(server):
                started_at = time.monotonic()
                assert await counters.read(stalled, [epoch], 1) is None
                assert time.monotonic() - started_at < timeout_s + slack_s
                started_at = time.monotonic()
                assert await counters.bump(stalled, [epoch]) is False
                assert time.monotonic() - started_at < timeout_s + slack_s
                with pytest.raises(TimeoutError):
                    await read_counters(stalled, [epoch], 1, timeout_s)
                with pytest.raises(TimeoutError):
                    await bump_counters(stalled, [epoch], timeout_s)
            assert await counters.read(stalled, [epoch], 1) is not None  # answers again once resumed
        finally:
            await stalled.aclose()


@pytest.mark.parametrize("value, expected", [(b"17", "17"), ("17", "17"), (17, "17")], ids=["bytes", "str", "int"])
def test_counter_text_of_a_value(value: object, expected: str) -> None:
    assert counter_text(value) == expected


def test_counter_text_of_a_missing_counter_matches_nothing() -> None:
    first, second = counter_text(None), counter_text(None)
    assert first.startswith("unset-") and first != second
