"""Filter AST, sort keys and search text -> MongoDB query documents.

This is the only code that builds `$` operators from user input. Every key it emits is
either a fixed operator or a `path` returned by the caller's FieldResolver; every value is
a str, int, float, bool, None, aware UTC datetime or compiled regex, never a user dict.
Regex text is always escaped (`escape_regex`), so `~` is a plain substring test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from cms.errors import InvalidFilter
from cms.filters.grammar import MAX_FILTER_LENGTH, And, Compare, Literal, Node, Or, number_value
from cms.filters.sort import SortKey

MAX_SEARCH_WORDS = 10
"""Most whitespace-separated words in one `search` text."""
MAX_REGEX_LENGTH = 512
"""Longest regex sent to the database for one `~` / `!~` value or one search word, in characters
after escaping (a NUL escapes to 4 characters). Real MongoDB takes 32,764; the embedded server
refuses patterns over 1,000 characters."""

STRING_TYPES = frozenset({"id", "text", "editor", "email", "url", "select", "relation", "file"})
"""Field types whose stored values are strings (or lists of strings) and accept `~` / `!~`."""
FIELD_TYPES = STRING_TYPES | {"datetime", "number", "bool", "date", "json"}
"""Every type a FieldResolver may return."""

_ORDER_OPERATORS = {">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}
# BSON integers are signed 64-bit; a larger int would fail in the driver, not as a 400.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ResolvedField:
    """Where and how a field is stored: `path` is the document key (e.g. "_id" for `id`),
    `type` one of FIELD_TYPES."""

    path: str
    type: str


class FieldResolver(Protocol):
    """Maps an API field name (as written in `filter` / `sort`) to its stored field."""

    def resolve(self, name: str) -> ResolvedField | None:
        """The field called `name`, or None when the collection has no such field."""
        ...


def to_mongo_query(node: Node, resolver: FieldResolver) -> dict[str, Any]:
    """Translate a parsed filter into a MongoDB query document.

    `Compare` -> `{path: value}` or `{path: {"$ne" | "$gt" | "$gte" | "$lt" | "$lte" |
    "$regex" | "$not": ...}}`; `And` -> `{"$and": [...]}`; `Or` -> `{"$or": [...]}`. Values
    are typed by the resolved field type (see `_typed_value`). Raises InvalidFilter, with the
    field's position, for an unknown field, a value the field's type does not accept, or an
    operator the type does not support (ordering on bool/json, `~` on non-text types,
    anything but `=` / `!=` on json or with null, a `~` / `!~` value longer than MAX_REGEX_LENGTH
    characters once escaped). Raises TypeError for a non-Node and
    ValueError when the resolver returns a type outside FIELD_TYPES (both programming errors)."""
    if isinstance(node, Compare):
        return _compare(node, resolver)
    if isinstance(node, (And, Or)):
        if not node.items:
            raise InvalidFilter("empty filter expression at position 0")
        parts = [to_mongo_query(item, resolver) for item in node.items]
        if len(parts) == 1:
            return parts[0]
        return {"$and" if isinstance(node, And) else "$or": parts}
    raise TypeError(f"not a filter node: {node!r}")


def to_mongo_sort(keys: list[SortKey], resolver: FieldResolver) -> list[tuple[str, int]]:
    """Translate sort keys into pymongo's sort spec `[(path, 1 | -1), ...]`, in order.

    The caller appends its `_id` tie-breaker. Raises InvalidFilter("unknown sort field 'x'")
    when the resolver does not know a field."""
    spec: list[tuple[str, int]] = []
    for key in keys:
        resolved = resolver.resolve(key.field)
        if resolved is None:
            raise InvalidFilter(f"unknown sort field '{key.field}'")
        spec.append((resolved.path, -1 if key.descending else 1))
    return spec


def search_query(text: str, paths: list[str]) -> dict[str, Any]:
    """A query where every whitespace-separated word of `text` occurs (case-insensitive
    substring) in at least one of the document keys `paths`:
    `{"$and": [{"$or": [{path: {"$regex": escaped_word, "$options": "i"}}, ...]}, ...]}`.

    No words -> `{}` (matches everything); no paths -> `{"_id": {"$in": []}}` (matches
    nothing). Raises InvalidFilter for more than MAX_SEARCH_WORDS words, a word longer than
    MAX_REGEX_LENGTH characters once escaped, or a text longer than MAX_FILTER_LENGTH characters."""
    words = _search_words(text)
    if not words:
        return {}
    if not paths:
        return {"_id": {"$in": []}}
    return {
        "$and": [
            {"$or": [{path: {"$regex": escape_regex(word), "$options": "i"}} for path in paths]}
            for word in words
        ]
    }


def text_search_query(text: str) -> dict[str, Any]:
    """The `$text` equivalent of `search_query` for a server with a text index:
    `{"$text": {"$search": '"w1" "w2"'}}`, each word quoted (with `"` removed from it) so
    that every word must match.

    No words -> `{}`. Raises InvalidFilter like `search_query`."""
    words = [word.replace('"', "") for word in _search_words(text)]
    words = [word for word in words if word]
    if not words:
        return {}
    return {"$text": {"$search": " ".join(f'"{word}"' for word in words)}}


def escape_regex(text: str) -> str:
    """`text` as a regex matching itself literally, in the syntax of both Python and PCRE.

    `re.escape` leaves NUL as is, and a BSON regex (a C string) cannot hold it, so NUL is
    written as the escape `\\x00`. Raises nothing."""
    return re.escape(text).replace("\x00", "\\x00")


def _typed_value(node: Compare, field_type: str) -> Any:
    """The value of `node` as the stored type of a `field_type` field.

    String-like types -> str (the source text for numbers and bools, so `title=123` means
    "123"); number -> int | float (also from a quoted numeric string); bool -> bool (also
    from quoted "true" / "false"); date / datetime -> aware UTC datetime from ISO 8601
    (date-only is midnight UTC, naive is UTC); json -> the literal's Python value; null ->
    None for every type. Raises InvalidFilter (with the field's position) when the value
    does not fit the type, ValueError for a type outside FIELD_TYPES."""
    literal = node.value
    if literal.kind == "null":
        return None
    if field_type in STRING_TYPES:
        return literal.value if literal.kind == "string" else literal.raw
    if field_type == "number":
        return _number(node, literal)
    if field_type == "bool":
        if literal.kind == "bool":
            return literal.value
        if literal.kind == "string" and literal.quoted and literal.raw in ("true", "false"):
            return literal.raw == "true"
        raise _expects(node, "true or false")
    if field_type in ("date", "datetime"):
        parsed = _parse_datetime(str(literal.value) if literal.kind == "string" else literal.raw)
        if parsed is None:
            raise _expects(node, "an ISO 8601 date or datetime")
        return parsed
    if field_type == "json":
        return literal.value
    raise ValueError(f"unknown field type {field_type!r} for field '{node.field}'")


def _compare(node: Compare, resolver: FieldResolver) -> dict[str, Any]:
    resolved = resolver.resolve(node.field)
    if resolved is None:
        raise InvalidFilter(f"unknown field '{node.field}' at position {node.position}")
    if resolved.type not in FIELD_TYPES:
        raise ValueError(f"unknown field type {resolved.type!r} for field '{node.field}'")
    _check_operator(node, resolved.type)
    value = _typed_value(node, resolved.type)
    path, op = resolved.path, node.op
    if op == "=":
        return {path: value}
    if op == "!=":
        return {path: {"$ne": value}}
    if op in _ORDER_OPERATORS:
        return {path: {_ORDER_OPERATORS[op]: value}}
    pattern = escape_regex(value)
    if len(pattern) > MAX_REGEX_LENGTH:
        raise InvalidFilter(
            f"value of '{node.field}' is too long for '{op}': at most {MAX_REGEX_LENGTH} characters "
            f"(special characters count double, NUL four) at position {node.value.position}"
        )
    if op == "~":
        return {path: {"$regex": pattern, "$options": "i"}}
    return {path: {"$not": re.compile(pattern, re.IGNORECASE)}}


def _check_operator(node: Compare, field_type: str) -> None:
    """Raise InvalidFilter when `node.op` makes no sense for the value or the field type."""
    op, where = node.op, f"field '{node.field}' at position {node.position}"
    if op in ("=", "!="):
        return
    if node.value.kind == "null":
        raise InvalidFilter(f"null can only be used with '=' or '!=' ({where})")
    if field_type == "json":
        raise InvalidFilter(f"operator '{op}' is not supported on json {where}; use '=' or '!='")
    if op in ("~", "!~") and field_type not in STRING_TYPES:
        raise InvalidFilter(f"operator '{op}' needs a text field, not {field_type} {where}")
    if op in _ORDER_OPERATORS and field_type == "bool":
        raise InvalidFilter(f"operator '{op}' is not supported on bool {where}")


def _number(node: Compare, literal: Literal) -> int | float:
    if literal.kind == "number":
        number = literal.value
    elif literal.kind == "string" and literal.quoted:
        number = number_value(str(literal.value).strip())
    else:
        number = None
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        raise _expects(node, "a number")
    if isinstance(number, int) and not _INT64_MIN <= number <= _INT64_MAX:
        raise InvalidFilter(f"number {literal.raw!r} is out of range at position {node.position}")
    return number


def _parse_datetime(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.strip())
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _expects(node: Compare, what: str) -> InvalidFilter:
    return InvalidFilter(
        f"field '{node.field}' expects {what}, got {node.value.raw!r} at position {node.position}"
    )


def _search_words(text: str) -> list[str]:
    if len(text) > MAX_FILTER_LENGTH:
        raise InvalidFilter(f"search text is longer than {MAX_FILTER_LENGTH} characters")
    words = text.split()
    if len(words) > MAX_SEARCH_WORDS:
        raise InvalidFilter(f"search text has more than {MAX_SEARCH_WORDS} words")
    for number, word in enumerate(words, start=1):
        if len(escape_regex(word)) > MAX_REGEX_LENGTH:
            raise InvalidFilter(
                f"search word {number} is too long: at most {MAX_REGEX_LENGTH} characters "
                "(special characters count double, NUL four)"
            )
    return words
