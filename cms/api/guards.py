"""Who may call a route: resolve the bearer credential to a Principal (decisions.md, 401 or 403)."""

from __future__ import annotations

from aiohttp import web

from cms.api.context import services
from cms.errors import Forbidden, Unauthorized
from cms.models import ADMIN_AUDIENCE, Principal, audience_collection_id
from cms.security.tokens import unverified_audience

PRINCIPAL_KEY = "principal"


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


async def optional_principal(request: web.Request) -> Principal | None:
    """The caller, or None without credentials. Raises Unauthorized for a credential that is
    invalid (bad, expired, revoked). The result is cached on the request."""
    if PRINCIPAL_KEY in request:
        cached: Principal | None = request[PRINCIPAL_KEY]
        return cached
    token = bearer_token(request)
    principal = None
    if token is not None:
        # The unverified `aud` only picks the user system; that system then verifies the token for
        # exactly that audience (signature, typ, expiry, active session, user still there).
        audience = unverified_audience(token)
        if audience == ADMIN_AUDIENCE:
            principal = await services(request).accounts.authenticate(token)
        elif audience is not None and audience_collection_id(audience) is not None:
            principal = await services(request).collection_auth.authenticate(token, audience)
        else:
            raise Unauthorized("Token is not valid here")
    request[PRINCIPAL_KEY] = principal
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
    """An admin-table user with role `admin`. Raises Unauthorized (401) or Forbidden (403)."""
    principal = await require_user(request)
    if not principal.is_admin:
        raise Forbidden("Admin role required")
    return principal
