"""The `filter` grammar (decisions.md, Records) and the access-rule grammar built on it
(decisions.md, Access rules): text -> AST. Pure; knows nothing of MongoDB.

    expr  := term (('&&' | '||') term)*          '&&' binds tighter than '||'
    term  := '(' expr ')' | field OP value
    OP    := = | != | > | >= | < | <= | ~ | !~   ('~' contains, case-insensitive; '!~' does not)
    value := 'single quoted' | "double quoted" | number | true | false | null | bare-word

A rule (`parse_rule`) also takes request variables on either side of a comparison:

    term     := '(' expr ')' | (field | variable) OP (value | variable)
    variable := '@request.auth.' name | '@request.data.' field-name

Whitespace around tokens is optional. A bare word runs to whitespace, '(', ')', '&&' or '||'
and is a string unless it is exactly `true`, `false`, `null` or a number. Typing a value by
the field's schema type is the job of `filters/mongo.py`, not of this module.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeAlias

from cms.errors import InvalidFilter

MAX_FILTER_LENGTH = 4096
"""Longest accepted filter text, in characters."""
MAX_FILTER_DEPTH = 16
"""Deepest accepted nesting of parentheses."""
MAX_FILTER_TERMS = 100
"""Most `field OP value` comparisons in one filter."""

FIELD_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?::(?:year|month|day|hour)(?![A-Za-z0-9_]))?")
"""A field name; a date bucket of a view collection's key (`placed:month`, decisions.md, Aggregation
and view collections) is one too, and names no field of any other collection (`unknown field`)."""
VARIABLE_PREFIX = "@request."
VARIABLE_RE = re.compile(r"@request\.(auth|data)\.([A-Za-z_][A-Za-z0-9_]*)")
NUMBER_RE = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
# Longest first, so that '!=' is not read as a bare '!' and '>=' not as '>'.
OPERATORS = ("!=", "!~", ">=", "<=", "=", ">", "<", "~")
# A bare value may not start with these: `a==1` or `a=>1` are typos, not comparisons with "=1".
_OPERATOR_CHARS = "=!<>~"
_QUOTES = "'\""


@dataclass(frozen=True)
class Literal:
    """A value as written: `kind` is "string" | "number" | "bool" | "null".

    `value` is the Python value (unescaped text for strings, int or float for numbers,
    bool, or None); `raw` is the source text without quotes, so a text field can take the
    bare `123` as "123"; `quoted` tells whether the value was written in quotes; `position` is
    the 0-based offset of the value (its opening quote) in the text, for error messages; it takes
    no part in equality."""

    kind: str
    value: str | int | float | bool | None
    raw: str
    quoted: bool
    position: int = dataclasses.field(default=0, compare=False)


@dataclass(frozen=True)
class Compare:
    """One `field OP value` term; `position` is the 0-based offset of `field` in the text."""

    field: str
    op: str
    value: Literal
    position: int


@dataclass(frozen=True)
class And:
    """All of `items` (two or more, none of them an `And`) must hold."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    """At least one of `items` (two or more, none of them an `Or`) must hold."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Variable:
    """A request variable of a rule, `@request.<scope>.<name>`: `scope` is "auth" or "data";
    `position` is the 0-based offset of its '@' in the text; it takes no part in equality."""

    scope: str
    name: str
    position: int = dataclasses.field(default=0, compare=False)

    @property
    def text(self) -> str:
        """The variable as written, e.g. `@request.auth.id`."""
        return f"{VARIABLE_PREFIX}{self.scope}.{self.name}"


@dataclass(frozen=True)
class VarCompare:
    """A rule comparison with a request variable on at least one side: `left` is a field name or
    a Variable, `right` a Literal or a Variable; `position` is the offset of `left`. Only
    `parse_rule` makes these; a plain `field OP value` term of a rule is a `Compare`."""

    left: str | Variable
    op: str
    right: Literal | Variable
    position: int


Node: TypeAlias = Compare | VarCompare | And | Or


