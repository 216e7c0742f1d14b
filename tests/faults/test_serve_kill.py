"""`cms serve` killed with SIGKILL in the middle of a CSV import, of bulk updates and of batches (issue 28,
item 1), while other clients create records; then started again on the same port and database.

Each test runs one production-mode `cms serve` (the process helpers of tests/test_replicas.py: its own
database on the session's MongoDB and Redis, one bootstrapped admin) and speaks real HTTP to it. What is
stored is read straight from MongoDB after the restart. Invariants proven:

- every create answered 201 is stored exactly once (under the id it was answered with), and a create
  that got no answer is stored at most once;
- a bulk update is all or nothing: every record of the request carries the same change, which is the
  last one answered or the one in flight when the process died (one bulk write: MongoDB received it
  whole or not at all);
- a batch is all or nothing: each batch (creates into two collections, an update and a delete: several
  database writes in one transaction) is stored completely or not at all, and every answered one
  completely, each record once;
- a CSV import that was answered stored exactly `imported` rows; one cut short stored each of its rows
  at most once, and what it stored is every row of its first k insert batches (IMPORT_BATCH_SIZE
  rows each, in file order) plus some rows of batch k + 1, so a client finds what is missing by a
  key column and imports just that again.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cms.runtime.embedded import free_port
from cms.services.content.record_csv import IMPORT_BATCH_SIZE
from cms.store.client import Database, open_client
from cms.store.documents import records_mongo_name
from tests.faults.test_worker_faults import kill
from tests.fixtures import wait_until
from tests.test_replicas import V1, Client, Processes, Replicas, _env, _wait_healthy, admin_client, new_collection

FIELDS = [{"name": "title", "type": "text"}, {"name": "n", "type": "number"}, {"name": "views", "type": "number"}]
CREATORS = 3
"""Clients creating records all along, each from its own IP (the general rate limit is per IP)."""


@dataclass
class Serve:
    """One `cms serve` on a fixed port, started again on the same port after a kill."""

    processes: Processes
    port: int
    runs: int = 0
    process: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.runs += 1
        name = f"serve{self.runs}"
        self.process = self.processes.start(name, "serve", "--port", str(self.port), "--host", "127.0.0.1")
        await asyncio.to_thread(_wait_healthy, self.url, self.process, self.processes.log(name))

    async def kill(self) -> None:
        await kill(self.process)


@pytest.fixture
async def serve(mongodb_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Serve]:
    processes = Processes(tmp_path, _env(mongodb_url, redis_url))
    running = Serve(processes, free_port())
    try:
        await running.start()
        yield running
    finally:
        processes.stop_all()


@pytest.fixture
async def db(serve: Serve, mongodb_url: str) -> AsyncIterator[Database]:
    """The serve's database, through a client of the test's own."""
    client = open_client(mongodb_url)
    yield client[serve.processes.env["MONGODB_DB"]]
    await client.close()


@dataclass
class Creates:
    """Creates sent all along by CREATORS clients until the server stops answering: `answered` maps the
    title of each create answered 201 to the id it was answered with; `unanswered` are the titles whose
    request got no answer (the connection broke)."""

    answered: dict[str, str] = field(default_factory=dict)
    unanswered: set[str] = field(default_factory=set)
    other: list[tuple[str, int, Any]] = field(default_factory=list)

    async def run(self, http: Client, collection: str) -> None:
        async def creator(number: int) -> None:
            client = Client(http.session, http.replicas)
            client.token = http.token
            for sequence in itertools.count():
                title = f"create {number}-{sequence}"
                try:
                    status, body = await client.call("a", "POST", f"{V1}/collections/{collection}/records",
                                                     json={"data": {"title": title}})
                except (TimeoutError, aiohttp.ClientError):
                    self.unanswered.add(title)
                    return
                if status == 201:
                    self.answered[title] = body["id"]
                else:
                    self.other.append((title, status, body))

        await asyncio.gather(*(creator(number) for number in range(CREATORS)))

    async def check(self, db: Database, collection_id: str) -> None:
        """Every answered create is stored once under its id; an unanswered one at most once."""
        assert not self.other, self.other
        assert len(self.answered) >= CREATORS, self.answered  # traffic did run
        stored = [doc async for doc in db[records_mongo_name(collection_id)].find({}, {"title": 1})]
        by_title = Counter(doc["title"] for doc in stored)
        ids = {doc["title"]: doc["_id"] for doc in stored}
        assert all(by_title[title] == 1 and ids[title] == record_id for title, record_id in self.answered.items())
        assert all(by_title[title] <= 1 for title in self.unanswered), by_title
        assert set(by_title) <= set(self.answered) | self.unanswered, by_title


@dataclass
class Traffic:
    """The creates of one test, in a collection of their own."""

    http: Client
    db: Database
    collection_id: str
    creates: Creates
    task: asyncio.Task[None]

    async def check(self) -> None:
        await asyncio.wait_for(self.task, 15)
        await self.creates.check(self.db, self.collection_id)


async def start_traffic(http: Client, db: Database) -> Traffic:
    collection = await new_collection(http, FIELDS)
    creates = Creates()
    task = asyncio.create_task(creates.run(http, collection["name"]))
    await wait_until(lambda: len(creates.answered) >= CREATORS, "creates answered", timeout_s=10)
    return Traffic(http, db, collection["id"], creates, task)


@pytest.fixture
async def http(serve: Serve) -> AsyncIterator[Client]:
    async with admin_client(Replicas(a=serve.url, b=serve.url)) as client:
        yield client


def csv_file(first: int, last: int) -> bytes:
    return ("title,n\r\n" + "".join(f"row {n},{n}\r\n" for n in range(first, last + 1))).encode()


async def import_csv(http: Client, collection: str, content: bytes) -> tuple[int, Any]:
    form = aiohttp.FormData()
    form.add_field("file", content, filename="rows.csv", content_type="text/csv")
    return await http.call("a", "POST", f"{V1}/collections/{collection}/records/import/csv", data=form)


async def restarted(serve: Serve, http: Client) -> None:
    """Start the serve again; its first create answers 201."""
    await serve.start()
    collection = await new_collection(http, FIELDS)
    status, body = await http.call("a", "POST", f"{V1}/collections/{collection['name']}/records",
                                   json={"data": {"title": "after the restart"}})
    assert status == 201, body


async def killed_when(serve: Serve, ready: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    await wait_until(ready, what, timeout_s=30)
    await serve.kill()


# --- the tests -------------------------------------------------------------------------------------


async def test_a_csv_import_cut_short_stored_whole_batches_and_part_of_the_next_each_row_once(
        serve: Serve, http: Client, db: Database) -> None:
    traffic = await start_traffic(http, db)
    collection = await new_collection(http, FIELDS)
    rows = db[records_mongo_name(collection["id"])]
    status, answer = await import_csv(http, collection["name"], csv_file(1, 300))
    assert status == 200 and answer["imported"] == 300 and answer["failed"] == [], answer  # answered: exact
    assert await rows.count_documents({}) == 300

    total = 30 * IMPORT_BATCH_SIZE
    big = asyncio.create_task(import_csv(http, collection["name"], csv_file(301, 300 + total)))

    async def part_stored() -> bool:
        return await rows.count_documents({}) > 300

    await killed_when(serve, part_stored, "the big import's first rows stored")
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(big, 15)  # cut short: no answer
    await restarted(serve, http)
    await traffic.check()

    numbers = Counter([int(doc["n"]) async for doc in rows.find({"n": {"$gt": 300}}, {"n": 1})])
    assert max(numbers.values()) == 1  # no row twice
    positions = sorted(n - 301 for n in numbers)  # 0-based positions in the big file
    assert 0 < len(positions) < total, len(positions)  # the kill landed mid-import
    whole = positions[-1] // IMPORT_BATCH_SIZE * IMPORT_BATCH_SIZE
    assert positions[:whole] == list(range(whole)), "a batch before the last one stored is incomplete"
    assert all(p < whole + IMPORT_BATCH_SIZE for p in positions[whole:])
    print(f"import cut short after {len(positions)} of {total} rows")


async def test_bulk_updates_cut_short_are_all_or_nothing(serve: Serve, http: Client, db: Database) -> None:
    collection = await new_collection(http, FIELDS)
    status, answer = await import_csv(http, collection["name"], csv_file(1, 1_000))
    assert status == 200 and answer["imported"] == 1_000, answer
    items = db[records_mongo_name(collection["id"])]
    ids = [doc["_id"] async for doc in items.find({}, {"_id": 1})]
    traffic = await start_traffic(http, db)
    answered: list[int] = []
    sent: list[int] = []

    async def bulk_updates() -> None:
        for views in itertools.count(1):
            sent.append(views)
            status, body = await http.call("a", "POST", f"{V1}/collections/{collection['name']}/records/bulk-update",
                                           json={"record_ids": ids, "data": {"views": views}})
            assert status == 200 and body == {"updated": len(ids)}, body
            answered.append(views)

    updates = asyncio.create_task(bulk_updates())
    await killed_when(serve, lambda: len(answered) >= 2, "two bulk updates answered")
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(updates, 15)
    await restarted(serve, http)
    await traffic.check()

    views = Counter([doc.get("views") async for doc in items.find({}, {"views": 1})])
    assert len(views) == 1 and sum(views.values()) == len(ids), views  # never part of one
    (stored,) = views
    assert stored in (answered[-1], sent[-1]), (stored, answered, sent)
    which = "in-flight" if stored == sent[-1] else "last answered"
    print(f"bulk updates answered: {len(answered)}; stored: the {which} one")


BATCH_SENDERS = 2
BATCH_PARTS = 4
"""Runs of creates in one batch, alternating between two collections: each run is one insert."""
PART_SIZE = 3
"""Creates in one run."""
POOL_PER_SENDER = 200
"""Records stored before the batches, per sender: each batch changes one and deletes another."""


async def test_batches_cut_short_are_all_or_nothing(serve: Serve, http: Client, db: Database) -> None:
    """A batch here is several database writes (four inserts into two collections, an update and a
    delete between them), so a kill lands between two writes of some batch: only its transaction
    keeps that batch all or nothing. (A batch of creates into one collection is one insert, which a
    kill cannot split, transaction or not.)"""
    first, second, pool = [await new_collection(http, FIELDS) for _ in range(3)]
    status, answer = await import_csv(http, pool["name"], csv_file(0, BATCH_SENDERS * POOL_PER_SENDER - 1))
    assert status == 200 and answer["imported"] == BATCH_SENDERS * POOL_PER_SENDER, answer
    pool_records = db[records_mongo_name(pool["id"])]
    pool_ids = {int(doc["n"]): doc["_id"] async for doc in pool_records.find({}, {"n": 1})}
    traffic = await start_traffic(http, db)
    answered: set[str] = set()
    sent: dict[str, tuple[str, str]] = {}  # tag -> (id of the record it changes, id of the one it deletes)

    def records(collection: dict[str, Any], record_id: str = "") -> str:
        return f"{V1}/collections/{collection['name']}/records" + (f"/{record_id}" if record_id else "")

    def batch(tag: str, changed: str, deleted: str) -> list[dict[str, Any]]:
        requests: list[dict[str, Any]] = []
        for part in range(BATCH_PARTS):
            requests += [{"method": "POST", "url": records(first if part % 2 == 0 else second),
                          "body": {"data": {"title": tag, "n": part * PART_SIZE + n}}} for n in range(PART_SIZE)]
            if part == 0:
                requests.append({"method": "PATCH", "url": records(pool, changed), "body": {"data": {"title": tag}}})
            elif part == 2:
                requests.append({"method": "DELETE", "url": records(pool, deleted)})
        return requests

    async def batches(sender: int) -> None:
        client = Client(http.session, http.replicas)
        client.token = http.token
        for number in range(POOL_PER_SENDER // 2):
            tag = f"batch {sender}-{number}-{uuid.uuid4().hex[:6]}"
            base = sender * POOL_PER_SENDER + 2 * number
            sent[tag] = (pool_ids[base], pool_ids[base + 1])
            requests = batch(tag, *sent[tag])
            status, body = await client.call("a", "POST", f"{V1}/batch", json={"requests": requests})
            assert status == 200 and len(body) == len(requests), body
            answered.add(tag)

    senders = [asyncio.create_task(batches(sender)) for sender in range(BATCH_SENDERS)]
    await killed_when(serve, lambda: len(answered) >= 4, "four batches answered")
    for sender in senders:
        with pytest.raises(aiohttp.ClientError):
            await asyncio.wait_for(sender, 15)
    await restarted(serve, http)
    await traffic.check()

    created: dict[str, Counter[tuple[str, int]]] = {}
    for which, collection in (("first", first), ("second", second)):
        async for doc in db[records_mongo_name(collection["id"])].find({}, {"title": 1, "n": 1}):
            created.setdefault(doc["title"], Counter())[(which, int(doc["n"]))] += 1
    titles = {doc["_id"]: doc["title"] async for doc in pool_records.find({}, {"title": 1})}
    whole = Counter({(("first", "second")[part % 2], part * PART_SIZE + n): 1
                     for part in range(BATCH_PARTS) for n in range(PART_SIZE)})
    stored: set[str] = set()
    split: dict[str, tuple[Any, ...]] = {}
    for tag, (changed, deleted) in sent.items():
        outcome = (created.get(tag, Counter()), titles.get(changed) == tag, deleted not in titles)
        if outcome == (whole, True, True):
            stored.add(tag)
        elif outcome != (Counter(), False, False):
            split[tag] = outcome
    assert not split, split  # each batch whole (each record once) or not at all
    assert set(created) <= set(sent)
    assert answered <= stored
    print(f"batches answered: {len(answered)}; stored unanswered: {len(stored - answered)}")
