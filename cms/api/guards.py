"""Who may call a route (decisions.md, 401 or 403): the one middleware that resolves the request's
credential to a Principal and enforces the matched route's `Policy` (`routes.py` gives each route
one; `cms.services.access.authorize` decides) before the handler runs. Handlers read the checked
principal with `principal_of` or `signed_in_principal`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler

from cms.errors import NotFound, Unauthorized
from cms.models import Principal
from cms.services import access
from cms.services.access import Policy
from cms.services.origin import origin_scope
from cms.web.context import CALLER, request_origin, services

if TYPE_CHECKING:
    from cms.api.route import Route

PRINCIPAL_KEY = "principal"
API_KEY_HEADER = "X-API-Key"
ROUTE_TABLE: web.AppKey[dict[web.AbstractRoute, Route]] = web.AppKey("route_table")
"""The aiohttp route of each entry of `routes.ROUTES` (filled by `routes.add_routes`)."""


def route_of(request: web.Request) -> Route | None:
    """The route-table entry the request matched, or None (a route outside the table: static files,
    /openapi.json, the admin UI, or no route at all)."""
    # the request's own app first: what `config_dict` looks at first, without building a chain per call
    table = request.app.get(ROUTE_TABLE)
    if table is None:
        table = request.config_dict.get(ROUTE_TABLE)
    return None if table is None else table.get(request.match_info.route)


def bearer_token(request: web.Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None when there is no header.
    Raises Unauthorized for a malformed header."""
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'")
    return token.strip()


def presented_credential(request: web.Request) -> str | None:
    """The credential of the request: `X-API-Key`, else the bearer token, else None. Raises
    Unauthorized for a malformed Authorization header or an empty X-API-Key."""
    api_key = request.headers.get(API_KEY_HEADER)
    if api_key is not None:
        if not api_key.strip():
            raise Unauthorized("X-API-Key is empty")
        return api_key.strip()
    return bearer_token(request)


@web.middleware
async def principal_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Resolve the request's credential once (`Authenticator`) and enforce the matched route's
    policy (`access.authorize`; a route outside the table is PUBLIC) before the handler runs, then
    keep the principal on the request (`principal_of`). A PUBLIC route ignores a credential that is
    not valid; any other answers 401 for it. An API key is refused (403) outside records and files
    and for a method its scopes do not allow. A METRICS route lets the METRICS_TOKEN bearer through
    (as an anonymous caller), and answers 404 while metrics are turned off (METRICS_ENABLED=false).

    The handler runs under the request's origin (`cms.services.origin`), now that the principal is
    known: every audit event the request causes, directly, after a commit or in a task it starts,
    carries its user, address and user agent."""
    route = route_of(request)
    policy = route.policy if route is not None else Policy.PUBLIC
    if policy is Policy.METRICS:
        if services(request).metrics is None:
            raise NotFound("Metrics are turned off (METRICS_ENABLED=false)")
        if access.metrics_token_matches(bearer_token(request), services(request).config.metrics_token):
            request[PRINCIPAL_KEY] = None
            return await handler(request)
    principal: Principal | None = None
    try:
        credential = presented_credential(request)
        if credential is not None:
            principal = await services(request).authenticator.authenticate(credential)
    except Unauthorized:
        if policy is not Policy.PUBLIC:
            raise
    if principal is not None and principal.kind == "api_key" and request.path.startswith("/api/"):
        access.require_api_key_reach(principal, request.method, request.path)
    request[PRINCIPAL_KEY] = request[CALLER] = checked = access.authorize(policy, principal)
    with origin_scope(request_origin(request, checked)):
        return await handler(request)


def principal_of(request: web.Request) -> Principal | None:
    """The caller the principal middleware checked against the route's policy; None for an
    anonymous caller (or on a PUBLIC route, one whose credential is not valid)."""
    principal: Principal | None = request.get(PRINCIPAL_KEY)
    return principal


def signed_in_principal(request: web.Request) -> Principal:
    """The caller of a route whose policy needs credentials (PRINCIPAL, ADMIN_USER,
    COLLECTION_USER, ADMIN), as the middleware checked it. Raises Unauthorized if there is none
    (a handler mounted without such a policy)."""
    return access.require_principal(principal_of(request))