def number_value(text: str) -> int | float | None:
    """The number `text` spells in full (`-?digits(.digits)?([eE][+-]?digits)?`), else None.

    Returns an int when there is neither a fraction nor an exponent, else a float. A float
    that overflows (`1e999`) gives None. Raises nothing."""
    match = NUMBER_RE.fullmatch(text)
    if match is None:
        return None
    if match.group(1) is None and match.group(2) is None:
        return int(text)
    number = float(text)
    return number if math.isfinite(number) else None


def parse_filter(text: str) -> Node:
    """Parse a filter expression into its AST: a `Compare`, `And` or `Or`.

    Nested nodes of the same kind are flattened (`a=1 && (b=2 && c=3)` is one `And` of three).
    Raises InvalidFilter, with the 0-based position in the message, when the text is empty,
    longer than MAX_FILTER_LENGTH, nests parentheses deeper than MAX_FILTER_DEPTH, holds more
    than MAX_FILTER_TERMS comparisons, or does not follow the grammar."""
    if len(text) > MAX_FILTER_LENGTH:
        raise InvalidFilter(
            f"filter is longer than {MAX_FILTER_LENGTH} characters at position {MAX_FILTER_LENGTH}"
        )
    return _Parser(text).parse()


def parse_rule(text: str) -> Node:
    """Parse an access rule (the filter grammar plus request variables) into its AST.

    A term whose sides are a field and a value is a `Compare`, as in a filter; a term with a
    `@request.auth.<name>` or `@request.data.<name>` variable on either side is a `VarCompare`.
    Which names exist is checked later, against the collection (`filters.rules.check_rule`).
    Raises InvalidFilter, with the position, as `parse_filter` does, and for a malformed
    variable."""
    if len(text) > MAX_FILTER_LENGTH:
        raise InvalidFilter(
            f"rule is longer than {MAX_FILTER_LENGTH} characters at position {MAX_FILTER_LENGTH}"
        )
    return _Parser(text, variables=True).parse()


