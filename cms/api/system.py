"""Handlers of `/health`, `/api/v1/stats`, the API explorer (`/docs`) and the small browser pages."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from cms.api.context import services

HTTP_STATS = web.AppKey("http_stats", dict)


async def health(request: web.Request) -> web.Response:
    healthy, body = await services(request).system.health()
    return web.json_response(body, status=200 if healthy else 503)


async def stats(request: web.Request) -> web.Response:
    body = await services(request).system.stats()
    return web.json_response({"http": dict(request.app[HTTP_STATS]), **body})


def _page(name: str) -> str:
    return resources.files("cms.static").joinpath(name).read_text(encoding="utf-8")


async def docs(request: web.Request) -> web.Response:
    return web.Response(text=_page("docs.html"), content_type="text/html")


async def verify_email_page(request: web.Request) -> web.Response:
    return web.Response(text=_page("verify-email.html"), content_type="text/html")
