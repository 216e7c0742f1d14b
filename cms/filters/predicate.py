"""The in-memory back end of the filter engine: a `Cond` decided for one stored document, with the
value semantics of `values` (what MongoDB decides for the query `mongo.render` gives the same
`Cond`). Used for one record, a create, and every realtime event (no query per subscriber); and
`sort_documents`, MongoDB's sort order in memory, for a sort on a field the caller sees on some
records only (its hidden values sort as null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cms.filters import values
from cms.filters.conditions import AllOf, AnyOf, Cond, Const, Term


def evaluate(cond: Cond, document: Mapping[str, Any]) -> bool:
    """Whether the stored `document` (`_id`, `created`, `updated` and the field values) satisfies
    `cond`; a field the document lacks reads as missing (null for `=` / `!=`). Raises TypeError for
    something that is not a `Cond` (a programming error)."""
    if isinstance(cond, Term):
        return values.compare(values.lookup(document, cond.path), cond.op, cond.value, cond.pattern)
    if isinstance(cond, AllOf):
        return all(evaluate(item, document) for item in cond.items)
    if isinstance(cond, AnyOf):
        return any(evaluate(item, document) for item in cond.items)
    if isinstance(cond, Const):
        return cond.value
    raise TypeError(f"not a condition: {cond!r}")


def _sort_rank(value: Any) -> tuple[Any, ...]:
    """MongoDB's sort order of one scalar: null (or missing) < numbers < strings < objects < bools <
    dates; within a kind by value."""
    if value is None or value is values.MISSING:
        return (1,)
    if isinstance(value, bool):
        return (8, value)
    if values.is_number(value):
        return (2, value)
    if isinstance(value, str):
        return (3, value)
    if isinstance(value, datetime):
        return (9, values.bson_time(value))
    if isinstance(value, dict):
        return (4, repr(sorted(value.items())))
    return (5, repr(value))


def sort_key(value: Any, descending: bool) -> tuple[Any, ...]:
    """The key of `value` in a MongoDB sort: a list sorts by its smallest element ascending and its
    largest descending (an empty list before null)."""
    if isinstance(value, list):
        if not value:
            return (0,)
        ranks = [_sort_rank(item) for item in value]
        return max(ranks) if descending else min(ranks)
    return _sort_rank(value)


def sort_value(document: Mapping[str, Any], path: str | tuple[str, ...]) -> Any:
    """The value a sort key `path` reads on a stored document: the value at a (dotted) path, or for a
    tuple of paths the first that holds one (not null or missing; a localized field's fallback chain,
    what `$ifNull` gives MongoDB's sort)."""
    if isinstance(path, str):
        return values.lookup(document, path)
    for candidate in path:
        value = values.lookup(document, candidate)
        if value is not None and value is not values.MISSING:
            return value
    return values.MISSING


def sort_documents(documents: Sequence[Mapping[str, Any]], order: Sequence[tuple[str | tuple[str, ...], int]],
                   guards: Mapping[str | tuple[str, ...], Cond]) -> list[int]:
    """The positions of `documents` in `order` (a records sort spec, `[(path, 1 | -1), ...]`, a path
    as `sort_value` reads it), with MongoDB's sort semantics, where a path of `guards` reads as null on
    a document its guard does not hold on (a value the caller may not see sorts as if it were not
    there). Raises nothing."""
    positions = list(range(len(documents)))

    def value(document: Mapping[str, Any], path: str | tuple[str, ...]) -> Any:
        guard = guards.get(path)
        if guard is not None and not evaluate(guard, document):
            return None
        return sort_value(document, path)

    for path, direction in reversed(order):  # stable sorts, least significant key first
        descending = direction < 0
        positions.sort(key=lambda i: sort_key(value(documents[i], path), descending), reverse=descending)
    return positions
