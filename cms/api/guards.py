"""Who may call a route: resolve the bearer credential to a Principal (decisions.md, 401 or 403)."""

from __future__ import annotations

import re

from aiohttp import web
from aiohttp.typedefs import Handler

from cms.errors import Forbidden, Unauthorized
from cms.models import Principal
from cms.services import access
from cms.web.context import services

PRINCIPAL_KEY = "principal"
AUTH_ERROR_KEY = "auth_error"
API_KEY_HEADER = "X-API-Key"
API_KEY_PATHS = re.compile(r"^/api/v1/(collections/[^/]+/records|files)(/.*)?$")
"""What an API key may reach: records and files (decisions.md); anything else under /api is 403."""
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


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
    """Resolve the request's credential once (`Authenticator`) and keep the Principal, or the
    reason it is invalid, for the route's guard: a public route ignores a bad credential it does
    not need, a protected one answers 401. An API key is refused (403) outside records and files
    and for a method its scopes do not allow."""
    principal: Principal | None = None
    try:
        credential = presented_credential(request)
        if credential is not None:
            principal = await services(request).authenticator.authenticate(credential)
    except Unauthorized as exc:
        request[AUTH_ERROR_KEY] = exc
    request[PRINCIPAL_KEY] = principal
    if principal is not None and principal.kind == "api_key" and request.path.startswith("/api/"):
        check_api_key_scope(principal, request.method, request.path)
    return await handler(request)


def check_api_key_scope(principal: Principal, method: str, path: str) -> None:
    """Raise Forbidden unless an API key `principal` may call `method` on `path`: records and files
    only; `read` for GET/HEAD, `write` for POST/PATCH/PUT/DELETE."""
    if not API_KEY_PATHS.match(path):
        raise Forbidden("API keys may be used on records and files only")
    needed = "read" if method in READ_METHODS else "write"
    if needed not in principal.scopes:
        raise Forbidden(f"This API key lacks the '{needed}' scope")


async def optional_principal(request: web.Request) -> Principal | None:
    """The caller, or None without credentials. Raises Unauthorized for a credential that is
    invalid (bad, expired, revoked)."""
    if AUTH_ERROR_KEY in request:
        error: Unauthorized = request[AUTH_ERROR_KEY]
        raise error
    if PRINCIPAL_KEY not in request:  # an app without the principal middleware (never in create_app)
        credential = presented_credential(request)
        request[PRINCIPAL_KEY] = (
            None if credential is None else await services(request).authenticator.authenticate(credential))
    principal: Principal | None = request[PRINCIPAL_KEY]
    return principal


async def require_user(request: web.Request) -> Principal:
    """Any authenticated principal. Raises Unauthorized (401)."""
    principal = await optional_principal(request)
    if principal is None:
        raise Unauthorized()
    return principal


async def require_admin_user(request: web.Request) -> Principal:
    """An admin-table user of any role (admin `/auth/me`, logout). Raises Unauthorized (401)."""
    principal = await require_user(request)
    if principal.kind != "admin_user":
        raise Unauthorized("Not an admin-table user token")
    return principal


async def require_collection_user(request: web.Request) -> Principal:
    """A user of some auth collection (its `/auth/me`, sessions, change-password); the service then
    checks that it is a user of the collection in the path. Raises Unauthorized (401)."""
    principal = await require_user(request)
    if principal.kind != "collection_user":
        raise Unauthorized("Not a token of this collection")
    return principal


async def require_admin(request: web.Request) -> Principal:
    """An admin-table user with role `admin` (`access.require_admin`). Raises Unauthorized (401)
    or Forbidden (403)."""
    return access.require_admin(await optional_principal(request))
