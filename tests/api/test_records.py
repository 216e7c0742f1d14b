"""API tests of record create/get/update/delete (spec: Records; decisions.md: Records, Errors)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from cms.app import create_app
from cms.services.delivery.events import RecordEvent
from cms.wiring import open_services
from tests.conftest import bearer, create_collection, create_record, error_of, names_field, records_path

COLLECTIONS = "/api/v1/collections"
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
MISSING_ID = "00000000-0000-0000-0000-000000000000"

FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True, "min": 2, "max": 20}},
    {"name": "code", "type": "text", "validation": {"pattern": "^[A-Z]{3}$"}},
    {"name": "body", "type": "editor"},
    {"name": "published", "type": "bool"},
    {"name": "contact", "type": "email"},
    {"name": "site", "type": "url"},
    {"name": "price", "type": "number", "validation": {"min": 0, "max": 100}},
    {"name": "views", "type": "number"},
    {"name": "released", "type": "date"},
    {"name": "status", "type": "select", "values": ["draft", "published"]},
    {"name": "tags", "type": "select", "values": ["a", "b", "c"], "max_select": 2},
    {"name": "meta", "type": "json"},
    {"name": "cover", "type": "file"},
]


# --- create and read --------------------------------------------------------------------------


async def test_create_get_shape_for_every_type(client, admin_token, user_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    data = {
        "title": "Hello", "code": "ABC", "body": "<p>Hi</p>", "published": True, "contact": "a@example.com",
        "site": "https://example.com/x", "price": 9.5, "views": 2**63 - 1, "released": "2024-03-01T12:30:00+02:00",
        "status": "draft", "tags": ["a", "c"], "meta": {"k": [1, {"n": None}], "b": True},
    }  # a file field holds files of its record only: tests/api/test_media_fields.py
    response = await client.post(records_path("posts"), headers=bearer(user_token), json={"data": data})
    assert response.status == 201, await response.text()
    created = await response.json()
    assert set(created) == {"id", "created", "updated", *data}
    assert ISO_Z.match(created["created"]) and created["created"] == created["updated"]
    assert created["released"] == "2024-03-01T10:30:00.000Z"
    assert {k: v for k, v in created.items() if k not in ("id", "created", "updated", "released")} == {
        k: v for k, v in data.items() if k != "released"}

    response = await client.get(records_path("posts", created["id"]))
    assert response.status == 200
    assert await response.json() == created


async def test_optional_fields_may_be_absent_or_null(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"title": "Only", "body": None, "price": None})
    assert set(record) == {"id", "created", "updated", "title"}


async def test_dates_are_iso_8601_utc_with_z(client, admin_token):
    await create_collection(client, admin_token, "events", [{"name": "at", "type": "date"}])
    for given, expected in [
        ("2024-03-01", "2024-03-01T00:00:00.000Z"),
        ("2024-03-01T10:00:00", "2024-03-01T10:00:00.000Z"),
        ("2024-03-01T10:00:00Z", "2024-03-01T10:00:00.000Z"),
        ("2024-03-01T10:00:00.123456-01:00", "2024-03-01T11:00:00.123Z"),
    ]:
        record = await create_record(client, admin_token, "events", {"at": given})
        assert record["at"] == expected, given
        assert (await (await client.get(records_path("events", record["id"]))).json())["at"] == expected


async def test_writes_need_a_token_reads_are_public(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    record = await create_record(client, admin_token, "posts", {"title": "t"})
    path = records_path("posts", record["id"])
    for headers in [{}, bearer("garbage"), {"Authorization": "Basic abc"}]:
        await error_of(await client.post(records_path("posts"), json={"data": {"title": "x"}}, headers=headers),
                       401, "unauthorized")
        await error_of(await client.patch(path, json={"data": {"title": "x"}}, headers=headers), 401, "unauthorized")
        await error_of(await client.delete(path, headers=headers), 401, "unauthorized")
    assert (await client.get(path)).status == 200
    assert (await (await client.get(records_path("posts"))).json())["total"] == 1
    assert (await (await client.get(path)).json())["title"] == "t"


async def test_unknown_collection_and_record_are_404(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    for method, path in [
        ("GET", records_path("nope")), ("POST", records_path("nope")),
        ("GET", records_path("nope", MISSING_ID)), ("PATCH", records_path("nope", MISSING_ID)),
        ("DELETE", records_path("nope", MISSING_ID)),
        ("GET", records_path("posts", MISSING_ID)), ("PATCH", records_path("posts", MISSING_ID)),
        ("DELETE", records_path("posts", MISSING_ID)), ("GET", records_path("Posts")),
    ]:
        response = await client.request(method, path, headers=bearer(admin_token), json={"data": {"title": "x"}})
        await error_of(response, 404, "not_found")


# --- validation -------------------------------------------------------------------------------


async def test_body_must_carry_data(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    for body in [{}, {"title": "flat"}, {"data": None}, {"data": "title"}, {"data": ["title"]},
                 {"data": {"title": "x"}, "extra": 1}]:
        response = await client.post(records_path("posts"), headers=bearer(admin_token), json=body)
        result = await error_of(response, 422, "validation_error")
        assert result["errors"], body
    response = await client.post(records_path("posts"), headers={**bearer(admin_token),
                                                                 "Content-Type": "application/json"}, data="{")
    await error_of(response, 400, "bad_request")
    response = await client.post(records_path("posts"), headers=bearer(admin_token), json=[{"data": {}}])
    await error_of(response, 400, "bad_request")
    assert (await (await client.get(records_path("posts"))).json())["total"] == 0


async def test_unknown_and_unsafe_keys_are_422(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    for key in ["subtitle", "id", "created", "updated", "_id", "$set", "$where", "title.x", "a.b", "Title"]:
        response = await client.post(records_path("posts"), headers=bearer(admin_token),
                                     json={"data": {"title": "t", key: "x"}})
        body = await error_of(response, 422, "validation_error")
        assert key in body["errors"], (key, body)
    assert (await (await client.get(records_path("posts"))).json())["total"] == 0


# (field, bad value) pairs over FIELDS; each must be 422 with the field named in `errors`.
WRONG_VALUES: list[tuple[str, Any]] = [
    ("title", 5), ("title", True), ("title", ["Hello"]), ("title", {"a": 1}), ("title", "x"), ("title", "x" * 21),
    ("title", ""), ("code", "abc"), ("code", "ABCD"), ("body", 1.5), ("body", False),
    ("published", "true"), ("published", 1), ("published", 0), ("published", "yes"),
    ("contact", "not-an-email"), ("contact", 5), ("site", "not a url"), ("site", "javascript alert"),
    ("site", 3), ("price", "5"), ("price", True), ("price", -1), ("price", 100.5), ("price", [1]),
    ("views", 2**63), ("views", -(2**63) - 1), ("views", "1e3"),
    ("released", "yesterday"), ("released", 20240301), ("released", "2024-13-01"),
    ("released", True), ("released", "9999-12-31T23:59:59-01:00"), ("status", "archived"),
    ("status", ["draft"]), ("status", 1), ("tags", "a"), ("tags", ["a", "z"]), ("tags", ["a", "b", "c"]),
    ("tags", [1]), ("meta", {"$set": 1}), ("meta", {"a": {"b.c": 1}}), ("meta", [{"$where": "1"}]),
    ("meta", {"n": 2**70}), ("meta", {"a\u0000b": 1}), ("cover", 5), ("cover", ""), ("cover", ["f1", "f2"]),
    ("cover", "not-a-file-id"),

]
# Not JSON a record can hold: NaN/Infinity and lone surrogates (valid JSON escapes, but not text that
# BSON can store) are refused by the JSON layer with 400 before any validation.
UNSTORABLE_VALUES = [
    ("meta", [float("nan")]), ("meta", float("inf")),
    ("title", "Ok\ud800"), ("body", "\udfff"), ("contact", "\ud800@example.com"), ("cover", "\ud800"),
    ("meta", {"\ud800": 1}), ("meta", ["\udfff"]),
]


async def test_unstorable_json_is_400(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    for field_name, value in UNSTORABLE_VALUES:
        response = await client.post(records_path("posts"), headers=bearer(admin_token),
                                     json={"data": {"title": "Valid", field_name: value}})
        assert response.status == 400, (field_name, value, await response.text())
        assert (await response.json())["code"] == "bad_request"
    assert (await (await client.get(records_path("posts"))).json())["total"] == 0


async def test_wrong_types_are_422_naming_the_field(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    for field_name, value in WRONG_VALUES:
        data = {"title": "Valid", field_name: value}
        response = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": data})
        assert response.status == 422, (field_name, value, await response.text())
        body = await response.json()
        assert body["code"] == "validation_error"
        assert names_field(body["errors"], field_name), (field_name, value, body)
    assert (await (await client.get(records_path("posts"))).json())["total"] == 0


async def test_wrong_types_on_update_are_422_and_change_nothing(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"title": "Valid", "price": 1})
    path = records_path("posts", record["id"])
    for field_name, value in WRONG_VALUES:
        if value is None:
            continue
        response = await client.patch(path, headers=bearer(admin_token), json={"data": {field_name: value}})
        assert response.status == 422, (field_name, value, await response.text())
        assert names_field((await response.json())["errors"], field_name)
    assert await (await client.get(path)).json() == record


async def test_required_fields(client, admin_token):
    await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text", "validation": {"required": True}},
        {"name": "done", "type": "bool", "validation": {"required": True}},
        {"name": "n", "type": "number", "validation": {"required": True}},
        {"name": "tags", "type": "select", "values": ["a", "b"], "max_select": 2, "validation": {"required": True}},
    ])
    response = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": {}})
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {"title", "done", "n", "tags"}
    response = await client.post(records_path("posts"), headers=bearer(admin_token),
                                 json={"data": {"title": None, "done": None, "n": None, "tags": []}})
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {"title", "done", "n", "tags"}
    record = await create_record(client, admin_token, "posts", {"title": "t", "done": False, "n": 0, "tags": ["a"]})
    assert record["done"] is False and record["n"] == 0


REQUIRED = "Missing data for required field."


async def test_a_required_field_left_empty_says_required(client, admin_token):
    """Empty text, an empty list or null in a required field says "required", not "Shorter than minimum
    length 1." (issue 44); a minimum the schema sets keeps its own message, and optional fields are as before."""
    people = await create_collection(client, admin_token, "people", [{"name": "name", "type": "text"}])
    await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text", "validation": {"required": True}},
        {"name": "slug", "type": "text", "validation": {"required": True, "min": 3}},
        {"name": "contact", "type": "email", "validation": {"required": True}},
        {"name": "tags", "type": "select", "values": ["a", "b"], "max_select": 2, "validation": {"required": True}},
        {"name": "author", "type": "relation", "collection_id": people["id"], "validation": {"required": True}},
        {"name": "note", "type": "text", "validation": {"min": 2}},
    ])
    empty = {"title": "", "slug": "", "contact": "", "tags": [], "author": "", "note": ""}
    response = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": empty})
    errors = (await error_of(response, 422, "validation_error"))["errors"]
    assert errors == {"title": [REQUIRED], "slug": ["Shorter than minimum length 3."], "contact": [REQUIRED],
                      "tags": [REQUIRED], "author": [REQUIRED], "note": ["Shorter than minimum length 2."]}
    nulls = {"title": None, "slug": None, "contact": None, "tags": None, "author": None, "note": None}
    response = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": nulls})
    errors = (await error_of(response, 422, "validation_error"))["errors"]
    assert errors == {name: [REQUIRED] for name in ("title", "slug", "contact", "tags", "author")}
    author = await create_record(client, admin_token, "people", {"name": "Ann"})
    record = await create_record(client, admin_token, "posts", {"title": "t", "slug": "abc", "contact": "a@b.example",
                                                                "tags": ["a"], "author": author["id"]})
    response = await client.patch(records_path("posts", record["id"]), headers=bearer(admin_token),
                                  json={"data": {"title": "", "tags": []}})
    errors = (await error_of(response, 422, "validation_error"))["errors"]
    assert errors == {"title": [REQUIRED], "tags": [REQUIRED]}


