"""A view collection's definition (decisions.md, Aggregation and view collections): reading the
`view` attribute of a collection create or update, checking it against its source, and the fields
of the view's records that follow from it.

A view's source is a base or an auth collection (a view over a view is 422: its records are computed,
and a chain of them would be recomputed at every step; group the source directly). Its records have
the key fields (named as in `group_by`, `placed:month` for a bucket) and the aggregate names as fields,
typed for filters and sorts: numbers, booleans and dates as such (a bucket and `created` are dates),
every other key as text. Those fields are stored with the view (its `schema`), so its rules and a
client's filter name them like any collection's; a change of the source that would change them, or
break the definition, is refused while the view exists (`collections.py`, 422 naming the view).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from cms.errors import InvalidFilter, ValidationFailed, flatten_errors
from cms.filters.grammar import MAX_FILTER_LENGTH
from cms.models import VIEW_TYPE, AccessRules, Collection, FieldSpec, ViewDefinition
from cms.services.access.aggregation import Grouping, source_condition, source_grouping
from cms.services.access.records import Condition
from cms.services.content.value_fields import check_unicode

VIEW_RULES = AccessRules(list_rule=None, view_rule=None, create_rule=None, update_rule=None, delete_rule=None)
"""The rules of a view created without rules: admins only (a view may sum what the source's rules hide
from others; open it with its own `list_rule` and `view_rule`). Writes are refused whatever the rules."""
WRITE_RULES = ("create_rule", "update_rule", "delete_rule")
SHOWN_TYPES = {"number": "number", "bool": "bool", "date": "date", "datetime": "date"}
"""The type of a view field by the type of its values (every other one is `text`)."""


class _Definition(Schema):
    source = fields.String(required=True, validate=[validate.Length(min=1, max=63), check_unicode])
    filter = fields.String(load_default="", allow_none=True, validate=[validate.Length(max=MAX_FILTER_LENGTH),
                                                                       check_unicode])
    group_by = fields.String(load_default="", allow_none=True, validate=validate.Length(max=1000))
    aggregates = fields.String(load_default="", allow_none=True, validate=validate.Length(max=1000))


def parse_view(raw: Any) -> ViewDefinition:
    """The `view` attribute of a request: `{source, filter?, group_by?, aggregates?}` (strings; null or
    absent: none). Raises ValidationFailed (422, `errors` under `view.<key>`)."""
    if not isinstance(raw, dict):
        raise ValidationFailed("Invalid view", errors={"view": ["Must be an object {source, filter, group_by, "
                                                                "aggregates}."]})
    try:
        loaded = _Definition(unknown=RAISE).load(raw)
    except ValidationError as exc:
        raise ValidationFailed("Invalid view", errors=flatten_errors(exc.messages, prefix="view")) from None
    return ViewDefinition(source=loaded["source"], filter=(loaded["filter"] or "").strip(),
                          group_by=(loaded["group_by"] or "").strip(), aggregates=(loaded["aggregates"] or "").strip())


@dataclass(frozen=True)
class ViewShape:
    """A definition resolved over its source: the `grouping`, the `condition` its records meet, and
    the `fields` of the view's records (key fields, then aggregates)."""

    grouping: Grouping
    condition: Condition
    fields: tuple[FieldSpec, ...]

    @property
    def default_order(self) -> list[tuple[str, int]]:
        """The order of a view's records without `sort`: the key fields ascending, then `id`."""
        return [*((k.name, 1) for k in self.grouping.keys), ("_id", 1)]


def view_shape(definition: ViewDefinition, source: Collection) -> ViewShape:
    """`definition` resolved over `source` (as the system sees it: every field). Raises InvalidFilter
    (400: the filter, a key or an aggregate does not fit the source), ValidationFailed (422: too many
    keys or aggregates, a source that is a view, names that collide: a key named `id`, or a key and an
    aggregate of one name)."""
    if source.type == VIEW_TYPE:
        raise ValidationFailed(f"A view's source cannot be a view ('{source.name}' is one); group its source",
                               errors={"view.source": ["Must be a base or auth collection, not a view."]})
    condition = source_condition(source, definition.filter)
    grouping = source_grouping(source, definition.group_by, definition.aggregates)
    specs = [FieldSpec(name=k.name, type=SHOWN_TYPES.get(k.answer_type, "text")) for k in grouping.keys]
    specs += [FieldSpec(name=m.name, type=SHOWN_TYPES.get(m.answer_type, "text")) for m in grouping.measures]
    names = [spec.name for spec in specs]
    clashes = sorted({name for name in names if names.count(name) > 1 or name == "id"})
    if clashes:
        raise ValidationFailed(f"A view's record fields must have distinct names other than 'id': {', '.join(clashes)}",
                               errors={"view.group_by": [f"Names a field twice or 'id': {', '.join(clashes)}."]})
    return ViewShape(grouping, condition, tuple(specs))


