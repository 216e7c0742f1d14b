"""The MongoDB back end of the filter engine: a `Cond` (`conditions.py`) -> a query document, sort
keys -> pymongo's sort spec, and the `$text` form of a search.

This is the only code that builds `$` operators from user input. Every key it emits is either a
fixed operator or a `path` a FieldResolver returned; every value is a str, int, float, bool,
None, aware UTC datetime or compiled regex, never a user dict. Regex text is always escaped, so
`~` is a plain substring test.
"""

from __future__ import annotations

import re
from typing import Any

from cms.errors import InvalidFilter
from cms.filters.conditions import (
    MAX_REGEX_LENGTH,
    MAX_SEARCH_WORDS,
    AllOf,
    AnyOf,
    Cond,
    Const,
    FieldResolver,
    ResolvedField,
    Term,
    build,
    escape_regex,
    search_words,
)
from cms.filters.grammar import Node
from cms.filters.grouping import Grouping, KeyField, Measure
from cms.filters.sort import SortKey

__all__ = ["MAX_REGEX_LENGTH", "MAX_SEARCH_WORDS", "FieldResolver", "ResolvedField", "escape_regex",
           "group_pipeline", "render", "text_search_query", "to_mongo_query", "to_mongo_sort"]

_ORDER_OPERATORS = {">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}

Decision = bool | dict[str, Any]
"""A rendered condition: True (every record), False (none) or a MongoDB query."""


def render(cond: Cond) -> Decision:
    """`cond` as MongoDB sees it: True / False for the constants, else a query document:
    `Term` -> `{path: value}` or `{path: {"$ne" | "$gt" | "$gte" | "$lt" | "$lte" | "$regex" (with
    `$options: "i"`) | "$not" (a compiled pattern): ...}}`; `AllOf` -> `{"$and": [...]}`; `AnyOf`
    -> `{"$or": [...]}` (a constant never stands inside either: `all_of` / `any_of` fold them).
    Raises TypeError for something that is not a `Cond`."""
    if isinstance(cond, Const):
        return cond.value
    if isinstance(cond, Term):
        return _term(cond)
    if isinstance(cond, (AllOf, AnyOf)):
        parts = [render(item) for item in cond.items]
        return {"$and" if isinstance(cond, AllOf) else "$or": parts}
    raise TypeError(f"not a condition: {cond!r}")


def query_of(cond: Cond) -> dict[str, Any]:
    """`render(cond)` as a query document: `{}` for TRUE and a match-nothing query for FALSE."""
    rendered = render(cond)
    if rendered is True:
        return {}
    if rendered is False:
        return {"_id": {"$in": []}}
    return rendered


def _term(term: Term) -> dict[str, Any]:
    path, op, value = term.path, term.op, term.value
    if op == "=":
        return {path: value}
    if op == "!=":
        return {path: {"$ne": value}}
    if op in _ORDER_OPERATORS:
        return {path: {_ORDER_OPERATORS[op]: value}}
    pattern = escape_regex(value)
    if op == "~":
        return {path: {"$regex": pattern, "$options": "i"}}
    return {path: {"$not": re.compile(pattern, re.IGNORECASE)}}


def to_mongo_query(node: Node, resolver: FieldResolver) -> dict[str, Any]:
    """A parsed filter (no request variables) as a MongoDB query: `render(build(node, resolver))`.
    Raises InvalidFilter as `conditions.build` does."""
    return query_of(build(node, resolver))


def to_mongo_sort(keys: list[SortKey], resolver: FieldResolver) -> list[tuple[str | tuple[str, ...], int]]:
    """Translate sort keys into a records sort spec `[(path, 1 | -1), ...]`, in order: pymongo's, but
    a localized field read through a fallback chain sorts by a tuple of paths, the first that holds a
    value (`ResolvedField.sort_path`; the store sorts it with `$ifNull` in an aggregation).

    The caller appends its `_id` tie-breaker. Raises InvalidFilter("unknown sort field 'x'")
    when the resolver does not know a field."""
    spec: list[tuple[str | tuple[str, ...], int]] = []
    for key in keys:
        resolved = resolver.resolve(key.field)
        if resolved is None:
            raise InvalidFilter(f"unknown sort field '{key.field}'")
        spec.append((resolved.sort_path, -1 if key.descending else 1))
    return spec


def text_search_query(text: str) -> dict[str, Any]:
    """The `$text` equivalent of `search_query` for a server with a text index:
    `{"$text": {"$search": '"w1" "w2"'}}`, each word quoted (with `"` removed from it) so
    that every word must match.

    No words -> `{}`. Raises InvalidFilter like `search_query`."""
    words = [word.replace('"', "") for word in search_words(text)]
    words = [word for word in words if word]
    if not words:
        return {}
    return {"$text": {"$search": " ".join(f'"{word}"' for word in words)}}


def group_pipeline(query: dict[str, Any], grouping: Grouping, order: list[tuple[str, int]], skip: int,
                   limit: int) -> list[dict[str, Any]]:
    """The aggregation pipeline of `grouping` over the records matching `query` (a list's query: one
    `$match`, so the server's indexes serve it): `$group` (two, first by key and value, when there is
    a `count_distinct`), `$sort` by `order` (output names, from `Grouping.order`), and a `$facet`
    answering one document `{items: [groups skip..skip+limit], total: [{n}]}` (`total` empty when
    there is no group). A group reads `{_id: {k<i>: key value}, m<j>: aggregate}` (`Grouping.row`).
    Every path comes from the resolver, every name here is fixed: nothing from the client is a key."""
    ids = {f"k{i}": _key_expression(key) for i, key in enumerate(grouping.keys)}
    distinct = grouping.distinct
    stages: list[dict[str, Any]] = [{"$match": query}]
    if distinct is None:
        accumulators = {f"m{j}": _accumulator(m) for j, m in enumerate(grouping.measures)}
        stages.append({"$group": {"_id": ids, **accumulators}})
    else:  # by key and value first: each value once per group, then count them (no $addToSet of every value)
        assert distinct.path is not None
        first: dict[str, Any] = {"_id": {**ids, "d": {"$ifNull": [f"${distinct.path}", None]}}, "c": {"$sum": 1}}
        second: dict[str, Any] = {"_id": {name: f"$_id.{name}" for name in ids}}
        averages: dict[str, Any] = {}
        for j, m in enumerate(grouping.measures):
            name = f"m{j}"
            if m.function == "count":
                second[name] = {"$sum": "$c"}
            elif m.function == "count_distinct":
                second[name] = {"$sum": {"$cond": [{"$eq": ["$_id.d", None]}, 0, 1]}}
            elif m.function == "avg":
                first[f"s{j}"], first[f"n{j}"] = {"$sum": f"${m.path}"}, {"$sum": _is_number(m)}
                second[f"s{j}"], second[f"n{j}"] = {"$sum": f"$s{j}"}, {"$sum": f"$n{j}"}
                averages[name] = {"$cond": [{"$gt": [f"$n{j}", 0]}, {"$divide": [f"$s{j}", f"$n{j}"]}, None]}
            else:  # sum, min, max: of the partial results
                first[name] = _accumulator(m)
                second[name] = {"$" + m.function: f"${name}"}
        stages += [{"$group": first}, {"$group": second}]
        if averages:
            stages.append({"$addFields": averages})
    positions = {k.name: f"_id.k{i}" for i, k in enumerate(grouping.keys)}
    positions.update({m.name: f"m{j}" for j, m in enumerate(grouping.measures)})
    if order:
        stages.append({"$sort": {positions[name]: direction for name, direction in order}})
    stages.append({"$facet": {"items": [{"$skip": skip}, {"$limit": limit}], "total": [{"$count": "n"}]}})
    return stages


def _key_expression(key: KeyField) -> dict[str, Any]:
    if key.unit is not None:
        return {"$dateTrunc": {"date": f"${key.path}", "unit": key.unit}}
    return {"$ifNull": [f"${key.path}", None]}  # a missing value groups with null


def _accumulator(measure: Measure) -> dict[str, Any]:
    if measure.function == "count":
        return {"$sum": 1}
    return {"$" + measure.function: f"${measure.path}"}


def _is_number(measure: Measure) -> dict[str, Any]:
    return {"$cond": [{"$isNumber": f"${measure.path}"}, 1, 0]}
