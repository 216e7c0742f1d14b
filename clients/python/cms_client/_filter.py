"""`client.filter(expr, params)`: values bound into a filter expression safely (decisions.md, Clients).

Each `{:name}` placeholder becomes a literal of the service's filter grammar (cms/filters/grammar.py): a string
in double quotes with `\\` and `"` escaped by a backslash (the only escapes the grammar reads; every other
character, a newline included, stands for itself inside quotes), so no value can close the string and add a term;
a finite number in decimal; a bool as `true` / `false`; None as `null`; a `datetime` as its UTC ISO 8601 text in
quotes (naive means UTC, as the service reads it) and a `date` as `YYYY-MM-DD` in quotes, which a date or datetime
field reads as that instant. The JS client's `filter` writes the same literals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime

FilterValue = str | int | float | bool | None | datetime | date
"""A value `filter` can bind."""

PLACEHOLDER_RE = re.compile(r"\{:([A-Za-z_][A-Za-z0-9_]*)\}")
"""A placeholder: `{:name}`."""


def filter_literal(value: FilterValue) -> str:
    """The filter grammar's literal of `value` (see the module). Raises TypeError for a float that is not finite
    or a value of another type (a list, a dict, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"filter: {value} is not a finite number")
        return "0" if value == 0 else repr(value)
    if isinstance(value, datetime):
        moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return '"' + moment.isoformat().replace("+00:00", "Z") + '"'
    if isinstance(value, date):
        return f'"{value.isoformat()}"'
    raise TypeError(f"filter: cannot bind a value of type {type(value).__name__}")


def bind_filter(expr: str, params: Mapping[str, FilterValue] | None = None) -> str:
    """`expr` with each `{:name}` replaced by the literal of `params[name]`:
    `bind_filter("title = {:t} && views > {:n}", {"t": 'say "hi"', "n": 10})` is
    `title = "say \\"hi\\"" && views > 10`. Raises KeyError for a placeholder `params` lacks, TypeError for a value
    that has no literal."""
    values = params or {}

    def literal(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise KeyError(f"filter: no value for the placeholder {{:{name}}}")
        return filter_literal(values[name])

    return PLACEHOLDER_RE.sub(literal, expr)
