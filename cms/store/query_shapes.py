"""The shape of a record query (issue 38, item 3): what a slow query is logged, counted and listed
as, so that every run of one filter with other values is one entry, and no value ever leaves the store.

`shape_of(query, sort)` reads the MongoDB query document the service built (cms.filters.mongo's
forms: `{path: value}`, `{path: {$op: value}}`, `$and`, `$or`, `$text`) and keeps its field names and
operators, never a value:

- a conjunction (`$and`, nested ones flattened, and the top level) is one `{...}` of `name: ops` items
  in name order, a field named twice getting the union of its operators (`views: $gte,$lte`); a bare
  value is `$eq`, `$options` is dropped (it goes with `$regex`), `_id` is `id`;
- an `$or` / `$nor` is one item `$or: [...]` of its branches' shapes, sorted and without repeats;
- the sort follows as ` sort -created` (`id` for `_id`), without the `_id` tie-breaker the service adds
  in the direction of the first key (cms.services.content.record_reads), which every list carries.

So `views>=10 && status="a"` and `status="b" && views>=99` are one shape,
`{status: $eq, views: $gte} sort created`. The text is cut at MAX_SHAPE_LENGTH characters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cms.models import QueryShape, SortPath

MAX_SHAPE_LENGTH = 400
"""Most characters of a shape's text (a filter is at most MAX_FILTER_LENGTH long; rules add to it)."""
MAX_SHAPE_FIELDS = 16
"""Most names kept in each of a shape's `equality`, `ranges` and `sort`."""
EQUALITY_OPERATORS = frozenset({"$eq", "$in"})
"""Operators that pin a field to values: an index serves them as the equality part of ESR."""
RANGE_OPERATORS = frozenset({"$gt", "$gte", "$lt", "$lte"})
"""Operators that bound a field: the range part of ESR."""
_GROUPS = ("$or", "$nor")


def shape_of(query: Mapping[str, Any], sort: Sequence[tuple[SortPath, int]] = ()) -> QueryShape:
    """The shape of `query` sorted by `sort` (pymongo's `[(path, 1 | -1)]`; a localized field's fallback
    chain, a tuple of paths, shows as `title.de|title.en`): see the module docstring.
    `equality` and `ranges` come from the top-level conjunction only (a field inside an `$or` cannot
    lead an index for the whole query), each in name order; a field with an equality operator is an
    equality field even if it is bounded too."""
    fields: dict[str, set[str]] = {}
    groups: set[str] = set()
    _conjunction(query, fields, groups)
    keys = [f"{'-' if direction < 0 else ''}{_name(path)}" for path, direction in sort]
    shown = keys[:-1] if len(keys) > 1 and keys[-1] == ("-id" if sort[0][1] < 0 else "id") else keys
    text = _render(fields, groups) + (f" sort {','.join(shown)}" if shown else "")
    if len(text) > MAX_SHAPE_LENGTH:
        text = text[:MAX_SHAPE_LENGTH - 1] + "…"
    equality = sorted(name for name, ops in fields.items() if ops & EQUALITY_OPERATORS)
    ranges = sorted(name for name, ops in fields.items() if ops & RANGE_OPERATORS and name not in equality)
    return QueryShape(text=text, equality=tuple(equality[:MAX_SHAPE_FIELDS]),
                      ranges=tuple(ranges[:MAX_SHAPE_FIELDS]), sort=tuple(keys[:MAX_SHAPE_FIELDS]))


def _name(path: SortPath) -> str:
    if not isinstance(path, str):
        return "|".join(path)
    return "id" if path == "_id" else path


def _conjunction(query: Mapping[str, Any], fields: dict[str, set[str]], groups: set[str]) -> None:
    """Add the items of the conjunction `query` to `fields` (name -> operators) and `groups` (the
    rendered `$or`/`$nor` and other top-level operators)."""
    for key, value in query.items():
        if key == "$and" and isinstance(value, list):
            for part in value:
                if isinstance(part, Mapping):
                    _conjunction(part, fields, groups)
        elif key in _GROUPS and isinstance(value, list):
            branches = sorted({_shape_text(part) for part in value if isinstance(part, Mapping)})
            groups.add(f"{key}: [{', '.join(branches)}]")
        elif key.startswith("$"):
            groups.add(key)  # `$text`, `$expr`, ...: the operator alone
        else:
            fields.setdefault(_name(key), set()).update(_operators(value))


def _operators(value: Any) -> set[str]:
    """The operators of one field's condition: those of an operator document (`$options` aside), else
    `$eq` (a bare value, a compiled pattern or a document compared as a whole)."""
    if isinstance(value, Mapping) and value and all(isinstance(k, str) and k.startswith("$") for k in value):
        return {k for k in value if k != "$options"}
    return {"$eq"}


def _shape_text(query: Mapping[str, Any]) -> str:
    fields: dict[str, set[str]] = {}
    groups: set[str] = set()
    _conjunction(query, fields, groups)
    return _render(fields, groups)


def _render(fields: Mapping[str, set[str]], groups: set[str]) -> str:
    items = [f"{name}: {','.join(sorted(fields[name]))}" for name in sorted(fields)] + sorted(groups)
    return "{" + ", ".join(items) + "}"
