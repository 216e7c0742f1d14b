"""Realtime across replicas (decisions.md, Realtime): two `cms serve` processes (A and B) and one `cms worker`
on the session's MongoDB and Redis, one database, secret and queue, started once for the module (the
process helpers of tests/test_replicas.py). A write answered by one replica reaches streams held by the
other; a subscription POST to one replica is in force for the stream another holds when its 204 returns; a
client resumes on the other replica with exactly what it missed; a replica stopped with SIGTERM ends its
streams at once and its clients resume elsewhere without loss; a client bound to its principal on one replica
refuses another principal on the other, and no replica logs a client id.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from httpx_sse import ServerSentEvent

from tests.realtime.sse import REALTIME, Stream, data
from tests.test_replicas import (
    ADMIN_PASSWORD,
    V1,
    Client,
    Processes,
    Replicas,
    _env,
    _wait_healthy,
    admin_client,
    login,
    new_collection,
)

FIELDS = [{"name": "title", "type": "text"}]
SHUTDOWN_END_S = 3.0
"""How soon a stream of a replica told to stop must end (well below the shutdown time-out, 10 s)."""


@pytest.fixture(scope="module")
def processes(mongodb_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processes]:
    """The module's processes (one database, secret and queue of their own); stopped after."""
    env = {**_env(mongodb_url, redis_url), "QUEUE_NAME": f"cms:realtime:{uuid.uuid4().hex[:12]}",
           "LOG_LEVEL": "INFO"}  # the access log too: client ids must not reach it
    started = Processes(tmp_path_factory.mktemp("realtime-replicas"), env)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture(scope="module")
def replicas(processes: Processes) -> Replicas:
    """Serve A, then serve B and one worker (A is healthy first: the admin bootstrap does not race)."""
    url_a, serve_a = processes.serve("a")
    _wait_healthy(url_a, serve_a, processes.log("a"))
    url_b, serve_b = processes.serve("b")
    worker = processes.start("worker", "worker")
    _wait_healthy(url_b, serve_b, processes.log("b"))
    assert worker.poll() is None, processes.log("worker").read_text()
    return Replicas(a=url_a, b=url_b)


@pytest.fixture
async def http(replicas: Replicas) -> AsyncIterator[Client]:
    """The bootstrapped admin's client of the replicas (logged in on A)."""
    async with admin_client(replicas) as client:
        yield client


@pytest.fixture
async def streams() -> AsyncIterator[Callable[[str], Stream]]:
    """Open streams on a replica's base URL; closed after the test."""
    opened: list[Stream] = []

    def make(base_url: str) -> Stream:
        stream = Stream(base_url)
        opened.append(stream)
        return stream

    yield make
    for stream in opened:
        await stream.close()


def order(event_id: str) -> tuple[int, int]:
    """The stream position of an event id (`<client id>:<ms>-<seq>`)."""
    ms, _, seq = event_id.rpartition(":")[2].partition("-")
    return int(ms), int(seq)


async def public_collection(http: Client) -> str:
    """A new collection everyone may list (through A); its name."""
    return str((await new_collection(http, FIELDS, list_rule="", view_rule=""))["name"])


async def create(http: Client, replica: str, name: str, title: str) -> dict[str, Any]:
    status, record = await http.call(replica, "POST", f"{V1}/collections/{name}/records",
                                     json={"data": {"title": title}})
    assert status == 201, record
    result: dict[str, Any] = record
    return result


async def subscribed(stream: Stream, topics: list[str]) -> None:
    answer = await stream.subscribe(topics)
    assert answer.status_code == 204, answer.text


def created(events: list[ServerSentEvent]) -> list[dict[str, Any]]:
    """The records of `events`, each asserted to be a `create`."""
    bodies = [data(e) for e in events]
    assert all(body["action"] == "create" for body in bodies), bodies
    return [body["record"] for body in bodies]


async def test_a_write_answered_by_one_replica_reaches_subscribers_of_the_other(
        http: Client, replicas: Replicas, streams: Callable[[str], Stream]) -> None:
    name = await public_collection(http)
    on_a, on_b = streams(replicas.a), streams(replicas.b)
    for stream in (on_a, on_b):
        await stream.open()
        await subscribed(stream, [f"{name}/*"])
    from_a = await create(http, "a", name, "answered by A")
    from_b = await create(http, "b", name, "answered by B")
    for stream in (on_a, on_b):
        assert created([await stream.next(), await stream.next()]) == [from_a, from_b]
        await stream.nothing()


async def test_a_subscription_posted_to_b_is_in_force_on_a_when_its_204_returns(
        http: Client, replicas: Replicas, streams: Callable[[str], Stream]) -> None:
    """Each round moves A's stream to one collection through B, then writes on A at once: first to the
    other collection (which must not arrive), then to the subscribed one (which must, and next)."""
    first, second = await public_collection(http), await public_collection(http)
    on_a = streams(replicas.a)
    await on_a.open()
    for round_number in range(6):
        wanted, other = (first, second) if round_number % 2 == 0 else (second, first)
        status, body = await http.call("b", "POST", REALTIME, json={
            "client_id": on_a.client_id, "subscriptions": [f"{wanted}/*"]})
        assert status == 204, body
        await create(http, "a", other, f"not subscribed {round_number}")
        record = await create(http, "a", wanted, f"subscribed {round_number}")
        event = await on_a.next()
        assert event.event == f"{wanted}/*"
        assert data(event) == {"action": "create", "record": record}
    await on_a.nothing()


