"""Authorization: who may do what (decisions.md, Identity and tokens and Access rules). Pure: no I/O.

Every path that reads or changes records (single, bulk, CSV, files, webhook deliveries) asks
`check(principal, collection, action)`, and the admin-only operations (collections, audit,
settings, backups) ask `require_admin`; handlers do not decide who may do what. Each API route
declares a `Policy` (who may call it), which the API's one middleware enforces with `authorize`
before the handler runs; the services check again through this module (the admin UI and the
workers call them directly). Webhooks and API keys belong to admin-table users: `require_admin_table`,
`owner_scope` and `manages` decide who manages which.

A collection's five rules (`models.AccessRules`) are None (admins only), "" (everyone) or an
expression of the rule grammar, bound to the request by `filters.rules`. Admins, and API keys of
admins, bypass every rule; any other API key acts as its owner, within its scopes (the API guard
checks the scopes).
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from cms.errors import CmsError, Forbidden, InvalidFilter, NotFound, Unauthorized
from cms.filters.grammar import parse_filter
from cms.filters.mongo import to_mongo_query
from cms.filters.rules import ACTIONS, Decision, RequestContext, bind_rule, check_rule, matches
from cms.models import ROLE_ADMIN, AccessRules, Collection, Principal, Record
from cms.services.content.fields import CollectionFields

log = logging.getLogger("cms.access")

AUTH_TYPE = "auth"
LIST, VIEW, CREATE, UPDATE, DELETE = ACTIONS

_VERBS = {LIST: "list", VIEW: "view", CREATE: "create", UPDATE: "change", DELETE: "delete"}


def acts_as_admin(principal: Principal | None) -> bool:
    """An admin-table user with role `admin`, or an API key acting for one (records and files)."""
    return principal is not None and principal.kind in ("admin_user", "api_key") and principal.role == ROLE_ADMIN


ADMIN_TABLE_TOKEN_ONLY = "Not an admin-table user token"
"""The 401 detail of an admin-table user's endpoint called with another kind of credential."""
COLLECTION_TOKEN_ONLY = "Not a token of this collection"
"""The 401 detail of an auth collection's user endpoint called with another kind of credential."""
API_KEY_PATHS = re.compile(r"^/api/v1/(collections/[^/]+/records|files|batch|realtime)(/.*)?$")
"""What an API key may reach: records and files (decisions.md), batches of record writes (the
`write` scope; each request then runs as the key's owner) and realtime subscriptions (reads: the
`read` scope, whatever the method); anything else under /api is 403."""
REALTIME_PATH = "/api/v1/realtime"
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
    files only (API_KEY_PATHS); `read` scope for GET/HEAD, `write` for POST/PATCH/PUT/DELETE."""
    if not API_KEY_PATHS.match(path):
        raise Forbidden("API keys may be used on records and files only")
    needed = "read" if method in READ_METHODS or path == REALTIME_PATH else "write"
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
    """Backups: an admin, or None, the operator (`cms backup ...` and scripts, run with the
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


def request_context(principal: Principal | None, data: Mapping[str, Any] | None = None) -> RequestContext:
    """The `@request.*` variables of `principal` (None: anonymous) and the submitted `data`."""
    submitted = data if data is not None else {}
    if principal is None:
        return RequestContext(data=submitted)
    return RequestContext(
        auth_id=principal.user_id,
        auth_collection=principal.collection_name if principal.kind == "collection_user" else "",
        auth_role=principal.role if principal.kind in ("admin_user", "api_key") else "",
        auth_verified=principal.verified,
        auth_email=principal.email,
        data=submitted,
    )


def record_document(record: Record) -> dict[str, Any]:
    """A record as it is stored (`_id`, `created`, `updated`, field values): what rules match."""
    return {"_id": record.id, "created": record.created, "updated": record.updated, **record.data}


@dataclass(frozen=True)
class Access:
    """The answer to "may `principal` do `action` in `collection`?": `decision` is True (on every
    record), False (refused outright) or a MongoDB query (on the records it matches)."""

    principal: Principal | None
    collection: Collection
    action: str
    decision: Decision

    @property
    def refused(self) -> bool:
        """Refused outright, whatever the record."""
        return self.decision is False

    @property
    def everything(self) -> bool:
        """Permitted on every record: no record needs to be looked at."""
        return self.decision is True

    @property
    def query(self) -> dict[str, Any] | None:
        """The condition a record must meet, as a MongoDB query; None when there is none (every
        record) or when the action is refused outright."""
        return self.decision if isinstance(self.decision, dict) else None

    def allows(self, record: Record) -> bool:
        """Whether the rule permits the action on `record` (for create: the record as it would be
        stored)."""
        return self.allows_document(record_document(record))

    def allows_document(self, document: Mapping[str, Any]) -> bool:
        """Whether the rule permits the action on the stored `document` (`_id`, `created`, `updated`
        and the field values, as `record_document` gives them): realtime events are decided on it.
        Raises nothing."""
        return matches(self.decision, document)

    def refusal(self) -> CmsError:
        """The error of a refused action: 401 without credentials, else 403."""
        if self.principal is None:
            return Unauthorized("Sign in to do this")
        return Forbidden(f"You may not {_VERBS[self.action]} records of '{self.collection.name}'")

    def hidden(self) -> CmsError:
        """The error for a record that does not exist or that the view rule hides: 404, or 401
        for an anonymous caller under a rule that depends on the record (so a missing record and a
        hidden one look the same)."""
        if self.principal is None and not self.everything:
            return Unauthorized("Sign in to see this record")
        return NotFound("Record not found")

    def require(self) -> None:
        """Raise `refusal()` when the action is refused outright."""
        if self.refused:
            raise self.refusal()


def check(principal: Principal | None, collection: Collection, action: str,
          data: Mapping[str, Any] | None = None) -> Access:
    """May `principal` (None: no credentials) do `action` (list, view, create, update, delete) on
    records of `collection`? `data` is the submitted record values of a create or update (what
    `@request.data` reads). Admins bypass the rules. A stored rule that no longer fits the
    collection refuses (and is logged), so a broken rule never opens a collection. Raises nothing."""
    if acts_as_admin(principal):
        return Access(principal, collection, action, True)
    rule = collection.rules.rule(action)
    if rule is None:
        decision: Decision = False
    elif rule == "":
        decision = True
    else:
        try:
            decision = bind_rule(rule, CollectionFields(collection), request_context(principal, data))
        except InvalidFilter as exc:
            log.error("the %s rule of collection %s no longer fits it (%s); refusing",
                      action, collection.name, exc.detail)
            decision = False
    return Access(principal, collection, action, decision)


@dataclass(frozen=True)
class Condition:
    """A client's `filter` compiled for one collection (and caller): `query` is its MongoDB query,
    `matches(document)` the same decision in memory (realtime topics). From `compile_filter`."""

    query: dict[str, Any]

    def matches(self, document: Mapping[str, Any]) -> bool:
        """Whether the stored `document` satisfies the filter. Raises nothing."""
        return matches(self.query, document)


def compile_filter(collection: Collection, filter_expr: str, principal: Principal | None = None) -> Condition:
    """The filter text `filter_expr` over `collection`, for `principal` (field rules decide which fields
    it may name and on which records). Raises InvalidFilter (syntax, unknown field, bad value)."""
    return Condition(to_mongo_query(parse_filter(filter_expr), CollectionFields(collection)))


def refused(principal: Principal | None, collection: Collection, action: str) -> Access:
    """An `Access` that refuses `action` outright (a subscription that no longer fits its collection)."""
    return Access(principal, collection, action, False)


def check_rules(rules: AccessRules, collection: Collection) -> None:
    """Validate every rule of `rules` against the fields of `collection` (the collection as it will
    be stored). Raises InvalidFilter (400) naming the rule and the position."""
    resolver = CollectionFields(collection)
    for action in ACTIONS:
        check_rule(rules.rule(action), action, resolver)

