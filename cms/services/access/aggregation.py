"""Aggregation through the one engine (decisions.md, Aggregation and view collections): a caller's
`group_by`, `aggregates` and `sort` resolved over the fields it may name (`Access.resolver`, so field
rules decide as they do for a list's filter and sort), the `$match` of the same list query
(`Access.list_query`), rendered as one pipeline (`mongo.group_pipeline`); a view's definition over
its source as the system sees it (`source_grouping`, `source_condition`); and the rows of a view
filtered and sorted in memory under the view's own rules (`view_rows`), with the in-memory back end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cms.filters.conditions import all_of, build
from cms.filters.grammar import parse_filter
from cms.filters.grouping import Grouping, parse_aggregates, parse_group_by, resolve_grouping
from cms.filters.groups import Contribution, Groups, contribution
from cms.filters.mongo import group_pipeline
from cms.filters.predicate import sort_documents
from cms.models import Collection
from cms.services.access.records import Access, Condition
from cms.services.content.fields import CollectionFields, is_multi

__all__ = ["AggregateQuery", "Contribution", "Grouping", "Groups", "aggregate_query", "contribution",
           "source_condition", "source_grouping", "view_rows"]


@dataclass(frozen=True)
class AggregateQuery:
    """One aggregation for one caller: `match` (the list query: the list rule, the filter with field
    rules joined), the `grouping` and the `order` of the groups (output names, `Grouping.order`)."""

    match: dict[str, Any]
    grouping: Grouping
    order: list[tuple[str, int]]

    def pipeline(self, skip: int, limit: int) -> list[dict[str, Any]]:
        """The pipeline answering groups `skip` to `skip + limit` and the number of groups
        (`mongo.group_pipeline`)."""
        return group_pipeline(self.match, self.grouping, self.order, skip, limit)

    def key_parts(self) -> list[Any]:
        """What distinguishes this aggregation in a read cache key."""
        return [self.match, [(k.name, k.path, k.type) for k in self.grouping.keys],
                [(m.name, m.path) for m in self.grouping.measures], self.order]


def _list_valued(collection: Collection) -> Any:
    multi = {spec.name for spec in collection.fields if is_multi(spec)}
    return multi.__contains__


def aggregate_query(access: Access, *, filter_expr: str | None, group_by: str | None, aggregates: str | None,
                    sort: str | None) -> AggregateQuery:
    """The aggregation the list `access` (the caller's list rule on the collection) permits: groups
    of the records its list with `filter_expr` shows, keyed by `group_by` with `aggregates` over the
    fields the caller may name, in `sort` order. Raises `access.refusal()` (the list rule refuses
    outright), InvalidFilter (400: syntax, unknown field, a field with a view rule, a type that does
    not fit) or ValidationFailed (422: too many keys or aggregates)."""
    match = access.list_query(filter_expr=filter_expr, search_text=None, text_index=False)
    grouping = resolve_grouping(parse_group_by(group_by), parse_aggregates(aggregates), access.resolver(),
                                _list_valued(access.collection))
    return AggregateQuery(match, grouping, grouping.order(sort))


def source_grouping(source: Collection, group_by: str | None, aggregates: str | None) -> Grouping:
    """A view's grouping over its source as the system sees it (every field, no rule: the view's own
    rules decide who sees the groups). Raises as `aggregate_query`."""
    return resolve_grouping(parse_group_by(group_by), parse_aggregates(aggregates), CollectionFields(source),
                            _list_valued(source))


def source_condition(source: Collection, filter_expr: str | None) -> Condition:
    """A view's filter over its source as the system sees it: the query of its records, and the same
    decision for one record in memory. Raises InvalidFilter."""
    if filter_expr is None or not filter_expr.strip():
        return Condition(all_of())
    return Condition(build(parse_filter(filter_expr), CollectionFields(source)))


def view_rows(access: Access, documents: Sequence[Mapping[str, Any]], *, filter_expr: str | None,
              sort: str | None, default_order: list[tuple[str, int]]) -> list[Mapping[str, Any]]:
    """The rows of a view (as documents: `_id` and the key and aggregate fields) that `access` (the
    caller's list or view rule on the view) and `filter_expr` keep, in `sort` order (default
    `default_order`), ties broken by `default_order`. Raises `access.refusal()` (the rule refuses
    outright) or InvalidFilter (syntax, unknown field or value)."""
    access.require()
    condition = access.condition
    if filter_expr is not None and filter_expr.strip():
        condition = all_of(condition, access.filter(filter_expr))
    matcher = Condition(condition)
    kept = [d for d in documents if matcher.matches(d)]
    order = access.sort(sort) if sort is not None and sort.strip() else []
    order += [(path, direction) for path, direction in default_order if all(path != p for p, _ in order)]
    return [kept[i] for i in sort_documents(kept, order, {})]
