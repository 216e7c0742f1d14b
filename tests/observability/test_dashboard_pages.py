"""The dashboard (`/_/`) and request log (`/_/logs`) pages served by the app on the suite's real MongoDB
and Redis: charts as inline SVG with the recorded series, named MongoDB and Redis figures, filters
validated into a 422 page (never a 500), and the log switched off by its setting."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from cms.admin_ui.charts import format_value, line_chart, nice_max
from cms.admin_ui.views.dashboard import duration_text, mongodb_figures, redis_figures
from cms.app import RECORDER
from cms.observability.recorder import Recorder
from cms.observability.signals import RequestSample
from cms.wiring import Services
from tests.test_admin_ui_errors import admin_cookies


async def replica_traffic(services: Services) -> None:
    """Another replica's minute: requests (one 500) and a read-cache look-up, flushed to Redis."""

    async def size() -> int:
        return 1000

    other = Recorder(services.redis, services.config.mongodb_db, log_size=size)
    await other.flush()
    now = time.time()
    for index in range(20):
        other.counters.request(RequestSample(at=now - 60 * (index % 3), method="GET", route="/api/v1/health",
                                             status=500 if index == 0 else 200, duration_s=0.004 * (index + 1),
                                             client_ip="10.1.2.3", principal=None))
        other.log.request(RequestSample(at=now, method="POST", route="/api/v1/other-replica", status=201,
                                        duration_s=0.01, client_ip="10.1.2.3", principal="admin:x"))
    other.counters.cache("read", True)
    other.counters.delivery("delivered", 0.12)
    assert await other.flush()


def chart_svg(html: str, key: str) -> str:
    match = re.search(rf'<figure class="chart card" id="chart-{key}">.*?</figure>', html, re.S)
    assert match, key
    return match.group(0)


