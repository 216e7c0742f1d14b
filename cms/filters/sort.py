"""The `sort` parameter (decisions.md, Records): "-created,title" -> [SortKey]. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from cms.errors import InvalidFilter
from cms.filters.grammar import FIELD_NAME_RE

MAX_SORT_FIELDS = 8
"""Most fields one `sort` may name."""


@dataclass(frozen=True)
class SortKey:
    """One sort field by its API name; `descending` is True for a `-` prefix."""

    field: str
    descending: bool


def parse_sort(text: str) -> list[SortKey]:
    """Parse comma-separated field names, each with an optional `-` (descending) or `+`
    (ascending, the default) prefix, into SortKeys in the given order.

    Spaces around items are allowed: `"-created, title"`. Raises InvalidFilter (with the
    0-based position) for an empty text or item, a name not matching
    `[A-Za-z_][A-Za-z0-9_]*`, a field named twice, or more than MAX_SORT_FIELDS fields."""
    if not text.strip():
        raise InvalidFilter("empty sort expression at position 0")
    keys: list[SortKey] = []
    seen: set[str] = set()
    offset = 0
    for item in text.split(","):
        position = offset + len(item) - len(item.lstrip())
        offset += len(item) + 1
        name = item.strip()
        if not name:
            raise InvalidFilter(f"empty sort field at position {position}")
        descending = name.startswith("-")
        if name[0] in "+-":
            name = name[1:]
        if not FIELD_NAME_RE.fullmatch(name):
            raise InvalidFilter(f"invalid sort field {item.strip()!r} at position {position}")
        if name in seen:
            raise InvalidFilter(f"sort field '{name}' is given twice at position {position}")
        if len(keys) == MAX_SORT_FIELDS:
            raise InvalidFilter(f"too many sort fields (max {MAX_SORT_FIELDS}) at position {position}")
        seen.add(name)
        keys.append(SortKey(name, descending))
    return keys
