"""Every `update` record event carries the record as it was before the change (`RecordEvent.previous`),
for subscribers that must tell whether a change moved a record into or out of a view (realtime):
a REST PATCH, a bulk update (also when some of its records were deleted meanwhile) and a change of an
auth-collection user. Relation releases read the records only after the change: no `previous`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import AsyncMongoClient

from cms.models import Principal
from cms.services.content.record_writer import RecordWriter
from cms.services.content.records import RecordService
from cms.services.delivery.events import RecordEvent
from cms.store.client import Capabilities
from cms.store.records import RecordRepository
from cms.wiring import Services
from tests.conftest import MovableClock, bearer, create_collection, create_record, records_path

FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True}},
    {"name": "status", "type": "select", "values": ["draft", "published"]},
    {"name": "views", "type": "number"},
]


async def test_a_patch_emits_the_record_before_and_after(
        client: Any, admin_token: str, seen: list[RecordEvent], clock: MovableClock) -> None:
    await create_collection(client, admin_token, "posts", FIELDS)
    old = await create_record(client, admin_token, "posts", {"title": "a", "status": "draft", "views": 3})
    clock.advance(seconds=2)
    response = await client.patch(records_path("posts", old["id"]), headers=bearer(admin_token),
                                  json={"data": {"status": "published", "views": None}})
    assert response.status == 200, await response.text()
    new = await response.json()
    assert new["status"] == "published" and "views" not in new and new["updated"] > old["updated"]

    update = seen[-1]
    assert (update.event, update.record_id, update.data) == ("update", old["id"], new)
    assert update.previous is not None and update.record is not None
    assert update.previous.data == {"title": "a", "status": "draft", "views": 3}
    assert update.previous.updated < update.record.updated
    assert update.record.data == {"title": "a", "status": "published"}
    assert update.previous.created == update.record.created
    # the response (the record after, replayed in memory) is what a read returns
    assert await (await client.get(records_path("posts", old["id"]), headers=bearer(admin_token))).json() == new
    assert [e.previous for e in seen if e.event == "create"] == [None]


async def test_a_bulk_update_emits_each_record_before_and_after(
        client: Any, admin_token: str, seen: list[RecordEvent]) -> None:
    await create_collection(client, admin_token, "posts", FIELDS)
    olds = [await create_record(client, admin_token, "posts", {"title": f"p{i}", "views": i}) for i in range(3)]
    ids = [olds[2]["id"], olds[0]["id"]]
    response = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"status": "published", "views": None}})
    assert await response.json() == {"updated": 2}

    updates = seen[3:]
    assert [(e.event, e.record_id) for e in updates] == [("update", i) for i in ids]
    assert [(e.previous.data if e.previous else None) for e in updates] == [
        {"title": "p2", "views": 2}, {"title": "p0", "views": 0}]
    assert [(e.record.data if e.record else None) for e in updates] == [
        {"title": "p2", "status": "published"}, {"title": "p0", "status": "published"}]


class DeletesFirst(RecordRepository):
    """Deletes record `gone` of a bulk update's records just before the update reaches them."""

    gone = ""

    async def update_many(self, collection_id: str, record_ids: Sequence[str], set_values: dict[str, Any],
                          unset: Sequence[str]) -> int:
        await self.delete(collection_id, self.gone)
        return await super().update_many(collection_id, record_ids, set_values, unset)


async def test_a_bulk_update_whose_record_was_deleted_meanwhile_keeps_previous_for_the_rest(
        client: Any, admin_token: str, services: Services, config: Any, seen: list[RecordEvent]) -> None:
    await create_collection(client, admin_token, "posts", FIELDS)
    olds = [await create_record(client, admin_token, "posts", {"title": f"p{i}"}) for i in range(3)]
    assert config.mongodb_url
    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(config.mongodb_url, tz_aware=True)
    try:
        repository = DeletesFirst(mongo[config.mongodb_db], Capabilities(text_index=False))
        repository.gone = olds[1]["id"]
        service = RecordService(services.catalog, repository,
                                RecordWriter(services.catalog, repository, services.events))
        assert await service.bulk_update(Principal("admin_user", "u"), "posts", [r["id"] for r in olds],
                                         {"views": 7}) == 2
    finally:
        await mongo.close()
    updates = {e.record_id: e for e in seen[3:]}
    assert set(updates) == {olds[0]["id"], olds[2]["id"]}
    for old in (olds[0], olds[2]):
        event = updates[old["id"]]
        assert event.previous is not None and event.previous.data == {"title": old["title"]}
        assert event.record is not None and event.record.data == {"title": old["title"], "views": 7}


async def test_a_user_change_emits_the_user_record_before_and_after(
        client: Any, admin_token: str, services: Services, seen: list[RecordEvent]) -> None:
    await create_collection(client, admin_token, "members", [{"name": "nickname", "type": "text"}], type="auth")
    system = await services.identity.systems.collection("members")
    user = await services.identity.registration.register(system, "old@example.com", "password-1", "password-1",
                                                         {"nickname": "n"})
    assert await system.set_email(user.id, "new@example.com") is not None

    update = seen[-1]
    assert (update.event, update.collection, update.record_id) == ("update", "members", user.id)
    assert update.previous is not None and update.record is not None
    assert (update.previous.data["email"], update.previous.data["verified"]) == ("old@example.com", False)
    assert (update.record.data["email"], update.record.data["verified"]) == ("new@example.com", True)
    assert update.previous.data["nickname"] == update.record.data["nickname"] == "n"


async def test_a_relation_release_emits_updates_without_previous(
        client: Any, admin_token: str, seen: list[RecordEvent]) -> None:
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    await create_collection(client, admin_token, "books", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": authors["id"]}])
    author = await create_record(client, admin_token, "authors", {"name": "x"})
    book = await create_record(client, admin_token, "books", {"title": "t", "author": author["id"]})
    response = await client.delete(records_path("authors", author["id"]), headers=bearer(admin_token))
    assert response.status == 204
    released = [e for e in seen if e.event == "update"]
    assert [(e.record_id, e.previous) for e in released] == [(book["id"], None)]
    assert released[0].record is not None and "author" not in released[0].record.data
