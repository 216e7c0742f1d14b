"""Regression tests of the hardening issue: what a hostile or clumsy client broke (items 1-6, 10
and 12; item 7 is in test_http_errors.py, 8 in test_refresh_reuse.py, 9 in test_mail_limits.py,
11 in test_schema_changes.py, 13 in test_app.py)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Sequence
from typing import Any

import aiohttp
import pytest
from pymongo.errors import AutoReconnect

from cms.errors import InvalidFilter
from cms.models import Record
from cms.services.content.record_csv import IMPORT_BATCH_SIZE, RecordCsv
from cms.services.content.record_writer import RecordWriter
from cms.services.delivery.events import RecordEvent
from cms.store.client import Capabilities, open_client
from cms.store.documents import records_mongo_name
from cms.store.records import RecordRepository
from tests.conftest import bearer, create_collection, create_record, error_of, records_path
from tests.fixtures import post_raw_json

# docs/concepts/records.md, Filter details: "at most 512 characters once escaped for a regex"
MAX_REGEX_LENGTH = 512
# docs/api/conventions.md, Hostile input: "nesting arrays and objects deeper than 64 levels" is a 400
MAX_JSON_DEPTH = 64

POSTS = [{"name": "title", "type": "text"}, {"name": "views", "type": "number"}, {"name": "meta", "type": "json"}]


def export_path(collection: str) -> str:
    return records_path(collection) + "/export/csv"


def import_form(content: bytes) -> aiohttp.FormData:
    data = aiohttp.FormData()
    data.add_field("file", content, filename="data.csv", content_type="text/csv")
    return data


def csv_bytes(rows: list[list[Any]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


async def raw_documents(config: Any, collection_id: str) -> list[dict[str, Any]]:
    mongo = open_client(config.mongodb_url)
    try:
        return [d async for d in mongo[config.mongodb_db][records_mongo_name(collection_id)].find({})]
    finally:
        await mongo.close()


# --- 1. long regex values ------------------------------------------------------------------------


async def test_a_long_contains_value_is_a_400_with_its_position(client, admin_token):
    await create_collection(client, admin_token, "posts", POSTS)
    await create_record(client, admin_token, "posts", {"title": "a"})
    response = await client.get(records_path("posts"), params={"filter": f'title~"{"x" * 1001}"'})
    body = await error_of(response, 400, "invalid_filter")
    assert "at position 6" in body["detail"] and str(MAX_REGEX_LENGTH) in body["detail"]


async def test_a_search_of_nul_characters_is_a_400(client, admin_token):
    await create_collection(client, admin_token, "posts", POSTS)
    response = await client.get(records_path("posts"), params={"search": "\x00" * 300})
    await error_of(response, 400, "invalid_filter")
    ok = await client.get(records_path("posts"), params={"search": "\x00" * (MAX_REGEX_LENGTH // 4)})
    assert ok.status == 200, await ok.text()


async def test_an_export_with_a_refused_filter_answers_json_before_any_byte(client, admin_token):
    await create_collection(client, admin_token, "posts", POSTS)
    await create_record(client, admin_token, "posts", {"title": "a"})
    for params in ({"filter": f'title~"{"x" * 1001}"'}, {"search": "\x00" * 300}):
        response = await client.get(export_path("posts"), headers=bearer(admin_token), params=params)
        await error_of(response, 400, "invalid_filter")
        assert response.content_type == "application/json"


async def test_a_query_the_server_refuses_becomes_invalid_filter(services, client, admin_token):
    """Whatever still reaches the server and is refused there (an invalid regex) is a 400, not a 500."""
    collection = await create_collection(client, admin_token, "posts", POSTS)
    await create_record(client, admin_token, "posts", {"title": "a"})
    repository = services.records.repository
    query = {"title": {"$regex": "("}}
    with pytest.raises(InvalidFilter):
        await repository.find(collection["id"], query, [("_id", 1)], 0, 10)
    with pytest.raises(InvalidFilter):
        await repository.count(collection["id"], query)
    with pytest.raises(InvalidFilter):
        async for _ in repository.stream(collection["id"], query, [("_id", 1)], batch_size=10):
            pass


# --- 2. hostile JSON bodies ----------------------------------------------------------------------


async def test_deeply_nested_login_body_is_a_400(client):
    body = '{"email": ' + "[" * 1000 + "]" * 1000 + ', "password": "x"}'
    response = await post_raw_json(client, "/api/v1/auth/login", body)
    error = await error_of(response, 400, "bad_request")
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in error["detail"]


async def test_json_nested_up_to_the_limit_reaches_validation(client):
    body = '{"email": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + ', "password": "x"}'
    response = await post_raw_json(client, "/api/v1/auth/login", body)
    await error_of(response, 422, "validation_error")


async def test_a_huge_integer_is_a_400_with_a_plain_message(client, admin_token):
    await create_collection(client, admin_token, "posts", POSTS)
    body = '{"data": {"views": ' + "9" * 5000 + "}}"
    response = await client.post(records_path("posts"), data=body,
                                 headers={**bearer(admin_token), "Content-Type": "application/json"})
    error = await error_of(response, 400, "bad_request")
    assert "more than 100 digits" in error["detail"]
    assert "set_int_max_str_digits" not in error["detail"]


async def test_a_too_deep_json_field_value_is_refused_and_nothing_stored(client, admin_token, config):
    collection = await create_collection(client, admin_token, "posts", POSTS)
    deep = "[" * (MAX_JSON_DEPTH + 5) + "]" * (MAX_JSON_DEPTH + 5)
    response = await client.post(records_path("posts"), data='{"data": {"meta": ' + deep + "}}",
                                 headers={**bearer(admin_token), "Content-Type": "application/json"})
    await error_of(response, 400, "bad_request")
    assert await raw_documents(config, collection["id"]) == []


# --- 3. CSV import: every cell problem is a row error ------------------------------------------


async def test_csv_cells_that_broke_the_import_are_row_errors(client, admin_token, config):
    collection = await create_collection(client, admin_token, "posts", POSTS)
    rows: list[list[Any]] = [["title", "views", "meta"]]
    rows += [[f"row {n}", n, "{}"] for n in range(1, 2501)]
    rows[2001] = ["big", "9" * 4301, "1"]
    rows[2002] = ["deep", "1", "[" * 3000 + "]" * 3000]
    rows[2003] = ["nan", "1", "NaN"]
    response = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token),
                                 data=import_form(csv_bytes(rows)))
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["imported"] == 2497
    failed = {f["row"]: f["errors"] for f in body["failed"]}
    assert set(failed) == {2001, 2002, 2003}
    assert "digits" in failed[2001]["views"][0]
    assert "nested deeper" in failed[2002]["meta"][0]
    assert "NaN" in failed[2003]["meta"][0]
    assert len(await raw_documents(config, collection["id"])) == 2497


class FailingRecords(RecordRepository):
    """The real repository on the real server, made to fail its `fail_on`-th insert_many: before
    the insert (`stored=False`) or after it landed (`stored=True`), as a dropped connection would."""

    def __init__(self, db: Any, capabilities: Capabilities, *, fail_on: int, stored: bool) -> None:
        super().__init__(db, capabilities)
        self.calls = 0
        self.fail_on = fail_on
        self.stored = stored

    async def insert_many(self, collection_id: str, records: Any) -> Any:
        self.calls += 1
        if self.calls == self.fail_on:
            if self.stored:
                await super().insert_many(collection_id, records)
            raise AutoReconnect("connection closed")
        return await super().insert_many(collection_id, records)


@pytest.mark.parametrize("stored", [False, True], ids=["failed-before-storing", "failed-after-storing"])
async def test_a_database_failure_mid_import_says_exactly_which_rows_were_stored(
        services, client, admin_token, config, stored):
    created = await create_collection(client, admin_token, "posts", POSTS)
    collection = await services.catalog.by_id(created["id"])
    emitted: list[Record] = []

    async def emit(events: Sequence[RecordEvent]) -> None:
        emitted.extend(e.record for e in events if e.event == "create" and e.record is not None)

    services.events.subscribe(emit)
    mongo = open_client(config.mongodb_url)
    repository = FailingRecords(mongo[config.mongodb_db], services.records.repository.capabilities,
                                fail_on=2, stored=stored)
    writer = RecordWriter(services.catalog, repository, services.events)
    total = IMPORT_BATCH_SIZE * 2 + 500
    content = csv_bytes([["title", "views"], *([f"row {n}", n] for n in range(1, total + 1))])
    try:
        result = await RecordCsv(repository, writer).import_csv(collection, content)
    finally:
        services.events.unsubscribe(emit)
        await mongo.close()

    expected_stored = IMPORT_BATCH_SIZE * (2 if stored else 1)
    docs = await raw_documents(config, created["id"])
    assert result.imported == expected_stored == len(docs) == len(emitted)
    assert sorted(d["views"] for d in docs) == list(range(1, expected_stored + 1))
    assert [f.row for f in result.failed] == list(range(expected_stored + 1, total + 1))
    assert all("Not stored" in f.errors["_row"][0] for f in result.failed)


async def test_nothing_is_stored_before_every_row_was_validated(client, admin_token, config):
    """A file refused as a whole (here: a broken quote in the last row) stores nothing."""
    collection = await create_collection(client, admin_token, "posts", POSTS)
    content = csv_bytes([["title"], *([f"row {n}"] for n in range(1, 2001))]) + b'"broken\n'
    response = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token),
                                 data=import_form(content))
    await error_of(response, 422, "validation_error")
    assert await raw_documents(config, collection["id"]) == []


# --- 4. ReDoS through a field pattern ------------------------------------------------------------


async def test_a_catastrophic_pattern_is_matched_in_linear_time(client, admin_token):
    await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text", "validation": {"pattern": "^(a+)+$"}}])
    # Python's re took 6.3 s for this and stalled every other request; RE2 answers at once.
    health = asyncio.ensure_future(client.get("/health"))
    response = await client.post(records_path("posts"), headers=bearer(admin_token),
                                 json={"data": {"title": "a" * 5000 + "!"}})
    body = await error_of(response, 422, "validation_error")
    assert body["errors"]["title"] == ["Does not match the pattern."]
    assert (await health).status == 200
    ok = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": {"title": "aaa"}})
    assert ok.status == 201


@pytest.mark.parametrize("pattern", [r"^(a)\1$", "(?=x)", "(?<=x)y", "(x{100}){100}", "a" * 501],
                         ids=["backreference", "lookahead", "lookbehind", "blow-up", "too-long"])
async def test_patterns_re2_cannot_run_are_refused_at_schema_time(client, admin_token, pattern):
    response = await client.post("/api/v1/collections", headers=bearer(admin_token), json={
        "name": "posts", "schema": [{"name": "title", "type": "text", "validation": {"pattern": pattern}}]})
    await error_of(response, 422, "validation_error")
    assert (await client.get(records_path("posts"))).status == 404


# --- 5 and 6. auth-collection users reach only their own record -----------------------------------

MEMBERS = "members"
PASSWORD = "member-password-1"


async def register_and_login(client: Any, email: str) -> tuple[str, dict[str, str]]:
    prefix = f"/api/v1/collections/{MEMBERS}/auth"
    response = await client.post(f"{prefix}/register", json={"email": email, "password": PASSWORD, "nickname": email})
    assert response.status == 201, await response.text()
    user_id = (await response.json())["user"]["id"]
    login = await client.post(f"{prefix}/login", json={"email": email, "password": PASSWORD})
    assert login.status == 200, await login.text()
    return user_id, bearer((await login.json())["token"]["access_token"])


@pytest.fixture
async def two_members(client, admin_token):
    await create_collection(client, admin_token, MEMBERS, [{"name": "nickname", "type": "text"}], type="auth")
    a = await register_and_login(client, "a@example.com")
    b = await register_and_login(client, "b@example.com")
    return a, b


async def test_a_user_cannot_change_or_delete_another_user(client, two_members):
    (a_id, a_auth), (b_id, b_auth) = two_members
    path = records_path(MEMBERS, a_id)
    await error_of(await client.patch(path, headers=b_auth, json={"data": {"nickname": "pwned"}}), 404, "not_found")
    await error_of(await client.delete(path, headers=b_auth), 404, "not_found")
    for bulk, body in (("bulk-update", {"record_ids": [b_id, a_id], "data": {"nickname": "x"}}),
                       ("bulk-delete", {"record_ids": [b_id, a_id]})):
        response = await client.post(records_path(MEMBERS) + "/" + bulk, headers=b_auth, json=body)
        error = await error_of(response, 403, "forbidden")
        assert list(error["errors"]) == [a_id]
    # A is untouched and still signed in; B's own record did not change either
    me = await client.get(f"/api/v1/collections/{MEMBERS}/auth/me", headers=a_auth)
    assert me.status == 200 and (await me.json())["nickname"] == "a@example.com"
    own = await client.get(records_path(MEMBERS, b_id), headers=b_auth)
    assert (await own.json())["nickname"] == "b@example.com"


async def test_a_user_may_change_their_own_record_and_admins_any(client, admin_token, two_members):
    (a_id, a_auth), (b_id, _) = two_members
    response = await client.patch(records_path(MEMBERS, a_id), headers=a_auth, json={"data": {"nickname": "A"}})
    assert response.status == 200 and (await response.json())["nickname"] == "A"
    response = await client.patch(records_path(MEMBERS, b_id), headers=bearer(admin_token),
                                  json={"data": {"nickname": "B"}})
    assert response.status == 200
    assert (await client.delete(records_path(MEMBERS, a_id), headers=a_auth)).status == 204
    assert (await client.get(f"/api/v1/collections/{MEMBERS}/auth/me", headers=a_auth)).status == 401


async def test_auth_collection_records_are_listed_only_to_their_user_and_admins(
        client, admin_token, user_token, two_members):
    (a_id, _), (b_id, b_auth) = two_members
    listed = await (await client.get(records_path(MEMBERS))).json()
    assert (listed["items"], listed["total"]) == ([], 0)
    assert "a@example.com" not in json.dumps(listed)
    await error_of(await client.get(records_path(MEMBERS, a_id)), 401, "unauthorized")
    await error_of(await client.get(records_path(MEMBERS, a_id), headers=b_auth), 404, "not_found")
    # an admin-table user of role `user` is not an admin
    other = await (await client.get(records_path(MEMBERS), headers=bearer(user_token))).json()
    assert other["total"] == 0
    own = await (await client.get(records_path(MEMBERS), headers=b_auth, params={"filter": "nickname~'@'"})).json()
    assert [r["id"] for r in own["items"]] == [b_id] and own["total"] == 1
    every = await (await client.get(records_path(MEMBERS), headers=bearer(admin_token))).json()
    assert {r["id"] for r in every["items"]} == {a_id, b_id}
    # a bad filter is still an error for someone who sees nothing
    await error_of(await client.get(records_path(MEMBERS), params={"filter": "nope=1"}), 400, "invalid_filter")


async def test_auth_collection_export_holds_only_what_the_caller_may_see(client, admin_token, two_members):
    (a_id, _), (b_id, b_auth) = two_members
    own = await client.get(export_path(MEMBERS), headers=b_auth)
    rows = list(csv.reader(io.StringIO((await own.read()).decode())))
    assert [row[0] for row in rows[1:]] == [b_id]
    every = await client.get(export_path(MEMBERS), headers=bearer(admin_token))
    rows = list(csv.reader(io.StringIO((await every.read()).decode())))
    assert {row[0] for row in rows[1:]} == {a_id, b_id}


# --- 10. writes racing a collection delete -------------------------------------------------------


async def test_no_write_outlives_a_deleted_collection(services, client, admin_token, config, clock):
    """24 writers keep creating records while the collection is deleted. Each create checks its
    relation against a collection of 3,000 records first, which holds it between looking the
    collection up and inserting (as load does on a busy server), so creates that looked the
    collection up before the delete insert after it."""
    auth = bearer(admin_token)
    people = await create_collection(client, admin_token, "people", [{"name": "name", "type": "text"}])
    now = clock()
    seeded = [Record(id=f"p{n}", created=now, updated=now, data={"name": str(n)}) for n in range(3000)]
    assert await services.records.repository.insert_many(people["id"], seeded) == []
    for round_number in range(ROUNDS):
        collection = await create_collection(client, admin_token, f"posts{round_number}", [
            {"name": "title", "type": "text"},
            {"name": "author", "type": "relation", "collection_id": people["id"]}])
        path = records_path(f"posts{round_number}")
        created = asyncio.Event()
        statuses: list[int] = []

        async def writer(number: int, path: str = path, statuses: list[int] = statuses,
                         created: asyncio.Event = created) -> None:
            for attempt in range(200):
                response = await client.post(path, headers=auth,
                                             json={"data": {"title": f"w{number}-{attempt}", "author": "p1"}})
                statuses.append(response.status)
                if response.status != 201:
                    assert response.status == 404, await response.text()
                    return
                created.set()

        writers = [asyncio.ensure_future(writer(n)) for n in range(24)]
        await asyncio.wait_for(created.wait(), 30)
        deleted = await client.delete(f"/api/v1/collections/{collection['id']}", headers=auth)
        assert deleted.status == 204
        await asyncio.wait_for(asyncio.gather(*writers), 60)
        assert 201 in statuses and 404 in statuses
        assert await raw_documents(config, collection["id"]) == []
        await error_of(await client.post(path, headers=auth, json={"data": {"title": "late"}}), 404, "not_found")


ROUNDS = 2


# --- 12. relations to deleted records ------------------------------------------------------------


async def relation_collections(client: Any, token: str, *, cascade: bool = False, required: bool = False
                               ) -> dict[str, Any]:
    people = await create_collection(client, token, "people", [{"name": "name", "type": "text"}])
    await create_collection(client, token, "posts", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": people["id"], "cascade_delete": cascade,
         "validation": {"required": required}},
        {"name": "readers", "type": "relation", "collection_id": people["id"], "max_select": 5},
    ])
    return people


async def test_deleting_a_record_removes_the_references_to_it(client, admin_token, seen, clock):
    await relation_collections(client, admin_token)
    ann = await create_record(client, admin_token, "people", {"name": "Ann"})
    bob = await create_record(client, admin_token, "people", {"name": "Bob"})
    post = await create_record(client, admin_token, "posts",
                               {"title": "p", "author": ann["id"], "readers": [ann["id"], bob["id"]]})
    other = await create_record(client, admin_token, "posts", {"title": "q", "author": bob["id"]})
    seen.clear()
    clock.advance(seconds=1)
    assert (await client.delete(records_path("people", ann["id"]), headers=bearer(admin_token))).status == 204
    after = await (await client.get(records_path("posts", post["id"]))).json()
    assert "author" not in after and after["readers"] == [bob["id"]]
    assert after["updated"] > post["updated"]
    untouched = await (await client.get(records_path("posts", other["id"]))).json()
    assert untouched == other
    assert [(e.event, e.collection, e.record_id) for e in seen] == [
        ("delete", "people", ann["id"]), ("update", "posts", post["id"])]
    assert "author" not in seen[1].data


async def test_cascade_delete_deletes_the_records_that_point_to_it(client, admin_token, seen):
    await relation_collections(client, admin_token, cascade=True)
    ann = await create_record(client, admin_token, "people", {"name": "Ann"})
    bob = await create_record(client, admin_token, "people", {"name": "Bob"})
    posts = [await create_record(client, admin_token, "posts", {"title": str(n), "author": ann["id"]})
             for n in range(3)]
    kept = await create_record(client, admin_token, "posts", {"title": "kept", "author": bob["id"]})
    seen.clear()
    response = await client.post(records_path("people") + "/bulk-delete", headers=bearer(admin_token),
                                 json={"record_ids": [ann["id"]]})
    assert response.status == 200 and (await response.json()) == {"deleted": 1}
    listed = await (await client.get(records_path("posts"))).json()
    assert [r["id"] for r in listed["items"]] == [kept["id"]]
    assert sorted((e.event, e.record_id) for e in seen if e.collection == "posts") == sorted(
        ("delete", p["id"]) for p in posts)


async def test_a_required_relation_blocks_the_delete_and_nothing_changes(client, admin_token):
    await relation_collections(client, admin_token, required=True)
    ann = await create_record(client, admin_token, "people", {"name": "Ann"})
    post = await create_record(client, admin_token, "posts", {"title": "p", "author": ann["id"]})
    response = await client.delete(records_path("people", ann["id"]), headers=bearer(admin_token))
    error = await error_of(response, 400, "bad_request")
    assert "posts.author" in error["detail"]
    assert (await client.get(records_path("people", ann["id"]))).status == 200
    assert await (await client.get(records_path("posts", post["id"]))).json() == post


async def test_a_cascade_through_a_self_relation_ends(client, admin_token):
    nodes = await create_collection(client, admin_token, "nodes", [{"name": "name", "type": "text"}])
    await client.patch(f"/api/v1/collections/{nodes['id']}", headers=bearer(admin_token), json={"schema": [
        {"name": "name", "type": "text"},
        {"name": "parent", "type": "relation", "collection_id": nodes["id"], "cascade_delete": True}]})
    root = await create_record(client, admin_token, "nodes", {"name": "root"})
    child = await create_record(client, admin_token, "nodes", {"name": "child", "parent": root["id"]})
    await create_record(client, admin_token, "nodes", {"name": "grandchild", "parent": child["id"]})
    # a cycle: root points at the grandchild's parent chain too
    await client.patch(records_path("nodes", root["id"]), headers=bearer(admin_token),
                       json={"data": {"parent": child["id"]}})
    assert (await client.delete(records_path("nodes", root["id"]), headers=bearer(admin_token))).status == 204
    assert (await (await client.get(records_path("nodes"))).json())["total"] == 0
    schema = await (await client.get(f"/api/v1/collections/{nodes['id']}")).json()
    assert schema["schema"]["fields"][1]["cascade_delete"] is True
