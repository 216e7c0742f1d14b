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

This module is the one engine's only door (STYLE rule 4): a rule, a field rule, a client's filter,
search and sort are bound here to one `Cond` tree (`filters.conditions`), which gives both the
MongoDB query of a list (`filters.mongo`) and the in-memory decision for one record, a create or a
realtime event (`filters.predicate`); nothing else imports those back ends. Field rules
(decisions.md, Field rules) are joined to the tree: a field the caller may not see on a record is
left out of it (`FieldView.redact`), a filter or search term on it holds only where it is visible,
and a field whose `view_rule` is null is unknown to everyone but admins.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cms.errors import CmsError, Forbidden, InvalidFilter, NotFound, Unauthorized
from cms.filters.conditions import FALSE, TRUE, Cond, ResolvedField, all_of, build, search
from cms.filters.grammar import parse_filter
from cms.filters.mongo import query_of, render, text_search_query, to_mongo_sort
from cms.filters.predicate import evaluate, sort_documents
from cms.filters.rules import ACTIONS, RequestContext, bind_rule, check_rule
from cms.filters.sort import parse_sort
from cms.models import ROLE_ADMIN, AccessRules, Collection, FieldSpec, Principal, Record
from cms.services.content.fields import SYSTEM_RESOLUTIONS, TEXT_TYPES, CollectionFields

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


EMAIL_FIELD = "email"
"""The key of an auth collection user's address in its record, under `email_view_rule`."""


@dataclass(frozen=True)
class FieldView:
    """Which field values of a collection's records one caller sees (decisions.md, Field rules).

    `guards` holds (field name, condition) for each field the caller does not see on every record:
    the field's `view_rule` bound to the caller (FALSE: on none). `unknown` names the fields whose
    rule is null: to this caller they do not exist (filter, sort and topics answer as for a name
    that does not exist). Empty for admins and for collections without field rules."""

    guards: tuple[tuple[str, Cond], ...] = ()
    unknown: frozenset[str] = frozenset()
    _key: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)

    def guard(self, name: str) -> Cond | None:
        """The condition under which field `name` is visible, None when it is visible everywhere."""
        for field_name, cond in self.guards:
            if field_name == name:
                return cond
        return None

    def hidden(self, document: Mapping[str, Any]) -> frozenset[str]:
        """The names of the fields the caller may not see on the stored `document`."""
        if not self.guards:
            return frozenset()
        return frozenset(name for name, cond in self.guards if not evaluate(cond, document))

    def redact(self, record: Record) -> Record:
        """`record` without the values the caller may not see (the same object when it sees them all)."""
        if not self.guards:
            return record
        hidden = self.hidden(record_document(record))
        if not hidden:
            return record
        return Record(id=record.id, created=record.created, updated=record.updated,
                      data={k: v for k, v in record.data.items() if k not in hidden})

    def key_parts(self) -> tuple[Any, ...]:
        """What distinguishes this view in a read cache key: each guard rendered, `(name, rendered)`
        (rendered once per view: views are remembered across requests, `field_view`)."""
        key = self._key
        if key is None:
            key = tuple((name, render(cond)) for name, cond in self.guards)
            object.__setattr__(self, "_key", key)  # frozen: set once, as a cache
        return key


EVERY_FIELD = FieldView()
"""The view of a caller who sees every field (admins; collections without field rules)."""


class CallerFields:
    """The fields of a collection as one caller may name them (a `FieldResolver`): the system fields,
    and each schema field with its guard (`FieldView.guard`); null-rule fields are unknown."""

    def __init__(self, collection: Collection, view: FieldView) -> None:
        self._fields = {spec.name: spec for spec in collection.fields}
        self._view = view

    def resolve(self, name: str) -> ResolvedField | None:
        """The field called `name` as this caller sees it, or None (no such field, or a null rule)."""
        system = SYSTEM_RESOLUTIONS.get(name)
        if system is not None:
            return system
        spec = self._fields.get(name)
        if spec is None or name in self._view.unknown:
            return None
        return ResolvedField(path=name, type=spec.type, guard=self._view.guard(name))


def _has_field_rules(collection: Collection) -> bool:
    return collection.type == AUTH_TYPE or any(spec.view_rule != "" for spec in collection.fields)


