"""Scenario tables for cms.filters.grammar (filter text -> AST) and cms.filters.sort."""

from __future__ import annotations

import pytest

from cms.errors import InvalidFilter
from cms.filters.grammar import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_LENGTH,
    MAX_FILTER_TERMS,
    And,
    Compare,
    Literal,
    Node,
    Or,
    parse_filter,
)
from cms.filters.sort import MAX_SORT_FIELDS, SortKey, parse_sort


def s(value: str, raw: str | None = None, *, quoted: bool = False) -> Literal:
    return Literal("string", value, value if raw is None else raw, quoted)


def q(value: str, raw: str | None = None) -> Literal:
    return s(value, raw, quoted=True)


def n(value: float, raw: str) -> Literal:
    return Literal("number", value, raw, False)


TRUE = Literal("bool", True, "true", False)
FALSE = Literal("bool", False, "false", False)
NULL = Literal("null", None, "null", False)
ONE, TWO, THREE = n(1, "1"), n(2, "2"), n(3, "3")


def c(field: str, op: str, value: Literal, position: int = 0) -> Compare:
    return Compare(field, op, value, position)


PARSES: dict[str, tuple[str, Node]] = {
    # operators
    "eq": ("title=hello", c("title", "=", s("hello"))),
    "ne": ("a!=1", c("a", "!=", ONE)),
    "gt": ("a>1", c("a", ">", ONE)),
    "gte": ("a>=1", c("a", ">=", ONE)),
    "lt": ("a<1", c("a", "<", ONE)),
    "lte": ("a<=1", c("a", "<=", ONE)),
    "contains": ("a~foo", c("a", "~", s("foo"))),
    "not-contains": ("a!~foo", c("a", "!~", s("foo"))),
    # boolean structure
    "and": ("a=1 && b=2", And((c("a", "=", ONE), c("b", "=", TWO, 7)))),
    "or": ("a=1 || b=2", Or((c("a", "=", ONE), c("b", "=", TWO, 7)))),
    "and-binds-tighter-right": (
        "a=1 || b=2 && c=3",
        Or((c("a", "=", ONE), And((c("b", "=", TWO, 7), c("c", "=", THREE, 14))))),
    ),
    "and-binds-tighter-left": (
        "a=1 && b=2 || c=3",
        Or((And((c("a", "=", ONE), c("b", "=", TWO, 7))), c("c", "=", THREE, 14))),
    ),
    "parentheses-override": (
        "(a=1 || b=2) && c=3",
        And((Or((c("a", "=", ONE, 1), c("b", "=", TWO, 8))), c("c", "=", THREE, 16))),
    ),
    "flatten-and-chain": (
        "a=1 && b=2 && c=3",
        And((c("a", "=", ONE), c("b", "=", TWO, 7), c("c", "=", THREE, 14))),
    ),
    "flatten-nested-and": (
        "a=1 && (b=2 && c=3)",
        And((c("a", "=", ONE), c("b", "=", TWO, 8), c("c", "=", THREE, 15))),
    ),
    "flatten-nested-or": (
        "(a=1 || b=2) || c=3",
        Or((c("a", "=", ONE, 1), c("b", "=", TWO, 8), c("c", "=", THREE, 16))),
    ),
    "no-flatten-mixed": (
        "a=1 && (b=2 || c=3)",
        And((c("a", "=", ONE), Or((c("b", "=", TWO, 8), c("c", "=", THREE, 15))))),
    ),
    "redundant-parentheses": ("((a=1))", c("a", "=", ONE, 2)),
    # whitespace
    "no-spaces": ("a=1&&b=2", And((c("a", "=", ONE), c("b", "=", TWO, 5)))),
    "spaces-everywhere": (" a = 1 && b = 2 ", And((c("a", "=", ONE, 1), c("b", "=", TWO, 10)))),
    "tabs-and-newlines": ("a=1\n||\tb=2", Or((c("a", "=", ONE), c("b", "=", TWO, 7)))),
    "space-inside-parentheses": ("( a=1 )", c("a", "=", ONE, 2)),
    "no-space-before-close": ("(a=x)", c("a", "=", s("x"), 1)),
    # quoted strings
    "single-quoted": ("a='hello world'", c("a", "=", q("hello world"))),
    "double-quoted": ('a="hello world"', c("a", "=", q("hello world"))),
    "empty-quoted": ("a=''", c("a", "=", q(""))),
    "escaped-single-quote": (r"a='it\'s'", c("a", "=", q("it's", r"it\'s"))),
    "escaped-double-quote": (r'a="say \"hi\""', c("a", "=", q('say "hi"', r"say \"hi\""))),
    "escaped-backslash": (r"a='c:\\dir'", c("a", "=", q("c:\\dir", r"c:\\dir"))),
    "other-backslash-kept": (r"a='a\nb'", c("a", "=", q(r"a\nb"))),
    "other-quote-inside": ('a="it\'s"', c("a", "=", q("it's"))),
    "operators-inside-quotes": ("a='x && y || (z)'", c("a", "=", q("x && y || (z)"))),
    "quoted-number-is-string": ("a='123'", c("a", "=", q("123"))),
    "quoted-true-is-string": ("a='true'", c("a", "=", q("true"))),
    "quoted-then-and": ("a='x'&&b=2", And((c("a", "=", q("x")), c("b", "=", TWO, 7)))),
    # numbers, bools, null
    "int": ("a=42", c("a", "=", n(42, "42"))),
    "negative-int": ("a=-7", c("a", "=", n(-7, "-7"))),
    "leading-zero": ("a=007", c("a", "=", n(7, "007"))),
    "float": ("a=2.5", c("a", "=", n(2.5, "2.5"))),
    "exponent": ("a=1e3", c("a", "=", n(1000.0, "1e3"))),
    "negative-exponent": ("a=-1.5E-2", c("a", "=", n(-0.015, "-1.5E-2"))),
    "true": ("a=true", c("a", "=", TRUE)),
    "false": ("a=false", c("a", "=", FALSE)),
    "null": ("a=null", c("a", "=", NULL)),
    "capitalised-true-is-string": ("a=True", c("a", "=", s("True"))),
    # bare words
    "bare-word": ("status=published", c("status", "=", s("published"))),
    "bare-email": ("email=a@b.com", c("email", "=", s("a@b.com"))),
    "bare-date": ("released>=2024-01-01", c("released", ">=", s("2024-01-01"))),
    "bare-datetime": (
        "released>2024-01-01T10:00:00Z",
        c("released", ">", s("2024-01-01T10:00:00Z")),
    ),
    "bare-url": ("site=https://x.org/a?b=1", c("site", "=", s("https://x.org/a?b=1"))),
    "bare-version": ("v=1.2.3", c("v", "=", s("1.2.3"))),
    "bare-dash": ("a=-", c("a", "=", s("-"))),
    "bare-with-equals": ("a=b=c", c("a", "=", s("b=c"))),
    "bare-single-ampersand": ("a=b&c", c("a", "=", s("b&c"))),
    "bare-apostrophe": ("a=it's", c("a", "=", s("it's"))),
    "bare-dollar": ("title=$ne", c("title", "=", s("$ne"))),
    "bare-unicode": ("a=zürich", c("a", "=", s("zürich"))),
    "bare-then-and": ("a=x&&b=y", And((c("a", "=", s("x")), c("b", "=", s("y"), 5)))),
    "bare-then-or": ("a=x||b=y", Or((c("a", "=", s("x")), c("b", "=", s("y"), 5)))),
    # field names
    "underscore-field": ("_private=1", c("_private", "=", ONE)),
    "digits-in-field": ("a_1B=1", c("a_1B", "=", ONE)),
}


