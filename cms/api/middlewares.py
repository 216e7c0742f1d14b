"""The request frame: request ids, the `/api/v1/stats` counters, the catalog scope and the one error
model (`{"detail", "code"}`) for every failure. The request's origin for the audit log is opened by
the principal middleware (`cms.api.guards`), once the caller is known."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time

from aiohttp import web
from aiohttp.typedefs import Handler
from pymongo.errors import ConnectionFailure as PyMongoConnectionFailure
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cms.api.responses import json_response
from cms.errors import (
    BadRequest,
    CmsError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServiceUnavailable,
)
from cms.models.identity import Principal
from cms.observability.signals import UNMATCHED_ROUTE, RequestSample
from cms.services.caching.definition_cache import request_scope
from cms.web.context import CALLER, HTTP_STATS, REQUEST_ID, SERVICES, client_ip

log = logging.getLogger("cms.api")

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 429: "rate_limited"}


_request_ids = itertools.count()
_request_id_prefix = os.urandom(10).hex()


def _renew_request_id_prefix() -> None:
    global _request_id_prefix
    _request_id_prefix = os.urandom(10).hex()


os.register_at_fork(after_in_child=_renew_request_id_prefix)


def new_request_id() -> str:
    """A request id: 32 hex characters, a random 80-bit prefix per process and a counter, so ids
    are unique across processes and replicas without a system call per request (uuid4 reads
    os.urandom every time)."""
    return f"{_request_id_prefix}{next(_request_ids) & 0xFFFFFFFFFFFF:012x}"


def error_response(error: CmsError, request_id: str) -> web.Response:
    """The JSON response of a CmsError, with the request id header (and Retry-After on 429)."""
    headers = {**error.headers, "X-Request-Id": request_id}
    if isinstance(error, RateLimited):
        headers["Retry-After"] = str(error.retry_after_s)
    return json_response(error.to_body(), status=error.status, headers=headers)


@web.middleware
async def request_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The frame of every request, in one middleware (it is on every request's path):

    - counts the request for `/api/v1/stats` (in total, and in flight until it is answered);
    - gives it an id (`X-Request-Id`, taken from the client when sane);
    - reads the catalog epoch at most once for it (`definition_cache.request_scope`);
    - renders every error in the `{detail, code}` model. Unexpected exceptions are logged with the
      id and become a 500 whose body carries no internals; a database that does not answer is a
      503; a client that disconnects mid-request (e.g. mid upload) is logged on one INFO line,
      without a traceback."""
    counters = request.app[HTTP_STATS]
    counters["requests_total"] += 1
    counters["active_connections"] += 1
    started = time.perf_counter()
    status = 500  # what the client saw if the frame itself is cancelled or fails
    try:
        response = await _answer(request, handler)
        status = response.status
        return response
    finally:
        counters["active_connections"] -= 1
        _observe(request, status, time.perf_counter() - started)


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's answer, or the error model's answer to its failure (see request_middleware)."""
    incoming = request.headers.get("X-Request-Id", "")
    request_id = incoming if 0 < len(incoming) <= 64 and incoming.isprintable() else new_request_id()
    request[REQUEST_ID] = request_id
    try:
        with request_scope():
            response = await handler(request)
    except CmsError as exc:
        if isinstance(exc, MethodNotAllowed):
            _allowed_here(request, exc)
        return error_response(exc, request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(_from_http(exc), request_id)
    except asyncio.CancelledError:  # the handler task is cancelled on disconnect if handler_cancellation is on
        if _client_gone(request):
            _log_disconnect(request, request_id)
        raise
    except (PyMongoConnectionFailure, RedisConnectionError, RedisTimeoutError) as exc:
        # a database that is down or stalled: say so, and let the client retry
        log.warning("%s %s: a database did not answer (request id %s): %r", request.method, request.path,
                    request_id, exc)
        return error_response(ServiceUnavailable("A database is not answering; retry shortly"), request_id)
    except Exception as exc:
        if isinstance(exc, ConnectionError) and _client_gone(request):
            # aiohttp fails the body read with ConnectionResetError("Connection lost"); nobody
            # reads this answer, but returning one keeps aiohttp from logging a traceback
            _log_disconnect(request, request_id)
            return error_response(BadRequest("The client disconnected"), request_id)
        log.exception("unhandled error in %s %s (request id %s)", request.method, request.path, request_id)
        return json_response(
            {"detail": f"Internal server error (request id {request_id})", "code": "internal_error"},
            status=500,
            headers={"X-Request-Id": request_id},
        )
    response.headers["X-Request-Id"] = request_id
    return response


def _observe(request: web.Request, status: int, duration_s: float) -> None:
    """Report the answered request to the process's signals (route template, never the path)."""
    services = request.app.get(SERVICES)
    if services is None:
        return
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else UNMATCHED_ROUTE
    principal = request.get(CALLER)
    try:
        ip = client_ip(request)
    except Exception:  # the services are closing
        ip = request.remote or ""
    services.signals.request(RequestSample(
        at=time.time(), method=request.method, route=route, status=status, duration_s=duration_s,
        client_ip=ip, principal=None if principal is None else principal_label(principal)))


def principal_label(principal: Principal) -> str:
    """A short, non-secret description of a caller for the request log: `admin:<user id>` for an
    admin-table user, `<collection>:<user id>` for an auth-collection user, `api_key:<user id>`."""
    if principal.kind == "api_key":
        return f"api_key:{principal.user_id}"
    if principal.collection_name:
        return f"{principal.collection_name}:{principal.user_id}"
    return f"admin:{principal.user_id}"


def _client_gone(request: web.Request) -> bool:
    """Whether the client's connection is closed (aiohttp drops the transport when it is lost)."""
    return request.transport is None or request.transport.is_closing()


def _log_disconnect(request: web.Request, request_id: str) -> None:
    log.info("client disconnected during %s %s (request id %s)", request.method, request.path, request_id)


def _allowed_here(request: web.Request, error: MethodNotAllowed) -> None:
    """Narrow the `Allow` of a 405 a handler raised (the methods it would take: a view collection's
    records allow reads only, `access.read_only`) to the methods the request's path has, so it lists
    what the target supports (RFC 9110 15.5.6); none, an empty `Allow` (10.2.1), on a path with no read
    (a view's `bulk-delete`, `import/csv`)."""
    allow = error.headers.get("Allow")
    resource = request.match_info.route.resource
    if allow is None or resource is None:
        return
    here = {route.method for route in resource}
    error.headers["Allow"] = ", ".join(m for m in (part.strip() for part in allow.split(",")) if m in here)


def _from_http(exc: web.HTTPException) -> CmsError:
    if exc.status == 404:
        return NotFound("No such endpoint")
    if exc.status == 405:
        allow = exc.headers.get("Allow", "")
        not_allowed = MethodNotAllowed(f"Method not allowed; allowed: {allow}".rstrip("; "))
        not_allowed.headers["Allow"] = allow  # RFC 9110 15.5.6: a 405 must list the allowed methods
        return not_allowed
    if exc.status == 413:
        return PayloadTooLarge("Request body too large")
    error = CmsError(exc.reason)
    error.status, error.code = exc.status, _HTTP_CODES.get(exc.status, "bad_request")
    return error
