"""The dashboard's per-minute counters (issue 30, item 3): what every replica did in each minute, kept in
Redis for 24 hours and combined by the reader.

`MinuteCounters` is a `Sink`: it adds requests (4xx and 5xx apart, their latency in LATENCY_BOUNDS_MS
buckets), webhook deliveries (success or failure, their latency), cache hits and misses, and sampled
gauges (job queue depth, realtime connections) to in-memory counters per minute. The recorder
(cms.observability.recorder) drains them every few seconds into one pipeline: `write` adds one HINCRBY
per counter to the minute's hash `keys.dashboard_minute(db, minute)`, which expires when the minute
leaves the 24-hour window (at most WINDOW_MINUTES hashes per database, each of at most about 40
fields). Replicas add to the same fields, so a hash holds the sum over replicas.

Gauges are sums and sample counts: each replica adds one sample a minute, so `rt:sum` is the realtime
connections of every replica together and `q:sum / q:n` the queue depth (one queue that every replica
sees). `read_timeline` reads a window and `combine` (pure) turns minutes into the charts' series.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from cms import redis_keys as keys
from cms.observability.signals import RequestSample, Sink

LATENCY_BOUNDS_MS: tuple[float, ...] = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000)
"""Upper bounds (milliseconds, inclusive) of the latency buckets of requests and deliveries; one more
bucket holds everything slower."""
BUCKETS = len(LATENCY_BOUNDS_MS) + 1
WINDOW_MINUTES = 24 * 60
"""The longest window the dashboard shows; a minute's hash expires when it leaves it."""
MAX_HELD_MINUTES = 5
"""Minutes a process holds in memory between flushes (normally one or two); past it the oldest is
dropped, so a stalled flush never grows memory."""
MAX_CACHE_NAMES = 8
"""Distinct cache names counted (the call sites name `read`, `definition`, `session`); others are ignored."""
READ_TIMEOUT_S = 5.0
"""How long reading a window may take, in seconds (TimeoutError past it)."""

REQUESTS = "req"
ERRORS_4XX = "4xx"
ERRORS_5XX = "5xx"
DELIVERED = "dlv:ok"
DELIVERY_FAILED = "dlv:fail"
QUEUE_DEPTH = "q"
"""The gauge name of the job queue depth (fields `q:sum`, `q:n`)."""
REALTIME_CONNECTIONS = "rt"
"""The gauge name of realtime connections (fields `rt:sum`, `rt:n`)."""
GAUGES = (QUEUE_DEPTH, REALTIME_CONNECTIONS)
SUCCESS_OUTCOMES = frozenset({"delivered"})
"""Delivery outcomes counted as successes; every other outcome (`failed`, `retrying`, ...) is a failure."""

# the series of a Timeline (see `combine`)
REQUESTS_PER_MIN = "requests_per_min"
P50_MS = "p50_ms"
P95_MS = "p95_ms"
RATE_4XX = "rate_4xx"
RATE_5XX = "rate_5xx"
DELIVERIES_PER_MIN = "deliveries_per_min"
DELIVERY_SUCCESS = "delivery_success"
DELIVERY_P50_MS = "delivery_p50_ms"
DELIVERY_P95_MS = "delivery_p95_ms"
QUEUE_DEPTH_SERIES = "queue_depth"
REALTIME_SERIES = "realtime_connections"
CACHE_HIT_PREFIX = "cache_hit:"
"""A cache's hit ratio series is `cache_hit:<name>`."""


def latency_field(bucket: int) -> str:
    """The field of request latency bucket `bucket` (0..BUCKETS-1): `lat:<bucket>`."""
    return f"lat:{bucket}"


def delivery_latency_field(bucket: int) -> str:
    """The field of delivery latency bucket `bucket` (0..BUCKETS-1): `dlat:<bucket>`."""
    return f"dlat:{bucket}"


def cache_field(cache: str, hit: bool) -> str:
    """The field of cache `cache`'s hits (`c:<cache>:hit`) or misses (`c:<cache>:miss`)."""
    return f"c:{cache}:{'hit' if hit else 'miss'}"


def minute_of(at_s: float) -> int:
    """The minute (epoch seconds // 60) that `at_s` (epoch seconds) falls in."""
    return int(at_s // 60)


def bucket_of(duration_ms: float) -> int:
    """The latency bucket of `duration_ms`: the index of the first bound >= it, BUCKETS-1 above all."""
    return bisect_left(LATENCY_BOUNDS_MS, duration_ms)


def quantile_ms(counts: Sequence[int], q: float) -> float | None:
    """The `q` quantile (0 < q <= 1; 0.5 for p50, 0.95 for p95) in milliseconds of a latency histogram
    `counts` (BUCKETS counts per LATENCY_BOUNDS_MS bucket), interpolated linearly inside its bucket
    (as Prometheus's histogram_quantile); the largest bound when it falls in the last bucket; None
    for an empty histogram. Raises ValueError for `q` out of range."""
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q} is not in (0, 1]")
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    below = 0
    for index, count in enumerate(counts):
        if count > 0 and below + count >= rank:
            if index >= len(LATENCY_BOUNDS_MS):
                return LATENCY_BOUNDS_MS[-1]
            lower = 0.0 if index == 0 else LATENCY_BOUNDS_MS[index - 1]
            upper = LATENCY_BOUNDS_MS[index]
            return lower + (upper - lower) * (rank - below) / count
        below += count
    return LATENCY_BOUNDS_MS[-1]