@pytest.mark.parametrize("text, expected", list(PARSES.values()), ids=list(PARSES))
def test_parse_filter(text: str, expected: Node) -> None:
    assert parse_filter(text) == expected


ERRORS: dict[str, tuple[str, str]] = {
    "empty": ("", "empty filter expression at position 0"),
    "only-spaces": ("   ", "empty filter expression at position 0"),
    "field-only": ("a", "expected an operator after field 'a' at position 1"),
    "no-value": ("a=", "unexpected end of filter, expected a value at position 2"),
    "no-value-after-spaces": ("a =  ", "expected a value at position 5"),
    "dangling-and": ("a=1 &&", "unexpected end of filter, expected a field name or '(' at position 6"),
    "dangling-or": ("a=1 ||  ", "unexpected end of filter, expected a field name or '(' at position 8"),
    "leading-and": ("&& a=1", "expected a field name, found '&' at position 0"),
    "missing-operator": ("a 1", "missing operator after field 'a', found '1' at position 2"),
    "dotted-field": ("a.b=1", "missing operator after field 'a', found '.' at position 1"),
    "operator-in-field": ("title.$gt=1", "missing operator after field 'title', found '.' at position 5"),
    "dollar-field": ("$where=1", "expected a field name, found '$' at position 0"),
    "digit-field": ("1a=1", "expected a field name, found '1' at position 0"),
    "unterminated-single": ("a='abc", "unterminated string at position 2"),
    "unterminated-double": ('a = "abc', "unterminated string at position 4"),
    "unterminated-escaped-quote": (r"a='abc\'", "unterminated string at position 2"),
    "unterminated-trailing-backslash": ("a='abc\\", "unterminated string at position 2"),
    "unclosed-parenthesis": ("(a=1", "unbalanced parenthesis: missing ')' for '(' at position 0"),
    "unclosed-inner-parenthesis": ("a=1 && ((b=2)", "missing ')' for '(' at position 7"),
    "extra-close": ("a=1)", "unbalanced parenthesis: unexpected ')' at position 3"),
    "close-instead-of-term": ("a=1 && )", "unexpected ')', expected a field name at position 7"),
    "empty-parentheses": ("()", "empty expression in parentheses at position 0"),
    "empty-parentheses-later": ("a=1 || ( )", "empty expression in parentheses at position 7"),
    "missing-connective": ("a=1 b=2", "expected '&&', '||' or end of filter, found 'b' at position 4"),
    "missing-connective-in-parens": ("(a=1 b=2)", "expected '&&', '||' or ')', found 'b' at position 5"),
    "single-ampersand": ("a=1 & b=2", "found '&' at position 4"),
    "junk-after-quote": ("a='x'y", "found 'y' at position 5"),
    "double-equals": ("a==1", "unexpected '=' at the start of a value (quote the value) at position 2"),
    "arrow": ("a=>1", "unexpected '>' at the start of a value (quote the value) at position 2"),
    "value-in-parentheses": ("a=(1)", "missing value, found '(' at position 2"),
    "paren-in-bare-word": (
        "a=f(x)",
        "'(' is not allowed in an unquoted value (quote the value) at position 3",
    ),
    "value-missing-before-and": ("a= && b=1", "missing value, found '&' at position 3"),
    "value-missing-before-close": ("(a=)", "missing value, found ')' at position 3"),
    "number-overflow": ("a=1e999", "number '1e999' is out of range at position 2"),
}


