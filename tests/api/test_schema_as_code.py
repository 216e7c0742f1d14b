"""Schema as code (decisions.md, Schema as code; issue 43): the snapshot of `GET /api/v1/schema`, the diff and
the apply, between two running instances (two apps on separate databases, different collection ids), with
renames that keep data, the hash guard and the data-loss guard. Bad input: tests/api/test_schema_as_code_input.py;
an apply cut short: tests/faults/test_schema_apply_kill.py."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from cms.app import create_app
from cms.config import Config
from cms.store.client import open_client
from cms.store.documents import records_mongo_name
from cms.wiring import Services, open_services
from tests.conftest import (
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    Client,
    MovableClock,
    bearer,
    create_collection,
    create_record,
    error_of,
    login,
    records_path,
)

SCHEMA = "/api/v1/schema"

AUTHORS: list[dict[str, Any]] = [{"name": "name", "type": "text", "validation": {"required": True, "max": 80}}]


def posts_fields(authors_id: str) -> list[dict[str, Any]]:
    return [
        {"name": "title", "type": "text", "validation": {"unique": True}},
        {"name": "status", "type": "select", "values": ["draft", "live"]},
        {"name": "views", "type": "number", "view_rule": None},
        {"name": "author", "type": "relation", "collection_id": authors_id},
    ]


@pytest.fixture
async def other(aiohttp_client: Any, config: Config, clock: MovableClock) -> AsyncIterator[tuple[Client, str]]:
    """A second running instance (its own database and queue) and an admin token of it."""
    own = replace(config, mongodb_db=f"test_{uuid.uuid4().hex[:12]}", queue_name=f"cms:test:{uuid.uuid4().hex[:12]}")
    async with open_services(own, clock=clock) as services:
        served: TestClient[web.Request, web.Application] = await aiohttp_client(create_app(own, services=services))
        await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
        token = str((await login(served, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"])
        yield served, token
    assert own.mongodb_url
    mongo = open_client(own.mongodb_url)
    await mongo.drop_database(own.mongodb_db)
    await mongo.close()


async def export(client: Client, token: str) -> tuple[bytes, dict[str, Any]]:
    response = await client.get(SCHEMA, headers=bearer(token))
    assert response.status == 200, await response.text()
    raw = await response.read()
    return raw, json.loads(raw)


async def diff(client: Client, token: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(SCHEMA + "/diff", headers=bearer(token), json=snapshot)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def apply(client: Client, token: str, snapshot: dict[str, Any], *, allow_data_loss: bool = False,
                hash_: str | None = None) -> Any:
    """Diff, then apply against the diff's hash (or `hash_`); the response."""
    current = hash_ or (await diff(client, token, snapshot))["hash"]
    return await client.post(SCHEMA + "/apply", headers=bearer(token),
                             json={"hash": current, "snapshot": snapshot, "allow_data_loss": allow_data_loss})