class MinuteCounters(Sink):
    """In-memory counters per minute, for `write`: requests are counted in the minute they were answered
    (`RequestSample.at`), everything else in the minute `now()` (epoch seconds) gives. At most
    MAX_HELD_MINUTES minutes are held (`dropped_minutes` counts the older ones given up)."""

    def __init__(self, now: Callable[[], float] = time.time, *, max_minutes: int = MAX_HELD_MINUTES) -> None:
        self._now = now
        self._max_minutes = max_minutes
        self._minutes: dict[int, Counter[str]] = {}
        self._caches: set[str] = set()
        self.dropped_minutes = 0

    def _add(self, at_s: float, counts: Mapping[str, int]) -> None:
        minute = minute_of(at_s)
        held = self._minutes.get(minute)
        if held is None:
            if len(self._minutes) >= self._max_minutes:
                oldest = min(self._minutes)
                if oldest > minute:  # older than everything held: drop it instead
                    self.dropped_minutes += 1
                    return
                del self._minutes[oldest]
                self.dropped_minutes += 1
            held = self._minutes[minute] = Counter()
        held.update(counts)

    def request(self, sample: RequestSample) -> None:
        """Count one answered request: `req`, `4xx`/`5xx` by status, its latency bucket."""
        counts = {REQUESTS: 1, latency_field(bucket_of(sample.duration_s * 1000)): 1}
        if 400 <= sample.status < 500:
            counts[ERRORS_4XX] = 1
        elif sample.status >= 500:
            counts[ERRORS_5XX] = 1
        self._add(sample.at, counts)

    def cache(self, cache: str, hit: bool) -> None:
        """Count one look-up of cache `cache` (at most MAX_CACHE_NAMES names are counted)."""
        if cache not in self._caches:
            if len(self._caches) >= MAX_CACHE_NAMES:
                return
            self._caches.add(cache)
        self._add(self._now(), {cache_field(cache, hit): 1})

    def delivery(self, outcome: str, duration_s: float) -> None:
        """Count one delivery attempt (a success when `outcome` is in SUCCESS_OUTCOMES) and its latency."""
        self._add(self._now(), {DELIVERED if outcome in SUCCESS_OUTCOMES else DELIVERY_FAILED: 1,
                                delivery_latency_field(bucket_of(duration_s * 1000)): 1})

    def gauge(self, name: str, value: int) -> None:
        """Add one sample `value` of gauge `name` (QUEUE_DEPTH, REALTIME_CONNECTIONS) to this minute."""
        self._add(self._now(), {f"{name}:sum": value, f"{name}:n": 1})

    def drain(self) -> dict[int, dict[str, int]]:
        """Every held minute's counters ({minute: {field: count}}), which are cleared."""
        drained = {minute: dict(counts) for minute, counts in self._minutes.items()}
        self._minutes.clear()
        return drained


def expires_at(minute: int) -> int:
    """When (epoch seconds) the hash of `minute` expires: as it leaves the WINDOW_MINUTES window."""
    return (minute + WINDOW_MINUTES) * 60


def write(pipe: Pipeline, db: str, minutes: Mapping[int, Mapping[str, int]]) -> None:
    """Queue on `pipe` the commands adding `minutes` ({minute: {field: count}}, as `drain` gives) to the
    hashes of database `db`: one HINCRBY per non-zero field, then EXPIREAT `expires_at(minute)`."""
    for minute, counts in minutes.items():
        key = keys.dashboard_minute(db, minute)
        written = False
        for name, amount in counts.items():
            if amount:
                pipe.hincrby(key, name, amount)
                written = True
        if written:
            pipe.expireat(key, expires_at(minute))


async def read_minutes(redis: Redis, db: str, first: int, count: int) -> dict[int, dict[str, int]]:
    """The stored counters of `count` minutes from minute `first` on (one pipelined HGETALL each),
    {minute: {field: count}}, without the minutes that have none. Raises redis errors, or TimeoutError
    after READ_TIMEOUT_S."""
    pipe = redis.pipeline(transaction=False)
    for minute in range(first, first + count):
        pipe.hgetall(keys.dashboard_minute(db, minute))
    answers: list[Any] = await asyncio.wait_for(pipe.execute(), READ_TIMEOUT_S)
    found: dict[int, dict[str, int]] = {}
    for minute, fields in zip(range(first, first + count), answers, strict=True):
        if fields:
            found[minute] = {_text(name): int(value) for name, value in fields.items()}
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Timeline:
    """A window of the dashboard: `starts_s` the start (epoch seconds) of each point, oldest first, each
    `step_minutes` long; `series` {name: one value per point}, the names above (REQUESTS_PER_MIN, P50_MS,
    ..., `cache_hit:<cache>` per cache seen). Counts per minute are 0 where nothing was recorded;
    ratios (percent), latencies (ms) and gauges are None there (a gap: nothing to divide or sample)."""

    starts_s: list[int]
    step_minutes: int
    series: dict[str, list[float | None]]
    caches: list[str]