@pytest.mark.parametrize("text, message", list(ERRORS.values()), ids=list(ERRORS))
def test_parse_filter_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse_filter(text)
    assert message in caught.value.detail
    assert caught.value.code == "invalid_filter"


def nested(depth: int) -> str:
    return "(" * depth + "a=1" + ")" * depth


def terms(count: int) -> str:
    return " && ".join(["a=1"] * count)  # each "a=1 && " is 7 characters


LIMITS: dict[str, tuple[str, str | None]] = {
    "length-at-limit": ("a=" + "x" * (MAX_FILTER_LENGTH - 2), None),
    "length-over-limit": (
        "a=" + "x" * (MAX_FILTER_LENGTH - 1),
        f"longer than {MAX_FILTER_LENGTH} characters at position {MAX_FILTER_LENGTH}",
    ),
    "depth-at-limit": (nested(MAX_FILTER_DEPTH), None),
    "depth-over-limit": (
        nested(MAX_FILTER_DEPTH + 1),
        f"nested deeper than {MAX_FILTER_DEPTH} levels at position {MAX_FILTER_DEPTH}",
    ),
    "terms-at-limit": (terms(MAX_FILTER_TERMS), None),
    "terms-over-limit": (
        terms(MAX_FILTER_TERMS + 1),
        f"too many conditions (max {MAX_FILTER_TERMS}) at position {7 * MAX_FILTER_TERMS}",
    ),
}


