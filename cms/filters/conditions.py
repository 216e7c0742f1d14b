"""The typed tree of the filter engine (decisions.md, Records, Access rules and Field rules).

`grammar` parses text to an AST of names and literals; `build` resolves that AST against a
collection (a `FieldResolver`) and, for rules, binds `@request.*` (a `RequestContext`), giving a
`Cond`: `Term`s with typed values, `AllOf`, `AnyOf` and the constants `TRUE` / `FALSE`. Both back
ends render that one tree: `mongo.render` (a MongoDB query) and `predicate.evaluate` (in memory),
with the value semantics of `values`. A field whose view is restricted for the caller resolves
with a `guard` (its bound field rule): every term on it is `guard && term`, so a filter cannot
find records by a value the caller may not see.

Pure: imports nothing from `cms` but `cms.errors`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeAlias

from cms.errors import InvalidFilter
from cms.filters import values
from cms.filters.grammar import (
    MAX_FILTER_LENGTH,
    And,
    Compare,
    Literal,
    Node,
    Or,
    VarCompare,
    Variable,
    number_value,
)

MAX_SEARCH_WORDS = 10
"""Most whitespace-separated words in one `search` text."""
MAX_REGEX_LENGTH = 512
"""Longest pattern sent to the database for one `~` / `!~` value or one search word, in characters
after escaping (a NUL escapes to 4 characters). Real MongoDB takes 32,764; the embedded server
refuses patterns over 1,000 characters."""

STRING_TYPES = frozenset({"id", "text", "editor", "email", "url", "select", "relation", "file"})
"""Field types whose stored values are strings (or lists of strings) and accept `~` / `!~`."""
FIELD_TYPES = STRING_TYPES | {"datetime", "number", "bool", "date", "json"}
"""Every type a FieldResolver may return."""
ORDER_OPERATORS = frozenset({">", ">=", "<", "<="})

# BSON integers are signed 64-bit; a larger int would fail in the driver, not as a 400.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class Const:
    """A condition that holds on every record (`TRUE`) or on none (`FALSE`)."""

    value: bool


TRUE = Const(True)
FALSE = Const(False)


@dataclass(frozen=True, slots=True)
class Term:
    """`path OP value` over stored documents: `path` the document key, `type` the field's type (one
    of FIELD_TYPES), `op` one of the grammar's operators, `value` typed by the field (None for null;
    for `~` / `!~` the text looked for). `pattern` is that text escaped and compiled
    case-insensitive (for `~` / `!~` only); it takes no part in equality."""

    path: str
    type: str
    op: str
    value: Any
    pattern: re.Pattern[str] | None = dataclasses.field(default=None, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class AllOf:
    """Every one of `items` (two or more) holds."""

    items: tuple[Cond, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    """At least one of `items` (two or more) holds."""

    items: tuple[Cond, ...]


Cond: TypeAlias = Const | Term | AllOf | AnyOf
"""A resolved, typed condition over the stored records of one collection."""


def all_of(*items: Cond) -> Cond:
    """The conjunction of `items`, folded: FALSE decides it, TRUE drops out, nested `AllOf`s flatten."""
    return _fold(AllOf, items, decisive=FALSE)


def any_of(*items: Cond) -> Cond:
    """The disjunction of `items`, folded: TRUE decides it, FALSE drops out, nested `AnyOf`s flatten."""
    return _fold(AnyOf, items, decisive=TRUE)


def _fold(kind: type[AllOf] | type[AnyOf], items: tuple[Cond, ...], decisive: Const) -> Cond:
    neutral = TRUE if decisive == FALSE else FALSE
    parts: list[Cond] = []
    for item in items:
        if item == decisive:
            return decisive
        if item != neutral:
            parts.extend(item.items if isinstance(item, kind) else (item,))
    if not parts:
        return neutral
    return parts[0] if len(parts) == 1 else kind(tuple(parts))


@dataclass(frozen=True)
class ResolvedField:
    """Where and how a field is stored: `path` is the document key (e.g. "_id" for `id`), `type`
    one of FIELD_TYPES; `guard` the condition under which the caller may see the field's value
    (its bound field view rule; None: everywhere); `locales` for a localized field, the locale chain
    its value resolves through (decisions.md, Localized fields: the value at `path.<code>` of the
    first code that holds one; empty: not localized)."""

    path: str
    type: str
    guard: Cond | None = None
    locales: tuple[str, ...] = ()

    @property
    def sort_path(self) -> str | tuple[str, ...]:
        """What a sort on this field orders by: `path`; for a localized field `path.<code>` (one
        locale) or the tuple of those paths, the first that holds a value (a fallback chain)."""
        if not self.locales:
            return self.path
        paths = tuple(f"{self.path}.{code}" for code in self.locales)
        return paths[0] if len(paths) == 1 else paths

    def term(self, op: str, value: Any, pattern: re.Pattern[str] | None = None) -> Cond:
        """`field OP value` on this field's value as answers show it: one Term, or for a localized
        field `localized_term`; not joined to the guard."""
        if not self.locales:
            return Term(self.path, self.type, op, value, pattern)
        return localized_term(self, op, value, pattern)


def localized_term(field: ResolvedField, op: str, value: Any, pattern: re.Pattern[str] | None = None) -> Cond:
    """`field OP value` on a localized field's resolved value (its chain's first value, else null), as
    terms on the stored paths: for the chain de -> en, `title = x` is `title.de = x || (title.de = null
    && title.en = x)`. Each branch is an equality or a range on one stored path beside nulls of the
    paths before it, so an index on `title.<code>` serves it (no `$expr`). Where null satisfies the
    comparison (`!=`, `!~`), a branch also needs its path to hold a value, but for the last one, whose
    term is true on null as well. Raises nothing."""
    paths = [f"{field.path}.{code}" for code in field.locales]

    def absent(path: str) -> Term:
        return Term(path, field.type, "=", None)

    if value is None and op in ("=", "!="):
        if op == "=":
            return all_of(*(absent(path) for path in paths))
        return any_of(*(Term(path, field.type, "!=", None) for path in paths))
    null_holds = values.compare(values.MISSING, op, value, pattern)
    branches: list[Cond] = []
    for index, path in enumerate(paths):
        parts: list[Cond] = [absent(before) for before in paths[:index]]
        if null_holds and index < len(paths) - 1:
            parts.append(Term(path, field.type, "!=", None))
        parts.append(Term(path, field.type, op, value, pattern))
        branches.append(all_of(*parts))
    return any_of(*branches)


class FieldResolver(Protocol):
    """Maps an API field name (as written in `filter` / `sort` / a rule) to its stored field."""

    def resolve(self, name: str) -> ResolvedField | None:
        """The field called `name`, or None when the collection has no such field (or the caller
        may never see it)."""
        ...


class Variables(Protocol):
    """The request variables a rule is bound with (`rules.RequestContext`)."""

    def value(self, variable: Variable) -> Any:
        """The value of `variable`. Raises InvalidFilter for an unknown name."""
        ...


def build(node: Node, resolver: FieldResolver, variables: Variables | None = None) -> Cond:
    """Resolve and type the AST `node` over `resolver`'s fields, binding request variables from
    `variables` (None for a filter, which has none): comparisons of two request values fold to
    TRUE / FALSE here. Raises InvalidFilter (with the position) for an unknown field or variable, a
    value the field's type does not take, an operator the type does not support, or a `~` value
    over MAX_REGEX_LENGTH once escaped; TypeError for a non-Node (a programming error)."""
    if isinstance(node, Compare):
        return term(node, resolver)
    if isinstance(node, (And, Or)):
        if not node.items:
            raise InvalidFilter("empty filter expression at position 0")
        parts = [build(item, resolver, variables) for item in node.items]
        return all_of(*parts) if isinstance(node, And) else any_of(*parts)
    if isinstance(node, VarCompare):
        if variables is None:
            raise InvalidFilter(f"request variables are only available in rules at position {node.position}")
        return _bind_compare(node, resolver, variables)
    raise TypeError(f"not a filter node: {node!r}")


def term(node: Compare, resolver: FieldResolver) -> Cond:
    """One `field OP value` comparison as a typed Term, joined to the field's guard. Raises
    InvalidFilter as `build` does."""
    resolved = resolver.resolve(node.field)
    if resolved is None:
        raise InvalidFilter(f"unknown field '{node.field}' at position {node.position}")
    if resolved.type not in FIELD_TYPES:
        raise ValueError(f"unknown field type {resolved.type!r} for field '{node.field}'")
    _check_operator(node, resolved.type)
    value = typed_value(node, resolved.type)
    pattern = None
    if node.op in ("~", "!~"):
        escaped = escape_regex(value)
        if len(escaped) > MAX_REGEX_LENGTH:
            raise InvalidFilter(
                f"value of '{node.field}' is too long for '{node.op}': at most {MAX_REGEX_LENGTH} characters "
                f"(special characters count double, NUL four) at position {node.value.position}")
        pattern = re.compile(escaped, re.IGNORECASE)
    made = resolved.term(node.op, value, pattern)
    return made if resolved.guard is None else all_of(resolved.guard, made)


def _bind_compare(node: VarCompare, resolver: FieldResolver, variables: Variables) -> Cond:
    right = variables.value(node.right) if isinstance(node.right, Variable) else node.right
    if isinstance(node.left, Variable):
        left = variables.value(node.left)
        if isinstance(right, Literal):
            # A bare number literal is also its text, so a text value can equal or contain `123`
            # (never order against it: values of two kinds do not order).
            bare = right.kind == "number" and isinstance(left, str) and node.op not in ORDER_OPERATORS
            operand = right.raw if bare else right.value
        else:
            operand = right
        return TRUE if values.compare(left, node.op, operand) else FALSE
    # A field compared with a variable: the variable's value becomes the literal of a filter term.
    literal = right if isinstance(right, Literal) else literal_of(right)
    if literal is None:  # an object or a list: equal to no stored value
        return TRUE if node.op in ("!=", "!~") else FALSE
    try:
        return term(Compare(node.left, node.op, literal, node.position), resolver)
    except InvalidFilter:
        if resolver.resolve(node.left) is None:
            raise
        # The value does not fit the field's type (a text id against a number field), or is too
        # long for a pattern: it equals no stored value.
        return TRUE if node.op in ("!=", "!~") else FALSE


def literal_of(value: Any) -> Literal | None:
    """A request value as a quoted literal (so the field's type decides how it is read), or None for
    an object, a list or a non-finite number."""
    if value is None:
        return Literal("null", None, "null", False)
    if isinstance(value, bool):
        return Literal("bool", value, "true" if value else "false", False)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return None
        return Literal("number", value, repr(value), False)
    if isinstance(value, str):
        return Literal("string", value, value, True)
    return None


def search(text: str, fields: list[ResolvedField]) -> Cond:
    """`search`: every whitespace-separated word of `text` occurs (case-insensitive substring) in at
    least one of `fields` where the caller may see it (each field's guard joins its term). No words:
    TRUE; no fields: FALSE. Raises InvalidFilter for more than MAX_SEARCH_WORDS words, a word over
    MAX_REGEX_LENGTH once escaped, or a text over MAX_FILTER_LENGTH characters. A localized field is
    searched in its resolved value (`localized_term`)."""
    words = search_words(text)
    clauses: list[Cond] = []
    for word in words:
        pattern = re.compile(escape_regex(word), re.IGNORECASE)
        found = [(f.guard, f.term("~", word, pattern)) for f in fields]
        clauses.append(any_of(*(t if guard is None else all_of(guard, t) for guard, t in found)))
    return all_of(*clauses)


def search_words(text: str) -> list[str]:
    """The words of a `search` text. Raises InvalidFilter as `search` does."""
    if len(text) > MAX_FILTER_LENGTH:
        raise InvalidFilter(f"search text is longer than {MAX_FILTER_LENGTH} characters")
    words = text.split()
    if len(words) > MAX_SEARCH_WORDS:
        raise InvalidFilter(f"search text has more than {MAX_SEARCH_WORDS} words")
    for number, word in enumerate(words, start=1):
        if len(escape_regex(word)) > MAX_REGEX_LENGTH:
            raise InvalidFilter(
                f"search word {number} is too long: at most {MAX_REGEX_LENGTH} characters "
                "(special characters count double, NUL four)")
    return words


def escape_regex(text: str) -> str:
    """`text` as a regex matching itself literally, in the syntax of both Python and PCRE.

    `re.escape` leaves NUL as is, and a BSON regex (a C string) cannot hold it, so NUL is
    written as the escape `\\x00`. Raises nothing."""
    return re.escape(text).replace("\x00", "\\x00")


def typed_value(node: Compare, field_type: str) -> Any:
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
    if op in ORDER_OPERATORS and field_type == "bool":
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
    return InvalidFilter(f"field '{node.field}' expects {what}, got {node.value.raw!r} at position {node.position}")


def document_value(document: Mapping[str, Any], path: str) -> Any:
    """The value at `path` of a stored document, `values.MISSING` when it has none (`values.lookup`:
    a dotted path reads into objects, a localized field's `title.de`)."""
    return values.lookup(document, path)
