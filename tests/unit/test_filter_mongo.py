"""Scenario tables for cms.filters.mongo: AST -> MongoDB query, sort spec and search queries."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.errors import InvalidFilter
from cms.filters.conditions import search
from cms.filters.grammar import And, Compare, Literal, Or, parse_filter
from cms.filters.mongo import (
    MAX_REGEX_LENGTH,
    MAX_SEARCH_WORDS,
    ResolvedField,
    render,
    text_search_query,
    to_mongo_query,
    to_mongo_sort,
)
from cms.filters.sort import SortKey, parse_sort

FIELDS = {
    "id": ResolvedField("_id", "id"),
    "created": ResolvedField("created", "datetime"),
    "title": ResolvedField("title", "text"),
    "body": ResolvedField("body", "editor"),
    "email": ResolvedField("email", "email"),
    "site": ResolvedField("site", "url"),
    "status": ResolvedField("status", "select"),
    "author": ResolvedField("author", "relation"),
    "avatar": ResolvedField("avatar", "file"),
    "price": ResolvedField("price", "number"),
    "published": ResolvedField("published", "bool"),
    "released": ResolvedField("released", "date"),
    "meta": ResolvedField("meta", "json"),
}
PATHS = {field.path for field in FIELDS.values()}
OPERATORS = {"$and", "$or", "$ne", "$gt", "$gte", "$lt", "$lte", "$regex", "$options", "$not"}


class SchemaResolver:
    """Resolves the names in FIELDS; everything else is unknown."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def resolve(self, name: str) -> ResolvedField | None:
        self.asked.append(name)
        return FIELDS.get(name)


def query(text: str) -> dict[str, Any]:
    return to_mongo_query(parse_filter(text), SchemaResolver())


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def not_contains(text: str) -> re.Pattern[str]:
    return re.compile(re.escape(text), re.IGNORECASE)


TYPED: dict[str, tuple[str, dict[str, Any]]] = {
    # string-like types take the source text of numbers and bools
    "text-word": ("title=hello", {"title": "hello"}),
    "text-number-as-text": ("title=123", {"title": "123"}),
    "text-keeps-raw-number": ("title=1.50", {"title": "1.50"}),
    "text-bool-as-text": ("title=true", {"title": "true"}),
    "text-quoted": ("title='a \\'b\\''", {"title": "a 'b'"}),
    "text-null": ("title=null", {"title": None}),
    "id-to-_id": ("id=0b5e4c1a-1f2e-4c7b-9d3a-2f1e0c9b8a7d", {"_id": "0b5e4c1a-1f2e-4c7b-9d3a-2f1e0c9b8a7d"}),
    "id-number-as-text": ("id=42", {"_id": "42"}),
    "editor": ("body='<p>x</p>'", {"body": "<p>x</p>"}),
    "email": ("email=a@b.com", {"email": "a@b.com"}),
    "url": ("site=https://x.org/a", {"site": "https://x.org/a"}),
    "select": ("status=published", {"status": "published"}),
    "relation": ("author=u1", {"author": "u1"}),
    "file": ("avatar=me.png", {"avatar": "me.png"}),
    # number
    "number-int": ("price=10", {"price": 10}),
    "number-float": ("price=2.5", {"price": 2.5}),
    "number-exponent": ("price=-1e3", {"price": -1000.0}),
    "number-quoted": ("price='12'", {"price": 12}),
    "number-quoted-float": ('price=" 2.5 "', {"price": 2.5}),
    "number-null": ("price=null", {"price": None}),
    "number-int64-max": (f"price={2**63 - 1}", {"price": 2**63 - 1}),
    # bool
    "bool-true": ("published=true", {"published": True}),
    "bool-false": ("published=false", {"published": False}),
    "bool-quoted": ("published='false'", {"published": False}),
    "bool-ne": ("published!=true", {"published": {"$ne": True}}),
    "bool-null": ("published=null", {"published": None}),
    # date and datetime -> aware UTC datetimes
    "date-only-is-midnight-utc": ("released=2024-01-01", {"released": utc(2024, 1, 1)}),
    "date-quoted": ("released='2024-06-30'", {"released": utc(2024, 6, 30)}),
    "date-basic-format-number": ("released=20240101", {"released": utc(2024, 1, 1)}),
    "datetime-z": ("created>2024-01-01T10:00:00Z", {"created": {"$gt": utc(2024, 1, 1, 10)}}),
    "datetime-offset": ("created>=2024-01-01T10:00:00+02:00", {"created": {"$gte": utc(2024, 1, 1, 8)}}),
    "datetime-naive-is-utc": ("created<2024-01-01T10:30:00", {"created": {"$lt": utc(2024, 1, 1, 10, 30)}}),
    "datetime-millis": (
        "created<=2024-01-01T10:00:00.250Z",
        {"created": {"$lte": datetime(2024, 1, 1, 10, 0, 0, 250000, tzinfo=UTC)}},
    ),
    "datetime-null": ("created=null", {"created": None}),
    # json keeps the literal's Python value
    "json-number": ("meta=5", {"meta": 5}),
    "json-quoted-number-stays-text": ("meta='5'", {"meta": "5"}),
    "json-bool": ("meta=true", {"meta": True}),
    "json-null": ("meta=null", {"meta": None}),
    "json-ne": ("meta!=x", {"meta": {"$ne": "x"}}),
}


