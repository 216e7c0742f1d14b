"""Who may call what (decisions.md, Identity and tokens): route policies, admin-only operations,
API keys' reach, and who manages which webhooks and API keys. Pure: no I/O."""

from __future__ import annotations

import hmac
import re
from enum import Enum

from cms.errors import Forbidden, Unauthorized
from cms.filters.rules import ACTIONS
from cms.models import ROLE_ADMIN, Principal

AUTH_TYPE = "auth"
LIST, VIEW, CREATE, UPDATE, DELETE = ACTIONS

def acts_as_admin(principal: Principal | None) -> bool:
    """An admin-table user with role `admin`, or an API key acting for one (records and files)."""
    return principal is not None and principal.kind in ("admin_user", "api_key") and principal.role == ROLE_ADMIN


ADMIN_TABLE_TOKEN_ONLY = "Not an admin-table user token"
"""The 401 detail of an admin-table user's endpoint called with another kind of credential."""
COLLECTION_TOKEN_ONLY = "Not a token of this collection"
"""The 401 detail of an auth collection's user endpoint called with another kind of credential."""
API_KEY_PATHS = re.compile(r"^/api/v1/(collections/[^/]+/records|collections/[^/]+/aggregate|files|batch|realtime)"
                           r"(/.*)?$")
"""What an API key may reach: records, their aggregations and files (decisions.md), batches of record writes (the
`write` scope; each request then runs as the key's owner), realtime subscriptions and file tokens (reads:
the `read` scope, whatever the method); anything else under /api is 403."""
REALTIME_PATH = "/api/v1/realtime"
FILE_TOKEN_PATH = "/api/v1/files/token"
READ_POSTS = frozenset({REALTIME_PATH, FILE_TOKEN_PATH})
"""POSTs that only read: a realtime subscription, and a file token (what reading a protected field's
files needs; decisions.md, Files in records: "any credentials")."""
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Policy(Enum):
    """Who may call an API route (decisions.md, Identity and tokens, 401 or 403); each route of
    `cms/api/routes.py` has one, and the API's principal middleware enforces it with `authorize`.

    PUBLIC: anyone; a credential is not looked at (a bad one is ignored). OPTIONAL: anyone, but a
    credential that is sent must be valid (401 otherwise): it is the principal the collection's
    rules see. PRINCIPAL: any valid credential (401 without). ADMIN_USER: an admin-table user of
    either role; COLLECTION_USER: a user of an auth collection (the service then checks it is one
    of the path's collection); either answers 401 to any other credential. ADMIN: an admin-table
    user with role `admin` (401 without credentials, 403 for any other principal). METRICS: as ADMIN,
    or the bearer token METRICS_TOKEN when that is set (`metrics_token_matches`; decisions.md, Metrics)."""

    PUBLIC = "public"
    OPTIONAL = "optional"
    PRINCIPAL = "principal"
    ADMIN_USER = "admin_user"
    COLLECTION_USER = "collection_user"
    ADMIN = "admin"
    METRICS = "metrics"


def authorize(policy: Policy, principal: Principal | None) -> Principal | None:
    """The caller of a route of `policy`: `principal` (None: no credentials) when the policy lets it
    call. A credential that did not resolve is the caller's affair before this (PUBLIC ignores it,
    every other policy answers 401). Raises Unauthorized or Forbidden (ADMIN only)."""
    if policy in (Policy.PUBLIC, Policy.OPTIONAL):
        return principal
    if policy is Policy.ADMIN or policy is Policy.METRICS:
        return require_admin(principal)
    signed_in = require_principal(principal)
    if policy is Policy.ADMIN_USER and signed_in.kind != "admin_user":
        raise Unauthorized(ADMIN_TABLE_TOKEN_ONLY)
    if policy is Policy.COLLECTION_USER and signed_in.kind != "collection_user":
        raise Unauthorized(COLLECTION_TOKEN_ONLY)
    return signed_in


def metrics_token_matches(presented: str | None, token: str | None) -> bool:
    """Whether the bearer token `presented` is the configured METRICS_TOKEN `token` (compared in
    constant time); always False when no token is configured or none was presented."""
    if not token or presented is None:
        return False
    return hmac.compare_digest(presented.encode(), token.encode())


def require_principal(principal: Principal | None) -> Principal:
    """`principal`, if there is one. Raises Unauthorized (no credentials)."""
    if principal is None:
        raise Unauthorized()
    return principal


def require_api_key_reach(principal: Principal, method: str, path: str) -> None:
    """Raise Forbidden unless an API key `principal` may call `method` on the API `path`: records and
    files only (API_KEY_PATHS); `read` scope for GET/HEAD and READ_POSTS, `write` for POST/PATCH/PUT/DELETE."""
    if not API_KEY_PATHS.match(path):
        raise Forbidden("API keys may be used on records and files only")
    needed = "read" if method in READ_METHODS or path in READ_POSTS else "write"
    if needed not in principal.scopes:
        raise Forbidden(f"This API key lacks the '{needed}' scope")


def require_admin(principal: Principal | None) -> Principal:
    """The admin-only operations (collections, audit, settings, backups, stats): `principal` if it
    is an admin-table user with role `admin`. Raises Unauthorized (no credentials) or Forbidden."""
    if principal is None:
        raise Unauthorized()
    if not principal.is_admin:
        raise Forbidden("Admin role required")
    return principal


def require_admin_or_operator(principal: Principal | None) -> None:
    """Backups and schema snapshots: an admin, or None, the operator (`cms backup ...`, `cms schema ...`,
    SCHEMA_FILE at start-up and scripts, run with the
    server's own configuration; an API or admin UI request always has a principal here). Raises
    Forbidden for any other principal."""
    if principal is not None:
        require_admin(principal)


def require_admin_table(principal: Principal, managed: str) -> Principal:
    """`principal` if it is an admin-table user (either role): only they manage `managed` (e.g.
    "Webhooks", "API keys"). Raises Forbidden."""
    if principal.kind != "admin_user":
        raise Forbidden(f"{managed} are managed by admin-table users")
    return principal


def owner_scope(principal: Principal) -> str | None:
    """Whose webhooks and API keys an admin-table `principal` manages: None (everyone's) for role
    admin, else its own user id."""
    return None if principal.role == ROLE_ADMIN else principal.user_id


def manages(principal: Principal, owner_id: str) -> bool:
    """Whether an admin-table `principal` manages a webhook or API key of user `owner_id`: an admin
    manages all, role `user` its own."""
    return principal.role == ROLE_ADMIN or owner_id == principal.user_id
