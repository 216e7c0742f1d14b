"""Handlers of `/health`, `/api/v1/stats`, the API explorer (`/docs`) and the small browser pages."""

from __future__ import annotations

import functools
from importlib import resources

import jinja2
from aiohttp import web

from cms.api.guards import principal_of
from cms.api.responses import json_response
from cms.services import representation as represent
from cms.web.context import HTTP_STATS, services


async def health(request: web.Request) -> web.Response:
    """GET /health: 200 when MongoDB and Redis answer, else 503; the body names each dependency's state."""
    healthy, body = await services(request).system.health()
    return json_response(represent.health(body), status=200 if healthy else 503)


async def stats(request: web.Request) -> web.Response:
    """GET /api/v1/stats: `{http, uptime_s}` for everyone; admins also get the MongoDB and Redis
    figures (server versions, data sizes), which anonymous callers must not learn."""
    http: dict[str, int] = request.app[HTTP_STATS]
    counters = {"http": dict(http)}
    principal = principal_of(request)
    if principal is None or not principal.is_admin:
        return json_response({**counters, "uptime_s": services(request).system.uptime_s()})
    return json_response({**counters, **await services(request).system.stats()})


_LINK_PAGES = jinja2.Environment(loader=jinja2.PackageLoader("cms", "static"), autoescape=True,
                                 undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
"""The emailed-link pages: each extends `static/_layout.html` (no-referrer, the shared style)."""


def _page(name: str) -> str:
    return resources.files("cms.static").joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _link_page(name: str) -> str:
    """`static/<name>` rendered on its layout (once: the pages take no values)."""
    return _LINK_PAGES.get_template(name).render()


async def docs(request: web.Request) -> web.Response:
    """GET /docs: the offline API explorer (Swagger UI) for `/openapi.json`."""
    return web.Response(text=_page("docs.html"), content_type="text/html")


async def token_link_page(request: web.Request) -> web.Response:
    """GET /_/verify-email and /_/confirm-email-change (`?token=...&collection=...`): the page of an
    emailed one-time link; it posts the token to the matching API endpoint and shows the outcome."""
    return web.Response(text=_link_page("token-link.html"), content_type="text/html")


async def reset_password_page(request: web.Request) -> web.Response:
    """GET /_/reset-password?token=...: the page of the emailed reset link; it posts the new password
    to `/api/v1/auth/reset-password`."""
    return web.Response(text=_link_page("reset-password.html"), content_type="text/html")
