"""Realtime agrees with REST (decisions.md, Realtime), as a property: for random records, a random list
rule, subscribers (anonymous, two users of an auth collection, an admin) each with one or two
`<collection>/*` topics with an optional random filter, and a random sequence of admin writes, every
subscriber's stream is, topic by topic, the difference of its own REST list (with the topic's filter)
before and after each write: a record that appears is a `create`, one that disappears a `delete` (the
record as it was), the written record still listed an `update` (the record after), anything else nothing.

The hub decides rules and filters in memory (`filters.rules.matches`); REST asks the database. The
scenarios are drawn from the filter and rule grammars over a text, a number, a bool and an owner field,
with values chosen to meet the edges (null and missing, empty text, case, ints and floats around the
bounds, the anonymous empty `@request.auth.id`). Every run draws new scenarios; one that failed is kept
under `.hypothesis/` and tried first next time (see the settings of the test for why).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from cms.wiring import Services
from tests.api.test_access_rules import customer
from tests.conftest import COLLECTIONS, Client, bearer, create_collection, records_path
from tests.realtime.sse import Stream, data

FIELDS = [{"name": "title", "type": "text"}, {"name": "views", "type": "number"},
          {"name": "published", "type": "bool"}, {"name": "owner", "type": "text"}]
MEMBERS = "members"
"""The auth collection of the two users; `@request.auth.collection` may name it."""
ANN, BOB = "@ann", "@bob"
"""Stand-ins, in drawn values and expressions, for the two users' ids (known only once registered)."""
PER_PAGE = 100
EVENT_TIMEOUT_S = 10.0
QUIET_S = 0.4
"""How long every stream must stay silent once all expected events arrived."""

TITLES = ["", "a", "b", "ab", "Ab", "ba"]
VIEWS = [-1, 0, 2, 3, 3.5, 4, 7]
OWNERS = [ANN, BOB, "", "zed"]

# --- scenarios ------------------------------------------------------------------------------------------


def _quoted(text: str) -> str:
    return f"'{text}'"


def _field_terms() -> st.SearchStrategy[str]:
    """One `field OP value` term of the filter grammar over FIELDS."""
    title = st.builds("title {} {}".format, st.sampled_from(["=", "!=", "~", "!~"]),
                      st.sampled_from(TITLES).map(_quoted))
    views = st.builds("views {} {}".format, st.sampled_from(["=", "!=", ">", ">=", "<", "<="]),
                      st.sampled_from(VIEWS).map(str))
    published = st.builds("published {} {}".format, st.sampled_from(["=", "!="]), st.sampled_from(["true", "false"]))
    owner = st.builds("owner {} {}".format, st.sampled_from(["=", "!=", "~"]), st.sampled_from(OWNERS).map(_quoted))
    nulls = st.builds("{} {} null".format, st.sampled_from(["title", "views", "published", "owner"]),
                      st.sampled_from(["=", "!="]))
    return st.one_of(title, views, published, owner, nulls)


def _rule_terms() -> st.SearchStrategy[str]:
    """A term of a rule: a field term, or one with a request variable."""
    variables = st.sampled_from([
        "owner = @request.auth.id", "owner != @request.auth.id", "@request.auth.id != ''", "@request.auth.id = ''",
        f"@request.auth.collection = '{MEMBERS}'", "@request.auth.verified = true",
    ])
    return st.one_of(_field_terms(), variables)


