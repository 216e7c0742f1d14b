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
import time as _time

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from cms.logs import FIELDS_ATTRIBUTE
from cms.web.context import client_ip


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


class CmsAccessLogger(AbstractAccessLogger):
    """aiohttp's default access line (`%a %t "%r" %s %b "%{Referer}i" "%{User-Agent}i"`), written
    directly rather than through aiohttp's format interpreter (it is on every request's path), with
    the query string left out of the request line and the Referer; records also carry
    `access_fields`. The `log_format` aiohttp hands in is not read: cms never sets one."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """Log one request that took `time` seconds; a failure to format is logged, not raised."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        try:
            headers = request.headers
            version = request.version
            line = (f'{request.remote or "-"} {_started_at(time)} "{request.method} '
                    f'{request.raw_path.partition("?")[0]} HTTP/{version.major}.{version.minor}" '
                    f'{response.status} {response.body_length} '
                    f'"{headers.get("Referer", "-").partition("?")[0]}" "{headers.get("User-Agent", "-")}"')
            self.logger.info(line, extra={FIELDS_ATTRIBUTE: access_fields(request, response, time)})
        except Exception:
            self.logger.exception("Error in logging")


_stamp: tuple[int, str] = (-1, "")


def _started_at(duration_s: float) -> str:
    """`[24/Nov/2026:01:02:03 +0000]`: local time when the request started, to the second, as
    aiohttp's `%t` (formatted once per second)."""
    global _stamp
    second = int(_time.time() - duration_s)
    if _stamp[0] != second:
        _stamp = (second, _time.strftime("[%d/%b/%Y:%H:%M:%S %z]", _time.localtime(second)))
    return _stamp[1]
