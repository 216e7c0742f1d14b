"""The HTTP server of `cms serve`: aiohttp's AppRunner, with parser errors in the error model.

aiohttp answers a request its parser rejects (a request line or header over its limit, too many
headers, bytes that are not HTTP) in `RequestHandler.handle_error`, before any middleware runs:
a `text/plain` 400 that echoes the start of the request, and an ERROR log with a traceback.
`CmsRequestHandler` answers such a request with `{"detail", "code"}` JSON instead (414
`uri_too_long`, 431 `request_header_too_large`, else 400 `bad_request`), echoes nothing, and logs
one INFO line. aiohttp builds its `RequestHandler` in `web.Server.__call__` with no hook, so
`CmsAppRunner` puts a `CmsServer` in place of the server that `web.AppRunner` makes.

Start it like `web.AppRunner`: `runner = CmsAppRunner(app); await runner.setup();
await web.TCPSite(runner, host, port).start(); ...; await runner.cleanup()`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from cms.api.responses import json_response
from cms.errors import BadRequest, CmsError, RequestHeaderTooLarge, UriTooLong

log = logging.getLogger("cms.api")

MAX_REQUEST_LINE_BYTES = 8190
"""Longest request line (the C parser measures the URL alone) before a 414; aiohttp's default."""
MAX_HEADER_FIELD_BYTES = 8192
"""Longest header (name and value) before a 431. It must differ from MAX_REQUEST_LINE_BYTES:
aiohttp raises the same `LineTooLong` for both, and only its limit tells them apart."""
MAX_HEADERS = 128
"""Most request headers before a 431; aiohttp's default."""

_TOO_MANY_HEADERS = "Too many headers received"  # BadHttpMessage text of both aiohttp parsers


def parser_error(exc: HttpProcessingError, *, max_line_size: int, max_field_size: int,
                 max_headers: int) -> CmsError:
    """The client-visible error for an exception of aiohttp's HTTP parser.

    `LineTooLong` whose limit is `max_line_size` is a UriTooLong (414); at `max_field_size`, or
    "too many headers", a RequestHeaderTooLarge (431); anything else a BadRequest (400). Limits
    are in bytes. The detail never quotes the request."""
    if isinstance(exc, LineTooLong) and len(exc.args) > 1:
        if exc.args[1] == max_line_size:
            return UriTooLong(f"The request line is longer than {max_line_size} bytes")
        if exc.args[1] == max_field_size:
            return RequestHeaderTooLarge(f"A request header is longer than {max_field_size} bytes")
    if isinstance(exc, BadHttpMessage) and exc.message == _TOO_MANY_HEADERS:
        return RequestHeaderTooLarge(f"The request has more than {max_headers} headers")
    return BadRequest("Malformed HTTP request")


class CmsRequestHandler(RequestHandler):
    """aiohttp's per-connection protocol with the limits above, answering parser errors as JSON.

    Other errors that reach `handle_error` (a 500 or 504 raised outside the middlewares) keep
    aiohttp's answer and logging."""

    def __init__(self, manager: web.Server, **kwargs: Any) -> None:
        kwargs.setdefault("max_line_size", MAX_REQUEST_LINE_BYTES)
        kwargs.setdefault("max_field_size", MAX_HEADER_FIELD_BYTES)
        kwargs.setdefault("max_headers", MAX_HEADERS)
        super().__init__(manager, **kwargs)

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """A parser error (`HttpProcessingError`) becomes a `{detail, code}` response that closes
        the connection, with an `X-Request-Id`, and one INFO log line naming the exception class;
        anything else goes to aiohttp's `handle_error`."""
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        error = parser_error(exc, max_line_size=self.max_line_size, max_field_size=self.max_field_size,
                             max_headers=self.max_headers)
        request_id = uuid.uuid4().hex
        # exc.message quotes request bytes (maybe a token), so only its class is logged
        log.info("rejected a malformed request from %s: %s %s (%s, request id %s)",
                 request.remote, error.status, error.code, type(exc).__name__, request_id)
        response = json_response(error.to_body(), status=error.status, headers={"X-Request-Id": request_id})
        response.force_close()
        return response


class CmsServer(web.Server):
    """`web.Server` whose connections are served by CmsRequestHandler."""

    def __call__(self) -> RequestHandler:
        """A handler for one new connection."""
        return CmsRequestHandler(self, loop=self._loop, **self._kwargs)


class CmsAppRunner(web.AppRunner):
    """`web.AppRunner` serving through CmsServer; arguments as `web.AppRunner`."""

    async def _make_server(self) -> web.Server:
        # AppRunner starts the app and makes its Server (request handler, request factory,
        # handler arguments); the same Server is rebuilt as a CmsServer.
        server = await super()._make_server()
        # its handler arguments (the runner's, plus debug, the access log class and the app's
        # handler_args) are kept in `_kwargs` only: aiohttp offers no public copy of them
        kwargs = server._kwargs  # noqa: SLF001 - rebuilding aiohttp's own Server is the point here
        return CmsServer(server.request_handler, request_factory=server.request_factory,
                         handler_cancellation=server.handler_cancellation, loop=asyncio.get_running_loop(),
                         **kwargs)
