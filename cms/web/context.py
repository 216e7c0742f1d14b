"""Request-level helpers shared by the API and the admin UI: app keys, body and query parsing, and
the request's context (client address, HTTPS, User-Agent)."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any, Literal

from aiohttp import web
from marshmallow import EXCLUDE, Schema, ValidationError

from cms.errors import BadRequest, PayloadTooLarge, ValidationFailed, flatten_errors
from cms.models import Principal
from cms.security.json_input import JsonInputError, decode_json
from cms.services.origin import RequestOrigin
from cms.wiring import Services

SERVICES = web.AppKey("services", Services)
REQUEST_ID = "request_id"
CALLER = "caller"
"""Request key of the authenticated caller (a `Principal`), set by whichever layer authenticated the
request (the API's principal middleware, the admin UI's session); the request log reads it."""
HTTP_STATS = web.AppKey("http_stats", dict[str, int])
"""`{requests_total, active_connections}` of this process, for `/api/v1/stats` and the dashboard."""
_CLIENT_IP = "cms_client_ip"
"""Request key under which `client_ip` keeps the address it worked out."""
INLINE_JSON_BYTES = 64 * 1024
"""Bodies up to this size (bytes) are decoded on the event loop; larger ones in a thread."""


def services(request: web.Request) -> Services:
    """The process's wired services, set on the root app and seen from its sub-apps (the admin UI)."""
    # the request's own app first: what `config_dict` looks at first, without building a chain per call
    found = request.app.get(SERVICES)
    return found if found is not None else request.config_dict[SERVICES]


async def read_json(request: web.Request, *, max_bytes: int | None = None) -> Any:
    """The decoded JSON body (None when empty). Raises BadRequest for malformed JSON (see
    `decode_json`: too deep, too long a number, NaN, lone surrogates) and PayloadTooLarge for an
    oversized body: over aiohttp's client_max_size (the app's JSON limit), or over `max_bytes` when
    given (a route with a limit of its own: a schema snapshot). Bodies over INLINE_JSON_BYTES are
    decoded in a worker thread, so a big parse never stalls other requests."""
    raw = await request.read() if max_bytes is None else await read_limited(request, max_bytes)
    if not raw.strip():
        return None
    try:
        if len(raw) > INLINE_JSON_BYTES:
            return await asyncio.to_thread(decode_json, raw)
        return decode_json(raw)
    except JsonInputError as exc:
        raise BadRequest(f"Malformed JSON body: {exc}") from None


async def read_limited(request: web.Request, max_bytes: int) -> bytes:
    """The raw body, at most `max_bytes` bytes (read from the stream: aiohttp's client_max_size does not
    apply). Raises PayloadTooLarge past it (a Content-Length over it is refused before reading)."""
    too_large = PayloadTooLarge(f"Request body too large (at most {max_bytes:,} bytes)")
    if request.content_length is not None and request.content_length > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def parse_body(request: web.Request, schema: Schema, *, required: bool = False,
                     max_bytes: int | None = None) -> dict[str, Any]:
    """Decode the JSON body (an object) and load it with `schema`; a missing body reads as `{}`
    unless `required`. `max_bytes`: the route's own body limit (`read_json`). Raises BadRequest
    (missing though `required`, malformed, not an object), PayloadTooLarge or ValidationFailed (422,
    per-field errors)."""
    return load_body(await read_json(request, max_bytes=max_bytes), schema, required=required)


def load_body(body: Any, schema: Schema, *, required: bool = False) -> dict[str, Any]:
    """Load the decoded JSON `body` (None: no body, read as `{}` unless `required`) with `schema`,
    as `parse_body` does (a batch's requests carry their bodies inside the batch's). Raises
    BadRequest (missing though `required`, not an object) or ValidationFailed (422)."""
    if body is None:
        if required:
            raise BadRequest("A JSON body is required")
        body = {}
    if not isinstance(body, dict):
        raise BadRequest("JSON body must be an object")
    return load(schema, body)


def parse_query(request: web.Request, schema: Schema) -> dict[str, Any]:
    """Load the query string with `schema` (unknown parameters ignored). Raises ValidationFailed."""
    return load(schema, dict(request.query), unknown=EXCLUDE)


def load(schema: Schema, data: dict[str, Any], *,
         unknown: Literal["exclude", "include", "raise"] | None = None) -> dict[str, Any]:
    """`schema.load(data)` with marshmallow errors turned into ValidationFailed (422); nested
    errors get dotted keys (`flatten_errors`), so every `errors` value is a list of strings."""
    try:
        loaded: dict[str, Any] = schema.load(data, unknown=unknown)
    except ValidationError as exc:
        raise ValidationFailed("Validation failed", errors=flatten_errors(exc.messages)) from None
    return loaded


def client_ip(request: web.Request) -> str:
    """The client's address: the socket peer, unless that peer is one of `TRUSTED_PROXIES`; then
    the right-most address of `X-Forwarded-For` that is not a trusted proxy (a client can prepend
    anything to that header, but not past the proxies we trust). Worked out once per request (the
    rate limit, the audit origin and the request log all ask)."""
    known: str | None = request.get(_CLIENT_IP)
    if known is None:
        known = request[_CLIENT_IP] = _client_ip(request)
    return known


def _client_ip(request: web.Request) -> str:
    peer = request.remote or ""
    trusted = services(request).config.trusted_proxies
    if not trusted or not _is_trusted(peer, trusted):
        return peer
    hops = [h.strip() for h in request.headers.get("X-Forwarded-For", "").split(",") if h.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, trusted):
            return hop
    return hops[0] if hops else peer


def is_https(request: web.Request) -> bool:
    """Whether the client reached us over HTTPS: the connection itself, or `X-Forwarded-Proto:
    https` set by one of `TRUSTED_PROXIES` (a TLS-terminating load balancer); the header of any
    other peer is ignored."""
    if request.secure:
        return True
    trusted = services(request).config.trusted_proxies
    if not trusted or not _is_trusted(request.remote or "", trusted):
        return False
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[-1].strip().lower()
    return forwarded == "https"


def _is_trusted(address: str, trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def user_agent(request: web.Request) -> str:
    """The User-Agent header, or empty."""
    return request.headers.get("User-Agent", "")


def request_origin(request: web.Request, principal: Principal | None) -> RequestOrigin:
    """The origin of `request` sent by `principal` (None: anonymous): the client address after
    TRUSTED_PROXIES (`client_ip`), the User-Agent and the request id (decisions.md, Audit context)."""
    return RequestOrigin(user_id=principal.user_id if principal is not None else None,
                         ip_address=client_ip(request), user_agent=user_agent(request),
                         request_id=str(request.get(REQUEST_ID, "")))
