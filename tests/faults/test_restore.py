"""Restores and backups under faults (decisions.md, Backups; issue 28): two replicas asked to restore
at once, a restore while traffic runs, a restore whose caller goes away, and a backup directory
whose disk is full.

The replica cases run two `cms serve` processes (A and B, production mode) on the session's MongoDB
and Redis, sharing one database and one backup directory (`BACKUP_DIR`). The other cases use the
in-process app. The full disk is a real one: a 256 KiB tmpfs mounted on the backup directory (the
test is skipped where `mount` is not permitted)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import bson
import pytest
from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.config import Config
from cms.errors import BadRequest, ServiceUnavailable
from cms.runtime.embedded import free_port
from cms.services.operations.shared_lock import SharedLock
from cms.store.client import Database, open_client
from cms.store.documents import records_mongo_name
from cms.wiring import Services
from tests.api.test_backups import Snapshot, snapshot, without_audit
from tests.conftest import Client as AppClient
from tests.conftest import bearer, create_collection, create_record, error_of
from tests.fixtures import wait_until
from tests.test_replicas import V1, Client, Processes, Replicas, _env, _wait_healthy, admin_client

BACKUPS = V1 + "/backups"
ITEM_FIELDS: list[dict[str, Any]] = [{"name": "title", "type": "text"}, {"name": "n", "type": "number"}]
CHUNK_BYTES = 4 * 2**20
"""Random (incompressible) GridFS bytes in every backup, so that a restore takes a while."""


@dataclass(frozen=True)
class Site:
    """The two replicas, their database (`db`, a client of the test's own) and the session's Redis."""

    replicas: Replicas
    db_name: str
    db: Database
    redis: Redis


@pytest.fixture(scope="module")
def replica_site(mongodb_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[Replicas, str]]:
    """Serve A and B on one database and one backup directory; stopped after the module."""
    tmp = tmp_path_factory.mktemp("restore")
    env = {**_env(mongodb_url, redis_url), "BACKUP_DIR": str(tmp / "backups")}
    processes = Processes(tmp, env)
    try:
        url_a, serve_a = processes.serve("a")
        _wait_healthy(url_a, serve_a, processes.log("a"))
        url_b, serve_b = processes.serve("b")
        _wait_healthy(url_b, serve_b, processes.log("b"))
        yield Replicas(a=url_a, b=url_b), env["MONGODB_DB"]
    finally:
        processes.stop_all()


@pytest.fixture
async def site(replica_site: tuple[Replicas, str], mongodb_url: str, redis_url: str) -> AsyncIterator[Site]:
    replicas, db_name = replica_site
    mongo = open_client(mongodb_url)
    redis = Redis.from_url(redis_url)
    try:
        yield Site(replicas, db_name, mongo[db_name], redis)
    finally:
        await redis.aclose()
        await mongo.close()


async def call(http: Client, replica: str, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    return await http.call(replica, method, path, **kwargs)


async def seed(http: Client, db: Database, collection: str, count: int) -> tuple[str, list[dict[str, Any]]]:
    """A collection of `count` records (through A) and a GridFS file of CHUNK_BYTES random bytes;
    returns the Mongo name of the records' collection, and the records."""
    status, body = await call(http, "a", "POST", V1 + "/collections", json={"name": collection, "schema": ITEM_FIELDS})
    assert status == 201, body
    mongo_name = records_mongo_name(body["id"])
    records = []
    for n in range(count):
        status, body = await call(http, "a", "POST", f"{V1}/collections/{collection}/records",
                                  json={"data": {"title": f"item {n}", "n": n}})
        assert status == 201, body
        records.append(body)
    file_id = bson.ObjectId()
    await db["fs.files"].insert_one({"_id": file_id, "length": CHUNK_BYTES, "chunkSize": CHUNK_BYTES,
                                     "filename": f"{collection}.bin"})
    await db["fs.chunks"].insert_one({"files_id": file_id, "n": 0, "data": bson.Binary(os.urandom(CHUNK_BYTES))})
    return mongo_name, records


async def backup_on(http: Client, replica: str) -> str:
    """Take a backup through `replica`; names have a one-second grain, so a backup taken in the same
    second as the previous one is asked again a second later, as the 400 says."""
    deadline = time.monotonic() + 5
    while True:
        status, body = await call(http, replica, "POST", BACKUPS)
        if status != 400 or body.get("code") != "already_exists" or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    assert status == 201, body
    filename: str = body["filename"]
    return filename


def restored_exactly(after: Snapshot, before: Snapshot, filename: str) -> None:
    """`after` is the state `before` as backed up in `filename`: every collection equal, the audit
    log being the backup's (without its own `backup_created`, written once the archive was) plus
    exactly one `backup_restored` entry (so exactly one restore ran)."""
    assert without_audit(after) == without_audit(before)
    audit, indexes = after["audit_log"]
    assert indexes == before["audit_log"][1]
    backed_up = [entry for entry in before["audit_log"][0]
                 if (entry["event_type"], entry["details"].get("filename")) != ("backup_created", filename)]
    added = [entry for entry in audit if entry not in backed_up]
    assert [entry["event_type"] for entry in added] == ["backup_restored"], added
    assert len(audit) == len(backed_up) + 1


# --- two replicas at once ----------------------------------------------------------------------------


async def test_two_replicas_asked_to_restore_at_once_run_one_restore(site: Site) -> None:
    async with admin_client(site.replicas) as http:
        collection = f"race_{uuid.uuid4().hex[:6]}"
        _, records = await seed(http, site.db, collection, 20)
        filename = await backup_on(http, "a")
        before = await snapshot(site.db)
        status, _ = await call(http, "b", "DELETE", f"{V1}/collections/{collection}/records/{records[0]['id']}")
        assert status == 204

        started = time.monotonic()
        answers = await asyncio.gather(call(http, "a", "POST", f"{BACKUPS}/{filename}/restore"),
                                       call(http, "b", "POST", f"{BACKUPS}/{filename}/restore"))
        took_s = time.monotonic() - started
        assert sorted(status for status, _ in answers) == [200, 400], answers
        refused = next(body for status, body in answers if status == 400)
        assert refused == {"detail": "A restore is running; try again when it is done", "code": "bad_request"}
        restored_exactly(await snapshot(site.db), before, filename)
        assert not await site.redis.exists(keys.backup_lock(site.db_name))  # released once done
        # both replicas serve the backup's data at once (the restore's epochs)
        for replica in ("a", "b"):
            status, body = await call(http, replica, "GET", f"{V1}/collections/{collection}/records/{records[0]['id']}")
            assert status == 200, (replica, body)
        # and the next restore is accepted
        status, body = await call(http, "b", "POST", f"{BACKUPS}/{filename}/restore")
        assert status == 200, body
        print(f"two restores at once answered in {took_s:.2f} s")


# --- a restore while traffic runs --------------------------------------------------------------------


@dataclass
class Traffic:
    """Reads and writes on both replicas until `stop` is set; what each write got back."""

    http: Client
    collection: str
    read_ids: list[str]
    stop: asyncio.Event
    statuses: list[int]
    created: list[tuple[str, float]]  # (title, monotonic time of the 201)

    async def writer(self, replica: str) -> None:
        n = 0
        while not self.stop.is_set():
            title = f"traffic {replica} {n}"
            status, _ = await call(self.http, replica, "POST", f"{V1}/collections/{self.collection}/records",
                                   json={"data": {"title": title, "n": -1}})
            self.statuses.append(status)
            if status == 201:
                self.created.append((title, time.monotonic()))
            n += 1

    async def reader(self, replica: str) -> None:
        while not self.stop.is_set():
            for record_id in self.read_ids:
                status, _ = await call(self.http, replica, "GET",
                                       f"{V1}/collections/{self.collection}/records/{record_id}")
                self.statuses.append(status)
            status, _ = await call(self.http, replica, "GET", f"{V1}/collections/{self.collection}/records")
            self.statuses.append(status)


async def test_a_restore_under_traffic_leaves_the_backup_and_no_cache_serves_the_old_data(site: Site) -> None:
    async with admin_client(site.replicas) as http:
        collection, extra = f"busy_{uuid.uuid4().hex[:6]}", f"later_{uuid.uuid4().hex[:6]}"
        records_name, records = await seed(http, site.db, collection, 10)
        filename = await backup_on(http, "a")
        before = await snapshot(site.db)
        changed, deleted = records[1]["id"], records[2]["id"]
        # after the backup: a change, a delete, a new record and a new collection, all read on both
        # replicas so that their caches hold the new data
        item = f"{V1}/collections/{collection}/records"
        assert (await call(http, "a", "PATCH", f"{item}/{changed}", json={"data": {"title": "changed"}}))[0] == 200
        assert (await call(http, "a", "DELETE", f"{item}/{deleted}"))[0] == 204
        status, added = await call(http, "b", "POST", item, json={"data": {"title": "added", "n": 99}})
        assert status == 201, added
        status, body = await call(http, "b", "POST", V1 + "/collections", json={"name": extra, "schema": ITEM_FIELDS})
        assert status == 201, body
        for replica in ("a", "b"):
            assert (await call(http, replica, "GET", f"{item}/{changed}"))[1]["title"] == "changed"
            assert (await call(http, replica, "GET", f"{item}/{deleted}"))[0] == 404
            assert (await call(http, replica, "GET", f"{item}/{added['id']}"))[0] == 200
            assert (await call(http, replica, "GET", f"{V1}/collections/{extra}/records"))[0] == 200

        traffic = Traffic(http, collection, [changed, deleted, added["id"]], asyncio.Event(), [], [])
        loops = [asyncio.create_task(loop(replica)) for replica in ("a", "b")
                 for loop in (traffic.writer, traffic.reader)]
        await wait_until(lambda: len(traffic.created) >= 4, "traffic running on both replicas")
        sent = time.monotonic()
        status, body = await call(http, "a", "POST", f"{BACKUPS}/{filename}/restore")
        assert status == 200, body
        # right after the answer, while traffic still runs: both replicas serve the backup's data
        for replica in ("a", "b"):
            status, record = await call(http, replica, "GET", f"{item}/{changed}")
            assert (status, record["title"]) == (200, "item 1"), (replica, record)
            assert (await call(http, replica, "GET", f"{item}/{deleted}"))[0] == 200, replica
            assert (await call(http, replica, "GET", f"{item}/{added['id']}"))[0] == 404, replica
            assert (await call(http, replica, "GET", f"{V1}/collections/{extra}/records"))[0] == 404, replica
            assert (await call(http, replica, "GET", f"{V1}/collections/{extra}"))[0] == 404, replica
        traffic.stop.set()
        await asyncio.gather(*loops)

        assert traffic.statuses and not [s for s in traffic.statuses if s >= 500], sorted(set(traffic.statuses))
        after = await snapshot(site.db)
        # records written by the traffic during the restore may have landed after the switch: each
        # one there got a 201, and none answered before the restore was asked for is there
        documents, indexes = after[records_name]
        traffic_titles = {title for title, _ in traffic.created}
        early = {title for title, at in traffic.created if at < sent}
        kept = [d for d in documents if _title(d) not in traffic_titles]
        landed = {_title(d) for d in documents} & traffic_titles
        assert not landed & early, landed & early
        assert kept == before[records_name][0] and indexes == before[records_name][1]
        after[records_name] = before[records_name]
        restored_exactly(after, before, filename)
        print(f"traffic: {len(traffic.statuses)} requests, {len(traffic.created)} writes, "
              f"{len(landed)} landed after the switch")


def _title(document: dict[str, Any]) -> Any:
    return document.get("title", document.get("data", {}).get("title"))


# --- a caller that goes away -------------------------------------------------------------------------


async def test_a_cancelled_restore_goes_on_holding_the_lock_until_it_is_done(
        client: AppClient, admin_token: str, services: Services, config: Config, mongo_db: Database) -> None:
    await create_collection(client, admin_token, "notes", ITEM_FIELDS)
    await create_record(client, admin_token, "notes", {"title": "kept", "n": 1})
    file_id = bson.ObjectId()
    await mongo_db["fs.files"].insert_one({"_id": file_id, "length": CHUNK_BYTES, "chunkSize": CHUNK_BYTES})
    await mongo_db["fs.chunks"].insert_one({"files_id": file_id, "n": 0, "data": bson.Binary(os.urandom(CHUNK_BYTES))})
    backup = await services.backups.create(None)
    before = await snapshot(mongo_db)
    await create_record(client, admin_token, "notes", {"title": "after the backup", "n": 2})

    lock = keys.backup_lock(config.mongodb_db)
    caller = asyncio.create_task(services.backups.restore(None, backup.filename))
    await wait_until(lambda: _held(services.redis, lock), "the restore holds the lock")
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert await services.redis.exists(lock)  # the work goes on, holding the lock
    with pytest.raises(BadRequest, match="A restore is running"):
        await services.backups.restore(None, backup.filename)
    await wait_until(lambda: _gone(services.redis, lock), "the lock released", timeout_s=30)
    restored_exactly(await snapshot(mongo_db), before, backup.filename)


async def _held(redis: Redis, key: str) -> bool:
    return bool(await redis.exists(key))


async def _gone(redis: Redis, key: str) -> bool:
    return not await redis.exists(key)


async def test_without_redis_a_backup_or_restore_is_503_and_nothing_runs() -> None:
    """No fallback to a lock per process (docs/operations/backups.md): nothing listens on the port."""
    redis = Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=2)
    ran: list[str] = []

    async def work() -> None:
        ran.append("restore")

    try:
        with pytest.raises(ServiceUnavailable, match="needs Redis"):
            await SharedLock(redis, keys.backup_lock("nowhere")).run("restore", work)
    finally:
        await redis.aclose()
    assert ran == []


