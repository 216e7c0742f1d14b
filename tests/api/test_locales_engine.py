"""Queries that agree with answers, as a property (decisions.md, Localized fields; issue 40, item 5): for
random stored records whose localized fields hold random locales (values, nulls, empty objects, fields
missing), random fallback chains and random filters, the condition on the stored objects holds exactly
where the same filter holds on the values the answer shows (each field resolved along the chain), in
memory and in the database; and the sort by a fallback chain (`$ifNull` in an aggregation, a tuple path
in memory) orders records as the resolved values do.

`ENGINE_EXAMPLES` sets how many examples are drawn (default 100), as for the engine's own property test.
"""

from __future__ import annotations

import os
from typing import Any

import pymongo
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from cms.errors import InvalidFilter
from cms.filters.conditions import ResolvedField, build
from cms.filters.grammar import parse_filter
from cms.filters.mongo import render
from cms.filters.predicate import evaluate, sort_documents
from cms.services.content.locales import resolve
from cms.store.query_plans import sort_stages

EXAMPLES = int(os.environ.get("ENGINE_EXAMPLES", "100"))
LOCALES = ("en", "de", "fr")
TYPES = {"name": "text", "score": "number", "tags": "select", "plain": "text"}
LOCALIZED = ("name", "score", "tags")
TEXTS = ["", "a", "A", "ab", "ba", "7", "null"]
NUMBERS = [-1, 0, 2, 3.5, 7]


class Fields:
    """The test collection's resolver: `name`, `score` and `tags` localized along `chain` (empty: the
    values as the answer shows them, already resolved)."""

    def __init__(self, chain: tuple[str, ...]) -> None:
        self.chain = chain

    def resolve(self, name: str) -> ResolvedField | None:
        kind = TYPES.get(name)
        if kind is None:
            return None
        return ResolvedField(name, kind, locales=self.chain if name in LOCALIZED else ())


def _value(name: str) -> st.SearchStrategy[Any]:
    if name == "score":
        return st.one_of(st.sampled_from(NUMBERS), st.none())
    if name == "tags":
        return st.one_of(st.lists(st.sampled_from(["a", "A", "b"]), max_size=2), st.none())
    return st.one_of(st.sampled_from(TEXTS), st.none())


@st.composite
def documents(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to 10 stored records: a localized field missing, an empty object, or an object of some locales
    (a value or null each); `plain` missing or a text."""
    docs = []
    for n in range(draw(st.integers(min_value=1, max_value=10))):
        doc: dict[str, Any] = {"_id": f"r{n}"}
        for name in LOCALIZED:
            if draw(st.integers(0, 4)) == 0:
                continue
            codes = draw(st.lists(st.sampled_from(LOCALES), unique=True, max_size=3))
            doc[name] = {code: draw(_value(name)) for code in codes}
        if draw(st.booleans()):
            doc["plain"] = draw(st.sampled_from(TEXTS))
        docs.append(doc)
    return docs


@st.composite
def terms(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(TYPES)))
    if name == "score":
        literal = draw(st.sampled_from(["0", "2", "3.5", "7", "null"]))
    else:
        literal = draw(st.sampled_from(["a", "'A'", "''", "ab", "7", "b", "null"]))
    ops = ["=", "!="] if literal == "null" else ["=", "!=", ">", ">=", "<", "<="]
    if name != "score" and literal != "null":
        ops += ["~", "!~"]
    return f"{name} {draw(st.sampled_from(ops))} {literal}"


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 2 or draw(st.booleans()):
        return draw(terms())
    parts = draw(st.lists(expressions(depth + 1), min_size=2, max_size=3))
    joined = f" {draw(st.sampled_from(['&&', '||']))} ".join(parts)
    return f"({joined})" if depth else joined


chains = st.lists(st.sampled_from(LOCALES), unique=True, min_size=1, max_size=3).map(tuple)


def shown(doc: dict[str, Any], chain: tuple[str, ...]) -> dict[str, Any]:
    """The record as an answer in the chain's first locale shows it: each localized field resolved."""
    return {key: resolve(value, chain) if key in LOCALIZED else value for key, value in doc.items()}


@pytest.fixture
def stored(config: Any) -> Any:
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(config.mongodb_url, retryWrites=False, tz_aware=True)
    yield client[config.mongodb_db]["locales_property"]
    client.close()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
@given(docs=documents(), chain=chains, filter_text=expressions())
def test_a_filter_holds_where_the_answer_shows_what_it_asks(stored: Any, docs: list[dict[str, Any]],
                                                            chain: tuple[str, ...], filter_text: str) -> None:
    note(f"chain: {chain}\nfilter: {filter_text}")
    try:
        localized = build(parse_filter(filter_text), Fields(chain))
        plain = build(parse_filter(filter_text), Fields(()))
    except InvalidFilter:
        return
    on_answers = {d["_id"] for d in docs if evaluate(plain, shown(d, chain))}
    in_memory = {d["_id"] for d in docs if evaluate(localized, d)}
    assert in_memory == on_answers
    query = render(localized)
    note(f"query: {query!r}")
    if isinstance(query, bool):
        assert in_memory == ({d["_id"] for d in docs} if query else set())
        return
    stored.delete_many({})
    stored.insert_many(docs)
    assert {d["_id"] for d in stored.find(query, {"_id": 1})} == in_memory


@settings(max_examples=max(EXAMPLES // 3, 10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(docs=documents(), chain=chains, name=st.sampled_from(["name", "score"]), direction=st.sampled_from([1, -1]))
def test_a_sort_orders_by_the_value_shown(stored: Any, docs: list[dict[str, Any]], chain: tuple[str, ...],
                                          name: str, direction: int) -> None:
    path = Fields(chain).resolve(name)
    assert path is not None
    order: list[tuple[str | tuple[str, ...], int]] = [(path.sort_path, direction), ("_id", direction)]
    answers = [shown(d, chain) for d in docs]
    expected = [answers[i]["_id"] for i in sort_documents(answers, [(name, direction), ("_id", direction)], {})]
    assert [docs[i]["_id"] for i in sort_documents(docs, order, {})] == expected
    stored.delete_many({})
    stored.insert_many(docs)
    stages = sort_stages(order)
    pipeline = [{"$match": {}}, *(stages or [{"$sort": dict(order)}]), {"$project": {"_id": 1}}]
    assert [d["_id"] for d in stored.aggregate(pipeline)] == expected
