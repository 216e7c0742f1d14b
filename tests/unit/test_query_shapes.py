"""Query shapes (cms.store.query_shapes) and the index advice on them (cms.services.content.index_advice):
the shape keeps field names and operators, never values; the suggestion follows ESR (equality, sort,
range), leaves the sort out on a server that sorts in memory, and is None when a kept index serves it."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.models import Collection, FieldSpec, IndexDeclaration, QueryShape, Validation, default_rules
from cms.services.content.index_advice import kept_indexes, suggest_index
from cms.store.query_shapes import MAX_SHAPE_LENGTH, shape_of

NEWEST = [("created", -1), ("_id", -1)]
OLDEST = [("created", 1), ("_id", 1)]


@pytest.mark.parametrize("query, sort, text, equality, ranges", [
    ({}, OLDEST, "{} sort created", (), ()),
    ({"views": {"$gte": 10}}, NEWEST, "{views: $gte} sort -created", (), ("views",)),
    ({"$and": [{"views": {"$gte": 1}}, {"status": "live"}]}, OLDEST, "{status: $eq, views: $gte} sort created",
     ("status",), ("views",)),
    ({"$and": [{"status": "x"}, {"$and": [{"views": {"$lte": 9}}, {"views": {"$gt": 2}}]}]}, [],
     "{status: $eq, views: $gt,$lte}", ("status",), ("views",)),
    ({"post": {"$in": ["a", "b"]}}, NEWEST, "{post: $in} sort -created", ("post",), ()),
    ({"_id": {"$in": ["a"]}}, [], "{id: $in}", ("id",), ()),
    ({"$or": [{"a": 1}, {"b": {"$regex": "x", "$options": "i"}}, {"a": 2}]}, [("views", 1), ("_id", 1)],
     "{$or: [{a: $eq}, {b: $regex}]} sort views", (), ()),
    ({"owner": "u1", "$or": [{"public": True}, {"owner": "u1"}]}, OLDEST,
     "{owner: $eq, $or: [{owner: $eq}, {public: $eq}]} sort created", ("owner",), ()),
    ({"title": {"$not": re.compile("x")}, "n": {"$ne": 3}}, [("title", 1), ("views", -1), ("_id", 1)],
     "{n: $ne, title: $not} sort title,-views", (), ()),
    ({"$text": {"$search": '"word"'}}, OLDEST, "{$text} sort created", (), ()),
    ({"views": {"$gte": 1}, "tags": {"$eq": "x", "$gt": "a"}}, [], "{tags: $eq,$gt, views: $gte}", ("tags",),
     ("views",)),
], ids=["empty", "range", "and", "nested-and", "in", "id", "or", "rule-and-or", "unindexable", "text",
        "equality-wins"])
def test_a_shape_keeps_names_and_operators(query: dict[str, Any], sort: list[tuple[str, int]], text: str,
                                           equality: tuple[str, ...], ranges: tuple[str, ...]) -> None:
    shape = shape_of(query, sort)
    assert (shape.text, shape.equality, shape.ranges) == (text, equality, ranges)


def test_a_shape_never_shows_a_value_and_is_one_for_any_values_and_term_order() -> None:
    one = shape_of({"$and": [{"views": {"$gte": 4242}}, {"status": "zq-secret"}]}, NEWEST)
    other = shape_of({"$and": [{"status": "live"}, {"views": {"$gte": 1}}]}, NEWEST)
    assert one == other
    assert "4242" not in one.text and "zq-secret" not in one.text
    assert one.sort == ("-created", "-id")


def test_a_long_shape_is_cut() -> None:
    query = {"$and": [{f"field_{i:03d}": i} for i in range(200)]}
    assert len(shape_of(query).text) == MAX_SHAPE_LENGTH


def collection(*names: str, relations: tuple[str, ...] = (), unique: tuple[str, ...] = (),
               indexes: tuple[tuple[str, ...], ...] = (), list_rule: str | None = "") -> Collection:
    fields = [FieldSpec(name=n, type="number", validation=Validation(unique=n in unique)) for n in names]
    fields += [FieldSpec(name=n, type="relation", collection_id="c2") for n in relations]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Collection(id="c1", name="posts", type="base", fields=tuple(fields), created=now, updated=now,
                      rules=replace(default_rules("base"), list_rule=list_rule),
                      indexes=tuple(IndexDeclaration(fields=f) for f in indexes))


POSTS = collection("views", "status", "score", "owner", relations=("author",), unique=("score",),
                   indexes=(("status", "-created", "-id"),), list_rule="owner = @request.auth.id")


def shape(equality: tuple[str, ...] = (), ranges: tuple[str, ...] = (), sort: tuple[str, ...] = ()) -> QueryShape:
    return QueryShape(text="t", equality=equality, ranges=ranges, sort=sort)


@pytest.mark.parametrize("query, index_sorts, expected", [
    (shape(ranges=("views",), sort=("-created", "-id")), True, ("-created", "-id", "views")),
    (shape(ranges=("views",), sort=("-created", "-id")), False, ("views",)),
    (shape(equality=("views",), ranges=("owner",), sort=("created", "id")), True, ("views", "created", "id", "owner")),
    (shape(equality=("owner", "views"), sort=("-views", "-id")), True, ("owner", "views", "-id")),
    (shape(ranges=("views",), sort=("-views", "-id")), True, ("-views", "-id")),
    (shape(sort=("views", "id")), True, ("views", "id")),
    (shape(sort=("views", "id")), False, None),  # nothing an index would do there
    (shape(sort=("-created", "-id")), True, None),  # created_id, walked backward
    (shape(equality=("status",), sort=("-created", "-id")), True, None),  # the declared index
    (shape(equality=("status",), sort=("created", "id")), True, None),  # ... walked backward
    (shape(equality=("status",), sort=("views", "id")), True, ("status", "views", "id")),
    (shape(equality=("status",), ranges=("views",)), False, ("status", "views")),
    (shape(equality=("status",)), False, None),  # led by status
    (shape(equality=("author",), sort=("-created", "-id")), False, None),  # auto_relation_author
    (shape(equality=("owner",)), False, None),  # auto_rule_owner
    (shape(ranges=("score",)), False, None),  # unique_score
    (shape(equality=("id", "views")), True, None),  # the _id index pins it
    (shape(equality=("email", "unknown")), True, None),  # no name a declared index may hold
], ids=["esr-range-sort", "memory-sort-range", "esr-all", "pinned-sort-key", "sort-is-range", "sort-only",
        "sort-only-memory", "created-id", "declared", "declared-backward", "declared-wrong-sort", "eq-range",
        "declared-prefix", "relation", "rule", "unique", "id", "not-indexable"])
def test_the_suggestion_follows_esr_unless_an_index_serves(query: QueryShape, index_sorts: bool,
                                                            expected: tuple[str, ...] | None) -> None:
    suggested = suggest_index(POSTS, query, index_sorts=index_sorts)
    assert (suggested.fields if suggested else None) == expected
    assert suggested is None or suggested.unique is False


def test_kept_indexes_say_why_each_exists() -> None:
    reasons = {index.name: (index.origin, index.fields, index.reason) for index in kept_indexes(POSTS)}
    assert reasons["created_id"][:2] == ("service", ("created", "id"))
    assert reasons["unique_score"][0] == "service"
    assert reasons["auto_relation_author"] == ("automatic", ("author",),
                                               "author is a relation field (filters on it, expand's back-relations)")
    assert reasons["auto_rule_owner"] == ("automatic", ("owner",), "a rule compares owner with @request.auth")
    assert reasons["idx_status_1_created_-1_id_-1"][:2] == ("declared", ("status", "-created", "-id"))
