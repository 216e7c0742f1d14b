"""Prometheus metrics (issue 30; decisions.md, Metrics): a `Sink` that turns signals into
prometheus-client counters and histograms, and the text a scrape gets (format 0.0.4).

What is exposed (prefix `cms_`, units in the names):

- `cms_http_requests_total{route,method,status}` and `cms_http_request_duration_seconds{route,method}`:
  every answered request, by route template (`unmatched` for none), never by path;
- `cms_cache_lookups_total{cache,result}`: `cache` is `read`, `definition` or `session`, `result`
  `hit` or `miss`;
- `cms_webhook_deliveries_total{outcome}` (`delivered`, `retrying`, `failed`) and
  `cms_webhook_delivery_duration_seconds`: every delivery attempt a worker made;
- `cms_rate_limited_total{limit}`: refusals by limit name (`general`, `auth:login`, `mail:otp_request`);
- `cms_realtime_connections` (streams held) and `cms_realtime_events_sent_total`;
- `cms_mongodb_command_duration_seconds{command}` and `cms_mongodb_command_failures_total{command}`;
- `cms_slow_queries_total{collection,shape}` and `cms_slow_query_duration_seconds{collection}`: list
  queries over SLOW_QUERY_MS by collection name and query shape (field names and operators, never
  values), at most MAX_SLOW_COLLECTIONS collections and MAX_SLOW_SHAPES shapes per collection per
  process, the rest under `other`;
- `cms_thumbnails_total{outcome}` (`generated`, `stored`, `memory`) and
  `cms_thumbnail_generation_duration_seconds`: thumbnails answered, and the time of each one made;
- `cms_job_queue_depth` and `cms_webhook_outbox_backlog`: read from Redis and MongoDB when scraped;
- `cms_processes` (processes whose metrics the scrape covers), `cms_build_info{version}` and
  prometheus-client's `process_*`.

Labels only ever take values from fixed sets (route templates, method names, status codes, the
names above) or bounded ones (collection names and query shapes, as said): never ids, emails, query
strings, values or path-parameter values.

With `multiprocess_dir` (`cms serve --workers N` sets PROMETHEUS_MULTIPROC_DIR for its children),
prometheus-client keeps every process's values in files there, and a scrape through any process
reads them all: counters and histograms are summed, gauges of live processes too (`livesum`), and
the `process_*` figures are those of every live process, summed (start time: the earliest).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from cms import __version__
from cms.observability.signals import RequestSample, Sink

log = logging.getLogger("cms.observability")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of a scrape's answer: Prometheus's text format 0.0.4 (not OpenMetrics)."""
HTTP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MONGO_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
WEBHOOK_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SLOW_QUERY_BUCKETS_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
MAX_SLOW_COLLECTIONS = 50
"""Collections a process counts slow queries of under their own name; later ones count as `other`."""
MAX_SLOW_SHAPES = 20
"""Query shapes a process counts under their own text per collection; later ones count as `other`."""
THUMBNAIL_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
THUMBNAIL_OUTCOMES = ("generated", "stored", "memory")
SAMPLE_TIMEOUT_S = 2.0
"""Seconds a scrape waits for each figure it reads from Redis or MongoDB; one that takes longer is
left out of that scrape (and logged)."""
OTHER = "other"
"""The label value of anything outside a label's fixed set (an unknown HTTP method or command)."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
MONGO_COMMANDS = frozenset({
    "find", "insert", "update", "delete", "aggregate", "getMore", "count", "distinct", "findAndModify",
    "bulkWrite", "createIndexes", "dropIndexes", "listIndexes", "listCollections", "listDatabases", "create",
    "drop", "dropDatabase", "renameCollection", "collMod", "killCursors", "commitTransaction",
    "abortTransaction", "endSessions", "ping", "hello", "isMaster", "ismaster", "buildInfo", "dbStats",
    "collStats", "serverStatus", "explain",
})
"""The MongoDB command names kept as they are in the `command` label; any other is `other`."""
_LIMIT_PART = re.compile(r"^[a-z0-9_]{1,40}$")
_DB_FILE = re.compile(r"^gauge_livesum_(\d+)\.db$")


def limit_label(kind: str) -> str:
    """The `limit` label of a rate-limit refusal of `kind` (`general`, `auth:<action>`,
    `mail:<endpoint>` where an auth collection's endpoint is `<collection>:<endpoint>`): the kind
    and its last part only, so no collection name reaches the label; `other` for anything that is
    not made of lower-case words."""
    head, _, rest = kind.partition(":")
    tail = rest.rpartition(":")[2]
    parts = [head, tail] if rest else [head]
    return ":".join(parts) if all(_LIMIT_PART.match(p) for p in parts) else OTHER


@dataclass(frozen=True)
class SampledGauge:
    """A gauge read when scraped, not signalled: `name` (full metric name), `documentation`
    (its HELP text) and `read()`, an awaitable of the current value (a figure of Redis or MongoDB)."""

    name: str
    documentation: str
    read: Callable[[], Awaitable[float]]


class _Families:
    """A collector of fixed metric families (the gauges one scrape sampled) or of other collectors."""

    def __init__(self, families: Iterable[Metric] = (), parts: Iterable[Collector] = ()) -> None:
        self._families = list(families)
        self._parts = list(parts)

    def collect(self) -> Iterable[Metric]:
        """The parts' families, then the fixed ones."""
        for part in self._parts:
            yield from part.collect()
        yield from self._families


class LiveProcesses:
    """Collector of the `process_*` figures of every live process writing to a multiprocess
    directory (the pids of its `livesum` gauge files; `mark_process_dead` removes a dead one's),
    summed: CPU seconds, memory and open descriptors add up, the start time is the earliest and
    the descriptor limit the lowest. Reads `/proc` (Linux; nothing elsewhere)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def pids(self) -> list[int]:
        """The pids with a live gauge file in the directory."""
        return sorted({int(m.group(1)) for name in os.listdir(self._path) if (m := _DB_FILE.match(name))})

    def collect(self) -> Iterable[Metric]:
        """`process_*` families over the live processes (see the class docstring)."""
        totals: dict[str, float] = {}
        lowest: dict[str, float] = {}
        documentation: dict[str, str] = {}
        for pid in self.pids():
            for family in ProcessCollector(pid=lambda pid=pid: pid, registry=None).collect():  # type: ignore[misc]
                name, value = family.name, family.samples[0].value
                documentation[name] = family.documentation
                if name in ("process_start_time_seconds", "process_max_fds"):
                    lowest[name] = min(lowest.get(name, value), value)
                else:
                    totals[name] = totals.get(name, 0.0) + value
        for name, value in totals.items():
            if name == "process_cpu_seconds":
                yield CounterMetricFamily(name, documentation[name] + " (every process)", value=value)
            else:
                yield GaugeMetricFamily(name, documentation[name] + " (every process, summed)", value=value)
        for name, value in lowest.items():
            yield GaugeMetricFamily(name, documentation[name] + " (the lowest of every process)", value=value)


class PrometheusMetrics(Sink):
    """The Prometheus sink of one process (add it with `Signals.add`), and what a scrape reads.

    Its metrics live in a registry of its own (`registry`), so several in one process (tests) never
    collide in prometheus-client's global one. `multiprocess_dir`: the directory of
    prometheus-client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR, which must have been set before
    prometheus-client was imported), or None for this process alone. `sampled`: gauges read at each
    scrape (`render`). Signal methods cost a dict look-up and an increment; they never block."""

    def __init__(self, *, multiprocess_dir: Path | None = None, sampled: Sequence[SampledGauge] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._multiprocess_dir = multiprocess_dir
        self._sampled = tuple(sampled)
        r = self.registry
        self._requests = Counter("cms_http_requests", "HTTP requests answered, by route template, method and status",
                                 ("route", "method", "status"), registry=r)
        self._latency = Histogram("cms_http_request_duration_seconds",
                                  "Time to answer an HTTP request, by route template and method (seconds)",
                                  ("route", "method"), buckets=HTTP_BUCKETS_S, registry=r)
        self._cache = Counter("cms_cache_lookups", "Cache look-ups by cache (read, definition, session) and result",
                              ("cache", "result"), registry=r)
        self._deliveries = Counter("cms_webhook_deliveries", "Webhook delivery attempts by outcome", ("outcome",),
                                   registry=r)
        self._delivery_latency = Histogram("cms_webhook_delivery_duration_seconds",
                                           "Time of one webhook delivery attempt (seconds)",
                                           buckets=WEBHOOK_BUCKETS_S, registry=r)
        self._rate_limited = Counter("cms_rate_limited", "Requests refused by a rate limit, by limit name",
                                     ("limit",), registry=r)
        self._realtime_sent = Counter("cms_realtime_events_sent", "Realtime events written to subscribers' streams",
                                      registry=r)
        self._realtime_connections = Gauge("cms_realtime_connections", "Realtime (SSE) streams held",
                                           multiprocess_mode="livesum", registry=r)
        self._mongo = Histogram("cms_mongodb_command_duration_seconds",
                                "Time of MongoDB commands, by command name (seconds)", ("command",),
                                buckets=MONGO_BUCKETS_S, registry=r)
        self._mongo_failures = Counter("cms_mongodb_command_failures", "MongoDB commands that failed, by name",
                                       ("command",), registry=r)
        self._slow = Counter("cms_slow_queries", "List queries slower than SLOW_QUERY_MS, by collection and "
                             "query shape (field names and operators)", ("collection", "shape"), registry=r)
        self._slow_latency = Histogram("cms_slow_query_duration_seconds",
                                       "Time of list queries slower than SLOW_QUERY_MS, by collection (seconds)",
                                       ("collection",), buckets=SLOW_QUERY_BUCKETS_S, registry=r)
        self._slow_shapes: dict[str, set[str]] = {}
        self._thumbnails = Counter("cms_thumbnails", "Thumbnails answered, by outcome (generated, stored, memory)",
                                   ("outcome",), registry=r)
        self._thumbnail_latency = Histogram("cms_thumbnail_generation_duration_seconds",
                                            "Time to make and store one thumbnail (seconds)",
                                            buckets=THUMBNAIL_BUCKETS_S, registry=r)
        processes = Gauge("cms_processes", "Processes whose metrics this scrape covers", multiprocess_mode="livesum",
                          registry=r)
        processes.set(1)
        info = Gauge("cms_build_info", "The running version (value 1)", ("version",), multiprocess_mode="max",
                     registry=r)
        info.labels(__version__).set(1)
        if multiprocess_dir is None:
            ProcessCollector(registry=r)
        self._http: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self._lookups = {(cache, hit): self._cache.labels(cache, "hit" if hit else "miss")
                         for cache in ("read", "definition", "session") for hit in (True, False)}
        self._commands: dict[str, Histogram] = {}

    # --- signals ---------------------------------------------------------------------------------

    def request(self, sample: RequestSample) -> None:
        """Count the request and observe its duration under its route template and method."""
        method = sample.method if sample.method in METHODS else OTHER
        key = (sample.route, method, sample.status)
        children = self._http.get(key)
        if children is None:
            children = (self._requests.labels(sample.route, method, str(sample.status)),
                        self._latency.labels(sample.route, method))
            self._http[key] = children
        children[0].inc()
        children[1].observe(sample.duration_s)

    def cache(self, cache: str, hit: bool) -> None:
        """Count a look-up of the named cache (`read`, `definition`, `session`; another is `other`)."""
        child = self._lookups.get((cache, hit))
        if child is None:
            child = self._cache.labels(OTHER, "hit" if hit else "miss")
        child.inc()

    def delivery(self, outcome: str, duration_s: float) -> None:
        """Count a webhook delivery attempt by outcome and observe its duration."""
        self._deliveries.labels(outcome if outcome in ("delivered", "retrying", "failed") else OTHER).inc()
        self._delivery_latency.observe(duration_s)

    def rate_limited(self, limit: str) -> None:
        """Count a refusal under `limit_label(limit)`."""
        self._rate_limited.labels(limit_label(limit)).inc()

    def realtime_sent(self, events: int) -> None:
        """Add `events` to the realtime events sent."""
        self._realtime_sent.inc(events)

    def realtime_connections(self, count: int) -> None:
        """Set this process's realtime stream count."""
        self._realtime_connections.set(count)

    def thumbnail(self, outcome: str, duration_s: float) -> None:
        """Count a thumbnail answered by `outcome`; observe the time of one `generated`."""
        self._thumbnails.labels(outcome if outcome in THUMBNAIL_OUTCOMES else OTHER).inc()
        if outcome == "generated":
            self._thumbnail_latency.observe(duration_s)

    def mongo_command(self, command: str, duration_s: float, ok: bool) -> None:
        """Observe a MongoDB command's duration by name (`other` outside MONGO_COMMANDS)."""
        child = self._commands.get(command)
        if child is None:
            child = self._mongo.labels(command if command in MONGO_COMMANDS else OTHER)
            self._commands[command] = child
        child.observe(duration_s)
        if not ok:
            self._mongo_failures.labels(command if command in MONGO_COMMANDS else OTHER).inc()

    def slow_query(self, collection: str, shape: str, duration_s: float) -> None:
        """Count a slow query by collection and shape and observe its duration (labels bounded by
        MAX_SLOW_COLLECTIONS and MAX_SLOW_SHAPES: past them, `other`)."""
        shapes = self._slow_shapes.get(collection)
        if shapes is None:
            if len(self._slow_shapes) >= MAX_SLOW_COLLECTIONS:
                collection, shape = OTHER, OTHER
            shapes = self._slow_shapes.setdefault(collection, set())
        if shape not in shapes:
            if len(shapes) >= MAX_SLOW_SHAPES:
                shape = OTHER
            shapes.add(shape)
        self._slow.labels(collection, shape).inc()
        self._slow_latency.labels(collection).observe(duration_s)

    # --- scrapes ---------------------------------------------------------------------------------

    async def sample(self) -> list[Metric]:
        """The sampled gauges' current values, each read within SAMPLE_TIMEOUT_S seconds; one whose
        read fails or takes longer is left out (and logged at WARNING)."""

        async def one(gauge: SampledGauge) -> Metric | None:
            try:
                async with asyncio.timeout(SAMPLE_TIMEOUT_S):
                    value = float(await gauge.read())
            except Exception as exc:
                log.warning("metrics: could not read %s for a scrape: %r", gauge.name, exc)
                return None
            return GaugeMetricFamily(gauge.name, gauge.documentation, value=value)

        read = await asyncio.gather(*(one(gauge) for gauge in self._sampled))
        return [family for family in read if family is not None]

    def exposition(self, sampled: Sequence[Metric] = ()) -> bytes:
        """The scrape's text (format 0.0.4): this process's metrics, or every process's in
        multiprocess mode, then `sampled` (from `sample`). Reads files (multiprocess mode, /proc):
        call it off the event loop (`render` does)."""
        if self._multiprocess_dir is None:
            return generate_latest(_Families(sampled, [self.registry]))
        every_process = MultiProcessCollector(None, path=str(self._multiprocess_dir))  # type: ignore[no-untyped-call]
        return generate_latest(_Families(sampled, [every_process, LiveProcesses(self._multiprocess_dir)]))

    async def render(self) -> bytes:
        """A scrape's answer body: `sample()`, then `exposition` in a worker thread."""
        sampled = await self.sample()
        return await asyncio.to_thread(self.exposition, sampled)

    def render_from_thread(self, loop: asyncio.AbstractEventLoop, timeout_s: float = 2 * SAMPLE_TIMEOUT_S) -> bytes:
        """A scrape's answer body for a server thread (`cms worker`'s METRICS_PORT): the gauges are
        sampled on `loop` (the process's event loop), the text is made in the calling thread. Raises
        TimeoutError when the loop does not answer within `timeout_s` seconds."""
        sampled = asyncio.run_coroutine_threadsafe(self.sample(), loop).result(timeout_s)
        return self.exposition(sampled)
