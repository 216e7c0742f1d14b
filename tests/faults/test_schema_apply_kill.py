"""`cms schema apply` killed with SIGKILL mid-way (decisions.md, Schema as code; issue 43): the next start of
`cms serve` on the database leaves the old schema or the new one, never a mix, and the records match it.

Each test runs the apply as a real child process (production mode on the session's MongoDB and Redis, the
test's own database), watches the apply's journal in MongoDB to kill it at a chosen point, then starts `cms
serve` and reads through an in-process app on the same database. What the journal says at the kill decides
what the start must do: APPLYING -> undone (the old schema, renames put back), COMMITTED -> completed (the
new schema, every value converted exactly once: a value converted twice would be cleared here, as number ->
text -> number is not what a second conversion of a text does)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from cms.config import Config
from cms.store.client import Database, open_client
from tests.api.test_schema_as_code import collection_of, export, field_of
from tests.conftest import Client, bearer, create_collection
from tests.faults.test_worker_faults import kill
from tests.fixtures import wait_until
from tests.test_replicas import Processes
from tests.test_schema_cli import command_env

RECORDS = 5_000
"""Records of the changed collection: enough for its renames and rewrites to take seconds on the embedded
server (about 0.7 ms a record for a `$rename`, 2.3 ms for a rewritten value)."""
SLOW_DATABASE = {"DATABASE_TIMEOUT_S": "120"}
"""One `update_many` over many records takes longer than the default 20 s time-out on the embedded server."""


async def import_rows(client: Client, token: str, collection: str, header: str, rows: list[str]) -> None:
    form = aiohttp.FormData()
    form.add_field("file", (header + "\r\n" + "".join(row + "\r\n" for row in rows)).encode(),
                   filename="rows.csv", content_type="text/csv")
    response = await client.post(f"/api/v1/collections/{collection}/records/import/csv", headers=bearer(token),
                                 data=form)
    assert response.status == 200, await response.text()
    assert (await response.json())["imported"] == len(rows)


async def journal(db: Database) -> dict[str, Any] | None:
    found: dict[str, Any] | None = await db["schema_journal"].find_one({"_id": "apply"})
    return found


def start_apply(config: Config, tmp_path: Path, snapshot: dict[str, Any]) -> subprocess.Popen[bytes]:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(snapshot))
    env = {**command_env(config, **SLOW_DATABASE), "CMS_DATA_DIR": str(tmp_path / "cli")}
    return subprocess.Popen([sys.executable, "-m", "cms", "schema", "apply", str(path), "--allow-data-loss"],
                            env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "apply.log").open("wb"))


async def next_start(config: Config, tmp_path: Path) -> Processes:
    """`cms serve` on the database, healthy (its start-up resumed what the apply left: that may take a while
    on the embedded server, longer than an ordinary start)."""
    processes = Processes(tmp_path, command_env(config, **SLOW_DATABASE))
    url, process = processes.serve("serve")

    async def healthy() -> bool:
        assert process.poll() is None, processes.log("serve").read_text()
        try:
            async with aiohttp.ClientSession() as session, session.get(url + "/health") as response:
                return response.status == 200
        except aiohttp.ClientError:
            return False

    await wait_until(healthy, "cms serve healthy after resuming the apply", timeout_s=180)
    return processes


async def test_an_apply_killed_while_rewriting_values_is_completed_at_the_next_start(
        client: Client, admin_token: str, config: Config, tmp_path: Path) -> None:
    await create_collection(client, admin_token, "items", [
        {"name": "title", "type": "text"}, {"name": "n", "type": "number"}, {"name": "note", "type": "text"}])
    await import_rows(client, admin_token, "items", "title,n,note",
                      [f"item {i},{i},x" for i in range(RECORDS)])
    old_raw, snapshot = await export(client, admin_token)
    items = collection_of(snapshot, "items")
    field_of(items, "title").update(name="headline", renamed_from="title")
    field_of(items, "n")["type"] = "text"
    items["schema"]["fields"] = [f for f in items["schema"]["fields"] if f["name"] != "note"]
    assert config.mongodb_url
    mongo = open_client(config.mongodb_url)
    db = mongo[config.mongodb_db]
    process = start_apply(config, tmp_path, snapshot)
    processes: Processes | None = None
    try:
        async def rewriting() -> bool:
            found = await journal(db)
            return found is not None and found["state"] == "committed" and bool(found.get("progress"))

        await wait_until(rewriting, "the apply rewriting values", timeout_s=120)
        await kill(process)
        left = await journal(db)
        assert left is not None and left["state"] == "committed", left  # cut short past the point of no return
        processes = await next_start(config, tmp_path)
        assert await journal(db) is None
        _, now = await export(client, admin_token)
        wanted = {**snapshot, "collections": [{**c, "schema": {"fields": [
            {k: v for k, v in f.items() if k != "renamed_from"} for f in c["schema"]["fields"]]}}
            for c in snapshot["collections"]]}
        response = await client.post("/api/v1/schema/diff", headers=bearer(admin_token), json=wanted)
        assert (await response.json())["changes"] == []  # the new schema, whole
        assert now["hash"] != json.loads(old_raw)["hash"]
        items_id = (await (await client.get("/api/v1/collections", headers=bearer(admin_token))).json())[0]["id"]
        stored = [doc async for doc in db[f"records_{items_id.replace('-', '')}"].find({}, {"_id": 0, "created": 0,
                                                                                             "updated": 0})]
        assert len(stored) == RECORDS
        wrong = [doc for doc in stored if set(doc) != {"headline", "n"} or doc["n"] != doc["headline"].split()[1]]
        assert wrong == [], wrong[:3]  # each value converted once, each title renamed, each note unset
        response = await client.get("/api/v1/audit", headers=bearer(admin_token),
                                    params={"event_type": "schema_applied"})
        assert (await response.json())["total"] == 1
    finally:
        if process.poll() is None:
            process.kill()
        if processes is not None:
            processes.stop_all()
        await mongo.close()


async def test_an_apply_killed_before_its_point_of_no_return_is_undone_at_the_next_start(
        client: Client, admin_token: str, config: Config, tmp_path: Path) -> None:
    await create_collection(client, admin_token, "items", [{"name": "title", "type": "text"},
                                                           {"name": "code", "type": "text"}])
    await import_rows(client, admin_token, "items", "title,code", [f"item {i},c{i}" for i in range(RECORDS)])
    old_raw, snapshot = await export(client, admin_token)
    items = collection_of(snapshot, "items")
    field_of(items, "title").update(name="headline", renamed_from="title")
    field_of(items, "code")["validation"]["unique"] = True
    items["indexes"] = [{"fields": ["headline", "code"], "unique": False}]
    snapshot["collections"].append({"name": "tags", "type": "base", "schema": {"fields": []}})
    assert config.mongodb_url
    mongo = open_client(config.mongodb_url)
    db = mongo[config.mongodb_db]
    process = start_apply(config, tmp_path, snapshot)
    processes: Processes | None = None
    try:
        async def applying() -> bool:
            found = await journal(db)
            return found is not None and found["state"] == "applying"

        await wait_until(applying, "the apply's first writes", timeout_s=120)
        await kill(process)
        left = await journal(db)
        assert left is not None and left["state"] == "applying", left  # cut short before the point of no return
        processes = await next_start(config, tmp_path)
        assert await journal(db) is None
        raw, _ = await export(client, admin_token)
        assert raw == old_raw  # the old schema, whole
        items_id = (await (await client.get("/api/v1/collections", headers=bearer(admin_token))).json())[0]["id"]
        mongo_coll = db[f"records_{items_id.replace('-', '')}"]
        assert await mongo_coll.count_documents({"title": {"$exists": True}}) == RECORDS  # renames put back
        assert await mongo_coll.count_documents({"headline": {"$exists": True}}) == 0
        assert set(await mongo_coll.index_information()) == {"_id_", "created_id"} | (
            {"search_text"} if "search_text" in await mongo_coll.index_information() else set())
        response = await client.get("/api/v1/audit", headers=bearer(admin_token),
                                    params={"event_type": "schema_applied"})
        assert (await response.json())["total"] == 0
    finally:
        if process.poll() is None:
            process.kill()
        if processes is not None:
            processes.stop_all()
        await mongo.close()
