"""Record access (decisions.md, Access rules and Field rules): `check(principal, collection,
action)` -> `Access`, the one decision every record path asks for, and a client's filter compiled
for a caller (`compile_filter`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cms.errors import CmsError, Forbidden, InvalidFilter, MethodNotAllowed, NotFound, Unauthorized
from cms.filters.conditions import FALSE, TRUE, Cond, all_of, build, search
from cms.filters.grammar import parse_filter
from cms.filters.mongo import query_of, render, text_search_query, to_mongo_sort
from cms.filters.predicate import evaluate, sort_documents
from cms.filters.rules import ACTIONS, RequestContext, check_rule, fields_compared_with_auth
from cms.filters.sort import parse_sort
from cms.models import VIEW_TYPE, AccessRules, Collection, FieldSpec, Principal, Record, SortPath, SortSpec
from cms.services.access.fields import (
    EVERY_FIELD,
    CallerFields,
    FieldView,
    bound_rule,
    field_view,
    has_field_rules,
    record_document,
    request_context,
)
from cms.services.access.policies import AUTH_TYPE, CREATE, DELETE, LIST, UPDATE, VIEW, acts_as_admin
from cms.services.content.fields import TEXT_TYPES, CollectionFields, held_values
from cms.services.content.locales import Localization, localization

_VERBS = {LIST: "list", VIEW: "view", CREATE: "create", UPDATE: "change", DELETE: "delete"}


@dataclass(frozen=True)
class Access:
    """The answer to "may `principal` do `action` in `collection`?": `condition` is TRUE (on every
    record), FALSE (refused outright) or the condition a record must meet; `fields` is what the caller
    sees of each record; `context` the request variables it was bound with (the submitted data of a
    create or update); `locale` the localization asked (decisions.md, Localized fields; None: the
    default locale), which answers (`redact`), filters, sorts and searches all read localized fields
    through."""

    principal: Principal | None
    collection: Collection
    action: str
    condition: Cond
    fields: FieldView = EVERY_FIELD
    context: RequestContext = RequestContext()
    locale: Localization | None = None

    @property
    def localization(self) -> Localization:
        """The localization this decision reads localized fields with (`locale`, else the default)."""
        return self.locale if self.locale is not None else localization(self.collection, None)

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
        return self.collection.rules.rule(self.action) == "" and not has_field_rules(self.collection)

    def key_parts(self) -> list[Any]:
        """What distinguishes this decision in a read cache key: the condition, the field view and the
        localization (for a collection with localized fields), rendered."""
        parts: list[Any] = [render(self.condition)]
        if self.fields.guards:
            parts.append(self.fields.key_parts())
        localized = self.localization.key_parts()
        return [*parts, localized] if localized else parts

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
        """`record` as this caller may see it: without the values its field rules hide (decided on the
        record as stored), its localized fields as the localization answers them."""
        return self.localization.localize(self.fields.redact(record))

    def hides_file(self, record: Record | None, file_id: str) -> bool:
        """Whether the file `file_id` is held only by file fields of `record` that this caller may not
        see (a download then answers as for a missing file). False without a record."""
        if record is None:
            return False
        holders = [spec.name for spec in self.collection.fields
                   if spec.type == "file" and file_id in held_values(spec, record.data.get(spec.name))]
        shown = self.redact(record)
        return bool(holders) and not any(name in shown.data for name in holders)

    def resolver(self) -> CallerFields:
        """The collection's fields as this caller may name them in a filter or sort, localized fields
        read through the localization's chain."""
        return CallerFields(self.collection, self.fields, self.localization.chain)

    def filter(self, filter_expr: str) -> Cond:
        """The client's filter text over the fields this caller may name, each term joined to its
        field's guard. Raises InvalidFilter (syntax, unknown field, bad value)."""
        return build(parse_filter(filter_expr), self.resolver())

    def list_query(self, *, filter_expr: str | None, search_text: str | None, text_index: bool) -> dict[str, Any]:
        """The MongoDB query of a list: this rule, the filter and the search (each optional). With
        `text_index` (the server has one) and no guarded or localized text field, the search is `$text`;
        else each word must be found in a text field where the caller sees it (a localized one: in its
        resolved value). Raises InvalidFilter, or `refusal()` when the rule refuses outright."""
        self.require()
        parts: list[Cond] = [self.condition]
        if filter_expr and filter_expr.strip():
            parts.append(self.filter(filter_expr))
        text_query: dict[str, Any] = {}
        if search_text and search_text.strip():
            resolver = self.resolver()
            texts = [resolved for spec in self.collection.fields if spec.type in TEXT_TYPES
                     if (resolved := resolver.resolve(spec.name)) is not None]
            if text_index and texts and all(t.guard is None and not t.locales for t in texts):
                text_query = text_search_query(search_text)
            else:
                parts.append(search(search_text, texts))
        query = query_of(all_of(*parts))
        if text_query and query.get("_id") != {"$in": []}:
            return {"$and": [query, text_query]} if query else text_query
        return query

    def sort(self, sort_text: str) -> SortSpec:
        """The client's `sort` over the fields this caller may name, as a records sort spec (a localized
        field by its resolved value: `ResolvedField.sort_path`); a key on a field hidden from the caller
        on every record is left out (all its values sort as null). Raises InvalidFilter (unknown field)."""
        keys = parse_sort(sort_text)
        resolver = self.resolver()
        spec = to_mongo_sort(keys, resolver)
        kept = [(path, direction) for key, (path, direction) in zip(keys, spec, strict=True)
                if (resolved := resolver.resolve(key.field)) is None or resolved.guard != FALSE]
        return kept or [("_id", spec[0][1])]

    def sort_guards(self, order: SortSpec) -> dict[SortPath, Cond]:
        """Path -> guard of the keys of `order` (a spec from `sort`) on fields the caller sees on some
        records only: such a sort is done in memory (`arrange`), hidden values as null."""
        if not self.fields.guards:
            return {}
        guards = dict(self.fields.guards)
        return {path: guards[_field_of(path)] for path, _ in order if _field_of(path) in guards}

    def arrange(self, records: Sequence[Record], order: SortSpec) -> list[Record]:
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
                    bound_rule(spec.write_rule, self.collection, self.context, f"write_rule of field {spec.name}"),
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
        """The error of a refused action: 401 without credentials, else 403; 405 for a write to a view
        collection's records (`read_only`), whoever asks."""
        if self.collection.type == VIEW_TYPE and self.action in WRITES:
            return read_only(self.collection)
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