def check_view_rules(rules: dict[str, str | None] | None) -> None:
    """A view's records are read-only: its create, update and delete rules can only be null. Raises
    ValidationFailed naming the rules given otherwise."""
    wrong = {name: ["A view is read-only: this rule can only be null."] for name in WRITE_RULES
             if (rules or {}).get(name) is not None}
    if wrong:
        raise ValidationFailed("A view is read-only: its create, update and delete rules can only be null",
                               errors=wrong)


def uses(collection: Collection, source: Collection) -> bool:
    """Whether `collection` is a view over `source`."""
    return collection.view is not None and collection.view.source == source.name


def view_collection_parts(definition: ViewDefinition, source: Collection | None, *, schema: Any, indexes: Any,
                          rules: dict[str, str | None] | None) -> tuple[tuple[FieldSpec, ...], dict[str, str | None]]:
    """What a view collection is stored with: the fields of its records and its rules (VIEW_RULES with
    the `list_rule` / `view_rule` given). `source`: the collection the definition names (None: there is
    none). Raises ValidationFailed (422: no such source, a schema or indexes given, a write rule that is
    not null, and as `view_shape`) or InvalidFilter (as `view_shape`)."""
    if source is None:
        raise ValidationFailed(f"No collection named '{definition.source[:100]}'",
                               errors={"view.source": ["Must be the name of an existing collection."]})
    given = {"schema": schema not in (None, [], {}, {"fields": []}), "indexes": indexes not in (None, [])}
    wrong = {name: ["A view has no schema of its own: its fields follow from `view`."] if name == "schema"
             else ["A view's records are computed: it has no indexes."] for name, on in given.items() if on}
    if wrong:
        raise ValidationFailed("A view takes `view` instead of a schema and indexes", errors=wrong)
    check_view_rules(rules)
    shape = view_shape(definition, source)
    return shape.fields, {**{name: None for name in WRITE_RULES}, **(rules or {})}


def view_definition(type_: str, raw: Any, *, new: bool = False, versions: Any = None,
                    **switches: bool | None) -> ViewDefinition | None:
    """The `view` of a collection create (`new`) or update for a collection of `type_`: parsed
    (`parse_view`) for a view (None for an update that keeps it). Raises ValidationFailed (422): `view`
    for another type, none for a new view, `versions` or an auth switch (`otp_enabled`, ...) set on a
    view."""
    if type_ != VIEW_TYPE:
        raise ValidationFailed("Only a collection of type view takes `view`", errors={"view": ["Not a view."]})
    wrong = {name: ["A view has no logins."] for name, on in switches.items() if on}
    if versions not in (0, None):
        wrong["versions"] = ["A view's records are computed: it keeps no versions."]
    if raw is None and new:
        wrong["view"] = ["Missing: {source, filter, group_by, aggregates}."]
    if wrong:
        raise ValidationFailed(f"A view does not take {', '.join(sorted(wrong))}" if "view" not in wrong
                               else "A view needs `view`", errors=wrong)
    return None if raw is None else parse_view(raw)


def view_collection(current: Collection, definition: ViewDefinition, source: Collection | None, *, schema: Any,
                    indexes: Any, rules: dict[str, str | None] | None) -> Collection:
    """`current` (a view, or a new one's skeleton) with `definition` over `source`: its fields follow,
    and its rules are its own with those given (`view_collection_parts`). Raises as that does."""
    fields, view_rules = view_collection_parts(definition, source, schema=schema, indexes=indexes, rules=rules)
    return replace(current, type=VIEW_TYPE, fields=fields, view=definition, rules=replace(current.rules, **view_rules))


def check_sources_kept(current: Collection, changed: Collection | None, collections: Sequence[Collection]) -> None:
    """A change of `current` (to `changed`; None: a delete) keeps every view over it as it is: the
    source keeps its name and the fields the views read. Raises ValidationFailed (422) naming each view
    it would break or change."""
    views = [c for c in collections if uses(c, current) and c.id != current.id]
    broken: list[str] = []
    for view in views:
        assert view.view is not None
        if changed is None or changed.name != current.name:
            broken.append(view.name)
            continue
        try:
            shape = view_shape(view.view, changed)
        except (InvalidFilter, ValidationFailed):
            broken.append(view.name)
            continue
        if [(f.name, f.type) for f in shape.fields] != [(f.name, f.type) for f in view.fields]:
            broken.append(view.name)
    if broken:
        reason = ("it cannot be deleted" if changed is None else "it cannot be renamed" if changed.name != current.name
                  else "this change alters what they read")
        names = ", ".join(f"'{name}'" for name in broken)
        raise ValidationFailed(f"Collection '{current.name}' is the source of the view(s) {names}: {reason}; change "
                               "or delete the view(s) first", errors={"view": [f"Used by the view(s) {names}."]})
