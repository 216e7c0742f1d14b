"""The in-memory twin of `mongo.group_pipeline`: the groups of a `Grouping` over stored documents,
kept one document at a time (`add`, `remove`), so a view collection's groups follow its source's
writes without reading the source again (decisions.md, Aggregation and view collections). The rows
are those the pipeline answers, with MongoDB's semantics (`grouping.py`'s docstring); a test compares
the two on the same records.

Sums are exact whatever the order of additions and removals: integers as Python ints, other numbers
as fractions, answered as a float once a non-integer took part (as MongoDB answers a double). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from cms.filters import values
from cms.filters.grouping import Grouping, bucket_start
from cms.filters.predicate import sort_key

Normal = tuple[Any, ...]
"""A value as MongoDB compares it (`predicate.sort_key`): equal values are equal, and ordered alike."""


def normal(value: Any) -> Normal:
    """`value` (a scalar, None or missing) as MongoDB groups and orders it."""
    return sort_key(value, False)


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one document brings to its group: the group's `key` (normal values), the key's `values`
    as answered, and `measured`: per measure, the document's value at its field (None for `count`)."""

    key: tuple[Normal, ...]
    values: tuple[Any, ...]
    measured: tuple[Any, ...]


def contribution(grouping: Grouping, document: Mapping[str, Any]) -> Contribution:
    """The contribution of the stored `document` (`_id`, `created`, `updated`, field values) to the
    groups of `grouping`: a missing value is null; a date key in a bucket is the bucket's start."""
    answered = []
    for key in grouping.keys:
        value = document.get(key.path)
        if key.unit is not None:
            value = bucket_start(value, key.unit) if isinstance(value, datetime) else None
        answered.append(value)
    measured = tuple(None if m.path is None else document.get(m.path) for m in grouping.measures)
    return Contribution(tuple(normal(v) for v in answered), tuple(answered), measured)


@dataclass
class _Numbers:
    """Exact sum and count of the numbers a group's documents hold in one field."""

    integers: int = 0
    fractions: Fraction = Fraction(0)
    floats: int = 0
    count: int = 0

    def change(self, value: Any, sign: int) -> None:
        if not values.is_number(value):
            return
        self.count += sign
        if isinstance(value, int):
            self.integers += sign * value
        else:
            self.fractions += sign * Fraction(value)
            self.floats += sign

    def total(self) -> int | float:
        return float(self.integers + self.fractions) if self.floats else self.integers

    def mean(self) -> float | None:
        return float((self.integers + self.fractions) / self.count) if self.count else None


@dataclass
class _Values:
    """How many of a group's documents hold each non-null value of one field (normal value -> [the
    value as first seen, count])."""

    held: dict[Normal, list[Any]] = field(default_factory=dict)

    def change(self, value: Any, sign: int) -> None:
        if value is None:
            return
        key = normal(value)
        entry = self.held.get(key)
        if entry is None:
            if sign > 0:
                self.held[key] = [value, 1]
            return
        entry[1] += sign
        if entry[1] <= 0:
            del self.held[key]

    def extreme(self, largest: bool) -> Any:
        if not self.held:
            return None
        chosen = max(self.held) if largest else min(self.held)
        return self.held[chosen][0]


@dataclass
class _Group:
    values: tuple[Any, ...]
    count: int = 0
    measures: list[_Numbers | _Values | None] = field(default_factory=list)


class Groups:
    """The groups of `grouping` over the documents added and not removed (each `Contribution` added
    once; removing one that was not added is a programming error the counts do not survive)."""

    def __init__(self, grouping: Grouping) -> None:
        self.grouping = grouping
        self._groups: dict[tuple[Normal, ...], _Group] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, part: Contribution) -> None:
        """Count `part` in its group (made when missing)."""
        group = self._groups.get(part.key)
        if group is None:
            group = self._groups[part.key] = _Group(part.values, measures=[self._accumulator(m.function)
                                                                           for m in self.grouping.measures])
        self._change(group, part, 1)

    def remove(self, part: Contribution) -> None:
        """Take `part` out of its group (dropped once empty)."""
        group = self._groups.get(part.key)
        if group is None:
            return
        self._change(group, part, -1)
        if group.count <= 0:
            del self._groups[part.key]

    @staticmethod
    def _accumulator(function: str) -> _Numbers | _Values | None:
        if function in ("sum", "avg"):
            return _Numbers()
        if function in ("min", "max", "count_distinct"):
            return _Values()
        return None

    @staticmethod
    def _change(group: _Group, part: Contribution, sign: int) -> None:
        group.count += sign
        for accumulator, value in zip(group.measures, part.measured, strict=True):
            if accumulator is not None:
                accumulator.change(value, sign)

    def rows(self) -> list[dict[str, Any]]:
        """Every group as `Grouping.row` reads the pipeline's answer (`{key: {name: value}, <aggregate
        name>: value}`), in no particular order; without keys, exactly one (`Grouping.empty_row` over
        no documents)."""
        if not self._groups and not self.grouping.keys:
            return [self.grouping.empty_row()]
        names = [k.name for k in self.grouping.keys]
        return [{"key": dict(zip(names, group.values, strict=True)), **self._measured(group)}
                for group in self._groups.values()]

    def _measured(self, group: _Group) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        for measure, accumulator in zip(self.grouping.measures, group.measures, strict=True):
            if measure.function == "count":
                shown[measure.name] = group.count
            elif isinstance(accumulator, _Numbers):
                shown[measure.name] = accumulator.total() if measure.function == "sum" else accumulator.mean()
            elif isinstance(accumulator, _Values):
                shown[measure.name] = (len(accumulator.held) if measure.function == "count_distinct"
                                       else accumulator.extreme(measure.function == "max"))
        return shown
