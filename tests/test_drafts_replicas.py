"""Drafts across replicas (issue 39): two `cms serve` processes (A and B) and two `cms worker`
processes, in production mode against the session's MongoDB and Redis (as tests/test_replicas.py).

- a publish or an unpublish through A is seen by B's very next read (B's read cache stays exact);
- A and B publishing the same records at the same moment publish each once (one `create` event);
- schedules due over ten seconds (a tenth in each) run once each across both workers, one of which is
  killed mid-way (SIGKILL) and replaced: every record is published, no record twice (counted in the
  webhook deliveries).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from tests.fixtures import served
from tests.test_replicas import (
    V1,
    Client,
    Processes,
    Replicas,
    _env,
    _wait_healthy,
    admin_client,
    eventually,
    new_collection,
)

SCHEDULED_RECORDS = 200
DEAD_TRANSACTION_S = 60.0
"""How long the server keeps the open transaction of a client that died (transactionLifetimeLimitSeconds)."""


class Workers:
    """The `cms worker` processes of the module (started and replaced by the tests)."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.count = 0

    def start(self) -> Any:
        self.count += 1
        return self.processes.start(f"worker{self.count}", "worker")


@pytest.fixture(scope="module")
def cluster(mongodb_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Replicas, Workers]]:
    processes = Processes(tmp_path_factory.mktemp("drafts_replicas"), _env(mongodb_url, redis_url))
    try:
        url_a, serve_a = processes.serve("a")
        _wait_healthy(url_a, serve_a, processes.log("a"))
        url_b, serve_b = processes.serve("b")
        workers = Workers(processes)
        workers.start()
        workers.start()
        _wait_healthy(url_b, serve_b, processes.log("b"))
        yield Replicas(a=url_a, b=url_b), workers
    finally:
        processes.stop_all()


@pytest.fixture
async def http(cluster: tuple[Replicas, Workers]) -> AsyncIterator[Client]:
    async with admin_client(cluster[0]) as client:
        yield client


