"""The dashboard's charts and the request log in a real browser (issue 30, items 3 and 4): after some
traffic (the served app's own requests, and an hour of another replica's counters written through a
second recorder, as a replica of the same database would), the charts are drawn (non-empty SVG
polylines in the DOM), the log lists the requests and filters them. With CMS_UI_README_SHOTS=1 the pages
are saved as docs/screenshots/dashboard-charts.png and request-logs.png (docs/operations/dashboard.md)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import time
from typing import Any

from redis.asyncio import Redis

from cms.observability import timeline
from cms.observability.recorder import Recorder
from cms.observability.signals import RequestSample
from tests.ui.conftest import Api, BrowserPage, UiServer
from tests.ui.test_audit_ui import readme_screenshot

FLUSHED_WITHIN_S = 20.0
"""The served app flushes every FLUSH_INTERVAL_S (5 s); a generous bound for a busy machine."""
ROUTES = ("/api/v1/collections/{collection_name}/records", "/api/v1/collections/{collection_name}/records/{record_id}",
          "/api/v1/auth/login", "/api/v1/files/{collection_name}/{record_id}/{filename}")


async def seed_an_hour_of_another_replica(ui_server: UiServer) -> None:
    """Write the last hour of a second replica's counters (requests, latencies, errors, cache look-ups,
    webhook deliveries and gauges, minute by minute) into the served database's Redis."""
    assert ui_server.config.redis_url
    redis = Redis.from_url(ui_server.config.redis_url)
    rng = random.Random(30)
    clock = {"now": 0.0}

    async def size() -> int:
        return 0  # the log of this replica stays empty: the page shows the served app's requests

    async def gauges() -> dict[str, int]:
        minute = int(clock["now"] // 60) % 60
        return {timeline.QUEUE_DEPTH: max(0, 12 - abs(minute - 30) // 2),
                timeline.REALTIME_CONNECTIONS: 20 + minute % 7}

    try:
        replica = Recorder(redis, ui_server.config.mongodb_db, log_size=size, gauges=gauges,
                           now=lambda: clock["now"])
        start = time.time() // 60 * 60 - 59 * 60
        for minute in range(59):
            clock["now"] = start + minute * 60 + 1
            for _ in range(rng.randint(40, 120)):
                status = rng.choices((200, 201, 304, 404, 422, 500), (70, 10, 5, 8, 4, 1))[0]
                replica.counters.request(RequestSample(
                    at=clock["now"], method="GET", route=rng.choice(ROUTES), status=status,
                    duration_s=rng.lognormvariate(-4.2, 0.8), client_ip="10.0.0.2", principal=None))
            for _ in range(rng.randint(20, 60)):
                replica.counters.cache("read", rng.random() < 0.8)
                replica.counters.cache("definition", rng.random() < 0.97)
            for _ in range(rng.randint(0, 6)):
                replica.counters.delivery("delivered" if rng.random() < 0.9 else "failed", rng.uniform(0.05, 0.6))
            assert await replica.flush()
    finally:
        await redis.aclose()


def run_async(work: Any) -> None:
    """Run a coroutine to its end on an event loop of its own thread (Playwright's sync API holds this one)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, work).result(timeout=60)


def wait_for(check: Any, page: BrowserPage, path: str, timeout_s: float = FLUSHED_WITHIN_S) -> None:
    """Reload `path` until `check()` holds (the served app flushes on its own schedule)."""
    deadline = time.monotonic() + timeout_s
    while True:
        page.goto(path)
        if check():
            return
        assert time.monotonic() < deadline, f"{path}: not shown within {timeout_s} s"
        page.page.wait_for_timeout(500)


def test_the_dashboard_draws_charts_and_the_log_lists_requests(admin_page: BrowserPage, api: Api,
                                                               ui_server: UiServer) -> None:
    run_async(seed_an_hour_of_another_replica(ui_server))
    marker = f"/api/v1/collections/no_such_{int(time.time())}/records"
    for _ in range(5):
        assert api.call("GET", "/api/v1/collections")[0] == 200
        assert api.call("GET", marker)[0] == 404
    admin_page.page.set_viewport_size({"width": 1280, "height": 760})
    page = admin_page.page

    def latency_drawn() -> bool:
        return bool(page.locator("#chart-latency svg circle, #chart-latency svg polyline").count() > 0)

    wait_for(latency_drawn, admin_page, "/_/")
    for key in ("requests", "latency", "errors", "webhook-success", "webhook-latency", "cache", "queue", "realtime"):
        chart = page.locator(f"#chart-{key} svg.plot")
        assert chart.is_visible(), key
        points = chart.locator("polyline").evaluate_all("lines => lines.map(l => l.getAttribute('points'))")
        assert points and all(p and len(p.split()) >= 2 for p in points), key
        box = chart.bounding_box()
        assert box and box["width"] > 200 and box["height"] > 60, key
    stroke = page.locator("#chart-requests polyline").first.evaluate("l => getComputedStyle(l).stroke")
    assert stroke not in ("none", "")  # dashboard.css applies: the CSP let the stylesheet in
    assert page.locator("#mongodb [data-figure=version]").inner_text().strip() not in ("", "–")
    assert "MiB" in page.locator("#redis [data-figure=memory]").inner_text()
    readme_screenshot(page, "dashboard-charts", full_page=True)

    page.click("#window-24h")
    page.wait_for_url("**/_/?window=24h")
    assert page.locator("#chart-requests polyline").count() > 0

    def logged() -> bool:
        return bool(page.locator("table#logs tr[data-status='404']").count() >= 5)

    wait_for(logged, admin_page, "/_/logs")
    rows = page.locator("table#logs tbody tr")
    assert rows.count() >= 10
    first = rows.first.locator("td")
    assert first.nth(2).inner_text().startswith("/") and first.nth(4).inner_text().endswith(" ms")
    assert "no_such_" not in page.content()  # route templates only, never the path
    readme_screenshot(page, "request-logs", full_page=True)

    page.select_option("#logs-filters select[name=status]", "4xx")
    page.click("#logs-filters button[type=submit]")
    page.wait_for_url("**/_/logs?status=4xx*")
    statuses = page.locator("table#logs tbody tr").evaluate_all("rows => rows.map(r => r.dataset.status)")
    assert statuses and all(s.startswith("4") for s in statuses)
    admin_page.watch.assert_clean()
