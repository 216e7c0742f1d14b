"""Record versions (decisions.md, Drafts, versions and scheduled publishing: Versions), over HTTP: a
version per create and update in a collection with `versions: N`, numbered from 1 without gaps or
repeats (also with two replicas updating one record at once), the newest N kept, listed newest first and
paged like records, one read, restore as a validated update (422 on a relation whose record is gone),
field view rules on version data, deletes of a record or a collection taking its versions, batches, bulk
updates and CSV imports storing versions, and auth collections keeping no account state in them."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from cms.app import create_app
from cms.wiring import Services, open_services
from tests.api.test_access_rules import customer
from tests.api.test_batch import BATCH, patch, post
from tests.api.test_group_commit import held_group
from tests.conftest import (
    COLLECTIONS,
    Client,
    bearer,
    create_collection,
    create_record,
    error_of,
    records_path,
)
from tests.fixtures import CommandLog, wait_until

FIELDS = [{"name": "title", "type": "text", "validation": {"required": True}},
          {"name": "body", "type": "text"},
          {"name": "views", "type": "number"}]


def versions_path(collection: str, record_id: str, suffix: str = "") -> str:
    return records_path(collection, record_id) + "/versions" + suffix


async def versions_of(client: Client, token: str | None, collection: str, record_id: str,
                      **params: Any) -> dict[str, Any]:
    headers = bearer(token) if token else {}
    response = await client.get(versions_path(collection, record_id), headers=headers, params=params)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def update(client: Client, token: str, collection: str, record_id: str, data: dict[str, Any]) -> dict[str, Any]:
    response = await client.patch(records_path(collection, record_id), headers=bearer(token), json={"data": data})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def admin_id(client: Client, token: str) -> str:
    response = await client.get("/api/v1/auth/me", headers=bearer(token))
    assert response.status == 200, await response.text()
    return str((await response.json())["id"])


async def test_a_version_per_create_and_update_newest_first(client, admin_token):
    created = await create_collection(client, admin_token, "posts", FIELDS, versions=10)
    assert created["versions"] == 10
    record = await create_record(client, admin_token, "posts", {"title": "one", "views": 1})
    await update(client, admin_token, "posts", record["id"], {"title": "two"})
    last = await update(client, admin_token, "posts", record["id"], {"body": "text", "views": None})

    body = await versions_of(client, admin_token, "posts", record["id"])
    assert set(body) == {"items", "total", "page", "per_page"}
    assert (body["total"], body["page"], body["per_page"]) == (3, 1, 30)
    assert [v["version"] for v in body["items"]] == [3, 2, 1]
    assert [v["data"] for v in body["items"]] == [{"title": "two", "body": "text"}, {"title": "two", "views": 1},
                                                 {"title": "one", "views": 1}]
    writer = await admin_id(client, admin_token)
    assert all(set(v) == {"version", "created", "by", "data"} and v["by"] == writer for v in body["items"])
    assert body["items"][0]["created"] == last["updated"] and body["items"][2]["created"] == record["created"]

    response = await client.get(versions_path("posts", record["id"], "/2"), headers=bearer(admin_token))
    assert response.status == 200
    assert await response.json() == body["items"][1]

    # a write that changes no value stores no version
    await update(client, admin_token, "posts", record["id"], {"title": "two"})
    assert (await versions_of(client, admin_token, "posts", record["id"]))["total"] == 3


async def test_a_collection_without_versions_keeps_none(client, admin_token):
    created = await create_collection(client, admin_token, "posts", FIELDS)
    assert created["versions"] == 0
    record = await create_record(client, admin_token, "posts", {"title": "one"})
    await update(client, admin_token, "posts", record["id"], {"title": "two"})
    body = await versions_of(client, None, "posts", record["id"])
    assert body == {"items": [], "total": 0, "page": 1, "per_page": 30}


async def test_versions_is_checked(client, admin_token):
    for bad in (-1, 1001, "5", True, 2.5, None):
        response = await client.post(COLLECTIONS, headers=bearer(admin_token),
                                     json={"name": "posts", "schema": FIELDS, "versions": bad})
        body = await error_of(response, 422, "validation_error")
        assert "versions" in body["errors"], body
    created = await create_collection(client, admin_token, "posts", FIELDS, versions=1000)
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"versions": 1001})
    await error_of(response, 422, "validation_error")
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token), json={"versions": 0})
    assert response.status == 200 and (await response.json())["versions"] == 0


async def test_only_the_newest_are_kept(client, admin_token):
    created = await create_collection(client, admin_token, "posts", FIELDS, versions=3)
    record = await create_record(client, admin_token, "posts", {"title": "v1"})
    for n in range(2, 6):
        await update(client, admin_token, "posts", record["id"], {"title": f"v{n}"})
    body = await versions_of(client, admin_token, "posts", record["id"])
    assert body["total"] == 3
    assert [(v["version"], v["data"]["title"]) for v in body["items"]] == [(5, "v5"), (4, "v4"), (3, "v3")]
    response = await client.get(versions_path("posts", record["id"], "/2"), headers=bearer(admin_token))
    await error_of(response, 404, "not_found")

    # fewer kept from now on: the next version trims the record's history to the new number
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token), json={"versions": 1})
    assert response.status == 200
    assert (await versions_of(client, admin_token, "posts", record["id"]))["total"] == 3
    await update(client, admin_token, "posts", record["id"], {"title": "v6"})
    body = await versions_of(client, admin_token, "posts", record["id"])
    assert [(v["version"], v["data"]["title"]) for v in body["items"]] == [(6, "v6")]

    # none kept from now on: the versions there are stay (readable) and no new one is stored
    await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token), json={"versions": 0})
    await update(client, admin_token, "posts", record["id"], {"title": "v7"})
    body = await versions_of(client, admin_token, "posts", record["id"])
    assert [v["version"] for v in body["items"]] == [6]


async def test_versions_are_paged_like_records(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS, versions=1000)
    record = await create_record(client, admin_token, "posts", {"title": "v1"})
    for n in range(2, 8):
        await update(client, admin_token, "posts", record["id"], {"title": f"v{n}"})
    pages = [await versions_of(client, admin_token, "posts", record["id"], page=p, per_page=3) for p in (1, 2, 3, 4)]
    assert [[v["version"] for v in page["items"]] for page in pages] == [[7, 6, 5], [4, 3, 2], [1], []]
    assert {page["total"] for page in pages} == {7}
    assert (pages[1]["page"], pages[1]["per_page"]) == (2, 3)
    clamped = await versions_of(client, admin_token, "posts", record["id"], per_page=500)
    assert clamped["per_page"] == 100 and len(clamped["items"]) == 7
    for params in ({"page": 0}, {"per_page": 0}, {"page": "x"}):
        response = await client.get(versions_path("posts", record["id"]), headers=bearer(admin_token), params=params)
        await error_of(response, 422, "validation_error")


async def test_a_version_or_record_that_does_not_exist_is_404(client, admin_token, user_token):
    await create_collection(client, admin_token, "posts", FIELDS, versions=5,
                            view_rule='title != "hidden"', update_rule='@request.auth.id != ""')
    record = await create_record(client, admin_token, "posts", {"title": "one"})
    for suffix in ("/2", "/0", "/-1", "/abc", "/1.0", "/99999999999999999999", "/2/restore"):
        method = client.post if suffix.endswith("restore") else client.get
        response = await method(versions_path("posts", record["id"], suffix), headers=bearer(admin_token))
        body = await error_of(response, 404, "not_found")
        assert body["detail"] == "Version not found", (suffix, body)
    await error_of(await client.get(versions_path("nope", record["id"])), 404, "not_found")
    hidden = await create_record(client, admin_token, "posts", {"title": "hidden"})
    # a missing or hidden record answers as its view does: 404 to a signed-in caller, 401 without credentials
    for record_id in ("no-such-record", hidden["id"]):
        for suffix in ("", "/1"):
            await error_of(await client.get(versions_path("posts", record_id, suffix), headers=bearer(user_token)),
                           404, "not_found")
            await error_of(await client.get(versions_path("posts", record_id, suffix)), 401, "unauthorized")
        await error_of(await client.get(records_path("posts", record_id)), 401, "unauthorized")
    assert (await versions_of(client, admin_token, "posts", hidden["id"]))["total"] == 1  # admins see it


async def test_restore_writes_the_version_as_an_update(client, admin_token, user_token):
    created = await create_collection(client, admin_token, "posts", FIELDS, versions=10, update_rule=None)
    record = await create_record(client, admin_token, "posts", {"title": "first", "views": 3})
    await update(client, admin_token, "posts", record["id"], {"title": "second", "body": "added", "views": None})

    # the update rule: admins only here
    response = await client.post(versions_path("posts", record["id"], "/1/restore"), headers=bearer(user_token))
    await error_of(response, 403, "forbidden")
    response = await client.post(versions_path("posts", record["id"], "/1/restore"))
    await error_of(response, 401, "unauthorized")

    response = await client.post(versions_path("posts", record["id"], "/1/restore") + "?fields=id,title,body,views",
                                 headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    assert await response.json() == {"id": record["id"], "title": "first", "views": 3}
    current = await (await client.get(records_path("posts", record["id"]))).json()
    assert (current["title"], current.get("body"), current["views"]) == ("first", None, 3)
    body = await versions_of(client, admin_token, "posts", record["id"])
    assert [(v["version"], v["data"]) for v in body["items"]][0] == (3, {"title": "first", "views": 3})

    # validated like an update: a version the schema refuses now is 422, and nothing changes
    await update(client, admin_token, "posts", record["id"], {"body": "now required"})
    schema = [FIELDS[0], {"name": "body", "type": "text", "validation": {"required": True}}, FIELDS[2]]
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"schema": schema})
    assert response.status == 200, await response.text()
    response = await client.post(versions_path("posts", record["id"], "/1/restore"), headers=bearer(admin_token))
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {"body"}
    current = await (await client.get(records_path("posts", record["id"]))).json()
    assert (current["title"], current["body"]) == ("first", "now required")


async def test_restoring_a_relation_to_a_record_that_is_gone_is_422(client, admin_token):
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": authors["id"]},
        {"name": "editors", "type": "relation", "collection_id": authors["id"], "max_select": 5}], versions=10)
    ada = await create_record(client, admin_token, "authors", {"name": "Ada"})
    bob = await create_record(client, admin_token, "authors", {"name": "Bob"})
    post_ = await create_record(client, admin_token, "posts",
                                {"title": "p", "author": ada["id"], "editors": [ada["id"], bob["id"]]})
    await update(client, admin_token, "posts", post_["id"], {"author": bob["id"], "editors": [bob["id"]]})
    response = await client.delete(records_path("authors", ada["id"]), headers=bearer(admin_token))
    assert response.status == 204

    body = await versions_of(client, admin_token, "posts", post_["id"])
    assert body["items"][-1]["data"] == {"title": "p", "author": ada["id"], "editors": [ada["id"], bob["id"]]}
    response = await client.post(versions_path("posts", post_["id"], "/1/restore"), headers=bearer(admin_token))
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {"author", "editors"}
    current = await (await client.get(records_path("posts", post_["id"]))).json()
    assert (current["author"], current["editors"]) == (bob["id"], [bob["id"]])

    # a version whose related records all exist restores
    response = await client.post(versions_path("posts", post_["id"], "/2/restore"), headers=bearer(admin_token))
    assert response.status == 200, await response.text()


async def test_field_view_rules_apply_to_version_data(client, admin_token):
    await create_collection(client, admin_token, "customers", [], type="auth", list_rule="", view_rule="")
    ann_id, ann = await customer(client, "customers", "ann@example.com")
    _, bob = await customer(client, "customers", "bob@example.com")
    await create_collection(client, admin_token, "notes", [
        {"name": "title", "type": "text"},
        {"name": "owner", "type": "text"},
        {"name": "secret", "type": "text", "view_rule": "owner = @request.auth.id"},
        {"name": "internal", "type": "text", "view_rule": None}],
        versions=5, list_rule="", view_rule="", update_rule="owner = @request.auth.id")
    note = await create_record(client, admin_token, "notes",
                               {"title": "t", "owner": ann_id, "secret": "s1", "internal": "i1"})
    await update(client, admin_token, "notes", note["id"], {"secret": "s2", "owner": "someone-else"})

    response = await client.get(versions_path("notes", note["id"]), headers=ann)
    items = (await response.json())["items"]
    # decided on each version's own values: Ann owned the note in version 1, not in version 2
    assert items[1]["data"] == {"title": "t", "owner": ann_id, "secret": "s1"}
    assert items[0]["data"] == {"title": "t", "owner": "someone-else"}
    response = await client.get(versions_path("notes", note["id"], "/1"), headers=bob)
    assert (await response.json())["data"] == {"title": "t", "owner": ann_id}
    response = await client.get(versions_path("notes", note["id"], "/1"))
    assert (await response.json())["data"] == {"title": "t", "owner": ann_id}
    admin = await versions_of(client, admin_token, "notes", note["id"])
    assert admin["items"][1]["data"] == {"title": "t", "owner": ann_id, "secret": "s1", "internal": "i1"}


async def test_deleting_a_record_or_its_collection_deletes_its_versions(client, admin_token, services: Services):
    created = await create_collection(client, admin_token, "posts", FIELDS, versions=5)
    kept = await create_record(client, admin_token, "posts", {"title": "kept"})
    gone = await create_record(client, admin_token, "posts", {"title": "gone"})
    bulk = [await create_record(client, admin_token, "posts", {"title": f"bulk {n}"}) for n in range(3)]
    await update(client, admin_token, "posts", gone["id"], {"title": "gone 2"})
    repository = services.versions._versions  # noqa: SLF001 - what is stored, not what the API shows
    assert await repository.count(created["id"], gone["id"]) == 2

    response = await client.delete(records_path("posts", gone["id"]), headers=bearer(admin_token))
    assert response.status == 204
    assert await repository.count(created["id"], gone["id"]) == 0
    await error_of(await client.get(versions_path("posts", gone["id"])), 404, "not_found")
    response = await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                                 json={"record_ids": [r["id"] for r in bulk]})
    assert response.status == 200, await response.text()
    assert [await repository.count(created["id"], r["id"]) for r in bulk] == [0, 0, 0]
    assert await repository.count(created["id"], kept["id"]) == 1

    response = await client.delete(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token))
    assert response.status == 204
    assert await repository.count(created["id"], kept["id"]) == 0


async def test_two_replicas_updating_one_record_at_once_get_distinct_numbers(
        client, admin_token, aiohttp_client, config, clock):
    await create_collection(client, admin_token, "posts", FIELDS, versions=1000)
    record = await create_record(client, admin_token, "posts", {"title": "start"})
    async with open_services(config, clock=clock) as second:
        other = await aiohttp_client(create_app(config, services=second))
        replicas = (client, other)
        await asyncio.gather(*(update(replicas[n % 2], admin_token, "posts", record["id"],
                                      {"title": f"t{n}", "views": n}) for n in range(12)))
    body = await versions_of(client, admin_token, "posts", record["id"], per_page=100)
    assert body["total"] == 13
    assert [v["version"] for v in body["items"]] == list(range(13, 0, -1))
    assert sorted(v["data"].get("views", -1) for v in body["items"]) == [-1, *range(12)]


async def test_grouped_creates_store_their_versions_together_each_naming_its_writer(
        client, admin_token, user_token, services: Services, mongo_commands: CommandLog):
    created = await create_collection(client, admin_token, "posts", FIELDS, versions=5)
    tokens = [admin_token, user_token]
    writers = [await admin_id(client, token) for token in tokens]
    async with held_group(services, "posts") as hold:
        first = asyncio.create_task(create_record(client, admin_token, "posts", {"title": "first"}))
        await wait_until(hold.held.is_set, "the first create's group is held")
        rest = [asyncio.create_task(create_record(client, tokens[n % 2], "posts", {"title": f"t{n}"}))
                for n in range(1, 13)]
        await wait_until(lambda: services.records.creates_waiting() == 11, "11 creates wait in a group")
        hold.release()
        records = [await first, *await asyncio.gather(*rest)]
    assert mongo_commands.insert_sizes(created["id"]) == [1, 1, 11]  # grouped
    version_inserts = [c.documents for c in mongo_commands.commands
                       if c.name == "insert" and c.collection == "record_versions"]
    assert sorted(version_inserts) == [1, 1, 11]  # a group's versions: one insert
    for n, record in enumerate(records):
        body = await versions_of(client, admin_token, "posts", record["id"])
        assert [(v["version"], v["by"], v["data"]["title"]) for v in body["items"]] == [
            (1, writers[n % 2], record["title"])]


async def test_batches_bulk_updates_and_csv_imports_store_versions(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS, versions=5)
    first = await create_record(client, admin_token, "posts", {"title": "first"})
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [
        post("posts", {"title": "a"}), post("posts", {"title": "b"}),
        patch("posts", first["id"], {"title": "first, batched"})]})
    assert response.status == 200, await response.text()
    answers = await response.json()
    made = [answer["body"]["id"] for answer in answers[:2]]
    for record_id, title in ((made[0], "a"), (made[1], "b")):
        body = await versions_of(client, admin_token, "posts", record_id)
        assert [(v["version"], v["data"]["title"]) for v in body["items"]] == [(1, title)]
    body = await versions_of(client, admin_token, "posts", first["id"])
    assert [(v["version"], v["data"]["title"]) for v in body["items"]] == [(2, "first, batched"), (1, "first")]

    # a batch that fails stores no version
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [
        patch("posts", first["id"], {"title": "never"}), post("posts", {"body": "no title"})]})
    assert response.status == 400
    assert (await versions_of(client, admin_token, "posts", first["id"]))["total"] == 2

    response = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                                 json={"record_ids": [first["id"], *made], "data": {"views": 7}})
    assert response.status == 200, await response.text()
    for record_id, number in ((first["id"], 3), (made[0], 2), (made[1], 2)):
        newest = (await versions_of(client, admin_token, "posts", record_id))["items"][0]
        assert (newest["version"], newest["data"]["views"]) == (number, 7)

    data = aiohttp.FormData()
    data.add_field("file", b"title,views\nimported one,1\nimported two,2\n", filename="p.csv",
                   content_type="text/csv")
    response = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token), data=data)
    assert (await response.json())["imported"] == 2
    listing = await (await client.get(records_path("posts") + '?filter=title~"imported"')).json()
    for item in listing["items"]:
        body = await versions_of(client, admin_token, "posts", item["id"])
        assert [(v["version"], v["data"]["title"]) for v in body["items"]] == [(1, item["title"])]


async def test_auth_collection_versions_hold_no_account_state(client, admin_token):
    await create_collection(client, admin_token, "members", [{"name": "nickname", "type": "text"}], type="auth",
                            versions=5, list_rule="", view_rule="", update_rule="id = @request.auth.id")
    member_id, member = await customer(client, "members", "member@example.com")
    response = await client.patch(records_path("members", member_id), headers=member,
                                  json={"data": {"nickname": "mo"}})
    assert response.status == 200, await response.text()
    body = await versions_of(client, admin_token, "members", member_id)
    assert [(v["version"], v["data"], v["by"]) for v in body["items"]] == [(2, {"nickname": "mo"}, member_id),
                                                                          (1, {}, None)]
    response = await client.post(versions_path("members", member_id, "/1/restore"), headers=member)
    assert response.status == 200, await response.text()
    restored = await response.json()
    assert "nickname" not in restored and restored["email"] == "member@example.com"
