"""Scenario tables for cms.security.json_input (bounded JSON for client text) and
cms.security.patterns (field patterns on RE2)."""

from __future__ import annotations

from typing import Any

import pytest

from cms.security.json_input import (
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    JsonInputError,
    check_depth,
    decode_json,
)
from cms.security.patterns import MAX_PATTERN_LENGTH, PatternError, compile_pattern


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


ACCEPTED: dict[str, tuple[str | bytes, Any]] = {
    "object": ('{"a": [1, 2.5, "x", null, true]}', {"a": [1, 2.5, "x", None, True]}),
    "bytes": (b'{"a": "\xc3\xa9"}', {"a": "é"}),
    "max-depth": (nested(MAX_JSON_DEPTH), eval(nested(MAX_JSON_DEPTH))),
    "max-digits": ("1" * MAX_JSON_INT_DIGITS, int("1" * MAX_JSON_INT_DIGITS)),
    "negative-max-digits": ("-" + "9" * MAX_JSON_INT_DIGITS, -int("9" * MAX_JSON_INT_DIGITS)),
    "surrogate-pair": ('"\\ud83d\\ude00"', "\U0001F600"),
    "scalar": ("3", 3),
}


@pytest.mark.parametrize("text, expected", list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_decode_json_accepts(text: str | bytes, expected: Any) -> None:
    assert decode_json(text) == expected


REFUSED: dict[str, tuple[str | bytes, str]] = {
    "too-deep": (nested(MAX_JSON_DEPTH + 1), f"nested deeper than {MAX_JSON_DEPTH} levels"),
    "deep-objects": ('{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1), "nested deeper"),
    "recursion-deep": (nested(3000), "nested deeper"),
    "recursion-deep-login": ('{"email": ' + nested(1000) + "}", "nested deeper"),
    "too-many-digits": ("1" * (MAX_JSON_INT_DIGITS + 1), f"more than {MAX_JSON_INT_DIGITS} digits"),
    "python-int-limit": ("[" + "7" * 5000 + "]", f"more than {MAX_JSON_INT_DIGITS} digits"),
    "nan": ('{"a": NaN}', "NaN is not valid JSON"),
    "infinity": ("[-Infinity]", "-Infinity is not valid JSON"),
    "lone-surrogate": ('{"a": "\\ud800"}', "lone surrogate"),
    "lone-low-surrogate-key": ('{"\\uDC00": 1}', "lone surrogate"),
    "not-utf8": (b'{"a": "\xff"}', "not UTF-8 text (invalid byte at offset 7)"),
    "syntax": ('{"a": }', "Expecting value at line 1 column 7"),
    "trailing": ("[1] x", "Extra data"),
}


@pytest.mark.parametrize("text, message", list(REFUSED.values()), ids=list(REFUSED))
def test_decode_json_refuses(text: str | bytes, message: str) -> None:
    with pytest.raises(JsonInputError) as caught:
        decode_json(text)
    assert message in str(caught.value)
    assert "sys.set_int_max_str_digits" not in str(caught.value)


def test_check_depth_counts_containers_only() -> None:
    check_depth([[["x"]]], limit=3)
    with pytest.raises(JsonInputError):
        check_depth([[[[]]]], limit=3)
    check_depth("scalar", limit=0)
    with pytest.raises(JsonInputError):
        check_depth({}, limit=0)


# --- patterns ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern, text, matches", [
    ("^[a-z0-9-]+$", "hello-1", True),
    ("^[a-z0-9-]+$", "Hello", False),
    ("ell", "hello", True),  # search semantics
    ("^é+$", "éé", True),
    (r"^\d{3}$", "123", True),
    ("^(a+)+$", "a" * 28 + "!", False),
], ids=["slug", "slug-upper", "search", "unicode", "counted", "redos-shape"])
def test_compiled_patterns_search(pattern: str, text: str, matches: bool) -> None:
    assert (compile_pattern(pattern).search(text) is not None) is matches


def test_catastrophic_pattern_is_compiled_by_re2() -> None:
    regex = compile_pattern("^(a+)+$")
    # A backtracking engine (Python's re) needs seconds for 28 characters and would not finish this.
    assert regex.search("a" * 100_000 + "!") is None
    assert type(regex).__module__.startswith("re2")


@pytest.mark.parametrize("pattern, message", [
    (r"(a)\1", "invalid escape sequence"),
    ("(?=a)", "invalid perl operator"),
    ("(?<!a)b", "invalid perl operator"),
    ("(x{100}){100}", "invalid repetition size"),
    ("a" * (MAX_PATTERN_LENGTH + 1), f"longer than {MAX_PATTERN_LENGTH} characters"),
    ("(", "missing )"),
], ids=["backreference", "lookahead", "lookbehind", "blow-up", "too-long", "syntax"])
def test_patterns_re2_refuses(pattern: str, message: str) -> None:
    with pytest.raises(PatternError) as caught:
        compile_pattern(pattern)
    assert message in str(caught.value)


def test_a_pattern_of_the_maximum_length_is_accepted() -> None:
    assert compile_pattern("a" * MAX_PATTERN_LENGTH).search("a" * MAX_PATTERN_LENGTH) is not None


def test_nesting_under_scalars_is_still_measured() -> None:
    with pytest.raises(JsonInputError):
        check_depth(["x", 1, [[["deep"]]]], limit=3)
    check_depth(["x", 1, [["ok"]]], limit=3)
