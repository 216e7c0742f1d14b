"""Request log (`/_/logs`): the last requests of every replica, newest first (cms.observability.request_log),
filterable by status class (`?status=2xx|3xx|4xx|5xx`) and route template (`?route=`, a select of the
routes seen), PER_PAGE a page (`?page=`). Shows the time, method, route template, status, duration,
client IP and user (the caller's principal label); never a query string or a body. With the
`request_log_size` setting at 0 the page says the log is off. A bad filter is a 422 page with the form."""

from __future__ import annotations

import logging
import urllib.parse
from datetime import UTC, datetime

from aiohttp import web

from cms.admin_ui.common import PREFIX, ErrorMessage, admin_page, error_message, page_number, render
from cms.errors import ValidationFailed
from cms.models import Principal
from cms.observability import request_log
from cms.observability.request_log import LogPage, parse_route, parse_status_class, read_page, routes_seen
from cms.web.context import services

log = logging.getLogger("cms.admin_ui")


def page_link(status_class: str | None, route: str | None, page: int) -> str:
    """The URL of page `page` of the log with these filters."""
    query = {k: v for k, v in (("status", status_class), ("route", route)) if v}
    if page > 1:
        query["page"] = str(page)
    return PREFIX + "/logs" + ("?" + urllib.parse.urlencode(query) if query else "")


def when(at_s: float) -> str:
    """An entry's time as `YYYY-MM-DD HH:MM:SS.mmm` (UTC)."""
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/logs: one page of the request log."""
    svc = services(request)
    db = svc.config.mongodb_db
    size = int((await svc.settings.values())["request_log_size"])
    raw_status, raw_route = request.query.get("status"), request.query.get("route")
    error: ErrorMessage | None = None
    status_class = route = None
    try:
        status_class, route = parse_status_class(raw_status), parse_route(raw_route)
    except ValidationFailed as exc:
        error = error_message(exc)
    page = page_number(request.query.get("page", "1"))
    result: LogPage | None = None
    routes: list[str] = []
    unavailable = False
    if size and error is None:
        try:
            routes = await routes_seen(svc.redis, db)
            result = await read_page(svc.redis, db, size=size, status_class=status_class, route=route, page=page)
        except Exception:  # noqa: BLE001 - Redis down: the page says so
            log.warning("request log could not be read", exc_info=True)
            unavailable = True
    return await render(
        request, "logs/index.html", status=422 if error else 200, error=error, size=size, result=result,
        routes=routes, status_classes=request_log.STATUS_CLASSES, unavailable=unavailable,
        selected_status=raw_status or "", selected_route=raw_route or "", when=when,
        previous_link=page_link(status_class, route, page - 1) if result and page > 1 else None,
        next_link=page_link(status_class, route, page + 1) if result and result.has_next else None,
    )


def routes() -> list[web.RouteDef]:
    """The request log's routes."""
    return [web.get(PREFIX + "/logs", index, name="admin_ui.logs")]
