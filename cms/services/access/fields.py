"""What one caller sees of a collection's records (decisions.md, Field rules): the request
variables of a caller, each field's `view_rule` (and an auth collection's `email_view_rule`) bound
to it (`FieldView`), and the fields as it may name them in a filter or sort (`CallerFields`)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cms.errors import InvalidFilter
from cms.filters.conditions import FALSE, TRUE, Cond, ResolvedField
from cms.filters.mongo import render
from cms.filters.predicate import evaluate
from cms.filters.rules import RequestContext, bind_rule
from cms.models import Collection, Principal, Record
from cms.services.access.policies import AUTH_TYPE, acts_as_admin
from cms.services.content.fields import AUTH_RESOLUTIONS, SYSTEM_RESOLUTIONS, CollectionFields

log = logging.getLogger("cms.access")

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
                      data={k: v for k, v in record.data.items() if k not in hidden}, state=record.state)

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
    and each schema field with its guard (`FieldView.guard`); null-rule fields are unknown. Localized
    fields resolve through `chain` (the locale asked and its fallbacks; None: the default locale's)."""

    def __init__(self, collection: Collection, view: FieldView, chain: tuple[str, ...] | None = None) -> None:
        self._fields = {spec.name: spec for spec in collection.fields}
        self._auth = CollectionFields(collection)
        self._view = view
        self._chain = chain if chain is not None else collection.locales.chain(collection.locales.default)

    def resolve(self, name: str) -> ResolvedField | None:
        """The field called `name` as this caller sees it, or None (no such field, or a null rule)."""
        system = SYSTEM_RESOLUTIONS.get(name)
        if system is not None:
            return system
        spec = self._fields.get(name)
        if spec is None:
            auth = self._auth.resolve(name) if name in AUTH_RESOLUTIONS else None
            return None if auth is None else ResolvedField(auth.path, auth.type, self._view.guard(name))
        if name in self._view.unknown:
            return None
        return ResolvedField(path=name, type=spec.type, guard=self._view.guard(name),
                             locales=self._chain if spec.localized else ())


def has_field_rules(collection: Collection) -> bool:
    """Whether some caller may see less than every field of the collection's records."""
    return collection.type == AUTH_TYPE or any(spec.view_rule != "" for spec in collection.fields)


FIELD_VIEWS_KEPT = 1024
"""How many bound field views a process remembers (`field_view`), least recently used first out."""
_field_views: OrderedDict[tuple[Any, ...], FieldView] = OrderedDict()


def field_view(principal: Principal | None, collection: Collection) -> FieldView:
    """The `FieldView` of `principal` (None: anonymous) on `collection`: every field's `view_rule`
    and, on an auth collection, `email_view_rule`, bound to the caller. A rule that no longer fits
    the collection hides its field (and is logged). Raises nothing.

    Binding is a pure function of the fields (names, types, view rules, localized), the default
    locale's chain (what rules read localized fields through), the collection's type and
    `email_view_rule`, and the caller's `@request.auth.*` values, so the view is remembered under
    exactly those (FIELD_VIEWS_KEPT of them): a warm read binds nothing. A changed rule or schema is
    another key, never a stale view."""
    if acts_as_admin(principal) or not has_field_rules(collection):
        return EVERY_FIELD
    context = request_context(principal)
    key = (collection.type, collection.rules.email_view_rule if collection.type == AUTH_TYPE else "",
           tuple((spec.name, spec.type, spec.view_rule, spec.localized) for spec in collection.fields),
           collection.locales.chain(collection.locales.default),
           context.auth_id, context.auth_collection, context.auth_role, context.auth_verified, context.auth_email)
    view = _field_views.get(key)
    if view is not None:
        _field_views.move_to_end(key)
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
        cond = bound_rule(rule, collection, context, f"view_rule of field {name}")
        if cond != TRUE:
            guards.append((name, cond))
    return FieldView(tuple(guards), frozenset(unknown))


def bound_rule(rule: str, collection: Collection, context: RequestContext, what: str) -> Cond:
    """`rule` (an expression) bound for one request over `collection`'s fields; FALSE (logged, `what`
    naming the rule) when it no longer fits the collection. Raises nothing."""
    try:
        return bind_rule(rule, CollectionFields(collection), context)
    except InvalidFilter as exc:
        log.error("the %s of collection %s no longer fits it (%s); refusing", what, collection.name, exc.detail)
        return FALSE