async def test_the_dashboard_draws_every_chart_from_the_replicas_counters(client: Any, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    await replica_traffic(services)
    response = await client.get("/_/", cookies=cookies)
    assert response.status == 200
    html = await response.text()
    for key in ("requests", "latency", "errors", "webhook-success", "webhook-latency", "cache", "queue", "realtime"):
        assert "<svg" in chart_svg(html, key)
    requests = chart_svg(html, "requests")
    assert re.search(r'<polyline points="[0-9., ]{20,}"', requests)  # a drawn line, not just axes
    assert "req/min" in requests and re.search(r">\d\d:\d\d</text>", requests)  # unit and time labels
    assert re.search(r'<polyline points="[^"]+"|<circle', chart_svg(html, "errors"))
    assert 'data-latest="5xx"' in chart_svg(html, "errors")
    assert "style=" not in html and "<script>" not in html
    assert 'id="window-1h" aria-current="page"' in html
    # named figures, not JSON text
    for card in ("mongodb", "redis"):
        part = re.search(rf'<div class="card" id="{card}">.*?</div>', html, re.S)
        assert part and 'data-figure="version"' in part.group(0) and "{" not in part.group(0)
    assert re.search(r'data-figure="memory">[0-9.]+ MiB', html)

    day = await client.get("/_/?window=24h", cookies=cookies)
    assert day.status == 200
    text = await day.text()
    assert 'id="window-24h" aria-current="page"' in text and "one point per 10 minutes" in text


@pytest.mark.parametrize("query", ["window=7d", "window=%3Cscript%3E", "window=1H"])
async def test_a_bad_window_is_a_422_page(client: Any, services: Services, query: str) -> None:
    response = await client.get(f"/_/?{query}", cookies=await admin_cookies(client, services))
    assert response.status == 422 and response.content_type == "text/html"
    assert "Unknown window" in await response.text()


async def test_the_log_page_lists_every_replicas_requests_newest_first_and_filters(client: Any,
                                                                                   services: Services) -> None:
    cookies = await admin_cookies(client, services)
    await replica_traffic(services)
    assert (await client.get("/api/v1/no/such/route")).status == 404
    await client.server.app[RECORDER].flush()  # this replica's requests too
    response = await client.get("/_/logs", cookies=cookies)
    assert response.status == 200
    html = await response.text()
    rows = re.findall(r'<tr data-status="(\d+)" data-route="([^"]+)">', html)
    assert ("201", "/api/v1/other-replica") in rows and ("404", "unmatched") in rows
    assert '<option value="/api/v1/other-replica">' in html
    assert "10.1.2.3" in html and "admin:x" in html

    only_4xx = await (await client.get("/_/logs?status=4xx", cookies=cookies)).text()
    statuses = {s for s, _ in re.findall(r'<tr data-status="(\d+)" data-route="([^"]+)">', only_4xx)}
    assert statuses and all(s.startswith("4") for s in statuses)
    by_route = await (await client.get("/_/logs?route=/api/v1/other-replica", cookies=cookies)).text()
    assert {r for _, r in re.findall(r'<tr data-status="(\d+)" data-route="([^"]+)">', by_route)} == {
        "/api/v1/other-replica"}
    paged = await client.get("/_/logs?route=/api/v1/other-replica&page=2", cookies=cookies)
    assert paged.status == 200  # 20 entries, 50 a page: page 2 is empty
    assert 'id="logs-empty"' in await paged.text()
    assert (await client.get("/_/logs?page=abc", cookies=cookies)).status == 200


@pytest.mark.parametrize("query, field", [
    ("status=6xx", "status"), ("status=200", "status"), ("route=%3Cscript%3E", "route"),
    ("route=/a%3Fb%3D1", "route"), ("route=" + "a" * 300, "route"),
], ids=["6xx", "a-status", "markup", "query", "long"])
async def test_a_bad_log_filter_is_a_422_page_with_the_form(client: Any, services: Services, query: str,
                                                           field: str) -> None:
    response = await client.get(f"/_/logs?{query}", cookies=await admin_cookies(client, services))
    assert response.status == 422 and response.content_type == "text/html"
    html = await response.text()
    assert f"<code>{field}</code>" in html and 'id="logs-filters"' in html and "<script>" not in html


async def test_admin_ui_requests_are_logged_with_the_signed_in_admin(client: Any, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    assert (await client.get("/_/collections", cookies=cookies)).status == 200
    await client.server.app[RECORDER].flush()
    html = await (await client.get("/_/logs?route=/_/collections", cookies=cookies)).text()
    rows = re.findall(r'<tr data-status="200" data-route="/_/collections">(.*?)</tr>', html, re.S)
    assert rows and all("admin:" in row for row in rows)


async def test_size_zero_turns_the_log_page_off(client: Any, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    await services.settings.set("request_log_size", 0)
    response = await client.get("/_/logs", cookies=cookies)
    assert response.status == 200
    html = await response.text()
    assert 'id="logs-off"' in html and "<table" not in html


async def test_the_pages_are_admin_only(client: Any) -> None:
    for path in ("/_/", "/_/logs"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 303 and response.headers["Location"].startswith("/_/login")


def test_a_chart_breaks_its_line_at_gaps_and_draws_lone_values_as_dots() -> None:
    chart = line_chart("t", "T", "ms", [0, 60, 120, 180, 240], [("a", [1.0, 2.0, None, 4.0, None])])
    (line,) = chart.lines
    assert len(line.segments) == 1 and len(line.segments[0].split()) == 2 and len(line.dots) == 1
    assert line.latest == "4 ms" and [t.label for t in chart.y_ticks] == ["0", "1.25", "2.5", "3.75", "5"]
    assert [t.label for t in chart.x_ticks][:2] == ["00:00", "00:01"]
    empty = line_chart("e", "E", "%", [0, 60], [("a", [None, None])], percent=True)
    assert empty.empty and empty.y_ticks[-1].label == "100%"
    with pytest.raises(ValueError):
        line_chart("x", "X", "", [0, 60], [("a", [1.0])])


@pytest.mark.parametrize("value, expected", [(0, 1), (0.3, 0.5), (1, 1), (7, 10), (11, 20), (240, 250), (2600, 5000)])
def test_nice_maxima(value: float, expected: float) -> None:
    assert nice_max(value) == expected


@pytest.mark.parametrize("value, unit, expected", [
    (None, "ms", "–"), (3, "", "3"), (2.345, "ms", "2.35 ms"), (42.42, "%", "42.4%"), (1234, "req/min", "1.2k req/min"),
    (1000, "", "1k"),
    (250.4, "ms", "250 ms"),
])
def test_value_labels(value: float | None, unit: str, expected: str) -> None:
    assert format_value(value, unit) == expected


def test_database_figures_are_named_with_units() -> None:
    mongodb = mongodb_figures({"dataSize": 3 * 1024 * 1024, "indexSize": 0, "collections": 4, "objects": 10,
                               "pool": {"max_size": 100, "topology": "Single", "servers": 1},
                               "server": {"version": "8.0", "uptime_s": 100, "connections": {"current": 5},
                                          "opcounters": {"query": 150, "insert": 50}, "mem": {"resident": 90}}})
    shown = {f.key: f.value for f in mongodb}
    assert shown["data-size"] == "3 MiB" and shown["ops"] == "2 ops/s" and shown["memory"] == "90 MiB"
    assert shown["uptime"] == "1 min 40 s" and shown["connections"] == "5 open"
    assert shown["pool"] == "max 100 connections" and shown["topology"] == "Single, 1 server"
    redis = {f.key: f.value for f in redis_figures({"redis_version": "7.2", "used_memory": 1024 * 1024,
                                                   "keyspace_hits": 3, "keyspace_misses": 1, "queue_depth": 2,
                                                   "uptime_in_seconds": 90061})}
    assert redis["memory"] == "1 MiB" and redis["hit-ratio"] == "75%" and redis["queue-depth"] == "2 jobs"
    assert redis["uptime"] == "1 d 1 h" and duration_text(None) == "–"
