"""Handlers of `/health`, `/api/v1/stats`, the API explorer (`/docs`) and the small browser pages."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from cms.api.context import services

HTTP_STATS = web.AppKey("http_stats", dict[str, int])


async def health(request: web.Request) -> web.Response:
    healthy, body = await services(request).system.health()
    return web.json_response(body, status=200 if healthy else 503)


async def stats(request: web.Request) -> web.Response:
    body = await services(request).system.stats()
    counters = request.app[HTTP_STATS]
    return web.json_response({"http": dict(counters), **body})


def _page(name: str) -> str:
    return resources.files("cms.static").joinpath(name).read_text(encoding="utf-8")


async def docs(request: web.Request) -> web.Response:
    return web.Response(text=_page("docs.html"), content_type="text/html")


async def verify_email_page(request: web.Request) -> web.Response:
    return web.Response(text=_page("verify-email.html"), content_type="text/html")


async def reset_password_page(request: web.Request) -> web.Response:
    """GET /_/reset-password?token=...: the page of the emailed reset link; it posts the new password
    to `/api/v1/auth/reset-password`."""
    return web.Response(text=_page("reset-password.html"), content_type="text/html")


async def confirm_email_change_page(request: web.Request) -> web.Response:
    """GET /_/confirm-email-change?token=...&collection=...: the page of the emailed email-change
    link; it posts the token to the collection's `/auth/me/confirm-email-change`."""
    return web.Response(text=_page("confirm-email-change.html"), content_type="text/html")