def _ratio(part: int, whole: int) -> float | None:
    return None if whole <= 0 else 100.0 * part / whole


def combine(minutes: Mapping[int, Mapping[str, int]], first: int, points: int, step_minutes: int) -> Timeline:
    """The series of `points` points of `step_minutes` minutes each from minute `first` on, from stored
    counters `minutes` ({minute: {field: count}}, as `read_minutes` gives): per point, requests and
    deliveries per minute (the point's sum / step), p50/p95 latency in ms of the point's summed
    histograms, 4xx and 5xx rates and delivery success in percent, each cache's hit ratio in percent,
    the queue depth (mean of its samples) and realtime connections (the replicas' sum, averaged over
    the point's sampled minutes)."""
    caches = sorted({name.split(":")[1] for counts in minutes.values() for name in counts if name.startswith("c:")})
    names = [REQUESTS_PER_MIN, P50_MS, P95_MS, RATE_4XX, RATE_5XX, DELIVERIES_PER_MIN, DELIVERY_SUCCESS,
             DELIVERY_P50_MS, DELIVERY_P95_MS, QUEUE_DEPTH_SERIES, REALTIME_SERIES,
             *(CACHE_HIT_PREFIX + cache for cache in caches)]
    series: dict[str, list[float | None]] = {name: [] for name in names}
    starts: list[int] = []
    for point in range(points):
        start = first + point * step_minutes
        starts.append(start * 60)
        total: Counter[str] = Counter()
        realtime_minutes = 0
        realtime_sum = 0
        for minute in range(start, start + step_minutes):
            counts = minutes.get(minute)
            if counts:
                total.update(counts)
                if counts.get(f"{REALTIME_CONNECTIONS}:n", 0) > 0:
                    realtime_minutes += 1
                    realtime_sum += counts.get(f"{REALTIME_CONNECTIONS}:sum", 0)
        requests = total[REQUESTS]
        latency = [total[latency_field(b)] for b in range(BUCKETS)]
        delivered, failed = total[DELIVERED], total[DELIVERY_FAILED]
        delivery_latency = [total[delivery_latency_field(b)] for b in range(BUCKETS)]
        values: dict[str, float | None] = {
            REQUESTS_PER_MIN: requests / step_minutes,
            P50_MS: quantile_ms(latency, 0.5),
            P95_MS: quantile_ms(latency, 0.95),
            RATE_4XX: _ratio(total[ERRORS_4XX], requests),
            RATE_5XX: _ratio(total[ERRORS_5XX], requests),
            DELIVERIES_PER_MIN: (delivered + failed) / step_minutes,
            DELIVERY_SUCCESS: _ratio(delivered, delivered + failed),
            DELIVERY_P50_MS: quantile_ms(delivery_latency, 0.5),
            DELIVERY_P95_MS: quantile_ms(delivery_latency, 0.95),
            QUEUE_DEPTH_SERIES: (total[f"{QUEUE_DEPTH}:sum"] / total[f"{QUEUE_DEPTH}:n"]
                                 if total[f"{QUEUE_DEPTH}:n"] else None),
            REALTIME_SERIES: realtime_sum / realtime_minutes if realtime_minutes else None,
        }
        for cache in caches:
            hits, misses = total[cache_field(cache, True)], total[cache_field(cache, False)]
            values[CACHE_HIT_PREFIX + cache] = _ratio(hits, hits + misses)
        for name in names:
            series[name].append(values[name])
    return Timeline(starts_s=starts, step_minutes=step_minutes, series=series, caches=caches)


async def read_timeline(redis: Redis, db: str, now_s: float, window_minutes: int, step_minutes: int) -> Timeline:
    """The Timeline of database `db` for the `window_minutes` minutes (1..WINDOW_MINUTES, a multiple of
    `step_minutes`) ending with the minute of `now_s` (epoch seconds), in points of `step_minutes`.
    Raises ValueError for a bad window, redis errors, or TimeoutError after READ_TIMEOUT_S."""
    if not 0 < window_minutes <= WINDOW_MINUTES or step_minutes <= 0 or window_minutes % step_minutes:
        raise ValueError(f"bad window {window_minutes} min in steps of {step_minutes}")
    first = minute_of(now_s) - window_minutes + 1
    stored = await read_minutes(redis, db, first, window_minutes)
    return combine(stored, first, window_minutes // step_minutes, step_minutes)
