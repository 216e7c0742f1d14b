"""One engine, two back ends (decisions.md, Field rules: "they never disagree"), as a property: for
random records over every field type (nulls, missing fields, lists, case variants, ints and floats,
dates to the millisecond), random rules and filters drawn from the grammar (request variables on
either side, `@request.data.*` values of every JSON type), and random field guards (a field's view
rule joined to every term on it, as `Access` does), the in-memory predicate decides exactly the
records the database returns for the rendered query, and a sort in memory (hidden values as null)
orders them as the database does when nothing is hidden.

Hypothesis searches (random, not derandomized); examples that failed are kept in `.hypothesis/` and
tried first on the next run. `ENGINE_EXAMPLES` sets how many are drawn (default 100).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pymongo
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from cms.errors import InvalidFilter
from cms.filters.conditions import ResolvedField, all_of, build
from cms.filters.grammar import parse_filter
from cms.filters.mongo import render
from cms.filters.predicate import evaluate, sort_documents
from cms.filters.rules import RequestContext, bind_rule

EXAMPLES = int(os.environ.get("ENGINE_EXAMPLES", "100"))
START = datetime(2026, 1, 1, tzinfo=UTC)
TYPES = {"title": "text", "body": "editor", "mail": "email", "site": "url", "status": "select",
         "tags": "select", "author": "relation", "views": "number", "flag": "bool", "when": "date",
         "meta": "json", "created": "datetime", "id": "id"}
TEXTS = ["", "a", "A", "ab", "Ab", "ba", "b.c", "Ä", "ä", "7", "true", "null"]
NUMBERS = [-1, 0, 2, 3, 3.5, 7, 7.0, 10**12]
DATES = [START + timedelta(days=d, milliseconds=ms) for d in (0, 1, 2) for ms in (0, 5)]
IDS = ["r0", "r1", "r2", "ann", "bob"]


class Fields:
    """The resolver of the test collection, with optional guards (a field view rule bound)."""

    def __init__(self, guards: dict[str, Any] | None = None) -> None:
        self.guards = guards or {}

    def resolve(self, name: str) -> ResolvedField | None:
        kind = TYPES.get(name)
        if kind is None:
            return None
        return ResolvedField("_id" if name == "id" else name, kind, self.guards.get(name))


PLAIN = Fields()


def _value(name: str) -> st.SearchStrategy[Any]:
    kind = TYPES[name]
    scalar: st.SearchStrategy[Any]
    if kind in ("text", "editor", "email", "url", "relation") or name == "status":
        scalar = st.sampled_from(TEXTS)
    elif kind == "select":
        return st.lists(st.sampled_from(["a", "A", "b", ""]), max_size=3)
    elif kind == "number":
        scalar = st.sampled_from(NUMBERS)
    elif kind == "bool":
        scalar = st.booleans()
    elif kind == "date":
        scalar = st.sampled_from(DATES)
    else:  # json
        scalar = st.one_of(st.sampled_from([0, 1, "a", True, None]), st.just({"k": 1}), st.just([1, "a"]))
    return st.one_of(scalar, st.none())


@st.composite
def documents(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to 12 stored records: each field missing, null or a value of its kind."""
    docs = []
    for n in range(draw(st.integers(min_value=1, max_value=12))):
        doc: dict[str, Any] = {"_id": IDS[n] if n < len(IDS) else f"r{n}", "created": draw(st.sampled_from(DATES))}
        for name in TYPES:
            if name in ("id", "created") or draw(st.booleans()) and draw(st.booleans()):
                continue  # missing
            doc[name] = draw(_value(name))
        docs.append(doc)
    return docs


def _literal(name: str) -> st.SearchStrategy[str]:
    kind = TYPES[name]
    if kind == "number":
        return st.sampled_from(["0", "3", "3.5", "7", "'7'", "-1", "null"])
    if kind == "bool":
        return st.sampled_from(["true", "false", "'true'", "null"])
    if kind in ("date", "datetime"):
        return st.sampled_from(["'2026-01-01'", "'2026-01-02T00:00:00.005Z'", "'2026-01-03 00:00'", "null"])
    if kind == "json":
        return st.sampled_from(["0", "1", "a", "true", "null"])
    return st.sampled_from(["a", "'A'", "''", "ab", "'b.c'", "7", "'Ä'", "null", "true"])


def _operators(name: str, literal: str) -> list[str]:
    kind = TYPES[name]
    if literal == "null" or kind == "json":
        return ["=", "!="]
    ops = ["=", "!=", ">", ">=", "<", "<="] if kind != "bool" else ["=", "!="]
    if kind in ("text", "editor", "email", "url", "select", "relation", "id"):
        ops += ["~", "!~"]
    return ops


