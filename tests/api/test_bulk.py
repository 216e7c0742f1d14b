"""API tests of bulk update and bulk delete (spec: Records bulk-update, bulk-delete; decisions.md:
Records, Limits, Response shapes)."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from cms.errors import AlreadyExists
from cms.models import Principal
from cms.services.content.record_writer import RecordWriter
from cms.services.content.records import MAX_BULK_IDS, RecordService
from cms.store.bulk import ID_CHUNK
from cms.store.client import Capabilities
from cms.store.records import RecordRepository
from tests.conftest import bearer, create_collection, create_record, error_of, names_field, records_path

MISSING_ID = "00000000-0000-0000-0000-000000000000"
FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True}},
    {"name": "slug", "type": "text", "validation": {"unique": True}},
    {"name": "published", "type": "bool"},
    {"name": "views", "type": "number", "validation": {"min": 0}},
    {"name": "tags", "type": "select", "values": ["a", "b"], "max_select": 2},
]


def bulk_path(collection: str, action: str) -> str:
    return records_path(collection) + f"/bulk-{action}"


@pytest.fixture
async def posts(client: Any, admin_token: str) -> list[dict[str, Any]]:
    """The `posts` collection with four records, p0..p3 (slug s0..s3)."""
    await create_collection(client, admin_token, "posts", FIELDS)
    return [await create_record(client, admin_token, "posts", {"title": f"p{i}", "slug": f"s{i}", "views": i})
            for i in range(4)]


async def records_by_id(client: Any) -> dict[str, dict[str, Any]]:
    page = await (await client.get(records_path("posts"), params={"per_page": 100})).json()
    return {r["id"]: r for r in page["items"]}


# --- bulk update ----------------------------------------------------------------------------------


async def test_bulk_update_sets_fields_on_every_record(client, admin_token, posts, clock, seen):
    clock.advance(seconds=5)
    ids = [posts[0]["id"], posts[2]["id"]]
    response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"published": True, "views": 9, "tags": ["b"]}})
    assert response.status == 200, await response.text()
    assert await response.json() == {"updated": 2}
    stored = await records_by_id(client)
    for record in posts:
        after = stored[record["id"]]
        if record["id"] in ids:
            assert after["published"] is True and after["views"] == 9 and after["tags"] == ["b"]
            assert after["title"] == record["title"] and after["created"] == record["created"]
            assert after["updated"] > record["updated"]
        else:
            assert after == record
    assert [(e.event, e.collection, e.record_id) for e in seen] == [("update", "posts", i) for i in ids]
    assert [e.data for e in seen] == [stored[i] for i in ids]


async def test_bulk_update_null_clears_and_required_stays(client, admin_token, posts):
    ids = [r["id"] for r in posts]
    response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"views": None, "slug": None}})
    assert (await response.json()) == {"updated": 4}
    assert all("views" not in r and "slug" not in r for r in (await records_by_id(client)).values())
    response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"title": None}})
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {"title"}


async def test_bulk_update_validates_data_once(client, admin_token, posts, seen):
    before = await records_by_id(client)
    ids = [posts[0]["id"]]
    for data, field_name in [({"views": -1}, "views"), ({"published": "yes"}, "published"),
                             ({"nope": 1}, "nope"), ({"tags": ["z"]}, "tags")]:
        response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                     json={"record_ids": ids, "data": data})
        body = await error_of(response, 422, "validation_error")
        assert names_field(body["errors"], field_name), body
    bodies: list[dict[str, Any]] = [{"record_ids": ids}, {"record_ids": ids, "data": [1]},
                                    {"record_ids": ids, "data": None}]
    for body in bodies:
        response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token), json=body)
        assert "data" in (await error_of(response, 422, "validation_error"))["errors"]
    assert await records_by_id(client) == before and seen == []


async def test_bulk_update_unknown_ids_fail_all_and_are_reported(client, admin_token, posts, seen):
    before = await records_by_id(client)
    ids = [posts[0]["id"], MISSING_ID, posts[1]["id"], "not-a-record"]
    response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"views": 50}})
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {MISSING_ID, "not-a-record"}
    assert "2 of 4" in body["detail"] and "nothing was changed" in body["detail"]
    assert await records_by_id(client) == before and seen == []


async def test_bulk_update_unique_fields(client, admin_token, posts, seen):
    before = await records_by_id(client)
    # one value on several records: every one of them would clash
    response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                 json={"record_ids": [posts[0]["id"], posts[1]["id"]], "data": {"slug": "new"}})
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {posts[0]["id"], posts[1]["id"]}
    assert "slug" in body["errors"][posts[0]["id"]][0]
    # a value another record holds
    response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                 json={"record_ids": [posts[0]["id"]], "data": {"slug": "s3"}})
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {posts[0]["id"]}
    assert await records_by_id(client) == before and seen == []
    # its own value, or a free one, on one record is fine; clearing on many is fine
    for data in [{"slug": "s0"}, {"slug": "free"}]:
        response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                     json={"record_ids": [posts[0]["id"]], "data": data})
        assert (await response.json()) == {"updated": 1}
    response = await client.post(bulk_path("posts", "update"), headers=bearer(admin_token),
                                 json={"record_ids": [posts[1]["id"], posts[2]["id"]], "data": {"slug": None}})
    assert (await response.json()) == {"updated": 2}
    assert len(seen) == 4


async def test_bulk_update_relation_targets_must_exist(client, admin_token):
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    await create_collection(client, admin_token, "books", [
        {"name": "author", "type": "relation", "collection_id": authors["id"]}])
    ann = await create_record(client, admin_token, "authors", {"name": "Ann"})
    book = await create_record(client, admin_token, "books", {})
    response = await client.post(bulk_path("books", "update"), headers=bearer(admin_token),
                                 json={"record_ids": [book["id"]], "data": {"author": MISSING_ID}})
    assert "author" in (await error_of(response, 422, "validation_error"))["errors"]
    response = await client.post(bulk_path("books", "update"), headers=bearer(admin_token),
                                 json={"record_ids": [book["id"]], "data": {"author": ann["id"]}})
    assert (await response.json()) == {"updated": 1}


# --- bulk delete ----------------------------------------------------------------------------------


async def test_bulk_delete(client, user_token, posts, seen):
    ids = [posts[1]["id"], posts[3]["id"]]
    response = await client.post(bulk_path("posts", "delete"), headers=bearer(user_token), json={"record_ids": ids})
    assert response.status == 200, await response.text()
    assert await response.json() == {"deleted": 2}
    assert set(await records_by_id(client)) == {posts[0]["id"], posts[2]["id"]}
    for record_id in ids:
        await error_of(await client.get(records_path("posts", record_id)), 404, "not_found")
    assert [(e.event, e.collection, e.record_id, e.data) for e in seen] == [
        ("delete", "posts", i, {"id": i}) for i in ids]


async def test_bulk_delete_unknown_ids_delete_nothing(client, admin_token, posts, seen):
    ids = [posts[0]["id"], MISSING_ID]
    response = await client.post(bulk_path("posts", "delete"), headers=bearer(admin_token), json={"record_ids": ids})
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {MISSING_ID}
    assert len(await records_by_id(client)) == 4 and seen == []
    # deleting twice: the second time every id is unknown
    response = await client.post(bulk_path("posts", "delete"), headers=bearer(admin_token),
                                 json={"record_ids": [posts[0]["id"]]})
    assert (await response.json()) == {"deleted": 1}
    response = await client.post(bulk_path("posts", "delete"), headers=bearer(admin_token),
                                 json={"record_ids": [posts[0]["id"]]})
    assert set((await error_of(response, 422, "validation_error"))["errors"]) == {posts[0]["id"]}
    assert len(seen) == 1


# --- both: the id list, the collection, the caller ---------------------------------------------------


@pytest.mark.parametrize("action", ["update", "delete"])
async def test_bad_record_id_lists_are_422(client, admin_token, posts, seen, action):
    one = posts[0]["id"]
    for record_ids in [[], [one, posts[1]["id"], one], [one] * 2, ["x"] * (MAX_BULK_IDS + 1),
                       [f"id{i}" for i in range(MAX_BULK_IDS + 1)], None, "x", [1],
                       [""], [{"id": one}], ["x" * 65]]:
        body: dict[str, Any] = {"record_ids": record_ids}
        if action == "update":
            body["data"] = {"views": 1}
        response = await client.post(bulk_path("posts", action), headers=bearer(admin_token), json=body)
        result = await error_of(response, 422, "validation_error")
        assert names_field(result["errors"], "record_ids"), (record_ids, result)
    response = await client.post(bulk_path("posts", action), headers=bearer(admin_token),
                                 json={"record_ids": [one, one], **({"data": {}} if action == "update" else {})})
    result = await error_of(response, 422, "validation_error")
    assert one in result["errors"]["record_ids"][0]  # the repeated id is named
    response = await client.post(bulk_path("posts", action), headers=bearer(admin_token), json={"data": {}})
    assert "record_ids" in (await error_of(response, 422, "validation_error"))["errors"]
    response = await client.post(bulk_path("posts", action), headers=bearer(admin_token), data=b"{not json")
    await error_of(response, 400, "bad_request")
    assert len(await records_by_id(client)) == 4 and seen == []


@pytest.mark.parametrize("action", ["update", "delete"])
async def test_unknown_collection_is_404_and_token_required(client, admin_token, posts, action):
    body = {"record_ids": [posts[0]["id"]], "data": {"views": 1}}
    if action == "delete":
        del body["data"]
    response = await client.post(bulk_path("nope", action), headers=bearer(admin_token), json=body)
    await error_of(response, 404, "not_found")
    for headers in [{}, bearer("garbage")]:
        response = await client.post(bulk_path("posts", action), headers=headers, json=body)
        await error_of(response, 401, "unauthorized")
    assert len(await records_by_id(client)) == 4


async def test_a_thousand_ids_in_a_few_round_trips(config, services, admin_token, client):
    """1,000 ids (the limit) work, and a bulk call costs one MongoDB command per 100 ids, not one
    per record."""
    await create_collection(client, admin_token, "posts", FIELDS)
    principal = Principal("admin_user", "u")
    csv_text = "title,slug\n" + "".join(f"t{i},s{i}\n" for i in range(MAX_BULK_IDS))
    assert (await services.records.import_csv(principal, "posts", csv_text.encode())).imported == MAX_BULK_IDS
    ids = [r.id for number in range(1, 11) for r in (await services.records.list("posts", page=number,
                                                                                 per_page=100)).items]
    assert len(set(ids)) == MAX_BULK_IDS

    commands: list[str] = []

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name in ("find", "getMore", "update", "delete", "insert", "count", "aggregate"):
                commands.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    assert config.mongodb_url
    monitored: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        config.mongodb_url, tz_aware=True, retryWrites=False, event_listeners=[Listener()])
    try:
        repository = RecordRepository(monitored[config.mongodb_db], Capabilities(text_index=False))
        service = RecordService(services.catalog, repository,
                                RecordWriter(services.catalog, repository, services.events))
        assert await service.bulk_update(principal, "posts", ids, {"views": 3, "slug": None}) == MAX_BULK_IDS
        update_commands = list(commands)
        commands.clear()
        assert await service.bulk_delete(principal, "posts", ids) == MAX_BULK_IDS
        delete_commands = list(commands)
    finally:
        await monitored.close()
    # one find per 100 ids to check them, then one update or delete command (a bulk write)
    assert update_commands == ["find"] * (MAX_BULK_IDS // ID_CHUNK) + ["update"], update_commands
    assert delete_commands == ["find"] * (MAX_BULK_IDS // ID_CHUNK) + ["delete"], delete_commands
    assert (await services.records.list("posts")).total == 0


async def test_store_bulk_update_reports_a_unique_clash_as_already_exists(config, client, admin_token, posts):
    """The service rules clashes out first; the store still maps a racing one to AlreadyExists."""
    collection = (await (await client.get("/api/v1/collections")).json())[0]
    assert config.mongodb_url
    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(config.mongodb_url, tz_aware=True, retryWrites=False)
    try:
        repository = RecordRepository(mongo[config.mongodb_db], Capabilities(text_index=False))
        with pytest.raises(AlreadyExists) as caught:
            await repository.update_many(collection["id"], [posts[0]["id"]], {"slug": "s1"}, [])
        assert caught.value.errors == {"slug": ["Value must be unique"]}
        assert await repository.update_many(collection["id"], [], {"slug": "x"}, []) == 0
        assert await repository.delete_many(collection["id"], []) == 0
    finally:
        await mongo.close()