# --- update -----------------------------------------------------------------------------------


async def test_update_is_partial_and_null_clears(client, admin_token, clock):
    await create_collection(client, admin_token, "posts", FIELDS)
    record = await create_record(client, admin_token, "posts", {"title": "First", "price": 5, "body": "b",
                                                                "tags": ["a"]})
    clock.advance(seconds=3)
    path = records_path("posts", record["id"])
    response = await client.patch(path, headers=bearer(admin_token), json={"data": {"price": 7, "body": None,
                                                                                    "tags": None}})
    assert response.status == 200, await response.text()
    updated = await response.json()
    assert updated["title"] == "First" and updated["price"] == 7
    assert "body" not in updated and "tags" not in updated
    assert updated["created"] == record["created"] and updated["updated"] > record["updated"]
    assert await (await client.get(path)).json() == updated

    response = await client.patch(path, headers=bearer(admin_token), json={"data": {"title": None}})
    body = await error_of(response, 422, "validation_error")
    assert "title" in body["errors"]
    response = await client.patch(path, headers=bearer(admin_token), json={"data": {"title": ""}})
    await error_of(response, 422, "validation_error")
    response = await client.patch(path, headers=bearer(admin_token), json={"data": {}})
    assert response.status == 200
    assert (await response.json())["title"] == "First"
    response = await client.patch(path, headers=bearer(admin_token), json={})
    await error_of(response, 422, "validation_error")


