"""Aggregation's terms (decisions.md, Aggregation and view collections): the `group_by` and
`aggregates` parameters as text -> specs, resolved over a collection's fields (a `FieldResolver`)
-> a `Grouping`, its `sort` -> an order of output names, and the rows of a `$group` answer read back.
The pipeline itself is rendered by `mongo.group_pipeline`; the same rows computed in memory, one
document at a time, are `groups.Groups` (view collections keep them current that way). Pure.

- `group_by`: comma-separated field names; a date field may add `:year`, `:month`, `:day` or `:hour`
  (the key is the bucket's start, UTC). At most MAX_GROUP_FIELDS (422). A key's name is as written
  (`placed:month`). A field holding a list (select, relation or file with `max_select` above 1) or a
  JSON document cannot be grouped (400): its values are not one value each.
- `aggregates`: comma-separated `count()`, `count_distinct(f)`, `sum(f)`, `avg(f)`, `min(f)`,
  `max(f)`, named `count`, `count_distinct_f`, `sum_f`, ...; default `count()`. At most
  MAX_AGGREGATES (422) and MAX_COUNT_DISTINCT `count_distinct` (422: each needs a grouping pass of
  its own). `sum` and `avg` take number fields only (400).
- Semantics (MongoDB's): a missing value groups as null; `sum` adds the numbers (0 when none),
  `avg` is their mean (null when none), `min` / `max` ignore nulls and order values as MongoDB sorts
  them, `count_distinct` counts distinct non-null values (1 and 1.0 are one value).
- A field the caller sees on some records only (a field `view_rule`) cannot be grouped, aggregated
  or sorted by here (400, whatever the values): a group's key or sum would tell values apart that
  the caller may not see. A field whose rule is null is unknown to the caller, as in a filter. A
  localized field (decisions.md, Localized fields: an object of locale to value) cannot be grouped
  or aggregated either (400); a filter on it works as a list's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cms.errors import InvalidFilter, ValidationFailed
from cms.filters.conditions import FieldResolver, ResolvedField
from cms.filters.sort import parse_sort

MAX_GROUP_FIELDS = 10
"""Most keys one `group_by` may name (422 past it)."""
MAX_AGGREGATES = 10
"""Most aggregates one `aggregates` may name (422 past it)."""
MAX_COUNT_DISTINCT = 1
"""Most `count_distinct` aggregates in one request (422 past it)."""
MAX_PARAMETER_LENGTH = 1000
"""Longest `group_by` or `aggregates` text, in characters (400 past it)."""
DATE_UNITS = ("year", "month", "day", "hour")
"""The date buckets a `group_by` key may take."""
FUNCTIONS = ("count", "count_distinct", "sum", "avg", "min", "max")
NUMERIC_FUNCTIONS = frozenset({"sum", "avg"})
DATE_TYPES = frozenset({"date", "datetime"})
UNGROUPABLE_TYPES = frozenset({"json"})

_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?")
_AGGREGATE = re.compile(r"([a-z_]+)\(\s*([A-Za-z_][A-Za-z0-9_]*)?\s*\)")


@dataclass(frozen=True)
class GroupKey:
    """One `group_by` item: `field`, and the date bucket `unit` (None: the value itself)."""

    field: str
    unit: str | None = None

    @property
    def name(self) -> str:
        """The key's name in answers: the field, or `field:unit`."""
        return self.field if self.unit is None else f"{self.field}:{self.unit}"


@dataclass(frozen=True)
class AggregateSpec:
    """One `aggregates` item: `function` (one of FUNCTIONS) over `field` (None for `count()`)."""

    function: str
    field: str | None = None

    @property
    def name(self) -> str:
        """The aggregate's name in answers: `count`, or `<function>_<field>`."""
        return self.function if self.field is None else f"{self.function}_{self.field}"

    @property
    def text(self) -> str:
        """The aggregate as written, e.g. `sum(views)`."""
        return f"{self.function}({self.field or ''})"


def _items(text: str, parameter: str) -> list[str]:
    if len(text) > MAX_PARAMETER_LENGTH:
        raise InvalidFilter(f"{parameter} is longer than {MAX_PARAMETER_LENGTH} characters")
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise InvalidFilter(f"{parameter}: empty item")
    return items