async def applied(client: Client, token: str, snapshot: dict[str, Any], **options: Any) -> dict[str, Any]:
    response = await apply(client, token, snapshot, **options)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def seed_blog(client: Client, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    authors = await create_collection(client, token, "authors", AUTHORS, type="auth", list_rule=None)
    posts = await create_collection(client, token, "posts", posts_fields(authors["id"]),
                                    indexes=[{"fields": ["status", "-created"]}], create_rule="")
    return authors, posts


def collection_of(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in snapshot["collections"] if c["name"] == name)
    return found


def field_of(collection: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(f for f in collection["schema"]["fields"] if f["name"] == name)
    return found


# --- the snapshot ------------------------------------------------------------------------------------


async def test_the_snapshot_is_canonical_sorted_and_names_relations_by_name(client: Client, admin_token: str) -> None:
    await seed_blog(client, admin_token)
    raw, snapshot = await export(client, admin_token)
    assert raw == json.dumps(snapshot, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert snapshot["format"] == 1
    assert [c["name"] for c in snapshot["collections"]] == ["authors", "posts"]
    body = {"collections": snapshot["collections"], "format": 1}
    assert snapshot["hash"] == hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
    posts = collection_of(snapshot, "posts")
    assert "id" not in posts and "created" not in posts and "updated" not in posts
    author = field_of(posts, "author")
    assert author["collection"] == "authors" and "collection_id" not in author
    assert posts["indexes"] == [{"fields": ["status", "-created"], "unique": False}]
    assert posts["create_rule"] == "" and field_of(posts, "views")["view_rule"] is None
    assert collection_of(snapshot, "authors")["type"] == "auth"


async def test_the_snapshot_needs_an_admin(client: Client, admin_token: str, user_token: str) -> None:
    await error_of(await client.get(SCHEMA), 401, "unauthorized")
    await error_of(await client.get(SCHEMA, headers=bearer(user_token)), 403, "forbidden")
    await error_of(await client.post(SCHEMA + "/diff", headers=bearer(user_token), json={}), 403, "forbidden")
    await error_of(await client.post(SCHEMA + "/apply", headers=bearer(user_token), json={}), 403, "forbidden")


# --- between two instances ---------------------------------------------------------------------------


async def test_a_round_trip_between_two_instances_gives_the_same_bytes(
        client: Client, admin_token: str, other: tuple[Client, str]) -> None:
    authors, posts = await seed_blog(client, admin_token)
    raw, snapshot = await export(client, admin_token)
    second, second_token = other
    changes = await diff(second, second_token, snapshot)
    assert [(c["op"], c["collection"], c["field"], c["data_loss"]) for c in changes["changes"]] == [
        ("create", "authors", None, False), ("create", "posts", None, False)]
    assert changes["changes"][1]["to"] == collection_of(snapshot, "posts")
    answered = await applied(second, second_token, snapshot)
    assert answered["hash"] == snapshot["hash"]
    second_raw, _ = await export(second, second_token)
    assert second_raw == raw
    response = await second.get("/api/v1/collections", headers=bearer(second_token))
    stored = {c["name"]: c for c in await response.json()}
    assert stored["posts"]["id"] != posts["id"] and stored["authors"]["id"] != authors["id"]
    assert field_of(stored["posts"], "author")["collection_id"] == stored["authors"]["id"]
    # the second instance works as the first: a record that names an author
    response = await second.post("/api/v1/collections/authors/auth/register",
                                 json={"email": "a@example.com", "password": "pass-word-1", "name": "Ann"})
    assert response.status == 201, await response.text()
    author_id = (await response.json())["user"]["id"]
    post = await create_record(second, second_token, "posts", {"title": "t", "author": author_id})
    assert post["author"] == author_id
    assert (await diff(second, second_token, snapshot))["changes"] == []


async def test_a_rename_keeps_the_values_and_applying_again_changes_nothing(
        client: Client, admin_token: str, other: tuple[Client, str]) -> None:
    _, posts = await seed_blog(client, admin_token)
    first = await create_record(client, admin_token, "posts", {"title": "one", "status": "live", "views": 3})
    second_post = await create_record(client, admin_token, "posts", {"title": "two"})
    _, snapshot = await export(client, admin_token)
    title = field_of(collection_of(snapshot, "posts"), "title")
    title.update(name="headline", renamed_from="title")
    changes = (await diff(client, admin_token, snapshot))["changes"]
    shown = {k: v for k, v in title.items() if k != "renamed_from"}
    assert changes == [{"op": "update", "collection": "posts", "field": "headline", "data_loss": False,
                        "from": {**shown, "name": "title"}, "to": shown}]
    answered = await applied(client, admin_token, snapshot)
    assert [f["name"] for f in collection_of(answered, "posts")["schema"]["fields"]][0] == "headline"
    response = await client.get(records_path("posts", first["id"]), headers=bearer(admin_token))
    record = await response.json()
    assert record["headline"] == "one" and "title" not in record and record["views"] == 3
    response = await client.get(records_path("posts", second_post["id"]), headers=bearer(admin_token))
    assert (await response.json())["headline"] == "two"
    # the unique index moved with the field
    response = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": {"headline": "one"}})
    await error_of(response, 400, "already_exists")
    # the same file applied again (a second environment that has it already): nothing to do
    assert (await diff(client, admin_token, snapshot))["changes"] == []
    again = await applied(client, admin_token, snapshot)
    assert again["hash"] == answered["hash"]
    # and on an instance that never had `title`, a collection it creates ignores `renamed_from`
    second, second_token = other
    assert (await applied(second, second_token, snapshot))["hash"] == answered["hash"]
    assert posts["id"]


async def test_the_hash_guard_refuses_an_apply_against_another_schema(client: Client, admin_token: str) -> None:
    await seed_blog(client, admin_token)
    _, snapshot = await export(client, admin_token)
    before = snapshot["hash"]
    collection_of(snapshot, "posts")["list_rule"] = None
    made = (await diff(client, admin_token, snapshot))["hash"]
    assert made == before
    await create_collection(client, admin_token, "tags", [{"name": "label", "type": "text"}])  # the schema moves on
    response = await apply(client, admin_token, snapshot, hash_=made)
    body = await error_of(response, 409, "conflict")
    assert "hash" in body["detail"]
    _, now = await export(client, admin_token)
    assert collection_of(now, "posts")["list_rule"] == ""  # nothing applied
    assert [c["name"] for c in now["collections"]] == ["authors", "posts", "tags"]


async def test_data_loss_is_refused_unless_allowed_then_values_convert_or_clear(
        client: Client, admin_token: str, services: Services) -> None:
    await create_collection(client, admin_token, "items", [
        {"name": "code", "type": "text"}, {"name": "note", "type": "text"}, {"name": "keep", "type": "text"}])
    old = await create_collection(client, admin_token, "old", [{"name": "x", "type": "text"}])
    numeric = await create_record(client, admin_token, "items", {"code": "12", "note": "n", "keep": "k"})
    wordy = await create_record(client, admin_token, "items", {"code": "abc", "note": "m", "keep": "j"})
    await create_record(client, admin_token, "old", {"x": "gone"})
    _, snapshot = await export(client, admin_token)
    snapshot["collections"] = [c for c in snapshot["collections"] if c["name"] != "old"]
    items = collection_of(snapshot, "items")
    items["schema"]["fields"] = [{**field_of(items, "code"), "type": "number"}, field_of(items, "keep")]
    changes = (await diff(client, admin_token, snapshot))["changes"]
    lossy = {(c["op"], c["collection"], c["field"]) for c in changes if c["data_loss"]}
    assert lossy == {("update", "items", "code"), ("delete", "items", "note"), ("delete", "old", None)}
    response = await apply(client, admin_token, snapshot)
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {"collections.items.code", "collections.items.note", "collections.old"}
    _, unchanged = await export(client, admin_token)
    assert {c["name"] for c in unchanged["collections"]} == {"items", "old"}  # nothing applied

    await applied(client, admin_token, snapshot, allow_data_loss=True)
    response = await client.get(records_path("items", numeric["id"]), headers=bearer(admin_token))
    converted = await response.json()
    assert converted["code"] == 12 and "note" not in converted and converted["keep"] == "k"
    response = await client.get(records_path("items", wordy["id"]), headers=bearer(admin_token))
    cleared = await response.json()
    assert cleared.get("code") is None and cleared["keep"] == "j"
    response = await client.get(records_path("old"), headers=bearer(admin_token))
    await error_of(response, 404, "not_found")
    assert records_mongo_name(old["id"]) not in await services.records.repository.database_names()


async def test_every_apply_is_audited_with_its_changes(client: Client, admin_token: str) -> None:
    await seed_blog(client, admin_token)
    _, snapshot = await export(client, admin_token)
    collection_of(snapshot, "posts")["list_rule"] = None
    answered = await applied(client, admin_token, snapshot)
    response = await client.get("/api/v1/audit", headers=bearer(admin_token), params={"event_type": "schema_applied"})
    page = await response.json()
    assert page["total"] == 1, page
    (entry,) = page["items"]
    assert entry["severity"] == "warning"
    assert entry["details"]["hash"] == answered["hash"]
    assert entry["details"]["changes"] == [{"op": "update", "collection": "posts", "field": None,
                                            "from": {"list_rule": ""}, "to": {"list_rule": None}, "data_loss": False}]


async def test_a_unique_index_over_duplicates_undoes_the_whole_apply(client: Client, admin_token: str) -> None:
    await create_collection(client, admin_token, "first", [{"name": "a", "type": "text"}])
    await create_collection(client, admin_token, "second", [{"name": "b", "type": "text"}])
    for _ in range(2):
        await create_record(client, admin_token, "second", {"b": "same"})
    before_raw, snapshot = await export(client, admin_token)
    first = collection_of(snapshot, "first")
    first["schema"]["fields"].append({"name": "c", "type": "text"})
    first["schema"]["fields"][0]["name"] = "renamed"
    first["schema"]["fields"][0]["renamed_from"] = "a"
    field_of(collection_of(snapshot, "second"), "b")["validation"]["unique"] = True
    snapshot["collections"].append({"name": "third", "type": "base", "schema": {"fields": []}})
    response = await apply(client, admin_token, snapshot)
    body = await error_of(response, 422, "validation_error")
    assert any(key.startswith("collections.second") for key in body["errors"]), body
    after_raw, _ = await export(client, admin_token)
    assert after_raw == before_raw  # the rename and the new collection are undone too


async def test_a_field_becoming_localized_keeps_its_values_under_the_default_locale(
        client: Client, admin_token: str) -> None:
    response = await client.post("/api/v1/settings", headers=bearer(admin_token), json={
        "key": "locales", "value": json.dumps([{"code": "de"}, {"code": "en", "fallback": "de"}])})
    assert response.status == 200, await response.text()
    await create_collection(client, admin_token, "pages", [{"name": "title", "type": "text"}])
    page = await create_record(client, admin_token, "pages", {"title": "Hallo"})
    _, snapshot = await export(client, admin_token)
    field_of(collection_of(snapshot, "pages"), "title")["localized"] = True
    changes = (await diff(client, admin_token, snapshot))["changes"]
    assert [(c["field"], c["from"]["localized"], c["to"]["localized"], c["data_loss"]) for c in changes] == [
        ("title", False, True, False)]  # every value is kept: no data loss
    await applied(client, admin_token, snapshot)
    response = await client.get(records_path("pages", page["id"]), headers=bearer(admin_token),
                                params={"locale": "*"})
    assert (await response.json())["title"] == {"de": "Hallo"}
    field_of(collection_of(snapshot, "pages"), "title")["localized"] = False  # back: other locales would go
    assert [c["data_loss"] for c in (await diff(client, admin_token, snapshot))["changes"]] == [True]


async def test_without_transactions_a_rename_keeps_the_values(aiohttp_client: Any, config: Config,
                                                              clock: MovableClock) -> None:
    """A server without multi-document transactions (forced): the renames run before the switch, and again
    after it."""
    async with open_services(config, clock=clock, use_transactions=False) as services:
        assert services.records.repository.capabilities.transactions is False
        served: Client = await aiohttp_client(create_app(config, services=services))
        await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
        token = str((await login(served, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"])
        await create_collection(served, token, "notes", [{"name": "body", "type": "text"}])
        note = await create_record(served, token, "notes", {"body": "kept"})
        _, snapshot = await export(served, token)
        field_of(collection_of(snapshot, "notes"), "body").update(name="text", renamed_from="body")
        await applied(served, token, snapshot)
        response = await served.get(records_path("notes", note["id"]), headers=bearer(token))
        assert (await response.json())["text"] == "kept"
        assert (await diff(served, token, snapshot))["changes"] == []
    assert config.mongodb_url
    mongo = open_client(config.mongodb_url)
    await mongo.drop_database(config.mongodb_db)
    await mongo.close()


INVOICES: list[dict[str, Any]] = [{"name": "status", "type": "select", "values": ["open", "paid"]},
                                  {"name": "amount", "type": "number"}]
TOTALS = {"name": "invoice_totals", "type": "view", "list_rule": "", "view_rule": "",
          "view": {"source": "invoices", "group_by": "status", "aggregates": "count(),sum(amount)"}}


async def test_a_view_moves_with_its_source_and_reads_the_new_instance(
        client: Client, admin_token: str, other: tuple[Client, str]) -> None:
    await create_collection(client, admin_token, "invoices", INVOICES)
    response = await client.post("/api/v1/collections", headers=bearer(admin_token), json=TOTALS)
    assert response.status == 201, await response.text()
    raw, snapshot = await export(client, admin_token)
    totals = collection_of(snapshot, "invoice_totals")
    assert totals["view"]["source"] == "invoices" and totals["schema"]["fields"]  # its fields, for reading
    second, second_token = other
    changes = (await diff(second, second_token, snapshot))["changes"]
    assert [(c["op"], c["collection"]) for c in changes] == [("create", "invoice_totals"), ("create", "invoices")]
    await applied(second, second_token, snapshot)
    assert (await export(second, second_token))[0] == raw
    for amount, status in ((5, "open"), (7, "open"), (1, "paid")):
        await create_record(second, second_token, "invoices", {"amount": amount, "status": status})
    response = await second.get(records_path("invoice_totals"), headers=bearer(second_token))
    groups = {item["status"]: (item["count"], item["sum_amount"]) for item in (await response.json())["items"]}
    assert groups == {"open": (2, 12), "paid": (1, 1)}
    # a source the view reads cannot go (nor change what the view reads): 422 naming the view
    snapshot["collections"] = [c for c in snapshot["collections"] if c["name"] != "invoices"]
    response = await second.post(SCHEMA + "/diff", headers=bearer(second_token), json=snapshot)
    body = await error_of(response, 422, "validation_error")
    assert body["errors"] == {"collections.invoice_totals.view.source": [
        "A view over collection 'invoices', which the snapshot does not define."]}


async def test_a_rename_in_a_collection_with_drafts_renames_the_working_copies(
        client: Client, admin_token: str) -> None:
    await create_collection(client, admin_token, "articles", [{"name": "title", "type": "text"}], drafts=True)
    article = await create_record(client, admin_token, "articles", {"title": "Hello"})
    response = await client.post(records_path("articles", article["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    response = await client.patch(records_path("articles", article["id"]), headers=bearer(admin_token),
                                  json={"data": {"title": "Hello again"}})
    assert response.status == 200, await response.text()
    _, snapshot = await export(client, admin_token)
    assert collection_of(snapshot, "articles")["drafts"] is True
    field_of(collection_of(snapshot, "articles"), "title").update(name="headline", renamed_from="title")
    await applied(client, admin_token, snapshot)
    response = await client.get(records_path("articles", article["id"]), headers=bearer(admin_token))
    assert (await response.json())["headline"] == "Hello"  # the published copy
    response = await client.get(records_path("articles", article["id"]), headers=bearer(admin_token),
                                params={"draft": "true"})
    working = await response.json()
    assert working["headline"] == "Hello again" and "title" not in working  # the working copy followed
