"""Query plans of the records' reads: a sort over tuple paths (a localized field's fallback chain) as
aggregation stages, and the summary of a server's `explain` answer (decisions.md, Indexes and query plans;
Localized fields)."""

from __future__ import annotations

from typing import Any

from cms.models import QueryPlan, SortSpec
from cms.store.client import plan_nodes

COMPUTED_SORT_KEY = "_sort_"
"""The prefix of the keys an aggregation adds to sort by a tuple path (`_sort_0`, ...): no schema field
starts with `_`."""
def sort_stages(sort: SortSpec) -> list[dict[str, Any]] | None:
    """The `$addFields` and `$sort` stages of a sort holding tuple paths (models.SortPath: the first path
    that holds a value, a localized field's fallback chain): each tuple becomes an added key valued
    `{$ifNull: [path1, {$ifNull: [path2, ...]}]}`, and the sort is done on it. None when every path is a
    plain one (a `find` sorts it)."""
    if all(isinstance(path, str) for path, _ in sort):
        return None
    added: dict[str, Any] = {}
    order: dict[str, int] = {}
    for index, (path, direction) in enumerate(sort):
        if isinstance(path, str):
            order[path] = direction
            continue
        expression: Any = f"${path[-1]}"
        for candidate in reversed(path[:-1]):
            expression = {"$ifNull": [f"${candidate}", expression]}
        added[f"{COMPUTED_SORT_KEY}{index}"] = expression
        order[f"{COMPUTED_SORT_KEY}{index}"] = direction
    return [{"$addFields": added}, {"$sort": order}]


def pipeline_of(query: dict[str, Any], stages: list[dict[str, Any]], skip: int, limit: int,
              projection: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A `find` as an aggregation sorted by `stages` (`sort_stages`): match, sort, skip, limit, then
    the added keys dropped (or `projection` kept)."""
    pipeline: list[dict[str, Any]] = [{"$match": query}, *stages]
    if skip:
        pipeline.append({"$skip": skip})
    if limit:
        pipeline.append({"$limit": limit})
    pipeline.append({"$project": projection or {name: 0 for name in stages[0]["$addFields"]}})
    return pipeline


def plain_sort(sort: SortSpec) -> list[tuple[str, int]] | None:
    """A sort without tuple paths as pymongo takes it (None: no sort)."""
    return [(path, direction) for path, direction in sort if isinstance(path, str)] or None


EXPLAIN_MISSING_CODES = frozenset({59, 115, 238})
"""Server error codes of an `explain` the server does not have: CommandNotFound, CommandNotSupported,
NotImplemented."""


def query_plan(answer: dict[str, Any]) -> QueryPlan | None:
    """The summary of a `find` explain answer (its `queryPlanner.winningPlan` stage tree, in whatever
    nesting the server uses, and its `executionStats`); None when it has no winning plan."""
    winning = (answer.get("queryPlanner") or {}).get("winningPlan")
    if not isinstance(winning, dict):
        return None
    indexes: list[str] = []
    scans = False
    for node in plan_nodes(winning):
        scans = scans or node.get("stage") == "COLLSCAN"
        if isinstance(node.get("indexName"), str):
            indexes.append(node["indexName"])
    stats = answer.get("executionStats") or {}
    return QueryPlan(index=indexes[0] if indexes else None, collection_scan=scans,
                     docs_examined=int(stats.get("totalDocsExamined", 0)), returned=int(stats.get("nReturned", 0)))
