"""`GET /metrics` (decisions.md, Metrics): the process's Prometheus metrics, or every process's with
`cms serve --workers N`. Who may read them is the route's policy (`Policy.METRICS`: admins, or the
METRICS_TOKEN bearer); the principal middleware answers 404 while metrics are turned off."""

from __future__ import annotations

from aiohttp import web

from cms.errors import NotFound
from cms.observability.metrics import CONTENT_TYPE
from cms.web.context import services


async def scrape(request: web.Request) -> web.Response:
    """GET /metrics: Prometheus's text format 0.0.4 (`text/plain; version=0.0.4`). The job queue's
    depth and the webhook outbox's backlog are read now (one left out when its store does not
    answer within 2 s). Raises NotFound when metrics are turned off."""
    metrics = services(request).metrics
    if metrics is None:
        raise NotFound("Metrics are turned off (METRICS_ENABLED=false)")
    body = await metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"})
