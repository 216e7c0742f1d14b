"""The aggregation terms (cms/filters/grouping.py) and their in-memory twin (groups.py), pure: the
parameters as text, the bucket starts, the pipeline's shape, and the groups kept one document at a
time (exact sums whatever the order, MongoDB's equality and order of values)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from cms.errors import InvalidFilter, ValidationFailed
from cms.filters.conditions import FALSE, ResolvedField
from cms.filters.grouping import (
    AggregateSpec,
    Grouping,
    GroupKey,
    bucket_start,
    parse_aggregates,
    parse_group_by,
    resolve_grouping,
)
from cms.filters.groups import Groups, contribution
from cms.filters.mongo import group_pipeline


class Fields:
    """A resolver over a few typed fields, `hidden` ones guarded."""

    TYPES = {"n": "number", "t": "text", "d": "date", "b": "bool", "j": "json", "created": "datetime"}

    def __init__(self, hidden: frozenset[str] = frozenset()) -> None:
        self.hidden = hidden

    def resolve(self, name: str) -> ResolvedField | None:
        kind = self.TYPES.get(name)
        if kind is None:
            return None
        return ResolvedField(name, kind, FALSE if name in self.hidden else None)


def grouping(group_by: str | None, aggregates: str | None, hidden: frozenset[str] = frozenset()) -> Grouping:
    return resolve_grouping(parse_group_by(group_by), parse_aggregates(aggregates), Fields(hidden),
                            lambda name: name == "t2")


@pytest.mark.parametrize("text, expected", [
    (None, ()), ("", ()), (" a , b:month ", (GroupKey("a"), GroupKey("b", "month"))),
    ("d:year,d:hour", (GroupKey("d", "year"), GroupKey("d", "hour"))),
], ids=["none", "blank", "spaces", "two-buckets"])
def test_group_by_parses(text: str | None, expected: tuple[GroupKey, ...]) -> None:
    assert parse_group_by(text) == expected


@pytest.mark.parametrize("text, expected", [
    (None, (AggregateSpec("count"),)),
    ("count(), sum(n) ,max( t )", (AggregateSpec("count"), AggregateSpec("sum", "n"), AggregateSpec("max", "t"))),
], ids=["default", "several"])
def test_aggregates_parse(text: str | None, expected: tuple[AggregateSpec, ...]) -> None:
    assert parse_aggregates(text) == expected
    assert [s.name for s in expected][-1] in ("count", "max_t")


@pytest.mark.parametrize("group_by, aggregates, error", [
    ("a,", None, InvalidFilter), ("a:week", None, InvalidFilter), ("a.b", None, InvalidFilter),
    ("a,a", None, InvalidFilter), (",".join("abcdefghijk"), None, ValidationFailed),
    (None, "count(n)", InvalidFilter), (None, "sum()", InvalidFilter), (None, "mode(n)", InvalidFilter),
    (None, ",".join(f"max(f{i})" for i in range(11)), ValidationFailed),
    (None, "count_distinct(a),count_distinct(b)", ValidationFailed), (None, "sum(n),sum(n)", InvalidFilter),
], ids=["empty-item", "unit", "dotted", "twice", "eleven", "count-field", "sum-empty", "unknown", "eleven-aggs",
        "two-distinct", "repeated"])
def test_bad_parameters_are_refused(group_by: str | None, aggregates: str | None, error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_group_by(group_by)
        parse_aggregates(aggregates)


@pytest.mark.parametrize("group_by, aggregates, says", [
    ("nope", None, "unknown field 'nope'"), ("t:month", None, "a date unit needs a date field"),
    ("j", None, "JSON document"), ("t2", None, "unknown field"), (None, "sum(t)", "sum needs a number field"),
    (None, "avg(d)", "avg needs a number field"), ("n", None, "view rule"), (None, "max(n)", "view rule"),
], ids=["unknown", "unit-on-text", "json", "unknown-list", "sum-text", "avg-date", "hidden-key", "hidden-max"])
def test_fields_must_fit(group_by: str | None, aggregates: str | None, says: str) -> None:
    hidden = frozenset({"n"}) if says == "view rule" else frozenset()
    with pytest.raises(InvalidFilter, match=says):
        grouping(group_by, aggregates, hidden)


@pytest.mark.parametrize("unit, expected", [
    ("year", datetime(2026, 1, 1, tzinfo=UTC)), ("month", datetime(2026, 7, 1, tzinfo=UTC)),
    ("day", datetime(2026, 7, 9, tzinfo=UTC)), ("hour", datetime(2026, 7, 9, 13, tzinfo=UTC)),
])
def test_bucket_start(unit: str, expected: datetime) -> None:
    assert bucket_start(datetime(2026, 7, 9, 13, 45, 12, 345000, tzinfo=UTC), unit) == expected


def test_order_is_the_sort_then_every_key() -> None:
    g = grouping("t,d:month", "count(),sum(n)")
    assert g.order(None) == [("t", 1), ("d:month", 1)]
    assert g.order("-sum_n,d:month") == [("sum_n", -1), ("d:month", 1), ("t", 1)]
    with pytest.raises(InvalidFilter, match="unknown sort field"):
        g.order("n")


def test_the_pipeline_groups_by_key_then_value_for_a_distinct_count() -> None:
    plain = group_pipeline({"a": 1}, grouping("t", "count(),avg(n)"), [("t", 1)], 0, 30)
    assert [next(iter(stage)) for stage in plain] == ["$match", "$group", "$sort", "$facet"]
    assert plain[1]["$group"] == {"_id": {"k0": {"$ifNull": ["$t", None]}}, "m0": {"$sum": 1}, "m1": {"$avg": "$n"}}
    two = group_pipeline({}, grouping("d:day", "count_distinct(t),avg(n)"), [], 5, 10)
    assert [next(iter(stage)) for stage in two] == ["$match", "$group", "$group", "$addFields", "$facet"]
    assert two[1]["$group"]["_id"] == {"k0": {"$dateTrunc": {"date": "$d", "unit": "day"}},
                                       "d": {"$ifNull": ["$t", None]}}
    assert two[-1]["$facet"]["items"] == [{"$skip": 5}, {"$limit": 10}]


def rows(g: Grouping, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups = Groups(g)
    for document in documents:
        groups.add(contribution(g, document))
    return sorted(groups.rows(), key=lambda r: repr(r["key"]))


def test_groups_in_memory_follow_mongodb() -> None:
    g = grouping("t", "count(),sum(n),avg(n),min(n),max(d),count_distinct(b)")
    documents: list[dict[str, Any]] = [{"t": "x", "n": 1, "b": True, "d": datetime(2026, 1, 2, tzinfo=UTC)},
                 {"t": "x", "n": 1.5, "b": 1.0},
                 {"t": "x", "n": None, "b": 1},
                 {"n": 2, "b": None},
                 {"t": None, "n": 3}]
    assert rows(g, documents) == [
        {"key": {"t": "x"}, "count": 3, "sum_n": 2.5, "avg_n": 1.25, "min_n": 1,
         "max_d": datetime(2026, 1, 2, tzinfo=UTC), "count_distinct_b": 2},  # true, and 1 == 1.0
        {"key": {"t": None}, "count": 2, "sum_n": 5, "avg_n": 2.5, "min_n": 2, "max_d": None,
         "count_distinct_b": 0},
    ]
    assert rows(grouping(None, "count(),sum(n),avg(n)"), []) == [{"key": {}, "count": 0, "sum_n": 0,
                                                                  "avg_n": None}]


def test_sums_stay_exact_through_removals() -> None:
    g = grouping(None, "sum(n),max(n)")
    groups = Groups(g)
    parts = [contribution(g, {"n": value}) for value in (0.1, 0.2, 10**20, 0.3)]
    for part in parts:
        groups.add(part)
    groups.remove(parts[2])
    groups.remove(parts[0])
    assert groups.rows() == [{"key": {}, "sum_n": 0.5, "max_n": 0.3}]
    groups.remove(parts[1])
    groups.remove(parts[3])
    assert groups.rows() == [{"key": {}, "sum_n": 0, "max_n": None}]
