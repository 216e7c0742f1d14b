"""The access log of `cms serve`: one INFO record per answered request on the `cms.access` logger.

The message is aiohttp's default line (`%a %t "%r" %s %b "%{Referer}i" "%{User-Agent}i"`), so
`LOG_FORMAT=text` reads as before, except that the request line and the Referer leave out the
query string: links carry tokens there (`/_/verify-email?token=...`, and a page's API calls name
it as their Referer), and tokens are never logged. Each record
also carries, for `LOG_FORMAT=json` (cms.logs), `extra={"fields": {request_id, method, path,
status, duration_ms, client_ip}}`: the request id is the `X-Request-Id` the response carries,
`path` excludes the query string too, and `client_ip` honours `TRUSTED_PROXIES` like the rate
limits do.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.web_log import AccessLogger

from cms.api.context import client_ip
from cms.logs import FIELDS_ATTRIBUTE


def access_fields(request: web.BaseRequest, response: web.StreamResponse, duration_s: float) -> dict[str, object]:
    """The structured fields of one access-log record; `duration_s` is the handling time in seconds.
    `request_id` is None when the response has no `X-Request-Id`. Never raises."""
    try:
        ip = client_ip(request) if isinstance(request, web.Request) else request.remote
    except Exception:  # the app's services are gone (shutdown) or were never there
        ip = request.remote
    return {
        "request_id": response.headers.get("X-Request-Id"),
        "method": request.method,
        "path": request.path,
        "status": response.status,
        "duration_ms": round(duration_s * 1000, 1),
        "client_ip": ip,
    }


class CmsAccessLogger(AccessLogger):
    """aiohttp's AccessLogger (same text line) whose records also carry `access_fields`."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """Log one request that took `time` seconds; a failure to format is logged, not raised."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        try:
            values = tuple(_without_query(request) if key == "first_request_line"
                           else value.partition("?")[0] if key == ("request_header", "Referer")
                           else value
                           for key, value in self._format_line(request, response, time))
            self.logger.info(self._log_format % values,
                             extra={FIELDS_ATTRIBUTE: access_fields(request, response, time)})
        except Exception:
            self.logger.exception("Error in logging")


def _without_query(request: web.BaseRequest) -> str:
    """The request line with the query string left out: `GET /path HTTP/1.1`."""
    version = request.version
    return f"{request.method} {request.raw_path.partition('?')[0]} HTTP/{version.major}.{version.minor}"