def parse_group_by(text: str | None) -> tuple[GroupKey, ...]:
    """`group_by` as keys, in order (None or blank: none). Raises InvalidFilter (a bad or repeated
    item, an unknown date unit) or ValidationFailed (more than MAX_GROUP_FIELDS)."""
    if text is None or not text.strip():
        return ()
    keys: list[GroupKey] = []
    for item in _items(text, "group_by"):
        match = _KEY.fullmatch(item)
        if match is None:
            raise InvalidFilter(f"group_by: {item!r} is not a field name (or field:unit)")
        field, unit = match.group(1), match.group(2)
        if unit is not None and unit not in DATE_UNITS:
            raise InvalidFilter(f"group_by: unknown date unit {unit!r} in {item!r}; use {', '.join(DATE_UNITS)}")
        key = GroupKey(field, unit)
        if key in keys:
            raise InvalidFilter(f"group_by: {item!r} is given twice")
        keys.append(key)
    if len(keys) > MAX_GROUP_FIELDS:
        raise ValidationFailed(f"group_by names {len(keys)} keys; at most {MAX_GROUP_FIELDS}",
                               errors={"group_by": [f"At most {MAX_GROUP_FIELDS} keys."]})
    return tuple(keys)


def parse_aggregates(text: str | None) -> tuple[AggregateSpec, ...]:
    """`aggregates` as specs, in order (None or blank: `count()`). Raises InvalidFilter (a bad or
    repeated item, an unknown function, `count` with a field or another without one) or
    ValidationFailed (more than MAX_AGGREGATES, or more than MAX_COUNT_DISTINCT `count_distinct`)."""
    if text is None or not text.strip():
        return (AggregateSpec("count"),)
    specs: list[AggregateSpec] = []
    for item in _items(text, "aggregates"):
        match = _AGGREGATE.fullmatch(item)
        if match is None:
            raise InvalidFilter(f"aggregates: {item!r} is not of the form function(field)")
        function, field = match.group(1), match.group(2)
        if function not in FUNCTIONS:
            raise InvalidFilter(f"aggregates: unknown function {function!r}; use {', '.join(FUNCTIONS)}")
        if (function == "count") != (field is None):
            raise InvalidFilter(f"aggregates: {item!r}: count() takes no field, {', '.join(FUNCTIONS[1:])} one")
        spec = AggregateSpec(function, field)
        if spec in specs:
            raise InvalidFilter(f"aggregates: {item!r} is given twice")
        specs.append(spec)
    if len(specs) > MAX_AGGREGATES:
        raise ValidationFailed(f"aggregates names {len(specs)} aggregates; at most {MAX_AGGREGATES}",
                               errors={"aggregates": [f"At most {MAX_AGGREGATES} aggregates."]})
    if sum(spec.function == "count_distinct" for spec in specs) > MAX_COUNT_DISTINCT:
        raise ValidationFailed(f"aggregates: at most {MAX_COUNT_DISTINCT} count_distinct per request",
                               errors={"aggregates": [f"At most {MAX_COUNT_DISTINCT} count_distinct."]})
    return tuple(specs)


@dataclass(frozen=True)
class KeyField:
    """A resolved group key: its `name` in answers, the stored `path` and field `type`, and `unit`."""

    name: str
    path: str
    type: str
    unit: str | None = None

    @property
    def answer_type(self) -> str:
        """The field type of the key's values in answers (a bucket is a date)."""
        return "date" if self.unit is not None else self.type


@dataclass(frozen=True)
class Measure:
    """A resolved aggregate: its `name`, `function`, and the stored `path` and `type` of its field
    (None for `count`)."""

    name: str
    function: str
    path: str | None = None
    type: str | None = None

    @property
    def answer_type(self) -> str:
        """The field type of the aggregate's values in answers."""
        if self.function in ("min", "max") and self.type is not None:
            return "date" if self.type in DATE_TYPES else self.type
        return "number"


