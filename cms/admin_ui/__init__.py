"""The admin dashboard at `/_/` (issue 15): server-rendered Jinja2 pages with vendored htmx, served
by the same app from files inside the package, calling the same services and access checks as the
REST API. Each screen is one module of `views/` with its templates under `templates/<screen>/`;
`common.py` holds rendering, the admin check, CSRF and error helpers, `session.py` the session
cookie. See HACKING.md.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from cms.admin_ui import auth
from cms.admin_ui.common import PREFIX, error_page
from cms.admin_ui.session import REFRESH_SHARE, RefreshShare, apply_cookie_change, current_principal
from cms.admin_ui.views import api_keys, audit, backups, collections, dashboard, records, settings, users, webhooks

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PREFIX = PREFIX + "/static"
SCREENS = (dashboard, collections, records, users, webhooks, api_keys, settings, audit, backups)
LEGACY_PAGES = frozenset({"/_/verify-email", "/_/confirm-email-change", "/_/reset-password"})
"""The emailed-link pages of cms/static (inline script and style) are not admin pages: no CSP here."""

SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                                "form-action 'self'; object-src 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


async def _not_found(request: web.Request) -> web.StreamResponse:
    await current_principal(request)  # the layout when signed in
    return await error_page(request, 404, "There is no such page in the admin area.")


async def _on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Security headers on every admin response, `no-store` on pages, and the session cookie change."""
    path = request.path
    if not (path == PREFIX or path.startswith(PREFIX + "/")) or path in LEGACY_PAGES:
        return
    for name, value in SECURITY_HEADERS.items():  # a file keeps its own (`sandbox`) policy
        response.headers.setdefault(name, value)
    if not path.startswith(STATIC_PREFIX + "/"):
        response.headers["Cache-Control"] = "no-store"
    apply_cookie_change(request, response)


def setup_admin_ui(app: web.Application) -> None:
    """Register every `/_/` route (sign-in, each screen, a 404 page) and the static files on `app`,
    and the response hook that adds the security headers. Call once in create_app, before start."""
    app[REFRESH_SHARE] = RefreshShare()
    app.router.add_routes(auth.routes())
    for screen in SCREENS:
        app.router.add_routes(screen.routes())
    app.router.add_static(STATIC_PREFIX, STATIC_DIR, append_version=False)
    app.router.add_get(PREFIX, _redirect_root)
    app.router.add_get(PREFIX + "/{tail:.*}", _not_found)
    app.on_response_prepare.append(_on_response_prepare)


async def _redirect_root(request: web.Request) -> web.StreamResponse:
    return web.Response(status=308, headers={"Location": PREFIX + "/"})


__all__ = ["setup_admin_ui"]
