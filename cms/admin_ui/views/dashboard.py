"""Dashboard (`/_/`): health of the service and its dependencies (as `/health`), the figures of
`/api/v1/stats` for admins (HTTP counters, MongoDB, Redis with the job queue depth, webhook
outbox backlog) and the uptime."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, render
from cms.models import Principal
from cms.web.context import HTTP_STATS, services


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/: the dashboard."""
    system = services(request).system
    healthy, health = await system.health()
    http: dict[str, int] = request.config_dict[HTTP_STATS]
    stats: dict[str, Any] = {"http": dict(http), **await system.stats()}
    redis = stats.get("redis", {})
    return await render(request, "dashboard/index.html", healthy=healthy, health=health, stats=stats,
                        queue_depth=redis.get("queue_depth") if isinstance(redis, dict) else None)


def routes() -> list[web.RouteDef]:
    """The dashboard's routes."""
    return [web.get(PREFIX + "/", index, name="admin_ui.dashboard")]