def leaf(result: dict[str, Any]) -> Any:
    """The one value of a single-comparison query, under its operator if there is one."""
    value = next(iter(result.values()))
    return next(iter(value.values())) if isinstance(value, dict) else value


@pytest.mark.parametrize("text, expected", list(TYPED.values()), ids=list(TYPED))
def test_values_are_typed_by_field(text: str, expected: dict[str, Any]) -> None:
    result = query(text)
    assert result == expected
    assert type(leaf(result)) is type(leaf(expected))  # 1 == 1.0 == True, so check the type too
    if isinstance(leaf(result), datetime):
        assert leaf(result).tzinfo is UTC


OPERATOR_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "eq": ("title=a", {"title": "a"}),
    "ne": ("title!=a", {"title": {"$ne": "a"}}),
    "gt": ("price>1", {"price": {"$gt": 1}}),
    "gte": ("price>=1", {"price": {"$gte": 1}}),
    "lt": ("price<1", {"price": {"$lt": 1}}),
    "lte": ("price<=1", {"price": {"$lte": 1}}),
    "text-ordering": ("title>m", {"title": {"$gt": "m"}}),
    "contains": ("title~Hello", {"title": {"$regex": "Hello", "$options": "i"}}),
    "contains-escaped": ("title~'a.b*(c)'", {"title": {"$regex": r"a\.b\*\(c\)", "$options": "i"}}),
    "contains-number-text": ("title~12", {"title": {"$regex": "12", "$options": "i"}}),
    "not-contains": ("title!~Hello", {"title": {"$not": not_contains("Hello")}}),
    "not-contains-escaped": ("email!~'.com'", {"email": {"$not": not_contains(".com")}}),
    "eq-null": ("title=null", {"title": None}),
    "ne-null": ("title!=null", {"title": {"$ne": None}}),
    "and": ("title=a && price>1", {"$and": [{"title": "a"}, {"price": {"$gt": 1}}]}),
    "or": ("title=a || price>1", {"$or": [{"title": "a"}, {"price": {"$gt": 1}}]}),
    "precedence": (
        "title=a || price>1 && published=true",
        {"$or": [{"title": "a"}, {"$and": [{"price": {"$gt": 1}}, {"published": True}]}]},
    ),
    "parentheses": (
        "(title=a || title=b) && price<5",
        {"$and": [{"$or": [{"title": "a"}, {"title": "b"}]}, {"price": {"$lt": 5}}]},
    ),
}


@pytest.mark.parametrize("text, expected", list(OPERATOR_CASES.values()), ids=list(OPERATOR_CASES))
def test_operators(text: str, expected: dict[str, Any]) -> None:
    assert query(text) == expected


def test_single_item_and_or_are_unwrapped() -> None:
    term = Compare("title", "=", Literal("string", "a", "a", False), 0)
    assert to_mongo_query(And((term,)), SchemaResolver()) == {"title": "a"}
    assert to_mongo_query(Or((term,)), SchemaResolver()) == {"title": "a"}


def test_empty_and_is_invalid() -> None:
    with pytest.raises(InvalidFilter):
        to_mongo_query(And(()), SchemaResolver())