async def test_delete(client, admin_token, user_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    record = await create_record(client, admin_token, "posts", {"title": "t"})
    other = await create_record(client, admin_token, "posts", {"title": "u"})
    response = await client.delete(records_path("posts", record["id"]), headers=bearer(user_token))
    assert response.status == 204 and await response.read() == b""
    await error_of(await client.get(records_path("posts", record["id"])), 404, "not_found")
    await error_of(await client.delete(records_path("posts", record["id"]), headers=bearer(user_token)), 404,
                   "not_found")
    page = await (await client.get(records_path("posts"))).json()
    assert [r["id"] for r in page["items"]] == [other["id"]]


# --- unique -----------------------------------------------------------------------------------


async def test_unique_fields(client, admin_token):
    await create_collection(client, admin_token, "users", [
        {"name": "handle", "type": "text", "validation": {"unique": True, "required": True}},
        {"name": "mail", "type": "email", "validation": {"unique": True}},
        {"name": "rank", "type": "number", "validation": {"unique": True}},
    ])
    first = await create_record(client, admin_token, "users", {"handle": "ann", "mail": "ann@example.com"})
    second = await create_record(client, admin_token, "users", {"handle": "bob"})
    await create_record(client, admin_token, "users", {"handle": "cid", "rank": None})  # absent twice is fine
    for data, field_name in [({"handle": "ann"}, "handle"), ({"handle": "dan", "mail": "ann@example.com"}, "mail")]:
        response = await client.post(records_path("users"), headers=bearer(admin_token), json={"data": data})
        body = await error_of(response, 400, "already_exists")
        assert field_name in body["detail"] and field_name in body.get("errors", {}), body
    response = await client.patch(records_path("users", second["id"]), headers=bearer(admin_token),
                                  json={"data": {"mail": "ann@example.com"}})
    body = await error_of(response, 400, "already_exists")
    assert "mail" in body["detail"]
    assert "mail" not in await (await client.get(records_path("users", second["id"]))).json()
    # updating a record to its own value is not a conflict; clearing frees the value
    response = await client.patch(records_path("users", first["id"]), headers=bearer(admin_token),
                                  json={"data": {"handle": "ann", "mail": None}})
    assert response.status == 200, await response.text()
    response = await client.patch(records_path("users", second["id"]), headers=bearer(admin_token),
                                  json={"data": {"mail": "ann@example.com", "rank": 1}})
    assert response.status == 200, await response.text()
    assert (await (await client.get(records_path("users"))).json())["total"] == 3


# --- relations --------------------------------------------------------------------------------


async def test_relations_must_point_to_existing_records(client, admin_token):
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    await create_collection(client, admin_token, "books", [
        {"name": "author", "type": "relation", "collection_id": authors["id"]},
        {"name": "editors", "type": "relation", "collection_id": authors["id"], "max_select": 3},
    ])
    ann = await create_record(client, admin_token, "authors", {"name": "Ann"})
    bob = await create_record(client, admin_token, "authors", {"name": "Bob"})
    book = await create_record(client, admin_token, "books", {"author": ann["id"], "editors": [ann["id"], bob["id"]]})
    assert book["author"] == ann["id"] and book["editors"] == [ann["id"], bob["id"]]
    bad_values: list[dict[str, Any]] = [{"author": MISSING_ID}, {"editors": [ann["id"], MISSING_ID]},
                                        {"author": 5}, {"editors": ann["id"]}, {"author": [ann["id"]]}]
    for data in bad_values:
        response = await client.post(records_path("books"), headers=bearer(admin_token), json={"data": data})
        body = await error_of(response, 422, "validation_error")
        assert set(body["errors"]) == set(data), (data, body)
    response = await client.patch(records_path("books", book["id"]), headers=bearer(admin_token),
                                  json={"data": {"author": MISSING_ID}})
    body = await error_of(response, 422, "validation_error")
    assert "author" in body["errors"]
    # a record of another collection with a valid id is not a target
    other = await create_record(client, admin_token, "books", {})
    response = await client.post(records_path("books"), headers=bearer(admin_token),
                                 json={"data": {"author": other["id"]}})
    await error_of(response, 422, "validation_error")


# --- events -----------------------------------------------------------------------------------


async def test_one_event_per_change(client, admin_token, services):
    seen: list[RecordEvent] = []

    async def handler(events: Sequence[RecordEvent]) -> None:
        seen.extend(events)

    services.events.subscribe(handler)
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text",
                                                            "validation": {"unique": True}}])
    record = await create_record(client, admin_token, "posts", {"title": "a"})
    assert [(e.event, e.collection, e.record_id) for e in seen] == [("create", "posts", record["id"])]
    assert seen[0].data == record and seen[0].timestamp.tzinfo is not None

    response = await client.patch(records_path("posts", record["id"]), headers=bearer(admin_token),
                                  json={"data": {"title": "b"}})
    updated = await response.json()
    assert [(e.event, e.record_id) for e in seen[1:]] == [("update", record["id"])]
    assert seen[1].data == updated

    # failed writes emit nothing
    for method, path, body in [
        ("POST", records_path("posts"), {"data": {"title": "b"}}),
        ("POST", records_path("posts"), {"data": {"title": 1}}),
        ("PATCH", records_path("posts", MISSING_ID), {"data": {"title": "c"}}),
        ("DELETE", records_path("posts", MISSING_ID), None),
    ]:
        response = await client.request(method, path, headers=bearer(admin_token), json=body)
        assert response.status >= 400
    assert len(seen) == 2

    response = await client.delete(records_path("posts", record["id"]), headers=bearer(admin_token))
    assert response.status == 204
    assert [(e.event, e.collection, e.record_id, e.data) for e in seen[2:]] == [
        ("delete", "posts", record["id"], {"id": record["id"]})]
    services.events.unsubscribe(handler)


# --- schema changes seen by every replica -------------------------------------------------------


async def test_a_second_replica_sees_a_schema_change_at_once(client, admin_token, aiohttp_client, config, clock):
    created = await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    async with open_services(config, clock=clock) as second:
        other = await aiohttp_client(create_app(config, services=second))
        # warm the second replica's schema cache with the old version
        await create_record(other, admin_token, "posts", {"title": "old"})
        response = await other.post(records_path("posts"), headers=bearer(admin_token),
                                    json={"data": {"title": "x", "views": 1}})
        await error_of(response, 422, "validation_error")

        response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token), json={
            "schema": [{"name": "title", "type": "text", "validation": {"required": True}},
                       {"name": "views", "type": "number"}]})
        assert response.status == 200, await response.text()

        record = await create_record(other, admin_token, "posts", {"title": "new", "views": 1})
        assert record["views"] == 1
        response = await other.post(records_path("posts"), headers=bearer(admin_token), json={"data": {"views": 2}})
        body = await error_of(response, 422, "validation_error")
        assert "title" in body["errors"]
        page = await (await other.get(records_path("posts"), params={"filter": "views=1"})).json()
        assert [r["title"] for r in page["items"]] == ["new"]
