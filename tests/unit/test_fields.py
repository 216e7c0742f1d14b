"""Scenario tables for cms.services.content.fields: parse_schema and RecordSchemas.load (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.errors import ValidationFailed
from cms.models import Collection, FieldSpec, Validation
from cms.services.content.fields import (
    RecordSchemas,
    parse_schema,
    text_field_names,
    to_json_value,
    unique_field_names,
)
from tests.conftest import names_field

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def collection(fields: list[dict[str, Any]], version: int = 1, id_: str = "c1") -> Collection:
    return Collection(id=id_, name="posts", type="base", fields=parse_schema(fields), created=NOW, updated=NOW,
                      version=version)


# --- parse_schema ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, auth, expected", [
    ([], False, ()),
    ({"fields": []}, False, ()),
    ({}, False, ()),
    ([{"name": "title", "type": "text"}], False, (FieldSpec("title", "text"),)),
    ({"fields": [{"name": "title", "type": "text"}]}, False, (FieldSpec("title", "text"),)),
    ([{"name": "title", "type": "text", "validation": {"required": True, "min": 1, "max": 5, "pattern": "^a",
                                                       "unique": True}}], False,
     (FieldSpec("title", "text", Validation(required=True, min=1, max=5, pattern="^a", unique=True)),)),
    ([{"name": "n", "type": "number", "validation": {"min": -1.5}}], False,
     (FieldSpec("n", "number", Validation(min=-1.5)),)),
    ([{"name": "s", "type": "select", "values": ["a", "b"]}], False, (FieldSpec("s", "select", values=("a", "b")),)),
    ([{"name": "s", "type": "select", "values": ["a"], "max_select": 3}], False,
     (FieldSpec("s", "select", values=("a",), max_select=3),)),
    ([{"name": "r", "type": "relation", "collection_id": "c2", "max_select": 2}], False,
     (FieldSpec("r", "relation", max_select=2, collection_id="c2"),)),
    ([{"name": "f", "type": "file", "max_select": 4}], False, (FieldSpec("f", "file", max_select=4),)),
    # keys that do not apply to the type are dropped
    ([{"name": "t", "type": "text", "values": ["a"], "max_select": 2, "collection_id": "c2"}], False,
     (FieldSpec("t", "text"),)),
    ([{"id": "echoed", "name": "t", "type": "text"}], False, (FieldSpec("t", "text"),)),
    ([{"name": "email", "type": "email"}, {"name": "verified", "type": "bool"}], False,
     (FieldSpec("email", "email"), FieldSpec("verified", "bool"))),
    ([{"name": "nick", "type": "text"}], True, (FieldSpec("nick", "text"),)),
    ([{"name": "A" + "b" * 62, "type": "json"}], False, (FieldSpec("A" + "b" * 62, "json"),)),
], ids=["empty_list", "empty_object", "object_without_fields", "one_field", "object_form", "all_validation_keys",
        "number_min", "select", "multi_select", "relation", "file", "irrelevant_keys_dropped", "id_ignored",
        "auth_names_in_base", "auth_collection", "longest_name"])
def test_parse_schema(raw: Any, auth: bool, expected: tuple[FieldSpec, ...]) -> None:
    assert parse_schema(raw, auth=auth) == expected


def test_parse_schema_keeps_every_type_in_order() -> None:
    types = ["text", "editor", "bool", "email", "url", "number", "date", "json", "file"]
    specs = parse_schema([{"name": f"f_{t}", "type": t} for t in types]
                         + [{"name": "sel", "type": "select", "values": ["x"]},
                            {"name": "rel", "type": "relation", "collection_id": "c"}])
    assert [s.type for s in specs] == [*types, "select", "relation"]
    assert all(s.validation == Validation() for s in specs)


@pytest.mark.parametrize("raw, auth", [
    ("fields", False),
    (None, False),
    (5, False),
    ({"fields": [], "x": 1}, False),
    ({"fields": "title"}, False),
    (["title"], False),
    ([{"type": "text"}], False),
    ([{"name": "t"}], False),
    ([{"name": "t", "type": "varchar"}], False),
    ([{"name": "t", "type": "text", "extra": 1}], False),
    ([{"name": "t", "type": "text", "validation": {"unknown": 1}}], False),
    ([{"name": "t", "type": "text", "validation": {"min": "x"}}], False),
    ([{"name": "t", "type": "text", "validation": {"min": float("nan")}}], False),
    ([{"name": "1t", "type": "text"}], False),
    ([{"name": "_t", "type": "text"}], False),
    ([{"name": "t-t", "type": "text"}], False),
    ([{"name": "t\n", "type": "text"}], False),
    ([{"name": "", "type": "text"}], False),
    ([{"name": "t" * 64, "type": "text"}], False),
    ([{"name": 5, "type": "text"}], False),
    ([{"name": "id", "type": "text"}], False),
    ([{"name": "created", "type": "date"}], False),
    ([{"name": "updated", "type": "date"}], False),
    ([{"name": "password", "type": "text"}], True),
    ([{"name": "email", "type": "email"}], True),
    ([{"name": "verified", "type": "bool"}], True),
    ([{"name": "t", "type": "text"}, {"name": "T", "type": "text"}], False),
    ([{"name": "t", "type": "text", "validation": {"min": 3, "max": 2}}], False),
    ([{"name": "t", "type": "text", "validation": {"pattern": "[a-"}}], False),
    ([{"name": "n", "type": "number", "validation": {"pattern": "1"}}], False),
    ([{"name": "s", "type": "select"}], False),
    ([{"name": "s", "type": "select", "values": []}], False),
    ([{"name": "s", "type": "select", "values": [""]}], False),
    ([{"name": "s", "type": "select", "values": ["a"], "max_select": 0}], False),
    ([{"name": "s", "type": "select", "values": ["a"], "max_select": 1.5}], False),
    ([{"name": "r", "type": "relation"}], False),
    ([{"name": "b", "type": "bool", "validation": {"unique": True}}], False),
    ([{"name": "j", "type": "json", "validation": {"unique": True}}], False),
    ([{"name": f"f{i}", "type": "text"} for i in range(101)], False),
], ids=["string", "null", "number", "extra_object_key", "fields_not_list", "field_not_object", "no_name",
        "no_type", "unknown_type", "unknown_key", "unknown_validation_key", "min_not_number", "min_nan",
        "name_digit_first", "name_underscore_first", "name_dash", "name_trailing_newline", "name_empty",
        "name_too_long", "name_not_string", "reserved_id", "reserved_created", "reserved_updated",
        "auth_password", "auth_email", "auth_verified", "duplicate_case_insensitive", "min_above_max",
        "bad_pattern", "pattern_on_number", "select_no_values", "select_empty_values", "select_empty_value",
        "max_select_zero", "max_select_float", "relation_no_collection", "unique_bool", "unique_json",
        "too_many_fields"])
def test_parse_schema_rejects(raw: Any, auth: bool) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_schema(raw, auth=auth)
    assert caught.value.status == 422
    errors = caught.value.errors
    assert errors, errors
    # flat (decisions.md, Errors): "schema" or dotted keys below it, each a list of strings
    for key, messages in errors.items():
        assert key == "schema" or key.startswith("schema."), errors
        assert isinstance(messages, list) and messages and all(isinstance(m, str) for m in messages), errors


def test_field_name_helpers() -> None:
    c = collection([{"name": "t", "type": "text", "validation": {"unique": True}}, {"name": "e", "type": "editor"},
                    {"name": "m", "type": "email"}, {"name": "u", "type": "url"},
                    {"name": "n", "type": "number", "validation": {"unique": True}}, {"name": "j", "type": "json"},
                    {"name": "s", "type": "select", "values": ["a"]}])
    assert text_field_names(c) == ["t", "e", "m", "u"]
    assert unique_field_names(c) == ["t", "n"]


# --- RecordSchemas.load --------------------------------------------------------------------------


POSTS = collection([
    {"name": "title", "type": "text", "validation": {"required": True, "min": 2, "max": 5}},
    {"name": "code", "type": "text", "validation": {"pattern": "[0-9]{2}"}},
    {"name": "body", "type": "editor"},
    {"name": "done", "type": "bool"},
    {"name": "mail", "type": "email"},
    {"name": "site", "type": "url"},
    {"name": "n", "type": "number", "validation": {"min": 0, "max": 10}},
    {"name": "big", "type": "number"},
    {"name": "at", "type": "date"},
    {"name": "s", "type": "select", "values": ["a", "b"]},
    {"name": "ms", "type": "select", "values": ["a", "b", "c"], "max_select": 2},
    {"name": "j", "type": "json"},
    {"name": "r", "type": "relation", "collection_id": "c2"},
    {"name": "rs", "type": "relation", "collection_id": "c2", "max_select": 3},
    {"name": "f", "type": "file"},
])


@pytest.mark.parametrize("data, partial, expected", [
    ({"title": "ab"}, False, {"title": "ab"}),
    ({"title": "abcde", "body": "", "done": False, "n": 0, "big": -(2**63)}, False,
     {"title": "abcde", "body": "", "done": False, "n": 0, "big": -(2**63)}),
    ({"title": "ab", "code": "x12y"}, False, {"title": "ab", "code": "x12y"}),
    ({"title": "ab", "n": 10.0, "big": 1e300}, False, {"title": "ab", "n": 10.0, "big": 1e300}),
    ({"title": "ab", "mail": "a@b.co", "site": "http://localhost:8090/x"}, False,
     {"title": "ab", "mail": "a@b.co", "site": "http://localhost:8090/x"}),
    ({"title": "ab", "at": "2024-02-03"}, False, {"title": "ab", "at": datetime(2024, 2, 3, tzinfo=UTC)}),
    ({"title": "ab", "at": "2024-02-03T04:05:06.789999+01:00"}, False,
     {"title": "ab", "at": datetime(2024, 2, 3, 3, 5, 6, 789000, tzinfo=UTC)}),
    ({"title": "ab", "s": "a", "ms": ["c", "a"], "rs": ["x", "y"], "r": "x", "f": "file"}, False,
     {"title": "ab", "s": "a", "ms": ["c", "a"], "rs": ["x", "y"], "r": "x", "f": "file"}),
    ({"title": "ab", "ms": []}, False, {"title": "ab", "ms": []}),
    ({"title": "ab", "j": {"a": [1, {"b": None}], "c": "$not-a-key"}}, False,
     {"title": "ab", "j": {"a": [1, {"b": None}], "c": "$not-a-key"}}),
    ({"title": "ab", "j": [1, "x", True, None, 2.5]}, False, {"title": "ab", "j": [1, "x", True, None, 2.5]}),
    ({"title": "ab", "j": None, "body": None, "ms": None}, False, {"title": "ab", "j": None, "body": None,
                                                                  "ms": None}),
    ({}, True, {}),
    ({"n": 3}, True, {"n": 3}),
    ({"body": None, "n": None}, True, {"body": None, "n": None}),
], ids=["required_only", "falsy_values", "pattern_searches", "floats", "email_url", "date_only", "date_offset_ms",
        "select_relation_file", "empty_multi", "json_object", "json_list", "nulls_for_optional", "partial_empty",
        "partial_one", "partial_clear"])
def test_load_accepts(data: dict[str, Any], partial: bool, expected: dict[str, Any]) -> None:
    assert RecordSchemas().load(POSTS, data, partial=partial) == expected


@pytest.mark.parametrize("data, partial, field", [
    ({}, False, "title"),
    ({"title": None}, False, "title"),
    ({"title": None}, True, "title"),
    ({"title": ""}, True, "title"),
    ({"title": "a"}, False, "title"),
    ({"title": "abcdef"}, False, "title"),
    ({"title": 12}, False, "title"),
    ({"title": "ab", "code": "1x"}, False, "code"),
    ({"body": ["x"]}, True, "body"),
    ({"done": "false"}, True, "done"),
    ({"done": 0}, True, "done"),
    ({"mail": "nope"}, True, "mail"),
    ({"site": "example"}, True, "site"),
    ({"n": "1"}, True, "n"),
    ({"n": True}, True, "n"),
    ({"n": 11}, True, "n"),
    ({"n": -0.5}, True, "n"),
    ({"big": float("inf")}, True, "big"),
    ({"big": float("nan")}, True, "big"),
    ({"big": 2**63}, True, "big"),
    ({"at": "2024-02-30"}, True, "at"),
    ({"at": "0001-01-01T00:00:00+01:00"}, True, "at"),
    ({"at": 1706745600}, True, "at"),
    ({"at": "x" * 50}, True, "at"),
    ({"s": "c"}, True, "s"),
    ({"s": ["a"]}, True, "s"),
    ({"ms": "a"}, True, "ms"),
    ({"ms": ["a", "b", "c"]}, True, "ms"),
    ({"ms": ["d"]}, True, "ms"),
    ({"j": {"$gt": 1}}, True, "j"),
    ({"j": {"a.b": 1}}, True, "j"),
    ({"j": [[{"$x": 1}]]}, True, "j"),
    ({"j": {"a\x00": 1}}, True, "j"),
    ({"j": [2**64]}, True, "j"),
    ({"j": {"x": float("nan")}}, True, "j"),
    ({"r": ["x"]}, True, "r"),
    ({"r": ""}, True, "r"),
    ({"rs": ["x"] * 4}, True, "rs"),
    ({"f": 1}, True, "f"),
    ({"other": 1}, True, "other"),
    ({"$set": {"title": "x"}}, True, "$set"),
    ({"title.x": "ab"}, True, "title.x"),
    ({"id": "x"}, True, "id"),
], ids=["missing_required", "null_required", "null_required_partial", "empty_required", "too_short", "too_long",
        "text_not_string", "pattern", "editor_list", "bool_string", "bool_int", "email", "url", "number_string",
        "number_bool", "above_max", "below_min", "infinite", "nan", "int64_overflow", "bad_date", "date_overflow",
        "date_number", "date_too_long", "select_unknown", "select_list", "multi_not_list", "multi_too_many",
        "multi_unknown", "json_dollar_key", "json_dotted_key", "json_nested_dollar", "json_nul_key",
        "json_big_int", "json_nan", "relation_list", "relation_empty", "relations_too_many", "file_number",
        "unknown", "operator_key", "dotted_key", "system_key"])
def test_load_rejects(data: dict[str, Any], partial: bool, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        RecordSchemas().load(POSTS, data, partial=partial)
    assert caught.value.errors is not None and names_field(caught.value.errors, field), caught.value.errors


@pytest.mark.parametrize("data", [None, [], "x", 1], ids=["null", "list", "string", "number"])
def test_load_needs_an_object(data: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        RecordSchemas().load(POSTS, data, partial=False)
    assert caught.value.errors == {"data": ["Must be an object."]}


def test_json_nesting_is_bounded() -> None:
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    c = collection([{"name": "j", "type": "json"}])
    with pytest.raises(ValidationFailed):
        RecordSchemas().load(c, {"j": deep}, partial=True)


def test_schema_cache_follows_the_version() -> None:
    schemas = RecordSchemas(size=2)
    v1 = collection([{"name": "a", "type": "text"}])
    v2 = replace(v1, fields=parse_schema([{"name": "a", "type": "text"}, {"name": "b", "type": "number"}]), version=2)
    assert schemas.schema_for(v1) is schemas.schema_for(v1)
    with pytest.raises(ValidationFailed):
        schemas.load(v1, {"b": 1}, partial=True)
    assert schemas.load(v2, {"b": 1}, partial=True) == {"b": 1}
    first = schemas.schema_for(v1)
    schemas.schema_for(v2)  # v1 is now the least recently used
    schemas.schema_for(collection([], id_="other"))  # evicts v1
    assert schemas.schema_for(v1) is not first


@pytest.mark.parametrize("value, expected", [
    (datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC), "2024-01-02T03:04:05.678Z"),
    (datetime(2024, 1, 2, tzinfo=UTC), "2024-01-02T00:00:00.000Z"),
    ("text", "text"),
    (5, 5),
    (None, None),
], ids=["datetime", "midnight", "string", "number", "null"])
def test_to_json_value(value: Any, expected: Any) -> None:
    assert to_json_value(value) == expected
