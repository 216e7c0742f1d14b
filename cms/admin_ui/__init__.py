"""The admin dashboard at `/_/` (issue 15): server-rendered Jinja2 pages with vendored htmx, an
aiohttp sub-app mounted on the API app (`create_admin_ui`), served from files inside the package,
calling the same services and access checks as the REST API (never cms.api; what both share is in
cms/web). Each screen is one module of `views/` with its templates under `templates/<screen>/`;
`common.py` holds rendering, the admin check, CSRF and error helpers, `session.py` the session
cookie, `errors.py` the middleware of the HTML error pages. See HACKING.md.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from cms.admin_ui import auth
from cms.admin_ui.common import PREFIX
from cms.admin_ui.errors import error_pages_middleware
from cms.admin_ui.session import REFRESH_SHARE, RefreshShare, apply_cookie_change
from cms.admin_ui.views import (
    aggregates,
    api_keys,
    audit,
    backups,
    collections,
    dashboard,
    indexes,
    logs,
    records,
    releases,
    schema,
    settings,
    slow_queries,
    users,
    webhooks,
)

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PREFIX = PREFIX + "/static"
SCREENS = (dashboard, collections, indexes, records, aggregates, users, webhooks, api_keys, settings, audit, logs,
           slow_queries, backups, schema, releases)

SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                                "form-action 'self'; object-src 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


async def _on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Security headers on every admin response, `no-store` on pages, and the session cookie change.
    A sub-app's hook runs only for the requests routed to it: the emailed-link pages under `/_/`
    (verify-email, reset-password, ...) are API routes and keep their own inline script."""
    for name, value in SECURITY_HEADERS.items():  # a file keeps its own (`sandbox`) policy
        response.headers.setdefault(name, value)
    if not request.path.startswith(STATIC_PREFIX + "/"):
        response.headers["Cache-Control"] = "no-store"
    apply_cookie_change(request, response)


def create_admin_ui() -> web.Application:
    """The admin UI as an aiohttp sub-app, to mount with `app.add_subapp(PREFIX, create_admin_ui())`
    on an app that holds SERVICES (and HTTP_STATS). It has every `/_/` route (sign-in, each screen,
    `/_` redirecting to `/_/`) and the static files, its own middleware (HTML error pages: 404 for
    any other path under `/_/`, 403, 500) and the response hook that adds the security headers.
    Mount it after CORS is set up: the admin UI is same-origin only."""
    ui = web.Application(middlewares=[error_pages_middleware])
    ui[REFRESH_SHARE] = RefreshShare()
    ui.router.add_routes(_mounted(auth.routes()))
    for screen in SCREENS:
        ui.router.add_routes(_mounted(screen.routes()))
    ui.router.add_static(STATIC_PREFIX.removeprefix(PREFIX), STATIC_DIR, append_version=False)
    ui.router.add_get("", _redirect_root)
    ui.on_response_prepare.append(_on_response_prepare)
    return ui


def _mounted(route_defs: list[web.RouteDef]) -> list[web.RouteDef]:
    """The screens' routes (absolute `/_/...` paths, as links and redirects use them) relative to
    the mount point: aiohttp prefixes a sub-app's routes with PREFIX when it is added."""
    relative = []
    for route in route_defs:
        if not route.path.startswith(PREFIX + "/"):
            raise ValueError(f"admin UI route {route.path!r} is not under {PREFIX}/")
        relative.append(web.RouteDef(route.method, route.path.removeprefix(PREFIX), route.handler, route.kwargs))
    return relative


async def _redirect_root(request: web.Request) -> web.StreamResponse:
    return web.Response(status=308, headers={"Location": PREFIX + "/"})


__all__ = ["PREFIX", "create_admin_ui"]
