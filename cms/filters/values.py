"""One value semantics for the filter engine (decisions.md, Access rules and Field rules): how a
stored value compares with an operand, used by the in-memory predicate (`predicate.py`) and by the
folding of request variables (`conditions.py`), and chosen to be what MongoDB decides for the
queries `mongo.py` renders, so the two back ends agree (a property test compares them).

- Equality: a bool equals only a bool; numbers (int, float) by value; strings exactly; datetimes to
  the millisecond (BSON's grain); lists and objects as wholes; null only null. A stored list equals
  an operand when the whole list or one of its elements does; a missing field reads as null.
- Ordering (`>`, `>=`, `<`, `<=`): between two numbers, two strings or two datetimes only; a
  stored list when one element qualifies; anything else (null, bools, mixed kinds) is false.
- Contains (`~`): a case-insensitive substring of a string (any element of a stored list); `!~` is
  its negation (so a missing field, or one that is not text, does not contain anything).

Pure; imports nothing from `cms` but this package's siblings.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

MISSING: Any = object()
"""A field a stored document does not have (reads as null for `=` and `!=`)."""

ORDERINGS: dict[str, Callable[[Any, Any], Any]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}
"""The ordering operators of the grammar."""


def lookup(document: Mapping[str, Any], path: str) -> Any:
    """The value at `path` of a stored document, MISSING when there is none: a dotted path (a localized
    field's `title.de`) reads into objects, as MongoDB's does (a step into anything but an object finds
    nothing)."""
    if "." not in path:
        return document.get(path, MISSING)
    value: Any = document
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return MISSING
        value = value.get(key, MISSING)
        if value is MISSING:
            return MISSING
    return value


def is_number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bson_time(moment: datetime) -> datetime:
    """`moment` as BSON stores it: to the millisecond."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def scalar_equal(left: Any, right: Any) -> bool:
    """Whether two values are equal as wholes (see the module docstring). Raises nothing."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if is_number(left) and is_number(right):
        return bool(left == right)
    if isinstance(left, datetime) or isinstance(right, datetime):
        return isinstance(left, datetime) and isinstance(right, datetime) and bson_time(left) == bson_time(right)
    if type(left) is not type(right):
        return False
    if isinstance(left, list):
        return len(left) == len(right) and all(scalar_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(scalar_equal(v, right[k]) for k, v in left.items())
    return bool(left == right)


def equals(stored: Any, operand: Any) -> bool:
    """`stored = operand`: null matches a missing field, null, and a list holding null; a list
    matches when it equals the operand as a whole or one of its elements does."""
    if operand is None:
        return stored is MISSING or stored is None or (isinstance(stored, list) and None in stored)
    if stored is MISSING:
        return False
    if isinstance(stored, list) and not isinstance(operand, list):
        return any(scalar_equal(item, operand) for item in stored)
    return scalar_equal(stored, operand) or (
        isinstance(stored, list) and any(scalar_equal(item, operand) for item in stored))


def _ordered_pair(left: Any, op: str, right: Any) -> bool:
    if is_number(left) and is_number(right) or isinstance(left, str) and isinstance(right, str):
        return bool(ORDERINGS[op](left, right))
    if isinstance(left, datetime) and isinstance(right, datetime):
        return bool(ORDERINGS[op](bson_time(left), bson_time(right)))
    return False


def ordered(stored: Any, op: str, operand: Any) -> bool:
    """`stored OP operand` for an ordering `op`: values of one kind only (numbers, strings or
    datetimes); a stored list when one element qualifies. Raises KeyError for another `op`."""
    if isinstance(stored, list):
        return any(_ordered_pair(item, op, operand) for item in stored)
    return stored is not MISSING and _ordered_pair(stored, op, operand)


def contains(stored: Any, pattern: re.Pattern[str]) -> bool:
    """Whether `stored` (or an element of a stored list) is a string `pattern` is found in
    (`pattern`: the escaped operand, compiled case-insensitive)."""
    if isinstance(stored, list):
        return any(isinstance(item, str) and pattern.search(item) is not None for item in stored)
    return isinstance(stored, str) and pattern.search(stored) is not None


def compare(stored: Any, op: str, operand: Any, pattern: re.Pattern[str] | None = None) -> bool:
    """`stored OP operand` with the semantics above, for every operator of the grammar; `pattern` is
    the compiled operand of `~` / `!~` (compiled here when not given). Raises KeyError for an
    unknown operator."""
    if op == "=":
        return equals(stored, operand)
    if op == "!=":
        return not equals(stored, operand)
    if op in ("~", "!~"):
        if pattern is None:
            pattern = re.compile(re.escape(str(operand)), re.IGNORECASE)
        found = contains(stored, pattern)
        return found if op == "~" else not found
    return ordered(stored, op, operand)