def _field_of(path: SortPath) -> str:
    """The field a sort path reads (`title` of `title.de` or of a fallback chain's paths)."""
    return (path if isinstance(path, str) else path[0]).split(".", 1)[0]


def check(principal: Principal | None, collection: Collection, action: str,
          data: Mapping[str, Any] | None = None, *, locale: str | None = None) -> Access:
    """May `principal` (None: no credentials) do `action` (list, view, create, update, delete) on
    records of `collection`? `data` is the submitted record values of a create or update (what
    `@request.data` reads, and which field `write_rule`s apply); `locale` the `?locale=` asked (None:
    the default locale; `*`: objects), which answers, filters, sorts and searches read localized fields
    with (rules always read the default locale's). Admins bypass the rules; a write to a view
    collection's records is refused outright whoever asks (405, `refusal`). A stored rule that no
    longer fits the collection refuses (and is logged), so a broken rule never opens a collection.
    Raises BadRequest for a locale that is not configured, nothing else."""
    context = request_context(principal, data)
    asked = localization(collection, locale)
    if collection.type == VIEW_TYPE and action in WRITES:  # read-only whoever asks: 405 (`refusal`)
        return Access(principal, collection, action, FALSE, EVERY_FIELD, context, asked)
    if acts_as_admin(principal):
        return Access(principal, collection, action, TRUE, EVERY_FIELD, context, asked)
    rule = collection.rules.rule(action)
    if rule is None:
        condition: Cond = FALSE
    elif rule == "":
        condition = TRUE
    else:
        condition = bound_rule(rule, collection, context, f"{action} rule")
    return Access(principal, collection, action, condition, field_view(principal, collection), context, asked)


def reads_request_data(collection: Collection, action: str) -> bool:
    """Whether `collection`'s rule for `action` reads `@request.data` (the submitted values): checked
    before the values are known (a multipart write whose files come first), it would refuse what the
    values may allow, so such a check waits for them (record_uploads.RecordDraft)."""
    rule = collection.rules.rule(action)
    return bool(rule) and "@request.data" in (rule or "")


def draft_access(principal: Principal | None, collection: Collection, *, locale: str | None = None) -> Access:
    """Who may see working copies (`?draft=true`, the editors' reads; decisions.md, Drafts, versions and
    scheduled publishing): the update rule with the view rule, on the working copy, the fields as the
    view rule shows them, localized fields read as `locale` asks (as `check`). An `Access` of action
    update: its refusal is the update rule's (401 without credentials, else 403). Raises BadRequest for
    a locale that is not configured."""
    view, update = check(principal, collection, VIEW, locale=locale), check(principal, collection, UPDATE)
    return Access(principal, collection, UPDATE, all_of(view.condition, update.condition), view.fields, view.context,
                  view.locale)
WRITES = frozenset({CREATE, UPDATE, DELETE})


def read_only(collection: Collection) -> MethodNotAllowed:
    """The refusal of a write to the records of a view collection (decisions.md, Aggregation and view
    collections): 405 `method_not_allowed` with `Allow: GET, HEAD`, which the API narrows to the methods
    of the request's path (`api.middlewares`)."""
    error = MethodNotAllowed(f"'{collection.name}' is a view: its records are read-only")
    error.headers["Allow"] = "GET, HEAD"
    return error


def require_writable(collection: Collection) -> None:
    """Raise `read_only(collection)` when `collection` is a view: for the write paths that check the
    collection before any rule (creates, imports, bulk changes)."""
    if collection.type == VIEW_TYPE:
        raise read_only(collection)


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


def compile_filter(collection: Collection, filter_expr: str, principal: Principal | None = None, *,
                   locale: str | None = None) -> Condition:
    """The filter text `filter_expr` over `collection`, for `principal` (field rules decide which fields
    it may name and on which records), localized fields read as `locale` answers them (None: the
    default locale). Raises InvalidFilter (syntax, unknown field, bad value), BadRequest (locale)."""
    return Condition(check(principal, collection, VIEW, locale=locale).filter(filter_expr))


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


def fields_rules_filter_by(collection: Collection) -> frozenset[str]:
    """The schema fields that a rule of `collection` (its five rules, its fields' rules and, for an
    auth collection, `email_view_rule`) compares with `@request.auth.*`: every signed-in caller's
    list filters by them, so each deserves an index (issue 38)."""
    texts = [collection.rules.rule(action) for action in ACTIONS]
    texts += [text for spec in collection.fields for text in (spec.view_rule, spec.write_rule)]
    if collection.type == AUTH_TYPE:
        texts.append(collection.rules.email_view_rule)
    names = {spec.name for spec in collection.fields}
    return frozenset(name for text in texts for name in fields_compared_with_auth(text) if name in names)
