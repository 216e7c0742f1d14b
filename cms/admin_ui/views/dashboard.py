"""Dashboard (`/_/`): health of the service and its dependencies (as `/health`), this process's HTTP
counters and uptime, the job queue, charts of the last hour or day (`?window=1h|24h`) from every
replica's per-minute counters (cms.observability.timeline), and the MongoDB and Redis figures of
`/api/v1/stats` as named values with units.

Charts: requests per minute, p50/p95 latency, 4xx/5xx rates, webhook success rate and delivery
latency, cache hit ratios, job queue depth and realtime connections, as inline SVG (cms.admin_ui.charts).
A minute nothing was recorded in counts 0 requests and deliveries; ratios, latencies and gauges have
a gap there. The 24-hour window has points of WINDOWS["24h"] minutes."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cms.admin_ui.charts import Chart, format_value, line_chart
from cms.admin_ui.common import PREFIX, admin_page, render
from cms.errors import ValidationFailed
from cms.models import Principal
from cms.observability import timeline
from cms.observability.timeline import Timeline, read_timeline
from cms.web.context import HTTP_STATS, services

log = logging.getLogger("cms.admin_ui")

WINDOWS: dict[str, tuple[int, int]] = {"1h": (60, 1), "24h": (timeline.WINDOW_MINUTES, 10)}
"""`?window=` -> (minutes shown, minutes per point)."""
DEFAULT_WINDOW = "1h"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Figure:
    """A named value as the page shows it: `label`, `value` with its unit, an element `key`."""

    key: str
    label: str
    value: str


def parse_window(raw: str | None) -> str:
    """A `?window=` value: one of WINDOWS (absent: DEFAULT_WINDOW). Raises ValidationFailed."""
    if raw is None or raw == "":
        return DEFAULT_WINDOW
    if raw not in WINDOWS:
        raise ValidationFailed("Unknown window", errors={"window": [f"Must be one of {', '.join(WINDOWS)}."]})
    return raw


def duration_text(seconds: float | None) -> str:
    """`seconds` as `3 d 4 h`, `4 h 5 min`, `5 min 6 s` or `6 s` (`–` for None)."""
    if seconds is None:
        return "–"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mib(value: Any) -> str:
    number = _number(value)
    return "–" if number is None else format_value(number / MIB, "MiB")


def mongodb_figures(stats: dict[str, Any]) -> list[Figure]:
    """The MongoDB part of `/api/v1/stats` (cms.store.client.database_stats) as named figures: version,
    uptime, connections, operations per second (all kinds, averaged since the server started), resident
    memory, data and index size (MiB), collections, documents, the driver's pool and the topology. Figures the
    server does not report are left out."""
    server: dict[str, Any] = stats.get("server") or {}
    pool: dict[str, Any] = stats.get("pool") or {}
    figures = []
    if server:
        connections = server.get("connections") or {}
        uptime = _number(server.get("uptime_s"))
        operations = sum(v for v in (server.get("opcounters") or {}).values() if _number(v) is not None)
        figures += [
            Figure("version", "Version", str(server.get("version") or "–")),
            Figure("uptime", "Uptime", duration_text(uptime)),
            Figure("connections", "Connections", f"{connections.get('current', '–')} open"
                   + (f", {connections['available']} available" if connections.get("available") else "")),
            Figure("ops", "Operations per second (since start)",
                   format_value(operations / uptime, "ops/s") if uptime else "–"),
            Figure("memory", "Resident memory", format_value(_number((server.get("mem") or {}).get("resident")),
                                                             "MiB")),
        ]
    figures += [
        Figure("data-size", "Data size", _mib(stats.get("dataSize"))),
        Figure("index-size", "Index size", _mib(stats.get("indexSize"))),
        Figure("collections", "Collections", format_value(_number(stats.get("collections")))),
        Figure("objects", "Documents", format_value(_number(stats.get("objects")))),
    ]
    if pool:
        servers = pool.get("servers")
        plural = "" if servers == 1 else "s"
        figures += [Figure("pool", "Driver pool", f"max {pool.get('max_size')} connections"),
                    Figure("topology", "Topology", f"{pool.get('topology')}, {servers} server{plural}")]
    return figures


def redis_figures(stats: dict[str, Any]) -> list[Figure]:
    """The Redis part of `/api/v1/stats` (cms.system_builders.redis_stats) as named figures: version, uptime,
    clients, operations per second (instantaneous), memory used and peak (MiB; the limit if set),
    keyspace hit ratio, evicted keys and the job queue depth."""
    hits, misses = _number(stats.get("keyspace_hits")) or 0, _number(stats.get("keyspace_misses")) or 0
    maxmemory = _number(stats.get("maxmemory"))
    return [
        Figure("version", "Version", str(stats.get("redis_version") or "–")),
        Figure("uptime", "Uptime", duration_text(_number(stats.get("uptime_in_seconds")))),
        Figure("clients", "Connected clients", format_value(_number(stats.get("connected_clients")))),
        Figure("ops", "Operations per second", format_value(_number(stats.get("instantaneous_ops_per_sec")), "ops/s")),
        Figure("memory", "Memory used", _mib(stats.get("used_memory"))
               + (f" of {_mib(maxmemory)}" if maxmemory else "")),
        Figure("memory-peak", "Memory peak", _mib(stats.get("used_memory_peak"))),
        Figure("hit-ratio", "Keyspace hit ratio",
               format_value(100 * hits / (hits + misses), "%") if hits + misses else "–"),
        Figure("evicted", "Evicted keys", format_value(_number(stats.get("evicted_keys")))),
        Figure("queue-depth", "Job queue depth", format_value(_number(stats.get("queue_depth")), "jobs")),
    ]


def charts_of(line: Timeline) -> list[Chart]:
    """The dashboard's charts of `line`."""
    s, at = line.series, line.starts_s
    caches = [(cache, s[timeline.CACHE_HIT_PREFIX + cache]) for cache in line.caches]
    return [
        line_chart("requests", "Requests", "req/min", at, [("requests", s[timeline.REQUESTS_PER_MIN])]),
        line_chart("latency", "Latency", "ms", at, [("p50", s[timeline.P50_MS]), ("p95", s[timeline.P95_MS])]),
        line_chart("errors", "Error rate", "%", at, [("4xx", s[timeline.RATE_4XX]), ("5xx", s[timeline.RATE_5XX])],
                   percent=True),
        line_chart("webhook-success", "Webhook success rate", "%", at,
                   [("delivered", s[timeline.DELIVERY_SUCCESS])], percent=True),
        line_chart("webhook-latency", "Webhook delivery latency", "ms", at,
                   [("p50", s[timeline.DELIVERY_P50_MS]), ("p95", s[timeline.DELIVERY_P95_MS])]),
        line_chart("cache", "Cache hit ratio", "%", at, caches or [("read", [None] * len(at))], percent=True),
        line_chart("queue", "Job queue depth", "jobs", at, [("waiting", s[timeline.QUEUE_DEPTH_SERIES])]),
        line_chart("realtime", "Realtime connections", "connections", at,
                   [("all replicas", s[timeline.REALTIME_SERIES])]),
    ]


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/ (`?window=1h|24h`): the dashboard. A bad window is a 422 page."""
    window = parse_window(request.query.get("window"))
    minutes, step = WINDOWS[window]
    svc = services(request)
    healthy, health = await svc.system.health()
    http: dict[str, int] = request.config_dict[HTTP_STATS]
    stats: dict[str, Any] = {"http": dict(http), **await svc.system.stats()}
    redis = stats.get("redis", {})
    charts: list[Chart] | None = None
    try:
        charts = charts_of(await read_timeline(svc.redis, svc.config.mongodb_db, time.time(), minutes, step))
    except Exception:  # noqa: BLE001 - Redis down: the page says the charts are unavailable
        log.warning("dashboard: the per-minute counters could not be read", exc_info=True)
    mongodb, redis_part = stats.get("mongodb"), stats.get("redis")
    return await render(
        request, "dashboard/index.html", healthy=healthy, health=health, stats=stats,
        queue_depth=redis.get("queue_depth") if isinstance(redis, dict) else None,
        window=window, windows=list(WINDOWS), step_minutes=step, charts=charts,
        mongodb=mongodb_figures(mongodb) if isinstance(mongodb, dict) and "error" not in mongodb else None,
        redis=redis_figures(redis_part) if isinstance(redis_part, dict) and "error" not in redis_part else None,
        mongodb_error=mongodb.get("error") if isinstance(mongodb, dict) else None,
        redis_error=redis_part.get("error") if isinstance(redis_part, dict) else None,
    )


def routes() -> list[web.RouteDef]:
    """The dashboard's routes."""
    return [web.get(PREFIX + "/", index, name="admin_ui.dashboard")]