def _expressions(terms: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """`terms` joined by `&&` and `||`, parenthesised, at most three levels deep."""
    return st.recursive(terms, lambda inner: st.builds("({} {} {})".format, inner, st.sampled_from(["&&", "||"]),
                                                       inner), max_leaves=4)


FIXED_RULES = ["owner = @request.auth.id", "views > 3 && published = true",
               "owner = @request.auth.id || published = true"]
RULES: st.SearchStrategy[str | None] = st.one_of(
    st.none(), st.just(""), st.sampled_from(FIXED_RULES), _expressions(_rule_terms()))
"""A list rule: null (admins only), "" (everyone), or an expression."""
FILTERS: st.SearchStrategy[str | None] = st.one_of(st.none(), _expressions(_field_terms()))

VALUES = st.fixed_dictionaries({}, optional={
    "title": st.one_of(st.none(), st.sampled_from(TITLES)),
    "views": st.one_of(st.none(), st.sampled_from(VIEWS)),
    "published": st.one_of(st.none(), st.booleans()),
    "owner": st.one_of(st.none(), st.sampled_from(OWNERS)),
})
"""The data of a create (any fields may be missing) or an update (at least one field)."""

WRITES = st.lists(st.one_of(
    st.tuples(st.just("create"), VALUES),
    st.tuples(st.just("update"), st.integers(0, 20), VALUES.filter(bool)),
    st.tuples(st.just("delete"), st.integers(0, 20)),
), min_size=1, max_size=10)
"""Writes by an admin; an update or delete names the (index modulo count)-th live record."""

SUBSCRIBERS = ("anonymous", "ann", "bob", "admin")
TOPIC_FILTERS = st.lists(FILTERS, min_size=1, max_size=2, unique=True)
"""A subscriber's topics, as their filters: one or two `<collection>/*` topics."""


@dataclass(frozen=True)
class Scenario:
    """One drawn scenario: the list rule, the records there before anyone subscribes, the filters of
    each subscriber's topics (None: no filter) and the writes."""

    list_rule: str | None
    records: list[dict[str, Any]]
    filters: dict[str, list[str | None]]
    writes: list[tuple[Any, ...]]


SCENARIOS = st.builds(
    Scenario, list_rule=RULES, records=st.lists(VALUES, max_size=5),
    filters=st.fixed_dictionaries({name: TOPIC_FILTERS for name in SUBSCRIBERS}), writes=WRITES)


# --- the people ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class People:
    """Each subscriber's REST headers, and the users' ids (for the ANN and BOB stand-ins)."""

    headers: dict[str, dict[str, str]]
    ids: dict[str, str]

    def fill(self, value: Any) -> Any:
        """`value` (a text, an expression or a record's data) with the stand-ins replaced by user ids."""
        if isinstance(value, str):
            return value.replace(ANN, self.ids[ANN]).replace(BOB, self.ids[BOB])
        if isinstance(value, dict):
            return {key: self.fill(item) for key, item in value.items()}
        return value


@pytest.fixture
async def people(client: Client, admin_token: str, services: Services) -> People:
    await services.settings.set("rate_limit_enabled", False)  # a run sends thousands of requests
    await create_collection(client, admin_token, MEMBERS, [], type="auth")
    ann_id, ann = await customer(client, MEMBERS, "ann@example.com")
    bob_id, bob = await customer(client, MEMBERS, "bob@example.com")
    return People(headers={"anonymous": {}, "ann": ann, "bob": bob, "admin": bearer(admin_token)},
                  ids={ANN: ann_id, BOB: bob_id})


@pytest.fixture
async def opened(client: Client) -> AsyncIterator[list[Stream]]:
    """Streams a test opens (closed after the test, whichever example failed)."""
    streams: list[Stream] = []
    yield streams
    for stream in streams:
        await stream.close()


# --- what REST says and what arrived ------------------------------------------------------------------------


Event = tuple[str, str, dict[str, Any]]
"""(topic, action, record) of one realtime event."""
Lists = dict[str, dict[str, dict[str, Any]]]
"""Per topic, what its subscriber's REST list with the topic's filter holds: record id -> record."""


@dataclass
class Subscriber:
    """One subscriber: its REST headers, its topics (text -> filter) and its stream."""

    who: str
    headers: dict[str, str]
    topics: dict[str, str | None]
    stream: Stream

    async def lists(self, client: Client, name: str) -> Lists:
        """Its REST list under each of its topics' filters."""
        return {topic: await listed(client, name, self.who, self.headers, filter_expr)
                for topic, filter_expr in self.topics.items()}


async def listed(client: Client, name: str, who: str, headers: dict[str, str],
                 filter_expr: str | None) -> dict[str, dict[str, Any]]:
    """The records `who` may list (with `filter_expr`), by id. A refusal (401 or 403: a null rule, or
    one that holds for no record of this caller) lists nothing, as a topic the caller may not list
    delivers nothing."""
    params = {"per_page": str(PER_PAGE), **({"filter": filter_expr} if filter_expr is not None else {})}
    response = await client.get(records_path(name), headers=headers, params=params)
    if response.status in (401, 403) and who != "admin":
        return {}
    assert response.status == 200, await response.text()
    page = await response.json()
    assert page["total"] == len(page["items"]) < PER_PAGE, page
    return {item["id"]: item for item in page["items"]}


def difference(written_id: str, before: Lists, after: Lists) -> list[Event]:
    """The events one write should send a subscriber whose lists went from `before` to `after`, one
    per topic (sorted by topic: a write's events share one id, their order is not specified)."""
    events: list[Event] = []
    for topic in sorted(after):
        old, new = before[topic], after[topic]
        untouched = [i for i in old.keys() & new.keys() if i != written_id and old[i] != new[i]]
        assert not untouched, f"records changed that were not written: {untouched}"
        if written_id in new:
            events.append((topic, "update" if written_id in old else "create", new[written_id]))
        elif written_id in old:
            events.append((topic, "delete", old[written_id]))
    return events


async def arrived(stream: Stream, count: int) -> list[list[Event]]:
    """The next `count` events of `stream` (fewer when they do not come within EVENT_TIMEOUT_S), grouped
    by event id (one write), each group sorted by topic."""
    groups: list[tuple[str, list[Event]]] = []
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    for _ in range(count):
        try:
            event = await stream.next(timeout=max(deadline - time.monotonic(), 0.01))
        except TimeoutError:
            break
        body = data(event)
        if not groups or groups[-1][0] != event.id:
            groups.append((event.id, []))
        groups[-1][1].append((event.event, body["action"], body["record"]))
    return [sorted(events, key=lambda e: e[0]) for _, events in groups]


async def write(client: Client, admin: dict[str, str], name: str, step: tuple[Any, ...],
                live: list[str], people: People) -> str | None:
    """Do one drawn write as the admin; returns the written record's id (None: nothing to write)."""
    if step[0] == "create":
        response = await client.post(records_path(name), headers=admin, json={"data": people.fill(step[1])})
        assert response.status == 201, await response.text()
        record_id = str((await response.json())["id"])
        live.append(record_id)
        return record_id
    if not live:
        return None
    index: int = step[1]
    record_id = live[index % len(live)]
    if step[0] == "update":
        response = await client.patch(records_path(name, record_id), headers=admin,
                                      json={"data": people.fill(step[2])})
        assert response.status == 200, await response.text()
    else:
        response = await client.delete(records_path(name, record_id), headers=admin)
        assert response.status == 204, await response.text()
        live.remove(record_id)
    return record_id


def topic_of(name: str, filter_expr: str | None) -> str:
    """The topic `<name>/*` with `filter_expr` (percent-encoded, so `&&` and quotes pass as they are)."""
    return f"{name}/*" + ("" if filter_expr is None else "?filter=" + quote(filter_expr, safe=""))


# --- the property -----------------------------------------------------------------------------------------


EXAMPLES = DirectoryBasedExampleDatabase(Path(__file__).resolve().parents[2] / ".hypothesis" / "examples")
"""Where hypothesis keeps the scenarios that failed (`.hypothesis/` is git-ignored)."""


# Random, not derandomized: a fixed seed ran the same 20 scenarios on every run, so a bug outside them was
# never found however often the suite ran (in-memory `>=` and `<=` that left out the equal value passed
# them). Each run now draws new scenarios, and a failing one is saved in EXAMPLES and tried first on the
# next run (Phase.reuse), so a failure found once is not lost to the next draw. 60 examples keep the test
# near a minute on 2 cores (an example is about a second: its writes, the REST lists after each, QUIET_S).
# No shrinking (each step of it is an example): a failure prints its Scenario through `note`; add
# Phase.shrink to minimise one locally.
@settings(max_examples=60, deadline=None, database=EXAMPLES,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenario=SCENARIOS)
async def test_each_stream_is_the_difference_of_its_rest_lists_before_and_after_each_write(
        client: Client, people: People, opened: list[Stream], scenario: Scenario) -> None:
    note(repr(scenario))
    name = f"posts_{uuid.uuid4().hex[:10]}"
    admin = people.headers["admin"]
    list_rule = people.fill(scenario.list_rule)
    response = await client.post(COLLECTIONS, headers=admin, json={
        "name": name, "schema": FIELDS, "list_rule": list_rule, "view_rule": list_rule})
    assert response.status == 201, await response.text()
    live: list[str] = []
    for values in scenario.records:
        await write(client, admin, name, ("create", values), live, people)

    subscribers: list[Subscriber] = []
    for who in SUBSCRIBERS:
        filters = [people.fill(f) for f in scenario.filters[who]]
        stream = Stream(str(client.make_url("/")))
        opened.append(stream)
        subscriber = Subscriber(who, people.headers[who], {topic_of(name, f): f for f in filters}, stream)
        subscribers.append(subscriber)
        await stream.open()
        answer = await stream.subscribe(list(subscriber.topics), headers=subscriber.headers)
        assert answer.status_code == 204, answer.text

    expected: dict[str, list[list[Event]]] = {s.who: [] for s in subscribers}
    before = {s.who: await s.lists(client, name) for s in subscribers}
    for step in scenario.writes:
        written_id = await write(client, admin, name, step, live, people)
        if written_id is None:
            continue
        after = {s.who: await s.lists(client, name) for s in subscribers}
        for who, events in expected.items():
            if group := difference(written_id, before[who], after[who]):
                events.append(group)
        before = after

    received = await asyncio.gather(*(arrived(s.stream, sum(map(len, expected[s.who]))) for s in subscribers))
    for subscriber, groups in zip(subscribers, received, strict=True):
        assert groups == expected[subscriber.who], (subscriber.who, list_rule, subscriber.topics)
    await asyncio.gather(*(s.stream.nothing(QUIET_S) for s in subscribers))
    for subscriber in subscribers:
        await subscriber.stream.close()