@pytest.fixture
async def deliveries() -> AsyncIterator[tuple[str, dict[str, dict[str, Any]]]]:
    """A webhook receiver: (url, each distinct delivery's body by its `webhook-id`)."""
    received: dict[str, dict[str, Any]] = {}

    async def hook(request: web.Request) -> web.Response:
        received.setdefault(request.headers["webhook-id"], await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with served(app, "/hook") as url:
        yield url, received


async def drafted(http: Client, url: str | None = None) -> tuple[str, str]:
    """A collection with drafts (and a webhook on every event to `url`); returns (name, records path)."""
    name = (await new_collection(http, [{"name": "title", "type": "text"}], drafts=True))["name"]
    if url is not None:
        status, body = await http.call("a", "POST", V1 + "/webhooks", json={
            "url": url, "collection_name": name, "events": ["create", "update", "delete"]})
        assert status == 201, body
    return name, f"{V1}/collections/{name}/records"


async def create(http: Client, records: str, title: str) -> str:
    status, body = await http.call("a", "POST", records, json={"data": {"title": title}})
    assert status == 201, body
    return str(body["id"])


async def test_a_publish_on_a_is_read_on_b_at_once(http: Client) -> None:
    _, records = await drafted(http)
    record_id = await create(http, records, "v1")
    status, body = await http.call("a", "POST", f"{records}/{record_id}/publish")
    assert status == 200, body
    for _ in range(2):  # the second read is served from B's cache
        status, body = await http.call("b", "GET", f"{records}/{record_id}", token="")
        assert status == 200 and body["title"] == "v1", body
        status, page = await http.call("b", "GET", records, token="")
        assert [r["title"] for r in page["items"]] == ["v1"], page

    status, body = await http.call("a", "PATCH", f"{records}/{record_id}", json={"data": {"title": "v2"}})
    assert status == 200 and body["status"] == "changed", body
    status, body = await http.call("b", "GET", f"{records}/{record_id}", token="")
    assert body["title"] == "v1", body
    status, body = await http.call("a", "POST", f"{records}/{record_id}/publish")
    assert status == 200, body
    status, body = await http.call("b", "GET", f"{records}/{record_id}", token="")
    assert status == 200 and body["title"] == "v2", body
    status, page = await http.call("b", "GET", records, token="")
    assert [r["title"] for r in page["items"]] == ["v2"], page

    status, body = await http.call("a", "POST", f"{records}/{record_id}/unpublish")
    assert status == 200, body
    status, body = await http.call("b", "GET", f"{records}/{record_id}", token="")
    assert status == 404, body
    status, page = await http.call("b", "GET", records, token="")
    assert page["items"] == [], page


async def test_a_and_b_publishing_the_same_records_at_once_publish_each_once(
        http: Client, deliveries: tuple[str, dict[str, dict[str, Any]]]) -> None:
    url, received = deliveries
    _, records = await drafted(http, url)
    ids = [await create(http, records, f"race {i}") for i in range(10)]
    answers = await asyncio.gather(*(http.call(replica, "POST", f"{records}/{record_id}/publish")
                                     for record_id in ids for replica in ("a", "b")))
    refused = [(status, body) for status, body in answers if status != 200 or body["status"] != "published"]
    assert not refused, refused
    for first, second in zip(answers[::2], answers[1::2], strict=True):
        assert first[1]["published_at"] == second[1]["published_at"]  # the loser answers the winner's result

    async def all_delivered() -> bool:
        return len(received) >= len(ids)

    await eventually(all_delivered, 20.0, "one delivery per record")
    await asyncio.sleep(1.0)  # no second delivery of any record may follow
    events = sorted((body["event"], body["record_id"]) for body in received.values())
    assert events == sorted(("create", record_id) for record_id in ids)


async def test_schedules_due_together_run_once_across_workers_one_killed_mid_way(
        http: Client, cluster: tuple[Replicas, Workers], deliveries: tuple[str, dict[str, dict[str, Any]]]) -> None:
    _, workers = cluster
    url, received = deliveries
    _, records = await drafted(http, url)
    ids: list[str] = []
    for start in range(0, SCHEDULED_RECORDS, 20):
        ids.extend(await asyncio.gather(*(create(http, records, f"scheduled {i}")
                                          for i in range(start, start + 20))))
    at = datetime.now(UTC) + timedelta(seconds=6)  # then one second later for each tenth: work for ten seconds
    for start in range(0, len(ids), 20):
        answers = await asyncio.gather(*(http.call("ab"[i % 2], "POST", f"{records}/{record_id}/publish",
                                                   json={"at": (at + timedelta(seconds=(start + i) % 10)).isoformat()})
                                         for i, record_id in enumerate(ids[start:start + 20])))
        assert all(status == 200 and body["scheduled_at"] for status, body in answers), answers
    assert datetime.now(UTC) < at, "scheduling took too long for this test"

    first = workers.processes.started[2]  # the first worker started by `cluster`
    await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))

    async def some_published() -> bool:
        status, page = await http.call("b", "GET", records + "?per_page=1", token="")
        return status == 200 and page["total"] >= SCHEDULED_RECORDS * 3 // 10

    await eventually(some_published, 30.0, "the first three seconds' scheduled publishes")
    first.kill()  # mid-way: whatever it claimed and did not commit is taken over after its lease
    first.wait(timeout=10)
    workers.start()
    status, page = await http.call("b", "GET", records + "?per_page=1", token="")
    published_then = page["total"]

    async def all_published() -> bool:
        status, page = await http.call("b", "GET", records + "?per_page=1", token="")
        return status == 200 and page["total"] == len(ids)

    # the killed worker's open transaction (if it died inside one) holds its writes until the server drops it
    # (60 s, MongoDB's transactionLifetimeLimitSeconds; the embedded server holds other writes meanwhile)
    took_s = await eventually(all_published, DEAD_TRANSACTION_S + 60.0, f"{len(ids)} scheduled publishes")

    async def all_delivered() -> bool:
        return sum(1 for body in received.values() if body["event"] == "create") >= len(ids)

    await eventually(all_delivered, 40.0, "one delivery per scheduled record")
    await asyncio.sleep(1.0)
    events = sorted((body["event"], body["record_id"]) for body in received.values())
    assert events == sorted(("create", record_id) for record_id in ids), "a record was published twice"
    for page_number in (1, 2):
        status, page = await http.call("a", "GET", f"{records}?draft=true&per_page=100&page={page_number}")
        assert status == 200, page
        assert all(r["status"] == "published" and r["scheduled_at"] is None for r in page["items"]), page
    print(f"{published_then} of {len(ids)} published when the worker was killed; all {took_s:.1f} s later "
          f"({time.strftime('%H:%M:%S')})")