FIELD_VIEWS_KEPT = 1024
"""How many bound field views a process remembers (`field_view`), least recently used first out."""
_field_views: OrderedDict[tuple[Any, ...], FieldView] = OrderedDict()


def field_view(principal: Principal | None, collection: Collection) -> FieldView:
    """The `FieldView` of `principal` (None: anonymous) on `collection`: every field's `view_rule`
    and, on an auth collection, `email_view_rule`, bound to the caller. A rule that no longer fits
    the collection hides its field (and is logged). Raises nothing.

    Binding is a pure function of the fields (names, types, view rules), the collection's type and
    `email_view_rule`, and the caller's `@request.auth.*` values, so the view is remembered under
    exactly those (FIELD_VIEWS_KEPT of them): a warm read binds nothing. A changed rule or schema is
    another key, never a stale view."""
    if acts_as_admin(principal) or not _has_field_rules(collection):
        return EVERY_FIELD
    context = request_context(principal)
    key = (collection.type, collection.rules.email_view_rule if collection.type == AUTH_TYPE else "",
           tuple((spec.name, spec.type, spec.view_rule) for spec in collection.fields),
           context.auth_id, context.auth_collection, context.auth_role, context.auth_verified, context.auth_email)
    view = _field_views.get(key)
    if view is not None:
        try:
            _field_views.move_to_end(key)
        except KeyError:  # dropped meanwhile by another thread: still a correct view
            pass
        return view
    view = _bind_field_view(collection, context)
    _field_views[key] = view
    if len(_field_views) > FIELD_VIEWS_KEPT:
        _field_views.popitem(last=False)
    return view


def _bind_field_view(collection: Collection, context: RequestContext) -> FieldView:
    """`field_view` unremembered: each field rule bound with `context`."""
    guards: list[tuple[str, Cond]] = []
    unknown: set[str] = set()
    rules: list[tuple[str, str | None]] = [(spec.name, spec.view_rule) for spec in collection.fields]
    if collection.type == AUTH_TYPE:
        rules.append((EMAIL_FIELD, collection.rules.email_view_rule))
    for name, rule in rules:
        if rule == "":
            continue
        if rule is None:
            if name != EMAIL_FIELD:
                unknown.add(name)
            guards.append((name, FALSE))
            continue
        cond = _bound(rule, collection, context, f"view_rule of field {name}")
        if cond != TRUE:
            guards.append((name, cond))
    return FieldView(tuple(guards), frozenset(unknown))


def _bound(rule: str, collection: Collection, context: RequestContext, what: str) -> Cond:
    """A rule bound for one request; FALSE (logged) when it no longer fits the collection."""
    try:
        return bind_rule(rule, CollectionFields(collection), context)
    except InvalidFilter as exc:
        log.error("the %s of collection %s no longer fits it (%s); refusing", what, collection.name, exc.detail)
        return FALSE