@dataclass(frozen=True)
class Grouping:
    """What one aggregation computes: group `keys` and `measures`, both resolved and in order."""

    keys: tuple[KeyField, ...]
    measures: tuple[Measure, ...]

    @property
    def distinct(self) -> Measure | None:
        """The `count_distinct` measure, if any (there is at most one)."""
        return next((m for m in self.measures if m.function == "count_distinct"), None)

    def order(self, sort_text: str | None) -> list[tuple[str, int]]:
        """The order of the groups: `sort` (key names or aggregate names, `-` for descending), then
        every key ascending (so the order is total); default: the keys ascending. Raises
        InvalidFilter for a name that is neither."""
        names = {k.name for k in self.keys} | {m.name for m in self.measures}
        order: list[tuple[str, int]] = []
        if sort_text is not None and sort_text.strip():
            for key in parse_sort(sort_text):
                if key.field not in names:
                    raise InvalidFilter(f"unknown sort field '{key.field}': sort by a group key or an aggregate name")
                order.append((key.field, -1 if key.descending else 1))
        order += [(k.name, 1) for k in self.keys if all(name != k.name for name, _ in order)]
        return order

    def empty_row(self) -> dict[str, Any]:
        """The one group of an aggregation without keys over no records: `count` 0, `sum` 0, the others
        null."""
        return {"key": {}, **{m.name: _EMPTY.get(m.function) for m in self.measures}}

    def row(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """A group as `mongo.group_pipeline` answers it (`_id.k<i>`, `m<j>`) -> `{key: {name: value},
        <aggregate name>: value}`."""
        ids = document.get("_id") or {}
        return {"key": {k.name: ids.get(f"k{i}") for i, k in enumerate(self.keys)},
                **{m.name: document.get(f"m{j}") for j, m in enumerate(self.measures)}}


_EMPTY = {"count": 0, "count_distinct": 0, "sum": 0}


def resolve_grouping(keys: tuple[GroupKey, ...], specs: tuple[AggregateSpec, ...], resolver: FieldResolver,
                     list_valued: Callable[[str], bool]) -> Grouping:
    """The keys and aggregates over `resolver`'s fields (the caller's: see the module docstring);
    `list_valued(name)` says whether a field holds a list. Raises InvalidFilter (400): an unknown
    field, a field the caller sees on some records only, a localized field, a field holding a list or
    a JSON document,
    a date unit on a field that is not a date, `sum` or `avg` of a field that is not a number."""
    resolved_keys = []
    for key in keys:
        field = _field(resolver, key.field, f"group_by '{key.name}'")
        if field.type in UNGROUPABLE_TYPES or list_valued(key.field):
            kind = "a JSON document" if field.type in UNGROUPABLE_TYPES else "a list"
            raise InvalidFilter(f"group_by '{key.name}': field '{key.field}' holds {kind}; it cannot be grouped")
        if key.unit is not None and field.type not in DATE_TYPES:
            raise InvalidFilter(f"group_by '{key.name}': a date unit needs a date field, and '{key.field}' "
                                f"is {field.type}")
        resolved_keys.append(KeyField(key.name, field.path, field.type, key.unit))
    measures = []
    for spec in specs:
        if spec.field is None:
            measures.append(Measure(spec.name, spec.function))
            continue
        field = _field(resolver, spec.field, f"aggregates '{spec.text}'")
        if spec.function in NUMERIC_FUNCTIONS and field.type != "number":
            raise InvalidFilter(f"aggregates '{spec.text}': {spec.function} needs a number field, and "
                                f"'{spec.field}' is {field.type}")
        if field.type in UNGROUPABLE_TYPES or list_valued(spec.field):
            raise InvalidFilter(f"aggregates '{spec.text}': field '{spec.field}' holds a list or a JSON document")
        measures.append(Measure(spec.name, spec.function, field.path, field.type))
    return Grouping(tuple(resolved_keys), tuple(measures))


def _field(resolver: FieldResolver, name: str, where: str) -> ResolvedField:
    field = resolver.resolve(name)
    if field is None:
        raise InvalidFilter(f"{where}: unknown field '{name}'")
    if field.guard is not None:
        raise InvalidFilter(f"{where}: field '{name}' has a view rule; it cannot be grouped, aggregated or sorted "
                            "by here")
    if field.locales:
        raise InvalidFilter(f"{where}: field '{name}' is localized (a value per locale); it cannot be grouped or "
                            "aggregated")
    return field


def bucket_start(moment: datetime, unit: str) -> datetime:
    """The start (UTC) of the `unit` bucket (`year`, `month`, `day`, `hour`) holding `moment`, as
    MongoDB's `$dateTrunc` gives it. Raises KeyError for another unit."""
    moment = moment.astimezone(UTC)
    if unit == "year":
        return datetime(moment.year, 1, 1, tzinfo=UTC)
    if unit == "month":
        return datetime(moment.year, moment.month, 1, tzinfo=UTC)
    if unit == "day":
        return datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    if unit == "hour":
        return datetime(moment.year, moment.month, moment.day, moment.hour, tzinfo=UTC)
    raise KeyError(unit)