@pytest.mark.parametrize("text, message", list(LIMITS.values()), ids=list(LIMITS))
def test_parse_filter_limits(text: str, message: str | None) -> None:
    if message is None:
        parse_filter(text)
        return
    with pytest.raises(InvalidFilter) as caught:
        parse_filter(text)
    assert message in caught.value.detail


SORTS: dict[str, tuple[str, list[SortKey]]] = {
    "single": ("title", [SortKey("title", False)]),
    "descending": ("-created", [SortKey("created", True)]),
    "explicit-ascending": ("+title", [SortKey("title", False)]),
    "several": ("-created,title", [SortKey("created", True), SortKey("title", False)]),
    "spaces-around-commas": (
        " -created , +title ,id",
        [SortKey("created", True), SortKey("title", False), SortKey("id", False)],
    ),
    "at-limit": (",".join("abcdefgh"[:MAX_SORT_FIELDS]), [SortKey(x, False) for x in "abcdefgh"]),
    "underscore": ("_a1", [SortKey("_a1", False)]),
}


@pytest.mark.parametrize("text, expected", list(SORTS.values()), ids=list(SORTS))
def test_parse_sort(text: str, expected: list[SortKey]) -> None:
    assert parse_sort(text) == expected


SORT_ERRORS: dict[str, tuple[str, str]] = {
    "empty": ("", "empty sort expression at position 0"),
    "only-spaces": ("  ", "empty sort expression at position 0"),
    "trailing-comma": ("title,", "empty sort field at position 6"),
    "leading-comma": (",title", "empty sort field at position 0"),
    "double-comma": ("a,,b", "empty sort field at position 2"),
    "blank-item": ("a, ,b", "empty sort field at position 3"),
    "sign-only": ("-", "invalid sort field '-' at position 0"),
    "double-sign": ("--a", "invalid sort field '--a' at position 0"),
    "space-after-sign": ("a, - b", "invalid sort field '- b' at position 3"),
    "digit-first": ("1a", "invalid sort field '1a' at position 0"),
    "dotted": ("a.b", "invalid sort field 'a.b' at position 0"),
    "dollar": ("$natural", "invalid sort field '$natural' at position 0"),
    "inner-space": ("ti tle", "invalid sort field 'ti tle' at position 0"),
    "twice": ("title,-title", "sort field 'title' is given twice at position 6"),
    "over-limit": ("a,b,c,d,e,f,g,h,i", f"too many sort fields (max {MAX_SORT_FIELDS}) at position 16"),
}


@pytest.mark.parametrize("text, message", list(SORT_ERRORS.values()), ids=list(SORT_ERRORS))
def test_parse_sort_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse_sort(text)
    assert message in caught.value.detail


@pytest.mark.parametrize("text, position", [
    ("title='x'", 6), ("title = 'x'", 8), ("a=1 && title ~ word", 15), ("n>=-2", 3), ("f=null", 2),
], ids=["quoted", "spaced", "second-term", "number", "null"])
def test_values_carry_their_position(text: str, position: int) -> None:
    node = parse_filter(text)
    term = node.items[-1] if isinstance(node, And) else node
    assert isinstance(term, Compare)
    assert term.value.position == position