async def test_a_client_of_a_resumes_on_b_with_exactly_the_events_it_missed_then_live_ones(
        http: Client, replicas: Replicas, streams: Callable[[str], Stream]) -> None:
    name = await public_collection(http)
    on_a = streams(replicas.a)
    await on_a.open()
    await subscribed(on_a, [f"{name}/*"])
    seen = [await create(http, "a", name, f"seen {i}") for i in range(3)]
    read = [await on_a.next() for _ in seen]
    assert created(read) == seen
    await on_a.close()

    missed = [await create(http, replica, name, f"missed {i}") for i, replica in enumerate("abab")]
    on_b = streams(replicas.b)
    connect = await on_b.open(client_id=on_a.client_id, last_event_id=read[-1].id)
    assert on_b.client_id == on_a.client_id and connect.id == read[-1].id
    replayed = [await on_b.next() for _ in missed]
    assert created(replayed) == missed
    ids = [read[-1].id] + [e.id for e in replayed]
    assert ids == sorted(set(ids), key=order)  # increasing, none repeated
    live = await create(http, "a", name, "live")
    event = await on_b.next()
    assert created([event]) == [live] and order(event.id) > order(ids[-1])
    await on_b.nothing()


async def test_a_client_bound_on_a_refuses_another_principal_on_b_and_no_replica_logs_its_id(
        http: Client, replicas: Replicas, processes: Processes, streams: Callable[[str], Stream]) -> None:
    name = str((await new_collection(http, FIELDS, list_rule='@request.auth.id != ""'))["name"])
    owner = {"Authorization": f"Bearer {http.token}"}
    on_a = streams(replicas.a)
    await on_a.open()
    assert (await on_a.subscribe([f"{name}/*"], headers=owner)).status_code == 204  # bound to the admin, on A
    email = f"rt-{uuid.uuid4().hex[:10]}@example.com"
    status, body = await http.call("b", "POST", f"{V1}/auth/register", token="",
                                   json={"email": email, "password": ADMIN_PASSWORD})
    assert status == 201, body
    other = (await login(http, "b", email, ADMIN_PASSWORD))["access_token"]
    for token in (other, ""):  # another user, anonymous
        status, body = await http.call("b", "POST", REALTIME, token=token,
                                       json={"client_id": on_a.client_id, "subscriptions": []})
        assert status == 403, body
    first = await create(http, "b", name, "first")
    seen = await on_a.next()
    assert created([seen]) == [first]  # A's stream kept its subscriptions and credential
    status, body = await http.call("b", "GET", REALTIME, token=other, params={"client_id": on_a.client_id},
                                   headers={"Last-Event-ID": seen.id})
    assert status == 403, body
    second = await create(http, "b", name, "second")
    assert created([await on_a.next()]) == [second]  # not taken over from B
    await on_a.close()
    missed = await create(http, "a", name, "missed")
    on_b = streams(replicas.b)
    await on_b.open(client_id=on_a.client_id, last_event_id=seen.id, headers=owner)  # the owner resumes on B
    assert created([await on_b.next(), await on_b.next()]) == [second, missed]
    await on_b.close()
    for replica in ("a", "b"):
        logged = processes.log(replica).read_text()
        assert "/api/v1/realtime HTTP/1.1" in logged, replica  # the access log is on
        assert on_a.client_id not in logged, replica


async def test_sigterm_ends_a_replicas_streams_at_once_and_its_clients_resume_on_b_without_loss(
        http: Client, replicas: Replicas, processes: Processes, streams: Callable[[str], Stream]) -> None:
    """A replica of its own (C) is stopped, so A and B serve the other tests."""
    url_c, serve_c = processes.serve("c")
    _wait_healthy(url_c, serve_c, processes.log("c"))
    name = await public_collection(http)
    on_c = streams(url_c)
    await on_c.open()
    await subscribed(on_c, [f"{name}/*"])
    before = [await create(http, "b", name, f"before {i}") for i in range(2)]
    assert created([await on_c.next() for _ in before]) == before

    serve_c.send_signal(signal.SIGTERM)
    stopping = time.monotonic()
    during = [await create(http, "b", name, f"during {i}") for i in range(3)]
    delivered = await on_c.until_end(SHUTDOWN_END_S)
    assert time.monotonic() - stopping < SHUTDOWN_END_S
    last_id = delivered[-1].id if delivered else on_c.last_id

    on_b = streams(replicas.b)
    await on_b.open(client_id=on_c.client_id, last_event_id=last_id)
    resumed = [await on_b.next() for _ in range(len(during) - len(delivered))]
    assert created(delivered + resumed) == during
    after = await create(http, "a", name, "after")
    assert created([await on_b.next()]) == [after]
    await on_b.nothing()
    assert serve_c.wait(timeout=15) == 0, processes.log("c").read_text()