# --- a full disk -------------------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted at `<tmp>/disk` (skips where mounting is not permitted); unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(disk)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def config(config: Config, request: pytest.FixtureRequest) -> Config:
    """The test's Config; a test that requests `full_disk` keeps its backups there."""
    if "full_disk" not in request.fixturenames:
        return config
    disk: Path = request.getfixturevalue("full_disk")
    return replace(config, backup_dir=disk / "backups")


async def test_a_backup_on_a_full_disk_fails_cleanly_and_lists_nothing(
        full_disk: Path, client: AppClient, admin_token: str, config: Config, services: Services,
        mongo_db: Database) -> None:
    await create_collection(client, admin_token, "blobs", ITEM_FIELDS)
    file_id = bson.ObjectId()  # 1 MiB of random bytes: no archive of it fits in 256 KiB
    await mongo_db["fs.files"].insert_one({"_id": file_id, "length": 2**20, "chunkSize": 2**20})
    await mongo_db["fs.chunks"].insert_one({"files_id": file_id, "n": 0, "data": bson.Binary(os.urandom(2**20))})

    response = await client.post(BACKUPS, headers=bearer(admin_token))
    body = await error_of(response, 503, "service_unavailable")
    assert body["detail"] == ("The backup could not be written to the backup directory (No space left on device); "
                              "nothing was kept"), body
    assert "Traceback" not in await response.text()
    listed = await client.get(BACKUPS, headers=bearer(admin_token))
    assert listed.status == 200 and await listed.json() == []
    assert os.listdir(config.backups_path) == []  # no temporary file left either
    assert not await services.redis.exists(keys.backup_lock(config.mongodb_db))  # released

    # with the space back, the next backup is written
    await mongo_db["fs.chunks"].delete_many({})
    await mongo_db["fs.files"].delete_many({})
    response = await client.post(BACKUPS, headers=bearer(admin_token))
    assert response.status == 201, await response.text()
    assert [b["filename"] for b in await (await client.get(BACKUPS, headers=bearer(admin_token))).json()] == \
        [(await response.json())["filename"]]
