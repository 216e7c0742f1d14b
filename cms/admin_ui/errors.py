"""The admin UI's error pages: its middleware answers every failure under `/_/` with an HTML page
(404 no such page, 405, 403, a service's CmsError with its status, 500 with the request id), so
the API's JSON error model (cms.api.middlewares) never sees a UI error.

The API app's middlewares still run first on every `/_/` request (request id, general rate limit,
catalog scope): a refusal of theirs (429) is answered before the UI is reached, in the JSON model,
as before the UI was a sub-app."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler

from cms.admin_ui.common import error_page, render
from cms.admin_ui.session import current_principal
from cms.errors import CmsError, RateLimited
from cms.web.context import REQUEST_ID

log = logging.getLogger("cms.admin_ui")

NOT_FOUND_MESSAGE = "There is no such page in the admin area."
KEPT_HEADERS = ("Allow", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
"""Headers of a refusal that its error page carries too (405 `Allow`, 429 `Retry-After` and limits)."""


@web.middleware
async def error_pages_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer a failure under `/_/` with an HTML error page of its status: an HTTP error of the
    router (404 no such page, 405 with `Allow`), a CmsError a handler did not catch (its status
    and detail), any other exception a 500 page naming the request id (logged with its traceback;
    the page carries no internals). Redirects and a client that went away pass through."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = NOT_FOUND_MESSAGE if exc.status == 404 else exc.reason
        return await _page(request, exc.status, message, exc.headers)
    except CmsError as exc:
        headers = dict(exc.headers)
        if isinstance(exc, RateLimited):
            headers["Retry-After"] = str(exc.retry_after_s)
        return await _page(request, exc.status, exc.detail, headers)
    except Exception as exc:
        if isinstance(exc, ConnectionError) and (request.transport is None or request.transport.is_closing()):
            raise  # the client is gone: the API's frame logs it on one line
        request_id = request.get(REQUEST_ID, "")
        log.exception("unhandled error in %s %s (request id %s)", request.method, request.path, request_id)
        return await internal_error_page(request, request_id)


async def _page(request: web.Request, status: int, message: str, headers: Mapping[str, str]) -> web.Response:
    """The error page in the layout of the signed-in user (as any other page), with the kept headers."""
    try:
        await current_principal(request)
        response = await error_page(request, status, message)
    except Exception:  # the layout needs the database: without it, the page without the layout
        log.warning("error page of %s %s rendered without the layout", request.method, request.path, exc_info=True)
        response = await _plain(request, status, message)
    for name in KEPT_HEADERS:
        if name in headers:
            response.headers[name] = headers[name]
    return response


async def internal_error_page(request: web.Request, request_id: str) -> web.Response:
    """The 500 page: no internals, the request id to quote; rendered without the layout (the
    failure may be the database the layout reads)."""
    return await _plain(request, 500, f"Internal server error (request id {request_id}).")


async def _plain(request: web.Request, status: int, message: str) -> web.Response:
    try:
        return await render(request, "error.html", status=status, status_code=status, message=message,
                            principal=None, nav_collections=[])
    except Exception:  # the template itself failed: still an HTML page, never the JSON model
        log.exception("error page template failed")
        return web.Response(text=f"<!doctype html><title>{status}</title><h1>{status}</h1>",
                            status=status, content_type="text/html", charset="utf-8")
