"""`cms worker`'s own `/metrics` on METRICS_PORT (issue 30): a small WSGI server in a thread, since
the worker serves no HTTP otherwise. The text is the worker's `PrometheusMetrics` (its job
deliveries, MongoDB commands, process figures, and the queue depth and outbox backlog sampled on the
worker's event loop); answers and errors are those of `GET /metrics` on the API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer

from cms.observability.metrics import CONTENT_TYPE, PrometheusMetrics

log = logging.getLogger("cms.observability")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
Allowed = Callable[[str | None], bool]
"""Whether a bearer token (None: no Authorization header) may read the metrics."""


class _QuietHandler(WSGIRequestHandler):
    """wsgiref's request handler without its line per request on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Say nothing (scrapes come every few seconds)."""


def _error(start_response: StartResponse, status: str, code: str, detail: str,
           headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    body = json.dumps({"detail": detail, "code": code}).encode()
    start_response(status, [("Content-Type", "application/json; charset=utf-8"), *headers])
    return [body]


def _bearer(environ: dict[str, Any]) -> str | None:
    """The token of `Authorization: Bearer <token>`, "" for another header, None for none."""
    header = environ.get("HTTP_AUTHORIZATION")
    if header is None:
        return None
    scheme, _, token = str(header).partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class MetricsServer:
    """Serves `metrics` at `GET /metrics` on `host:port` from a daemon thread, sampling on `loop`.

    `allowed(token)`: whether a request's bearer token may read (None: no credentials needed); a
    request it refuses gets 401 `unauthorized`. Other paths are 404 `not_found`, other methods 405.
    `start()` binds (OSError when the port is taken) and returns the port; `close()` stops."""

    def __init__(self, metrics: PrometheusMetrics, loop: asyncio.AbstractEventLoop, *, port: int,
                 host: str = "0.0.0.0", allowed: Allowed | None = None) -> None:
        self._metrics = metrics
        self._loop = loop
        self._port = port
        self._host = host
        self._allowed = allowed
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def app(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        """The WSGI application (see the class docstring)."""
        if environ.get("PATH_INFO") != "/metrics":
            return _error(start_response, "404 Not Found", "not_found", "No such endpoint")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _error(start_response, "405 Method Not Allowed", "method_not_allowed",
                          "Method not allowed; allowed: GET, HEAD", [("Allow", "GET, HEAD")])
        if self._allowed is not None and not self._allowed(_bearer(environ)):
            return _error(start_response, "401 Unauthorized", "unauthorized", "Authentication required",
                          [("WWW-Authenticate", "Bearer")])
        try:
            body = self._metrics.render_from_thread(self._loop)
        except Exception as exc:  # the loop is stopping, or did not answer in time
            log.warning("metrics: a scrape of the worker failed: %r", exc)
            return _error(start_response, "503 Service Unavailable", "service_unavailable",
                          "Metrics are not available right now; retry shortly")
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Cache-Control", "no-store")])
        return [] if environ["REQUEST_METHOD"] == "HEAD" else [body]

    def start(self) -> int:
        """Bind and serve from a daemon thread; returns the bound port. Raises OSError."""
        self._server = make_server(self._host, self._port, self.app, ThreadingWSGIServer,
                                   handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="cms-metrics", daemon=True)
        self._thread.start()
        port = int(self._server.server_port)
        log.info("worker metrics at http://%s:%d/metrics", self._host, port)
        return port

    def close(self) -> None:
        """Stop serving and close the socket (waits for the serving thread's loop to end)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
