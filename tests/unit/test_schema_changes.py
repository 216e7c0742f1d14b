"""Unit tests of `cms.services.content.schema_changes` and `schema_checks`: which stored values survive a field
change."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.models import Collection, FieldSpec, Validation
from cms.services.content.schema_changes import (
    FieldChange,
    ValueRefused,
    convert_batch,
    convert_value,
    field_changes,
)
from cms.services.content.schema_checks import ChangeCheck

TEXT = FieldSpec("f", "text")
EDITOR = FieldSpec("f", "editor")
NUMBER = FieldSpec("f", "number")
DATE = FieldSpec("f", "date")
BOOL = FieldSpec("f", "bool")
JSON = FieldSpec("f", "json")
EMAIL = FieldSpec("f", "email")
SELECT = FieldSpec("f", "select", values=("a", "b", "c"))
SELECT_AB = FieldSpec("f", "select", values=("a", "b"))
TAGS = FieldSpec("f", "select", values=("a", "b", "c"), max_select=3)
TAGS_2 = FieldSpec("f", "select", values=("a", "b", "c"), max_select=2)
FILES = FieldSpec("f", "file", max_select=3)
FILE = FieldSpec("f", "file")
SMALL = FieldSpec("f", "number", Validation(max=10))
UPPER = FieldSpec("f", "text", Validation(pattern="^[A-Z]"))
SHORT = FieldSpec("f", "text", Validation(max=3))
REQUIRED = FieldSpec("f", "text", Validation(required=True))
WHEN = datetime(2024, 3, 1, 10, 30, tzinfo=UTC)

REFUSED = object()

CASES: list[tuple[str, FieldSpec, FieldSpec, Any, Any]] = [
    ("text-int", TEXT, NUMBER, "12", 12),
    ("text-negative", TEXT, NUMBER, "-5", -5),
    ("text-float", TEXT, NUMBER, "2.5", 2.5),
    ("text-float-zero", TEXT, NUMBER, "12.0", 12.0),
    ("text-big-exponent", TEXT, NUMBER, "1e+16", 1e16),
    ("text-word", TEXT, NUMBER, "twelve", REFUSED),
    ("text-leading-zero", TEXT, NUMBER, "007", REFUSED),
    ("text-padded", TEXT, NUMBER, " 12", REFUSED),
    ("text-short-exponent", TEXT, NUMBER, "1e3", REFUSED),
    ("text-empty", TEXT, NUMBER, "", None),
    ("text-blank", TEXT, NUMBER, "  ", REFUSED),
    ("number-int-text", NUMBER, TEXT, 12, "12"),
    ("number-negative-text", NUMBER, TEXT, -5, "-5"),
    ("number-float-text", NUMBER, TEXT, 0.1, "0.1"),
    ("number-too-long-text", NUMBER, SHORT, 12345, REFUSED),
    ("number-date", NUMBER, DATE, 2024, REFUSED),
    ("number-basic-date", NUMBER, DATE, 20240301, REFUSED),
    ("number-bool", NUMBER, BOOL, 1, REFUSED),
    ("text-date", TEXT, DATE, "2024-03-01T10:30:00.000Z", WHEN),
    ("text-short-date", TEXT, DATE, "2024-03-01", REFUSED),
    ("date-text", DATE, TEXT, WHEN, "2024-03-01T10:30:00.000Z"),
    ("text-bool", TEXT, BOOL, "true", True),
    ("text-yes", TEXT, BOOL, "yes", REFUSED),
    ("bool-text", BOOL, TEXT, False, "false"),
    ("text-email", TEXT, EMAIL, "a@example.com", "a@example.com"),
    ("text-bad-email", TEXT, EMAIL, "nobody", REFUSED),
    ("text-formula-editor", TEXT, EDITOR, "=1+1", "=1+1"),
    ("text-json-object", TEXT, JSON, '{"a":1}', {"a": 1}),
    ("text-json-word", TEXT, JSON, "hello", REFUSED),
    ("json-text", JSON, TEXT, {"a": [1, None]}, '{"a":[1,null]}'),
    ("text-select", TEXT, SELECT, "b", "b"),
    ("text-select-unknown", TEXT, SELECT, "z", REFUSED),
    ("select-text", SELECT, TEXT, "a", "a"),
    ("select-wraps", SELECT, TAGS, "a", ["a"]),
    ("text-wraps", TEXT, TAGS, "c", ["c"]),
    ("text-list-text", TEXT, TAGS, '["a","b"]', ["a", "b"]),
    ("json-list-select", JSON, TAGS, ["a", "b"], ["a", "b"]),
    ("list-one-item", TAGS, SELECT, ["b"], "b"),
    ("list-two-items", TAGS, SELECT, ["a", "b"], REFUSED),
    ("list-empty", TAGS, SELECT, [], None),
    ("list-item-unknown", TAGS, SELECT_AB, ["c"], REFUSED),
    ("list-text", TAGS, TEXT, ["a", "b"], '["a","b"]'),
    ("files-file", FILES, FILE, ["f1"], "f1"),
    ("file-files", FILE, FILES, "f1", ["f1"]),
    ("select-values-kept", SELECT, SELECT_AB, "a", "a"),
    ("select-value-removed", SELECT, SELECT_AB, "c", REFUSED),
    ("max-select-fits", TAGS, TAGS_2, ["a", "b"], ["a", "b"]),
    ("max-select-lowered", TAGS, TAGS_2, ["a", "b", "c"], REFUSED),
    ("number-under-max", NUMBER, SMALL, 10, 10),
    ("number-over-max", NUMBER, SMALL, 11, REFUSED),
    ("pattern-matches", TEXT, UPPER, "Hello", "Hello"),
    ("pattern-refuses", TEXT, UPPER, "hello", REFUSED),
    ("required-ignored", TEXT, REQUIRED, "", ""),
    ("none-never-blocks", TEXT, DATE, None, None),
]


@pytest.mark.parametrize("old, new, value, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_convert_value(old: FieldSpec, new: FieldSpec, value: Any, expected: Any) -> None:
    if expected is REFUSED:
        with pytest.raises(ValueRefused):
            convert_value(old, new, value)
    else:
        converted = convert_value(old, new, value)
        assert converted == expected
        assert type(converted) is type(expected)


def collection(*fields: FieldSpec) -> Collection:
    return Collection(id="c1", name="posts", type="base", fields=fields, created=WHEN, updated=WHEN)


@pytest.mark.parametrize("old, new, changed", [
    (TEXT, NUMBER, True),
    (TEXT, FieldSpec("f", "text", Validation(required=True, unique=True)), False),
    (TEXT, TEXT, False),
    (SELECT, SELECT_AB, True),
    (TEXT, UPPER, True),
], ids=["type", "required-and-unique", "same", "values", "pattern"])
def test_field_changes(old: FieldSpec, new: FieldSpec, changed: bool) -> None:
    other = FieldSpec("kept", "text")
    added = FieldSpec("added", "number")
    changes = field_changes(collection(old, other), collection(new, other, added))
    assert changes == ([FieldChange(old, new)] if changed else [])


def test_check_counts_blocking_records_per_field() -> None:
    check = ChangeCheck([FieldChange(TEXT, NUMBER), FieldChange(FieldSpec("s", "select", values=("a", "b", "c")),
                                                                FieldSpec("s", "select", values=("a",)))])
    check.add([("r1", {"f": "1"}), ("r2", {"f": "one"}), ("r3", {"f": "x" * 60, "s": "b"})])
    check.add([("r4", {"s": "a"}), ("r5", {})])
    problems = check.problems()
    assert problems[0] == ('f: 2 records hold values that cannot be converted to number '
                           '(e.g. record r2: "one")')
    assert problems[1].startswith("s: 1 record holds values that cannot be converted to select (e.g. record r3:")
    assert len(problems) == 2


def test_check_shortens_the_example() -> None:
    check = ChangeCheck([FieldChange(TEXT, NUMBER)])
    check.add([("r1", {"f": "x" * 60})])
    (problem,) = check.problems()
    assert problem.endswith('"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…)') and len(problem) < 120


def test_check_refuses_converted_duplicates_of_a_unique_field() -> None:
    unique_number = FieldSpec("f", "number", Validation(unique=True))
    check = ChangeCheck([FieldChange(TEXT, unique_number)])
    check.add([("r1", {"f": "12"}), ("r2", {"f": "13"})])
    assert check.problems() == []
    check.add([("r3", {"f": "12.0"})])
    (problem,) = check.problems()
    assert problem.startswith("f: 1 record holds values that would duplicate") and "r3" in problem


def test_check_accepts_what_converts() -> None:
    check = ChangeCheck([FieldChange(TEXT, NUMBER)])
    check.add([("r1", {"f": "1"}), ("r2", {"f": None}), ("r3", {})])
    assert check.problems() == []


def test_convert_batch_sets_unsets_and_skips() -> None:
    changes = [FieldChange(TEXT, NUMBER), FieldChange(FieldSpec("s", "select", values=("a",)),
                                                      FieldSpec("s", "text"))]
    updates, refused = convert_batch(changes, [
        ("r1", {"f": "12", "s": "a"}),   # s: select -> text keeps the same string, nothing to write
        ("r2", {"f": ""}),
        ("r3", {"f": "bad"}),
        ("r4", {"s": "a"}),
    ])
    assert updates == [("r1", {"f": 12}, []), ("r2", {}, ["f"])]
    assert refused == [("f", "r3", "bad")]


def test_check_asks_for_the_ids_of_a_new_relation_target() -> None:
    author = FieldSpec("f", "relation", collection_id="authors")
    moved = FieldChange(author, replace(author, collection_id="people"))
    same_target = FieldChange(author, replace(author, validation=Validation(max=5)))
    from_text = FieldChange(TEXT, author)
    check = ChangeCheck([moved])
    assert check.add([("r1", {"f": "a1"}), ("r2", {})]) == [(moved, "r1", "a1")]
    assert ChangeCheck([same_target]).add([("r1", {"f": "a1"})]) == []
    assert ChangeCheck([from_text]).add([("r1", {"f": "a1"})]) == [(from_text, "r1", "a1")]
    check.refuse("f", "r1", "a1")
    assert check.problems() == ['f: 1 record holds values that cannot be converted to relation (e.g. record r1: "a1")']