@dataclass(frozen=True)
class Access:
    """The answer to "may `principal` do `action` in `collection`?": `condition` is TRUE (on every
    record), FALSE (refused outright) or the condition a record must meet; `fields` is what the caller
    sees of each record; `context` the request variables it was bound with (the submitted data of a
    create or update)."""

    principal: Principal | None
    collection: Collection
    action: str
    condition: Cond
    fields: FieldView = EVERY_FIELD
    context: RequestContext = RequestContext()

    @property
    def refused(self) -> bool:
        """Refused outright, whatever the record."""
        return self.condition == FALSE

    @property
    def everything(self) -> bool:
        """Permitted on every record: no record needs to be looked at."""
        return self.condition == TRUE

    @property
    def query(self) -> dict[str, Any] | None:
        """The condition a record must meet, as a MongoDB query; None when there is none (every
        record) or when the action is refused outright."""
        rendered = render(self.condition)
        return rendered if isinstance(rendered, dict) else None

    @property
    def shared(self) -> bool:
        """Whether every caller gets the same answer from this decision: the rule is "" (everyone)
        and no field is hidden from anyone (a public cache may keep the answer)."""
        return self.collection.rules.rule(self.action) == "" and not _has_field_rules(self.collection)

    def key_parts(self) -> list[Any]:
        """What distinguishes this decision in a read cache key: the condition and the field view, rendered."""
        rendered = render(self.condition)
        return [rendered, self.fields.key_parts()] if self.fields.guards else [rendered]

    def visible_query(self, name: str) -> dict[str, Any] | None:
        """As `query`, for records whose field `name` the caller may see as well (a back-relation
        read through that field): None when that is every record."""
        guard = self.fields.guard(name)
        if guard is None:
            return self.query
        return query_of(all_of(self.condition, guard))

    def allows(self, record: Record) -> bool:
        """Whether the rule permits the action on `record` (for create: the record as it would be
        stored)."""
        return self.allows_document(record_document(record))

    def allows_document(self, document: Mapping[str, Any]) -> bool:
        """Whether the rule permits the action on the stored `document` (`_id`, `created`, `updated`
        and the field values, as `record_document` gives them): realtime events are decided on it.
        Raises nothing."""
        return evaluate(self.condition, document)

    def redact(self, record: Record) -> Record:
        """`record` as this caller may see it: without the values its field rules hide."""
        return self.fields.redact(record)

    def resolver(self) -> CallerFields:
        """The collection's fields as this caller may name them in a filter or sort."""
        return CallerFields(self.collection, self.fields)

    def filter(self, filter_expr: str) -> Cond:
        """The client's filter text over the fields this caller may name, each term joined to its
        field's guard. Raises InvalidFilter (syntax, unknown field, bad value)."""
        return build(parse_filter(filter_expr), self.resolver())

    def list_query(self, *, filter_expr: str | None, search_text: str | None, text_index: bool) -> dict[str, Any]:
        """The MongoDB query of a list: this rule, the filter and the search (each optional). With
        `text_index` (the server has one) and no guarded text field, the search is `$text`; else
        each word must be found in a text field where the caller sees it. Raises InvalidFilter, or
        `refusal()` when the rule refuses outright."""
        self.require()
        parts: list[Cond] = [self.condition]
        if filter_expr and filter_expr.strip():
            parts.append(self.filter(filter_expr))
        text_query: dict[str, Any] = {}
        if search_text and search_text.strip():
            resolver = self.resolver()
            texts = [resolved for spec in self.collection.fields if spec.type in TEXT_TYPES
                     if (resolved := resolver.resolve(spec.name)) is not None]
            if text_index and texts and all(t.guard is None for t in texts):
                text_query = text_search_query(search_text)
            else:
                parts.append(search(search_text, texts))
        query = query_of(all_of(*parts))
        if text_query and query.get("_id") != {"$in": []}:
            return {"$and": [query, text_query]} if query else text_query
        return query

    def sort(self, sort_text: str) -> list[tuple[str, int]]:
        """The client's `sort` over the fields this caller may name, as pymongo's sort spec; a key on
        a field hidden from the caller on every record is left out (all its values sort as null).
        Raises InvalidFilter (unknown field)."""
        keys = parse_sort(sort_text)
        resolver = self.resolver()
        spec = to_mongo_sort(keys, resolver)
        kept = [(path, direction) for key, (path, direction) in zip(keys, spec, strict=True)
                if (resolved := resolver.resolve(key.field)) is None or resolved.guard != FALSE]
        return kept or [("_id", spec[0][1])]

    def sort_guards(self, order: list[tuple[str, int]]) -> dict[str, Cond]:
        """Path -> guard of the keys of `order` (a spec from `sort`) on fields the caller sees on some
        records only: such a sort is done in memory (`arrange`), hidden values as null."""
        if not self.fields.guards:
            return {}
        guards = dict(self.fields.guards)
        return {path: guards[path] for path, _ in order if path in guards}

    def arrange(self, records: Sequence[Record], order: list[tuple[str, int]]) -> list[Record]:
        """`records` in `order` as MongoDB would sort them, with the values the caller may not see
        sorting as null (`predicate.sort_documents`)."""
        documents = [record_document(r) for r in records]
        return [records[i] for i in sort_documents(documents, order, self.sort_guards(order))]

    @property
    def writes_ruled_fields(self) -> bool:
        """Whether the submitted data names a field with a `write_rule` this caller does not bypass."""
        if acts_as_admin(self.principal) or not self.context.data:
            return False
        return any(spec.write_rule != "" and spec.name in self.context.data for spec in self.collection.fields)

    def refused_field(self, document: Mapping[str, Any]) -> str | None:
        """The first field the submitted data names whose `write_rule` does not hold for this caller
        on the stored `document` (the record as a create would store it; as stored before the change
        for an update), None when every one holds."""
        if not self.writes_ruled_fields:
            return None
        for spec in self.collection.fields:
            if spec.write_rule == "" or spec.name not in self.context.data:
                continue
            if spec.write_rule is None or not evaluate(
                    _bound(spec.write_rule, self.collection, self.context, f"write_rule of field {spec.name}"),
                    document):
                return spec.name
        return None

    def field_refusal(self, name: str) -> CmsError:
        """The error of a write naming field `name` whose `write_rule` refuses it: 403 naming it."""
        return Forbidden(f"You may not set the field '{name}' of records of '{self.collection.name}'")

    def permit(self, record: Record) -> None:
        """Raise unless this create or update may write `record` (for a create, the record as it would
        be stored; for an update, as stored before the change): `refusal()` when the rule does not
        hold on it, `field_refusal(name)` when a field's `write_rule` does not."""
        document = record_document(record)
        if not self.allows_document(document):
            raise self.refusal()
        name = self.refused_field(document)
        if name is not None:
            raise self.field_refusal(name)

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
    `@request.data` reads, and which field `write_rule`s apply). Admins bypass the rules. A stored
    rule that no longer fits the collection refuses (and is logged), so a broken rule never opens a
    collection. Raises nothing."""
    context = request_context(principal, data)
    if acts_as_admin(principal):
        return Access(principal, collection, action, TRUE, EVERY_FIELD, context)
    rule = collection.rules.rule(action)
    if rule is None:
        condition: Cond = FALSE
    elif rule == "":
        condition = TRUE
    else:
        condition = _bound(rule, collection, context, f"{action} rule")
    return Access(principal, collection, action, condition, field_view(principal, collection), context)


@dataclass(frozen=True)
class Condition:
    """A client's `filter` compiled for one collection and caller: `query` is its MongoDB query,
    `matches(document)` the same decision in memory (realtime topics). From `compile_filter`."""

    cond: Cond

    @property
    def query(self) -> dict[str, Any]:
        """The filter as a MongoDB query."""
        return query_of(self.cond)

    def matches(self, document: Mapping[str, Any]) -> bool:
        """Whether the stored `document` satisfies the filter. Raises nothing."""
        return evaluate(self.cond, document)


def compile_filter(collection: Collection, filter_expr: str, principal: Principal | None = None) -> Condition:
    """The filter text `filter_expr` over `collection`, for `principal` (field rules decide which fields
    it may name and on which records). Raises InvalidFilter (syntax, unknown field, bad value)."""
    return Condition(check(principal, collection, VIEW).filter(filter_expr))


def refused(principal: Principal | None, collection: Collection, action: str) -> Access:
    """An `Access` that refuses `action` outright (a subscription that no longer fits its collection)."""
    return Access(principal, collection, action, FALSE)


def check_rules(rules: AccessRules, collection: Collection) -> None:
    """Validate every rule of `rules`, and every field's `view_rule` and `write_rule`, against the
    fields of `collection` (the collection as it will be stored). Raises InvalidFilter (400) naming
    the rule and the position."""
    resolver = CollectionFields(collection)
    for action in ACTIONS:
        check_rule(rules.rule(action), action, resolver)
    if collection.type == AUTH_TYPE:
        check_rule(rules.email_view_rule, "email_view", resolver)
    for spec in collection.fields:
        check_field_rules(spec, resolver)


def check_field_rules(spec: FieldSpec, resolver: CollectionFields) -> None:
    """Validate a field's `view_rule` (as a view rule) and `write_rule` (as an update rule: it may
    read `@request.data.*`). Raises InvalidFilter whose message names the field and the rule."""
    for name, text, action in (("view_rule", spec.view_rule, "view"), ("write_rule", spec.write_rule, "update")):
        try:
            check_rule(text, action, resolver)
        except InvalidFilter as exc:
            detail = exc.detail.split(": ", 1)[-1]
            raise InvalidFilter(f"field '{spec.name}' {name}: {detail}") from None