@st.composite
def terms(draw: st.DrawFn, variables: bool) -> str:
    """One comparison of the filter (or, with `variables`, the rule) grammar."""
    name = draw(st.sampled_from(sorted(TYPES)))
    if variables and draw(st.integers(0, 3)) == 0:
        variable = draw(st.sampled_from(["@request.auth.id", "@request.auth.email", "@request.auth.verified",
                                         "@request.data.views", "@request.data.title", "@request.data.tags"]))
        if draw(st.booleans()):
            op = draw(st.sampled_from(["=", "!=", "~", "!~", ">", "<="]))
            return f"{variable} {op} {draw(st.sampled_from(['a', '7', 'true', 'null', 'ann']))}"
        op = draw(st.sampled_from(["=", "!=", ">", "<"]))
        return f"{name} {op} {variable}"
    literal = draw(_literal(name))
    return f"{name} {draw(st.sampled_from(_operators(name, literal)))} {literal}"


@st.composite
def expressions(draw: st.DrawFn, variables: bool, depth: int = 0) -> str:
    """`&&` / `||` of terms and parenthesised groups, at most three levels deep."""
    if depth >= 2 or draw(st.booleans()):
        return draw(terms(variables))
    parts = draw(st.lists(expressions(variables, depth + 1), min_size=2, max_size=3))
    joined = f" {draw(st.sampled_from(['&&', '||']))} ".join(parts)
    return f"({joined})" if depth else joined


contexts = st.builds(
    RequestContext,
    auth_id=st.sampled_from(["", "ann", "bob"]),
    auth_email=st.sampled_from(["", "a", "ann@x.io"]),
    auth_verified=st.booleans(),
    data=st.fixed_dictionaries({}, optional={"views": st.sampled_from([0, 3, 7.0, "7", None, [3]]),
                                             "title": st.sampled_from(["a", "A", 7, None, {"$ne": 1}]),
                                             "tags": st.sampled_from([["a"], "a", []])}),
)


@pytest.fixture
def stored(config: Any) -> Any:
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(config.mongodb_url, retryWrites=False, tz_aware=True)
    yield client[config.mongodb_db]["engine_property"]
    client.close()


def _agree(stored: Any, docs: list[dict[str, Any]], cond: Any) -> None:
    query = render(cond)
    note(f"query: {query!r}")
    in_memory = {d["_id"] for d in docs if evaluate(cond, d)}
    if isinstance(query, bool):
        assert in_memory == ({d["_id"] for d in docs} if query else set())
        return
    from_db = {d["_id"] for d in stored.find(query, {"_id": 1})}
    assert in_memory == from_db


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
@given(docs=documents(), rule=expressions(variables=True), filter_text=expressions(variables=False),
       context=contexts, guarded=st.lists(st.sampled_from(["title", "views", "tags", "flag"]), max_size=2),
       guard_rule=expressions(variables=True))
def test_the_predicate_and_the_database_agree(stored: Any, docs: list[dict[str, Any]], rule: str,
                                              filter_text: str, context: RequestContext, guarded: list[str],
                                              guard_rule: str) -> None:
    stored.delete_many({})
    stored.insert_many(docs)
    note(f"rule: {rule}\nfilter: {filter_text}\nguard on {guarded}: {guard_rule}")
    try:
        bound = bind_rule(rule, PLAIN, context)
        guard = bind_rule(guard_rule, PLAIN, context)
        filtered = build(parse_filter(filter_text), Fields({name: guard for name in guarded}))
    except InvalidFilter:
        return  # a drawn expression the grammar refuses (e.g. a value unfit for the field)
    _agree(stored, docs, bound)
    _agree(stored, docs, filtered)
    _agree(stored, docs, all_of(bound, filtered))


@settings(max_examples=max(EXAMPLES // 3, 10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(docs=documents(), keys=st.lists(st.tuples(st.sampled_from(["title", "views", "flag", "when", "tags"]),
                                                 st.sampled_from([1, -1])),
                                       min_size=1, max_size=2, unique_by=lambda k: k[0]))
def test_the_sort_in_memory_orders_as_the_database(stored: Any, docs: list[dict[str, Any]],
                                                   keys: list[tuple[str, int]]) -> None:
    stored.delete_many({})
    stored.insert_many(docs)
    order = [*keys, ("_id", keys[0][1])]
    from_db = [d["_id"] for d in stored.find({}, {"_id": 1}, sort=order)]
    positions = sort_documents(docs, order, {})
    assert [docs[i]["_id"] for i in positions] == from_db
