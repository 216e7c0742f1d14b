"""The dashboard's per-minute counters (cms.observability.timeline, recorder): the aggregation and the
p50/p95 math as pure functions, and recorders of two "replicas" flushing into the suite's real Redis,
combined by the reader, with the minute hashes expiring as they leave the 24-hour window."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable
from typing import cast

import pytest
from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.observability import timeline
from cms.observability.recorder import Recorder
from cms.observability.signals import RequestSample, Signals
from cms.observability.timeline import (
    BUCKETS,
    LATENCY_BOUNDS_MS,
    MinuteCounters,
    bucket_of,
    combine,
    quantile_ms,
    read_timeline,
)
from cms.runtime.embedded import free_port

T0 = time.time() // 60 * 60  # the start of this minute (epoch seconds): the keys written expire within a day
MINUTE = int(T0 // 60)


class Now:
    """A clock in epoch seconds that moves only when told."""

    def __init__(self, at: float = T0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def sample(at: float, status: int = 200, duration_ms: float = 20.0, route: str = "/api/v1/health") -> RequestSample:
    return RequestSample(at=at, method="GET", route=route, status=status, duration_s=duration_ms / 1000,
                         client_ip="10.0.0.1", principal=None)


def histogram(**by_bound: int) -> list[int]:
    """Counts per bucket from {"b<bound in ms>": count}; `over` for the last bucket."""
    counts = [0] * BUCKETS
    for name, count in by_bound.items():
        index = BUCKETS - 1 if name == "over" else LATENCY_BOUNDS_MS.index(float(name[1:]))
        counts[index] = count
    return counts


@pytest.mark.parametrize("duration_ms, bucket", [
    (0.0, 0), (5.0, 0), (5.01, 1), (10.0, 1), (99.0, 4), (100.0, 4), (10_000.0, 10), (10_000.1, 11), (1e9, 11),
], ids=["zero", "first-bound", "just-above", "second-bound", "below-100", "100", "largest-bound", "over", "huge"])
def test_a_duration_falls_in_the_first_bucket_whose_bound_holds_it(duration_ms: float, bucket: int) -> None:
    assert bucket_of(duration_ms) == bucket


@pytest.mark.parametrize("counts, q, expected", [
    (histogram(), 0.5, None),
    (histogram(b10=10), 0.5, 7.5),                 # bucket 5..10 ms, half way: 5 + 5 * 5/10
    (histogram(b10=10), 0.95, 9.75),
    (histogram(b5=50, b100=50), 0.5, 5.0),         # the 50th of 100 is the last of the first bucket
    (histogram(b5=50, b100=50), 0.95, 50 + 50 * 45 / 50),
    (histogram(b5=90, b1000=10), 0.95, 500 + 500 * 5 / 10),
    (histogram(b5=1, over=99), 0.5, 10_000.0),     # past the largest bound: that bound
    (histogram(b25=1), 0.5, 10 + 15 * 0.5),
], ids=["empty", "one-bucket-p50", "one-bucket-p95", "edge-of-a-bucket", "p95-in-the-upper-bucket", "tail",
        "overflow", "single"])
def test_quantiles_interpolate_inside_their_bucket(counts: list[int], q: float, expected: float | None) -> None:
    assert quantile_ms(counts, q) == pytest.approx(expected) if expected is not None else quantile_ms(counts, q) is None


def test_a_quantile_out_of_range_is_refused() -> None:
    for q in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError):
            quantile_ms(histogram(b5=1), q)


def test_counters_add_up_per_minute_by_status_latency_cache_delivery_and_gauge() -> None:
    now = Now(T0 + 30)
    counters = MinuteCounters(now)
    counters.request(sample(T0 + 1, 200, 3))
    counters.request(sample(T0 + 2, 404, 30))
    counters.request(sample(T0 + 3, 503, 300))
    counters.request(sample(T0 + 61, 201, 3))      # the next minute
    counters.cache("read", True)
    counters.cache("read", False)
    counters.cache("read", True)
    counters.delivery("delivered", 0.05)
    counters.delivery("failed", 2.0)
    counters.gauge(timeline.QUEUE_DEPTH, 7)
    drained = counters.drain()
    assert set(drained) == {MINUTE, MINUTE + 1}
    first = drained[MINUTE]
    assert first[timeline.REQUESTS] == 3 and first[timeline.ERRORS_4XX] == 1 and first[timeline.ERRORS_5XX] == 1
    assert first[timeline.latency_field(0)] == 1 and first[timeline.latency_field(3)] == 1
    assert first[timeline.latency_field(6)] == 1
    assert first[timeline.cache_field("read", True)] == 2 and first[timeline.cache_field("read", False)] == 1
    assert first[timeline.DELIVERED] == 1 and first[timeline.DELIVERY_FAILED] == 1
    assert first[timeline.delivery_latency_field(3)] == 1 and first[timeline.delivery_latency_field(8)] == 1
    assert first["q:sum"] == 7 and first["q:n"] == 1
    assert drained[MINUTE + 1] == {timeline.REQUESTS: 1, timeline.latency_field(0): 1}
    assert counters.drain() == {}  # drained means cleared


def test_memory_is_bounded_minutes_and_cache_names() -> None:
    counters = MinuteCounters(Now(), max_minutes=3)
    for minute in range(10):
        counters.request(sample(T0 + 60 * minute))
    counters.request(sample(T0))  # older than everything held: dropped, not re-added
    drained = counters.drain()
    assert sorted(drained) == [MINUTE + 7, MINUTE + 8, MINUTE + 9]
    assert counters.dropped_minutes == 8
    for index in range(timeline.MAX_CACHE_NAMES + 5):
        counters.cache(f"cache{index}", True)
    names = {name for counts in counters.drain().values() for name in counts}
    assert len(names) == timeline.MAX_CACHE_NAMES


def test_combine_gives_rates_percentiles_ratios_and_gaps() -> None:
    minutes = {
        MINUTE: {"req": 10, "4xx": 1, "5xx": 2, timeline.latency_field(1): 10, "c:read:hit": 3, "c:read:miss": 1,
                 "dlv:ok": 3, "dlv:fail": 1, timeline.delivery_latency_field(4): 4,
                 "q:sum": 10, "q:n": 2, "rt:sum": 5, "rt:n": 2},
        MINUTE + 2: {"req": 4, timeline.latency_field(0): 4},
    }
    line = combine(minutes, MINUTE, 3, 1)
    assert line.starts_s == [MINUTE * 60, (MINUTE + 1) * 60, (MINUTE + 2) * 60]
    s = line.series
    assert s[timeline.REQUESTS_PER_MIN] == [10, 0, 4]          # a minute with nothing is 0 requests
    assert s[timeline.P50_MS] == [7.5, None, 2.5]                # and a gap in latency
    assert s[timeline.RATE_4XX] == [10.0, None, 0.0] and s[timeline.RATE_5XX] == [20.0, None, 0.0]
    assert s[timeline.DELIVERY_SUCCESS] == [75.0, None, None]
    assert s[timeline.DELIVERIES_PER_MIN] == [4, 0, 0]
    assert s["cache_hit:read"] == [75.0, None, None] and line.caches == ["read"]
    assert s[timeline.QUEUE_DEPTH_SERIES] == [5.0, None, None]  # the mean of two replicas' samples
    assert s[timeline.REALTIME_SERIES] == [5.0, None, None]     # the replicas' sum

    coarse = combine(minutes, MINUTE, 1, 3)  # one point of three minutes
    assert coarse.series[timeline.REQUESTS_PER_MIN] == [pytest.approx(14 / 3)]
    assert coarse.series[timeline.P50_MS] == [pytest.approx(quantile_ms(histogram(b5=4, b10=10), 0.5))]


async def test_two_replicas_flush_into_the_same_minute_and_the_reader_combines_them(redis: Redis) -> None:
    db = f"obs_{uuid.uuid4().hex[:8]}"
    now = Now(T0 + 10)
    samples = {"a": [(4, 200, 3.0)], "b": [(0, 200, 40.0), (0, 500, 40.0), (0, 404, 40.0)]}
    replicas = {name: Recorder(redis, db, log_size=lambda: _size(0), now=now, gauges=functools.partial(_gauges, name))
                for name in ("a", "b")}
    for name, recorder in replicas.items():
        signals = Signals()
        recorder.attach(signals)
        for offset, status, ms in samples[name]:
            signals.request(sample(T0 + offset, status, ms))
        signals.cache("read", name == "a")
        signals.delivery("delivered" if name == "a" else "failed", 0.2)
        assert await recorder.flush()
    stored = await cast(Awaitable[dict[bytes, bytes]], redis.hgetall(keys.dashboard_minute(db, MINUTE)))
    assert int(stored[b"req"]) == 4 and int(stored[b"5xx"]) == 1 and int(stored[b"rt:n"]) == 2

    line = await read_timeline(redis, db, now(), 60, 1)
    assert len(line.starts_s) == 60 and line.starts_s[-1] == MINUTE * 60
    s = line.series
    assert s[timeline.REQUESTS_PER_MIN][-1] == 4 and s[timeline.REQUESTS_PER_MIN][:-1] == [0] * 59
    assert s[timeline.RATE_5XX][-1] == 25.0 and s[timeline.RATE_4XX][-1] == 25.0
    assert s[timeline.P95_MS][-1] == pytest.approx(quantile_ms(histogram(b5=1, b50=3), 0.95))
    assert s["cache_hit:read"][-1] == 50.0 and s[timeline.DELIVERY_SUCCESS][-1] == 50.0
    assert s[timeline.REALTIME_SERIES][-1] == 3 + 4          # a holds 3 streams, b holds 4
    assert s[timeline.QUEUE_DEPTH_SERIES][-1] == 12           # both see the one queue
    assert s[timeline.P50_MS][0] is None                       # no minute stored there: a gap

    now.at += 20  # the same minute: gauges are sampled once a minute per replica
    for recorder in replicas.values():
        recorder.counters.request(sample(now.at))
        assert await recorder.flush()
    again = await read_timeline(redis, db, now(), 60, 1)
    assert again.series[timeline.REALTIME_SERIES][-1] == 7 and again.series[timeline.REQUESTS_PER_MIN][-1] == 6

    day = await read_timeline(redis, db, now(), timeline.WINDOW_MINUTES, 10)
    assert len(day.starts_s) == 144 and day.series[timeline.REQUESTS_PER_MIN][-1] == pytest.approx(0.6)


async def test_minute_hashes_expire_as_they_leave_the_day_window(redis: Redis) -> None:
    db = f"obs_{uuid.uuid4().hex[:8]}"
    now = Now(T0 + 5)
    recorder = Recorder(redis, db, log_size=lambda: _size(0), now=now)
    recorder.counters.request(sample(T0 + 5))
    recorder.counters.request(sample(T0 - 3600))  # an hour ago (held, e.g. a slow flush)
    assert await recorder.flush()
    for minute in (MINUTE, MINUTE - 60):
        ttl_s = await redis.ttl(keys.dashboard_minute(db, minute))
        assert abs(ttl_s - ((minute + timeline.WINDOW_MINUTES) * 60 - time.time())) <= 2
        assert ttl_s <= timeline.WINDOW_MINUTES * 60
    assert len([k async for k in redis.scan_iter(match=keys.dashboard_minute(db, 0)[:-1] + "*")]) == 2


async def test_a_redis_that_is_down_drops_the_figures_without_raising_or_growing() -> None:
    down = Redis.from_url(f"redis://127.0.0.1:{free_port()}", socket_connect_timeout=0.5)
    try:
        recorder = Recorder(down, "obs_down", log_size=lambda: _size(10), now=Now())
        for offset in range(100):
            recorder.counters.request(sample(T0 + offset % 60))
            recorder.log.request(sample(T0 + offset % 60))
        assert not await recorder.flush()
        assert recorder.dropped_flushes == 1
        assert recorder.counters.drain() == {} and recorder.log.drain() == []  # dropped, not queued
    finally:
        await down.aclose()


async def _size(value: int) -> int:
    return value


async def _gauges(replica: str) -> dict[str, int]:
    return {timeline.QUEUE_DEPTH: 12, timeline.REALTIME_CONNECTIONS: 3 if replica == "a" else 4}
