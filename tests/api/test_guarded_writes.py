"""A record's PATCH and DELETE write with a read by `_id`, then `update_one` / `delete_one` guarded by
the record's `updated` (cms/store/guarded.py; the embedded server scans its collection for
`findAndModify`): concurrent PATCHes of different fields all land, each answering the record as its
own write found it; a writer that lands between another's read and write makes that one read again;
one that keeps losing gets a clear WriteConflict; and no `findAndModify` is sent. The test app's
clock stands still, so every write of these tests stamps the same time: `updated` moves forward by
1 ms a write instead."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from cms.errors import WriteConflict
from cms.store.client import Capabilities
from cms.store.guarded import GUARDED_WRITE_ATTEMPTS
from cms.store.records import RecordRepository
from tests.conftest import bearer, create_collection, create_record, records_path

FIELDS: list[dict[str, Any]] = [{"name": "a", "type": "number"}, {"name": "b", "type": "number"},
                                {"name": "title", "type": "text"}]
ROUNDS = 12


async def patch(client: Any, token: str, record_id: str, data: dict[str, Any]) -> dict[str, Any]:
    response = await client.patch(records_path("posts", record_id), headers=bearer(token), json={"data": data})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_concurrent_patches_of_different_fields_all_land(client: Any, admin_token: str) -> None:
    await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"a": 0, "b": 0})
    last_updated = record["updated"]
    for number in range(1, ROUNDS + 1):
        first, second = await asyncio.gather(patch(client, admin_token, record["id"], {"a": number}),
                                             patch(client, admin_token, record["id"], {"b": number}))
        stored = await (await client.get(records_path("posts", record["id"]), headers=bearer(admin_token))).json()
        assert (stored["a"], stored["b"]) == (number, number)
        # the later write found the earlier one: exactly one answer holds both of this round's values
        later = [body for body in (first, second) if (body["a"], body["b"]) == (number, number)]
        assert len(later) == 1, (first, second)
        assert stored == later[0]
        earlier = first if later[0] is second else second
        assert last_updated < earlier["updated"] < later[0]["updated"], (last_updated, first, second)
        last_updated = later[0]["updated"]


async def test_a_patch_and_a_delete_at_once_end_with_no_record(client: Any, admin_token: str) -> None:
    await create_collection(client, admin_token, "posts", FIELDS)
    for number in range(ROUNDS):
        record = await create_record(client, admin_token, "posts", {"a": number})
        path = records_path("posts", record["id"])
        patched, deleted = await asyncio.gather(
            client.patch(path, headers=bearer(admin_token), json={"data": {"b": number}}),
            client.delete(path, headers=bearer(admin_token)))
        assert deleted.status == 204, await deleted.text()
        assert patched.status in (200, 404), await patched.text()
        assert (await client.get(path, headers=bearer(admin_token))).status == 404


class Interleaved(RecordRepository):
    """After each of the first `wins` reads of a guarded write, another writer changes the record
    (`title` set to `win <n>`, `updated` stamped with the time just read) before the write is sent:
    the write then finds `updated` moved (by 1 ms)."""

    wins = 0
    landed = 0

    async def read_document(self, collection_id: str, record_id: str) -> dict[str, Any] | None:
        doc = await super().read_document(collection_id, record_id)
        if self.landed < self.wins:
            self.landed += 1
            other = RecordRepository(self._db, self.capabilities)
            assert doc is not None  # the other writer stamps the same time: a write in the same millisecond
            stamp = {"title": f"win {self.landed}", "updated": doc["updated"]}
            assert await other.update(collection_id, record_id, stamp, []) is not None
        return doc


@pytest.fixture
def mongo(config: Any) -> Iterator[AsyncMongoClient[dict[str, Any]]]:
    assert config.mongodb_url
    yield AsyncMongoClient(config.mongodb_url, tz_aware=True, retryWrites=False)


async def test_a_writer_landing_between_read_and_write_makes_it_read_again(
        client: Any, admin_token: str, config: Any, mongo: AsyncMongoClient[dict[str, Any]]) -> None:
    collection = await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"a": 1})
    try:
        store = Interleaved(mongo[config.mongodb_db], Capabilities(text_index=False))
        store.wins = 2
        change = await store.update(collection["id"], record["id"], {"b": 2}, [])
        assert change is not None
        before, after = change
        assert store.landed == 2
        assert before.data == {"a": 1, "title": "win 2"}  # as the write found it: after both others
        assert after.data == {"a": 1, "b": 2, "title": "win 2"}
        stored = await store.get(collection["id"], record["id"])
        assert stored is not None and stored.data == after.data

        store.landed, store.wins = 0, 1
        gone = await store.delete(collection["id"], record["id"])
        assert gone is not None and gone.data["title"] == "win 1" and store.landed == 1
        assert await store.get(collection["id"], record["id"]) is None
    finally:
        await mongo.close()


async def test_a_writer_that_keeps_losing_gets_a_write_conflict_and_changes_nothing(
        client: Any, admin_token: str, config: Any, mongo: AsyncMongoClient[dict[str, Any]]) -> None:
    collection = await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"a": 1})
    try:
        store = Interleaved(mongo[config.mongodb_db], Capabilities(text_index=False))
        store.wins = GUARDED_WRITE_ATTEMPTS
        with pytest.raises(WriteConflict):
            await store.update(collection["id"], record["id"], {"b": 2}, [])
        stored = await store.get(collection["id"], record["id"])
        assert stored is not None and stored.data == {"a": 1, "title": f"win {GUARDED_WRITE_ATTEMPTS}"}
        store.landed = 0
        with pytest.raises(WriteConflict):
            await store.delete(collection["id"], record["id"])
        assert await store.get(collection["id"], record["id"]) is not None
    finally:
        await mongo.close()


async def test_a_record_write_sends_no_find_and_modify(
        client: Any, admin_token: str, config: Any) -> None:
    collection = await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"a": 1})
    commands: list[str] = []

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            commands.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    assert config.mongodb_url
    monitored: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        config.mongodb_url, tz_aware=True, retryWrites=False, event_listeners=[Listener()])
    try:
        store = RecordRepository(monitored[config.mongodb_db], Capabilities(text_index=False))
        assert await store.update(collection["id"], record["id"], {"b": 2}, []) is not None
        assert commands == ["find", "update"], commands
        commands.clear()
        assert await store.delete(collection["id"], record["id"]) is not None
        assert commands == ["find", "delete"], commands
    finally:
        await monitored.close()


async def test_concurrent_edits_of_a_working_copy_all_land(client: Any, admin_token: str) -> None:
    """A collection with drafts: each PATCH edits the working copy (guarded by its revision, read
    first, then `update_one`): concurrent edits of different fields land one after the other."""
    await create_collection(client, admin_token, "posts", FIELDS, drafts=True)
    record = await create_record(client, admin_token, "posts", {"a": 0, "b": 0})
    for number in range(1, ROUNDS // 2 + 1):
        first, second = await asyncio.gather(patch(client, admin_token, record["id"], {"a": number}),
                                             patch(client, admin_token, record["id"], {"b": number}))
        working = await (await client.get(records_path("posts", record["id"]) + "?draft=true",
                                          headers=bearer(admin_token))).json()
        assert (working["a"], working["b"]) == (number, number)
        assert [(body["a"], body["b"]) == (number, number) for body in (first, second)].count(True) == 1
    response = await client.post(records_path("posts", record["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    published = await (await client.get(records_path("posts", record["id"]), headers=bearer(admin_token))).json()
    assert (published["a"], published["b"], published["status"]) == (ROUNDS // 2, ROUNDS // 2, "published")


async def test_a_publish_stores_the_published_copy_without_find_and_modify(
        client: Any, admin_token: str, config: Any) -> None:
    """A publish's `put`: the first stores the published copy (an insert-only upsert: no copy was
    replaced), a later one replaces it guarded by its `updated` and answers the copy it replaced."""
    collection = await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"a": 1})
    commands: list[str] = []

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            commands.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    assert config.mongodb_url
    monitored: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        config.mongodb_url, tz_aware=True, retryWrites=False, event_listeners=[Listener()])
    try:
        store = RecordRepository(monitored[config.mongodb_db], Capabilities(text_index=False))
        stored = await store.get(collection["id"], record["id"])
        assert stored is not None
        commands.clear()
        fresh = replace(stored, id="a-new-id", data={"a": 2})
        assert await store.put(collection["id"], fresh) is None
        assert await store.get(collection["id"], "a-new-id") == fresh
        changed = replace(stored, data={"a": 3, "b": 4})
        before = await store.put(collection["id"], changed)
        assert before == stored
        assert await store.get(collection["id"], record["id"]) == changed
        assert "findAndModify" not in commands and commands.count("update") == 2, commands
    finally:
        await monitored.close()