class _Parser:
    """Recursive descent over the text; lexing is done on the fly because a bare word's
    extent depends on where it stands (after an operator it may contain '=' or '.')."""

    def __init__(self, text: str, *, variables: bool = False) -> None:
        self.text = text
        self.pos = 0
        self.terms = 0
        self.variables = variables

    def fail(self, message: str, position: int | None = None) -> NoReturn:
        raise InvalidFilter(f"{message} at position {self.pos if position is None else position}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos]

    def parse(self) -> Node:
        self.skip_space()
        if self.at_end():
            self.fail("empty filter expression", 0)
        node = self.expression(0)
        self.skip_space()
        if not self.at_end():
            if self.peek() == ")":
                self.fail("unbalanced parenthesis: unexpected ')'")
            self.fail(f"expected '&&', '||' or end of filter, found {self.peek()!r}")
        return node

    def expression(self, depth: int) -> Node:
        return self.chain("||", Or, self.conjunction, depth)

    def conjunction(self, depth: int) -> Node:
        return self.chain("&&", And, self.term, depth)

    def chain(self, operator: str, kind: type[And | Or], operand: Callable[[int], Node], depth: int) -> Node:
        """`operand` once, then again after each `operator`, joined by `kind`."""
        items = [operand(depth)]
        while True:
            self.skip_space()
            if not self.text.startswith(operator, self.pos):
                return _combine(kind, items)
            self.pos += len(operator)
            items.append(operand(depth))

    def term(self, depth: int) -> Node:
        self.skip_space()
        if self.at_end():
            self.fail("unexpected end of filter, expected a field name or '('")
        if self.peek() != "(":
            return self.comparison()
        start = self.pos
        if depth >= MAX_FILTER_DEPTH:
            self.fail(f"parentheses nested deeper than {MAX_FILTER_DEPTH} levels")
        self.pos += 1
        self.skip_space()
        if not self.at_end() and self.peek() == ")":
            self.fail("empty expression in parentheses", start)
        node = self.expression(depth + 1)
        self.skip_space()
        if self.at_end():
            self.fail("unbalanced parenthesis: missing ')' for '('", start)
        if self.peek() != ")":
            self.fail(f"expected '&&', '||' or ')', found {self.peek()!r}")
        self.pos += 1
        return node

    def comparison(self) -> Compare | VarCompare:
        start = self.pos
        left: str | Variable
        if self.variables and self.peek() == "@":
            left = self.variable()
            name = left.text
        else:
            match = FIELD_NAME_RE.match(self.text, self.pos)
            if match is None:
                if self.peek() == ")":
                    self.fail("unbalanced parenthesis: unexpected ')', expected a field name")
                self.fail(f"expected a field name, found {self.peek()!r}")
            left = name = match.group()
            self.pos = match.end()
        self.terms += 1
        if self.terms > MAX_FILTER_TERMS:
            self.fail(f"too many conditions (max {MAX_FILTER_TERMS})", start)
        self.skip_space()
        if self.at_end():
            self.fail(f"unexpected end of filter, expected an operator after field '{name}'")
        op = next((op for op in OPERATORS if self.text.startswith(op, self.pos)), None)
        if op is None:
            self.fail(f"missing operator after field '{name}', found {self.peek()!r}")
        self.pos += len(op)
        right = self.value()
        if isinstance(left, str) and isinstance(right, Literal):
            return Compare(left, op, right, start)
        return VarCompare(left, op, right, start)

    def variable(self) -> Variable:
        """`@request.auth.<name>` or `@request.data.<name>` at the current position."""
        start = self.pos
        match = VARIABLE_RE.match(self.text, self.pos)
        if match is None or (match.end() < len(self.text) and self.text[match.end()] in "."):
            self.fail("unknown variable: expected @request.auth.<name> or @request.data.<field>", start)
        self.pos = match.end()
        return Variable(match.group(1), match.group(2), start)

    def value(self) -> Literal | Variable:
        self.skip_space()
        if self.at_end():
            self.fail("unexpected end of filter, expected a value")
        if self.variables and self.peek() == "@":
            return self.variable()
        if self.peek() in _QUOTES:
            return self.quoted()
        start = end = self.pos
        text = self.text
        while (
            end < len(text)
            and not text[end].isspace()
            and text[end] not in "()"
            and not text.startswith(("&&", "||"), end)
        ):
            end += 1
        word = text[start:end]
        if not word:
            self.fail(f"missing value, found {self.peek()!r}")
        if word[0] in _OPERATOR_CHARS:
            self.fail(f"unexpected {word[0]!r} at the start of a value (quote the value)")
        if end < len(text) and text[end] == "(":
            self.fail("'(' is not allowed in an unquoted value (quote the value)", end)
        self.pos = end
        return self.bare(word, start)

    def bare(self, word: str, start: int) -> Literal:
        if word in ("true", "false"):
            return Literal("bool", word == "true", word, False, start)
        if word == "null":
            return Literal("null", None, word, False, start)
        if NUMBER_RE.fullmatch(word):
            number = number_value(word)
            if number is None:
                self.fail(f"number {word!r} is out of range", start)
            return Literal("number", number, word, False, start)
        return Literal("string", word, word, False, start)

    def quoted(self) -> Literal:
        text, start = self.text, self.pos
        quote = text[start]
        chars: list[str] = []
        i = start + 1
        while i < len(text):
            char = text[i]
            if char == "\\" and i + 1 < len(text) and text[i + 1] in "\\'\"":
                chars.append(text[i + 1])
                i += 2
                continue
            if char == quote:
                self.pos = i + 1
                return Literal("string", "".join(chars), text[start + 1 : i], True, start)
            chars.append(char)
            i += 1
        self.fail("unterminated string", start)


def _combine(kind: type[And | Or], items: list[Node]) -> Node:
    """One node for `items` joined by `kind`, lifting the items of children of the same kind."""
    if len(items) == 1:
        return items[0]
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, kind) else (item,))
    return kind(tuple(flat))