QUERY_ERRORS: dict[str, tuple[str, str]] = {
    "unknown-field": ("nope=1", "unknown field 'nope' at position 0"),
    "unknown-field-later": ("title=1 && nope=1", "unknown field 'nope' at position 11"),
    "number-word": ("price=abc", "field 'price' expects a number, got 'abc' at position 0"),
    "number-bool": ("price=true", "field 'price' expects a number"),
    "number-quoted-word": ("price='abc'", "field 'price' expects a number"),
    "number-date": ("price=2024-01-01", "field 'price' expects a number"),
    "number-too-big": (f"price={2**63}", "is out of range at position 0"),
    "bool-word": ("published=yes", "field 'published' expects true or false, got 'yes'"),
    "bool-number": ("published=1", "field 'published' expects true or false"),
    "bool-quoted-word": ("published='yes'", "field 'published' expects true or false"),
    "date-word": ("released=yesterday", "field 'released' expects an ISO 8601 date or datetime"),
    "date-bad-month": ("released=2024-13-01", "expects an ISO 8601 date or datetime"),
    "date-bool": ("released=true", "expects an ISO 8601 date or datetime"),
    "datetime-number": ("created>2024", "field 'created' expects an ISO 8601 date or datetime"),
    "order-on-bool": ("published>true", "operator '>' is not supported on bool field 'published'"),
    "order-on-json": ("meta>=1", "operator '>=' is not supported on json field 'meta'"),
    "contains-on-json": ("meta~x", "operator '~' is not supported on json field 'meta'"),
    "contains-on-number": ("price~1", "operator '~' needs a text field, not number field 'price'"),
    "contains-on-date": ("released~2024", "operator '~' needs a text field, not date"),
    "not-contains-on-bool": ("published!~x", "operator '!~' needs a text field, not bool"),
    "order-with-null": ("title>null", "null can only be used with '=' or '!=' (field 'title' at position 0)"),
    "contains-null": ("title~null", "null can only be used with '=' or '!='"),
    "contains-too-long": (f"title~'{'a' * (MAX_REGEX_LENGTH + 1)}'",
                          f"value of 'title' is too long for '~': at most {MAX_REGEX_LENGTH} characters"),
    "contains-too-long-position": (f"price=1 && title ~ {'a' * (MAX_REGEX_LENGTH + 1)}", "at position 19"),
    "not-contains-escaped-too-long": (f"title!~'{'.' * (MAX_REGEX_LENGTH // 2 + 1)}'", "too long for '!~'"),
    "contains-nul-too-long": ("title~'" + "\x00" * (MAX_REGEX_LENGTH // 4 + 1) + "'", "too long for '~'"),
}


@pytest.mark.parametrize("value", ["a" * MAX_REGEX_LENGTH, "." * (MAX_REGEX_LENGTH // 2),
                                   "\x00" * (MAX_REGEX_LENGTH // 4)], ids=["plain", "escaped", "nul"])
def test_contains_values_up_to_the_regex_limit_are_accepted(value: str) -> None:
    result = query(f"title~'{value}'")
    assert len(result["title"]["$regex"]) == MAX_REGEX_LENGTH


@pytest.mark.parametrize("text, message", list(QUERY_ERRORS.values()), ids=list(QUERY_ERRORS))
def test_query_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidFilter) as caught:
        query(text)
    assert message in caught.value.detail


INJECTIONS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "operator-as-value": ("title=$ne", {"title": "$ne"}),
    "quoted-operator-as-value": ("title='$gt'", {"title": "$gt"}),
    "where-as-field": ("$where=1", None),
    "operator-in-field-path": ("title.$gt=1", None),
    "dotted-field": ("a.b=1", None),
    "dotted-known-field": ("meta.x=1", None),
    "json-object-text": ('title={"$gt":""}', {"title": '{"$gt":""}'}),
    "json-object-on-json-field": ("meta='{\"$gt\": 1}'", {"meta": '{"$gt": 1}'}),
    "regex-metacharacters": ("title~'.*'", {"title": {"$regex": r"\.\*", "$options": "i"}}),
    "regex-dollar": ("title~$where", {"title": {"$regex": r"\$where", "$options": "i"}}),
    "not-regex-metacharacters": ("title!~'^a|b$'", {"title": {"$not": not_contains("^a|b$")}}),
    "operator-in-or": ("title=a || $or=1", None),
}


def assert_safe(node: Any, *, under_path: bool = False) -> None:
    """Every key is a resolved path or a fixed operator, and operator dicts sit under a path."""
    if isinstance(node, list):
        for item in node:
            assert_safe(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            assert key in PATHS or key in OPERATORS, key
            if key in PATHS:
                assert not under_path
                assert_safe(value, under_path=True)
            else:
                assert_safe(value, under_path=under_path)
    else:
        assert node is None or isinstance(node, (str, int, float, bool, datetime, re.Pattern))


@pytest.mark.parametrize("text, expected", list(INJECTIONS.values()), ids=list(INJECTIONS))
def test_user_input_cannot_inject_operators(text: str, expected: dict[str, Any] | None) -> None:
    if expected is None:
        with pytest.raises(InvalidFilter):
            query(text)
        return
    result = query(text)
    assert result == expected
    assert_safe(result)


def test_resolver_only_sees_plain_field_names() -> None:
    resolver = SchemaResolver()
    to_mongo_query(parse_filter("title=a && (price>1 || published=true)"), resolver)
    assert resolver.asked == ["title", "price", "published"]


SORT_SPECS: dict[str, tuple[str, list[tuple[str, int]]]] = {
    "ascending": ("title", [("title", 1)]),
    "descending": ("-created", [("created", -1)]),
    "id-to-_id": ("-id", [("_id", -1)]),
    "several-in-order": ("-price,+title,created", [("price", -1), ("title", 1), ("created", 1)]),
}


@pytest.mark.parametrize("text, expected", list(SORT_SPECS.values()), ids=list(SORT_SPECS))
def test_to_mongo_sort(text: str, expected: list[tuple[str, int]]) -> None:
    assert to_mongo_sort(parse_sort(text), SchemaResolver()) == expected


def test_to_mongo_sort_unknown_field() -> None:
    with pytest.raises(InvalidFilter, match="unknown sort field 'nope'"):
        to_mongo_sort([SortKey("title", False), SortKey("nope", True)], SchemaResolver())


def regex(word: str) -> dict[str, Any]:
    return {"$regex": word, "$options": "i"}


def search_query(text: str, paths: list[str]) -> Any:
    """The search over text fields at `paths` (no guards), as MongoDB sees it."""
    return render(search(text, [ResolvedField(path, "text") for path in paths]))


SEARCHES: dict[str, tuple[str, list[str], Any]] = {
    "one-word-one-path": ("hello", ["title"], {"title": regex("hello")}),
    "words-times-paths": (
        " hello  World ",
        ["title", "body"],
        {
            "$and": [
                {"$or": [{"title": regex("hello")}, {"body": regex("hello")}]},
                {"$or": [{"title": regex("World")}, {"body": regex("World")}]},
            ]
        },
    ),
    "escaped": (
        "a.b (c) $x",
        ["title"],
        {"$and": [{"title": regex(re.escape(w))} for w in ("a.b", "(c)", "$x")]},
    ),
    "no-words": ("   ", ["title"], True),
    "empty": ("", [], True),
    "no-paths": ("hello", [], False),
    "max-words": (
        " ".join(["w"] * MAX_SEARCH_WORDS),
        ["t"],
        {"$and": [{"t": regex("w")}] * MAX_SEARCH_WORDS},
    ),
}


@pytest.mark.parametrize("text, paths, expected", list(SEARCHES.values()), ids=list(SEARCHES))
def test_search_query(text: str, paths: list[str], expected: dict[str, Any]) -> None:
    assert search_query(text, paths) == expected


TEXT_SEARCHES: dict[str, tuple[str, dict[str, Any]]] = {
    "one-word": ("hello", {"$text": {"$search": '"hello"'}}),
    "every-word-quoted": ("hello  world", {"$text": {"$search": '"hello" "world"'}}),
    "quotes-stripped": ('say "hi" x"y', {"$text": {"$search": '"say" "hi" "xy"'}}),
    "negation-is-literal": ("-draft", {"$text": {"$search": '"-draft"'}}),
    "only-quotes": ('" ""', {}),
    "empty": ("", {}),
}


@pytest.mark.parametrize("text, expected", list(TEXT_SEARCHES.values()), ids=list(TEXT_SEARCHES))
def test_text_search_query(text: str, expected: dict[str, Any]) -> None:
    assert text_search_query(text) == expected


SEARCH_ERRORS: dict[str, str] = {
    "too-many-words": " ".join(["w"] * (MAX_SEARCH_WORDS + 1)),
    "too-long": "x" * 5000,
    "word-too-long": "ok " + "x" * (MAX_REGEX_LENGTH + 1),
    "nul-word-too-long": "\x00" * 300,
    "escaped-word-too-long": "(" * (MAX_REGEX_LENGTH // 2 + 1),
}


def test_search_words_up_to_the_regex_limit_are_accepted() -> None:
    query = search_query("(" * (MAX_REGEX_LENGTH // 2), ["title"])
    assert len(query["title"]["$regex"]) == MAX_REGEX_LENGTH


@pytest.mark.parametrize("text", list(SEARCH_ERRORS.values()), ids=list(SEARCH_ERRORS))
def test_search_limits(text: str) -> None:
    with pytest.raises(InvalidFilter):
        search_query(text, ["title"])
    with pytest.raises(InvalidFilter):
        text_search_query(text)
