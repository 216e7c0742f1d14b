"""Access rules per collection (issue 10; decisions.md, Access rules), end to end over HTTP: the
scenario table of the issue, bulk and CSV behaviour, files, API keys, webhook deliveries, and the
in-memory evaluator checked against the database on the same records and rules."""

from __future__ import annotations

import csv
import io
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from cms.filters.mongo import render
from cms.filters.predicate import evaluate
from cms.filters.rules import RequestContext, bind_rule
from cms.models import Collection, Record
from cms.services.access import record_document
from cms.services.content.fields import CollectionFields, parse_schema
from cms.store.documents import records_mongo_name
from tests.api import test_webhooks
from tests.api.test_files import upload, uploaded
from tests.conftest import bearer, create_collection, create_record, error_of, records_path

config = test_webhooks.config  # fixtures: loopback receivers are allowed, as in the webhook tests
receiver = test_webhooks.receiver
make_webhook = test_webhooks.make_webhook
COLLECTIONS = "/api/v1/collections"
PASSWORD = "customer-password-1"
NOTES: list[dict[str, Any]] = [{"name": "title", "type": "text"}, {"name": "owner", "type": "text"},
         {"name": "status", "type": "select", "values": ["draft", "published"]},
         {"name": "claim", "type": "json"}]
OWNER = "owner = @request.auth.id"
OWNER_RULES = {"list_rule": OWNER, "view_rule": OWNER, "update_rule": OWNER, "delete_rule": OWNER,
               "create_rule": '@request.auth.id != "" && @request.data.owner = @request.auth.id'}


async def customer(client: Any, collection: str, email: str) -> tuple[str, dict[str, str]]:
    """Register and log in a user of auth collection `collection`: (user id, auth header)."""
    prefix = f"{COLLECTIONS}/{collection}/auth"
    response = await client.post(f"{prefix}/register", json={"email": email, "password": PASSWORD})
    assert response.status == 201, await response.text()
    login = await client.post(f"{prefix}/login", json={"email": email, "password": PASSWORD})
    assert login.status == 200, await login.text()
    return (await response.json())["user"]["id"], bearer((await login.json())["token"]["access_token"])


@pytest.fixture
async def two_customers(client, admin_token):
    await create_collection(client, admin_token, "customers", [], type="auth")
    ann = await customer(client, "customers", "ann@example.com")
    return ann, await customer(client, "customers", "bob@example.com")


@pytest.fixture
async def owned_notes(client, admin_token, two_customers):
    """`notes` under owner-only rules, with one note of Ann's and one of Bob's."""
    (ann, ann_auth), (bob, bob_auth) = two_customers
    await create_collection(client, admin_token, "notes", NOTES, **OWNER_RULES)
    ann_note = await create_record(client, ann_auth["Authorization"].split()[1], "notes", {"title": "A", "owner": ann})
    bob_note = await create_record(client, bob_auth["Authorization"].split()[1], "notes", {"title": "B", "owner": bob})
    return ann_note, bob_note


async def listed(client: Any, collection: str, headers: dict[str, str] | None = None,
                 **params: str) -> dict[str, Any]:
    response = await client.get(records_path(collection), headers=headers or {}, params=params)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


# --- the API ---------------------------------------------------------------------------------------


async def test_rules_are_returned_verbatim_with_defaults_by_type(client, admin_token):
    base = await create_collection(client, admin_token, "posts", NOTES)
    assert [base[f"{a}_rule"] for a in ("list", "view", "create", "update", "delete")] == [
        "", "", '@request.auth.id != ""', '@request.auth.id != ""', '@request.auth.id != ""']
    auth = await create_collection(client, admin_token, "members", [], type="auth")
    assert [auth[f"{a}_rule"] for a in ("list", "view", "create", "update", "delete")] == [
        "id = @request.auth.id", "id = @request.auth.id", None, "id = @request.auth.id", "id = @request.auth.id"]
    spaced = "  owner=@request.auth.id||status  =  published "
    response = await client.patch(f"{COLLECTIONS}/{base['id']}", headers=bearer(admin_token),
                                  json={"list_rule": spaced, "delete_rule": None})
    assert response.status == 200, await response.text()
    body = await response.json()
    assert (body["list_rule"], body["view_rule"], body["delete_rule"]) == (spaced, "", None)
    again = await (await client.get(f"{COLLECTIONS}/{base['id']}")).json()
    assert again["list_rule"] == spaced


@pytest.mark.parametrize("rule, message", [
    ("nope = @request.auth.id", "list_rule: unknown field 'nope' at position 0"),
    ("owner = @request.auth.nickname", "list_rule: unknown variable '@request.auth.nickname' at position 8"),
    ("owner = @request.data.owner", "list_rule: '@request.data.owner' is only available in create and update"),
    ("owner = 'x' || (status = ", "list_rule: unexpected end of filter"),
    ("owner = 1 || 1 = 1", "list_rule: expected a field name, found '1' at position 13"),
])
async def test_bad_rules_are_400_invalid_filter_and_change_nothing(client, admin_token, rule, message):
    created = await create_collection(client, admin_token, "notes", NOTES)
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"list_rule": rule, "name": "renamed"})
    error = await error_of(response, 400, "invalid_filter")
    assert error["detail"].startswith(message), error
    stored = await (await client.get(f"{COLLECTIONS}/{created['id']}")).json()
    assert (stored["name"], stored["list_rule"], stored["updated"]) == ("notes", "", created["updated"])
    response = await client.post(COLLECTIONS, headers=bearer(admin_token),
                                 json={"name": "other", "schema": NOTES, "list_rule": rule})
    await error_of(response, 400, "invalid_filter")
    assert (await client.get(records_path("other"))).status == 404


async def test_a_schema_change_may_not_strand_a_rule(client, admin_token):
    created = await create_collection(client, admin_token, "notes", NOTES, view_rule=OWNER)
    without_owner = [f for f in NOTES if f["name"] != "owner"]
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"schema": without_owner})
    error = await error_of(response, 400, "invalid_filter")
    assert error["detail"].startswith("view_rule: unknown field 'owner'")
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"schema": without_owner, "view_rule": ""})
    assert response.status == 200, await response.text()


async def test_only_admins_set_rules(client, admin_token, user_token):
    created = await create_collection(client, admin_token, "notes", NOTES)
    path = f"{COLLECTIONS}/{created['id']}"
    await error_of(await client.patch(path, json={"list_rule": ""}), 401, "unauthorized")
    await error_of(await client.patch(path, headers=bearer(user_token), json={"list_rule": ""}), 403, "forbidden")


async def test_collections_stored_before_rules_get_their_defaults_at_start_up(client, admin_token, services, config):
    base = await create_collection(client, admin_token, "legacy", NOTES)
    auth = await create_collection(client, admin_token, "legacy_users", [], type="auth")
    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(config.mongodb_url, retryWrites=False)
    try:
        await mongo[config.mongodb_db].collections.update_many({}, {"$unset": {"rules": ""}})
        assert await services.collections.fill_default_rules() == 2
        assert await services.collections.fill_default_rules() == 0
        stored = await mongo[config.mongodb_db].collections.find_one({"_id": auth["id"]})
        assert stored is not None and stored["rules"]["create_rule"] is None
    finally:
        await mongo.close()
    assert (await (await client.get(f"{COLLECTIONS}/{base['id']}")).json())["create_rule"] == '@request.auth.id != ""'
    assert (await (await client.get(f"{COLLECTIONS}/{auth['id']}")).json())["list_rule"] == "id = @request.auth.id"


# --- the scenarios -----------------------------------------------------------------------------------


async def test_owner_only_records(client, two_customers, owned_notes):
    (ann, ann_auth), (bob, bob_auth) = two_customers
    ann_note, bob_note = owned_notes
    mine = await listed(client, "notes", ann_auth)
    assert ([r["id"] for r in mine["items"]], mine["total"]) == ([ann_note["id"]], 1)
    assert (await listed(client, "notes", bob_auth, filter="title != 'zzz'"))["total"] == 1
    assert (await client.get(records_path("notes", ann_note["id"]), headers=ann_auth)).status == 200
    theirs = records_path("notes", bob_note["id"])
    await error_of(await client.get(theirs, headers=ann_auth), 404, "not_found")
    await error_of(await client.patch(theirs, headers=ann_auth, json={"data": {"title": "x"}}), 404, "not_found")
    await error_of(await client.delete(theirs, headers=ann_auth), 404, "not_found")
    # creating a note for someone else is refused by `@request.data.owner = @request.auth.id`
    response = await client.post(records_path("notes"), headers=ann_auth, json={"data": {"title": "x", "owner": bob}})
    await error_of(response, 403, "forbidden")
    # Bob's note is untouched; Ann changes and deletes her own
    assert (await (await client.get(theirs, headers=bob_auth)).json())["title"] == "B"
    own = records_path("notes", ann_note["id"])
    assert (await client.patch(own, headers=ann_auth, json={"data": {"title": "A2"}})).status == 200
    assert (await client.delete(own, headers=ann_auth)).status == 204
    # anonymous: the list is empty (the rule reads owner = ""), a record is 401, missing or not
    assert (await listed(client, "notes"))["total"] == 0
    await error_of(await client.get(theirs), 401, "unauthorized")
    await error_of(await client.get(records_path("notes", "no-such-id")), 401, "unauthorized")
    await error_of(await client.post(records_path("notes"), json={"data": {"title": "x"}}), 401, "unauthorized")


async def test_published_or_owner(client, admin_token, two_customers):
    (ann, ann_auth), (bob, bob_auth) = two_customers
    rule = 'status = "published" || owner = @request.auth.id'
    await create_collection(client, admin_token, "notes", NOTES, list_rule=rule, view_rule=rule)
    token = admin_token
    draft = await create_record(client, token, "notes", {"title": "d", "owner": ann, "status": "draft"})
    public = await create_record(client, token, "notes", {"title": "p", "owner": ann, "status": "published"})
    assert {r["id"] for r in (await listed(client, "notes", ann_auth))["items"]} == {draft["id"], public["id"]}
    bobs = await listed(client, "notes", bob_auth, sort="-title")
    assert ([r["id"] for r in bobs["items"]], bobs["total"]) == ([public["id"]], 1)
    anonymous = await listed(client, "notes")
    assert [r["id"] for r in anonymous["items"]] == [public["id"]]
    await error_of(await client.get(records_path("notes", draft["id"]), headers=bob_auth), 404, "not_found")
    await error_of(await client.get(records_path("notes", draft["id"])), 401, "unauthorized")
    assert (await client.get(records_path("notes", public["id"]))).status == 200


async def test_admin_only_collection(client, admin_token, user_token, two_customers):
    (_, ann_auth), _ = two_customers
    rules = {f"{a}_rule": None for a in ("list", "view", "create", "update", "delete")}
    await create_collection(client, admin_token, "secrets", NOTES, **rules)
    record = await create_record(client, admin_token, "secrets", {"title": "s"})
    for path in (records_path("secrets"), records_path("secrets", record["id"])):
        await error_of(await client.get(path), 401, "unauthorized")
        await error_of(await client.get(path, headers=bearer(user_token)), 403, "forbidden")
        await error_of(await client.get(path, headers=ann_auth), 403, "forbidden")
        assert (await client.get(path, headers=bearer(admin_token))).status == 200
    await error_of(await client.post(records_path("secrets"), headers=ann_auth, json={"data": {}}), 403, "forbidden")
    await error_of(await client.delete(records_path("secrets", record["id"]), headers=bearer(user_token)),
                   403, "forbidden")
    export = f"{records_path('secrets')}/export/csv"
    await error_of(await client.get(export, headers=ann_auth), 403, "forbidden")
    await error_of(await client.get(export), 401, "unauthorized")


async def test_public_read_authenticated_write(client, admin_token, user_token):
    await create_collection(client, admin_token, "posts", NOTES)  # the defaults
    record = await create_record(client, user_token, "posts", {"title": "hello"})
    assert (await listed(client, "posts"))["total"] == 1
    assert (await client.get(records_path("posts", record["id"]))).status == 200
    await error_of(await client.post(records_path("posts"), json={"data": {"title": "x"}}), 401, "unauthorized")
    await error_of(await client.patch(records_path("posts", record["id"]), json={"data": {"title": "x"}}),
                   401, "unauthorized")
    await error_of(await client.delete(records_path("posts", record["id"])), 401, "unauthorized")
    await error_of(await client.delete(records_path("posts", "missing")), 401, "unauthorized")


async def test_a_rule_naming_another_auth_collection_refuses_its_users(client, admin_token, two_customers):
    (_, ann_auth), _ = two_customers
    await create_collection(client, admin_token, "staff", [], type="auth")
    _, staff_auth = await customer(client, "staff", "sam@example.com")
    only_staff = '@request.auth.collection = "staff"'
    await create_collection(client, admin_token, "orders", NOTES, list_rule=only_staff, view_rule=only_staff,
                            create_rule=only_staff)
    await error_of(await client.get(records_path("orders"), headers=ann_auth), 403, "forbidden")
    await error_of(await client.post(records_path("orders"), headers=ann_auth, json={"data": {"title": "x"}}),
                   403, "forbidden")
    assert (await client.post(records_path("orders"), headers=staff_auth, json={"data": {"title": "x"}})).status == 201
    assert (await listed(client, "orders", staff_auth))["total"] == 1


async def test_verified_and_email_variables(client, admin_token, two_customers, services):
    (ann, ann_auth), _ = two_customers
    await create_collection(client, admin_token, "notes", NOTES, create_rule="@request.auth.verified = true",
                            list_rule='owner = @request.auth.email')
    await error_of(await client.post(records_path("notes"), headers=ann_auth, json={"data": {"title": "x"}}),
                   403, "forbidden")
    await create_record(client, admin_token, "notes", {"title": "n", "owner": "ann@example.com"})
    await create_record(client, admin_token, "notes", {"title": "n", "owner": "bob@example.com"})
    assert (await listed(client, "notes", ann_auth))["total"] == 1


async def test_operator_injection_through_data_and_rules(client, admin_token, two_customers):
    (ann, ann_auth), (bob, bob_auth) = two_customers
    await create_collection(client, admin_token, "notes", NOTES, view_rule="",
                            update_rule="owner = @request.data.claim")
    bob_note = await create_record(client, admin_token, "notes", {"title": "B", "owner": bob})
    for claim in ({"$ne": None}, {"$gt": ""}, [bob, ann], {"$regex": ".*"}):
        response = await client.patch(records_path("notes", bob_note["id"]), headers=ann_auth,
                                      json={"data": {"title": "pwned", "claim": claim}})
        await error_of(response, 403, "forbidden")
    assert (await (await client.get(records_path("notes", bob_note["id"]))).json())["title"] == "B"
    # a string that looks like an operator is just a string in a rule
    created = await client.post(COLLECTIONS, headers=bearer(admin_token), json={
        "name": "other", "schema": NOTES, "list_rule": "owner = '{\"$ne\": null}' || title = \"$where\""})
    assert created.status == 201, await created.text()
    await create_record(client, admin_token, "other", {"title": "t", "owner": "o"})
    assert (await listed(client, "other", ann_auth))["total"] == 0


# --- bulk and CSV ----------------------------------------------------------------------------------


async def test_bulk_changes_are_all_or_nothing_under_rules(client, admin_token, two_customers):
    (ann, ann_auth), (bob, _) = two_customers
    await create_collection(client, admin_token, "notes", NOTES, view_rule="", update_rule=OWNER, delete_rule=OWNER)
    mine = await create_record(client, admin_token, "notes", {"title": "a", "owner": ann})
    theirs = await create_record(client, admin_token, "notes", {"title": "b", "owner": bob})
    bulk = records_path("notes")
    for action, body in (("bulk-update", {"data": {"title": "x"}}), ("bulk-delete", {})):
        response = await client.post(f"{bulk}/{action}", headers=ann_auth,
                                     json={"record_ids": [mine["id"], theirs["id"], "missing"], **body})
        error = await error_of(response, 403, "forbidden")
        assert sorted(error["errors"]) == sorted([theirs["id"], "missing"])
    assert {r["title"] for r in (await listed(client, "notes"))["items"]} == {"a", "b"}
    response = await client.post(f"{bulk}/bulk-update", headers=ann_auth,
                                 json={"record_ids": [mine["id"]], "data": {"title": "x"}})
    assert response.status == 200 and (await response.json())["updated"] == 1
    response = await client.post(f"{bulk}/bulk-delete", json={"record_ids": [mine["id"]]})
    await error_of(response, 401, "unauthorized")
    response = await client.post(f"{bulk}/bulk-delete", headers=ann_auth, json={"record_ids": [mine["id"]]})
    assert response.status == 200 and (await response.json())["deleted"] == 1


async def test_csv_export_and_import_follow_the_rules(client, two_customers, owned_notes):
    (ann, ann_auth), (bob, _) = two_customers
    ann_note, _ = owned_notes
    export = await client.get(f"{records_path('notes')}/export/csv", headers=ann_auth)
    assert export.status == 200
    rows = list(csv.reader(io.StringIO((await export.read()).decode())))
    assert [row[0] for row in rows[1:]] == [ann_note["id"]]
    content = f"title,owner\nmine,{ann}\ntheirs,{bob}\nmine too,{ann}\n".encode()
    form = {"file": io.BytesIO(content)}
    response = await client.post(f"{records_path('notes')}/import/csv", headers=ann_auth, data=form)
    assert response.status == 200, await response.text()
    result = await response.json()
    assert result["imported"] == 2
    assert [(f["row"], list(f["errors"])) for f in result["failed"]] == [(2, ["_rule"])]
    assert (await listed(client, "notes", ann_auth))["total"] == 3
    response = await client.post(f"{records_path('notes')}/import/csv", data={"file": io.BytesIO(content)})
    await error_of(response, 401, "unauthorized")


# --- files, API keys, webhooks -------------------------------------------------------------------------


async def test_file_download_follows_the_view_rule(client, two_customers, owned_notes):
    (ann, ann_auth), (_, bob_auth) = two_customers
    ann_note, _ = owned_notes
    ann_token = ann_auth["Authorization"].split()[1]
    bob_token = bob_auth["Authorization"].split()[1]
    stored = await uploaded(client, ann_token, b"secret bytes", "notes", ann_note["id"])
    path = f"/api/v1/files/{stored['id']}"
    response = await client.get(path, headers=ann_auth)
    assert response.status == 200 and await response.read() == b"secret bytes"
    assert "private" in response.headers["Cache-Control"]
    await error_of(await client.get(path, headers=bob_auth), 404, "not_found")
    await error_of(await client.get(path), 404, "not_found")  # as a missing file: no existence oracle
    # Bob may neither attach to nor delete from Ann's note
    response = await upload(client, bob_token, b"x", "notes", ann_note["id"])
    await error_of(response, 422, "validation_error")
    await error_of(await client.delete(path, headers=bob_auth), 404, "not_found")
    assert (await client.delete(path, headers=ann_auth)).status == 204


async def test_an_api_key_acts_as_its_owner(client, admin_token, user_token):
    me = await (await client.get("/api/v1/auth/me", headers=bearer(user_token))).json()
    await create_collection(client, admin_token, "notes", NOTES, list_rule=OWNER, view_rule=OWNER)
    await create_record(client, admin_token, "notes", {"title": "mine", "owner": me["id"]})
    await create_record(client, admin_token, "notes", {"title": "not mine", "owner": "someone"})
    response = await client.post("/api/v1/api-keys", headers=bearer(user_token),
                                 json={"name": "reader", "scopes": ["read"]})
    assert response.status == 201, await response.text()
    key = {"X-API-Key": (await response.json())["key"]}
    page = await listed(client, "notes", key)
    assert [r["title"] for r in page["items"]] == ["mine"]


async def test_webhook_deliveries_follow_the_creators_view_rule(client, admin_token, user_token, receiver, run_jobs):
    await create_collection(client, admin_token, "posts", NOTES, view_rule='status = "published"')
    await make_webhook(client, user_token, receiver.url, events=["create", "delete"])  # role `user`
    draft = await create_record(client, admin_token, "posts", {"title": "draft", "status": "draft"})
    public = await create_record(client, admin_token, "posts", {"title": "public", "status": "published"})
    for record in (draft, public):
        assert (await client.delete(records_path("posts", record["id"]), headers=bearer(admin_token))).status == 204
    await run_jobs()
    seen = sorted((b["event"], b["record_id"]) for b in receiver.bodies())
    assert seen == sorted([("create", public["id"]), ("delete", public["id"])])


# --- the evaluator agrees with the database ------------------------------------------------------------

RULES = [
    "owner = @request.auth.id", 'status = "published" || owner = @request.auth.id', "views > 3 && views <= 7",
    "title ~ Ab", "title !~ b", "owner != @request.auth.id", "status = null", "status != null",
    "tags = a", "tags != a", "tags ~ B", "created >= '2026-01-01T00:00:05Z'", "flag = true || flag = null",
    "views = 5.0", "id = @request.auth.id", "(views < 2 || views > 8) && owner = @request.auth.id",
]


async def test_matches_agrees_with_the_database(client, admin_token, config):
    fields = [{"name": "title", "type": "text"}, {"name": "owner", "type": "text"},
              {"name": "status", "type": "select", "values": ["draft", "published"]},
              {"name": "views", "type": "number"}, {"name": "flag", "type": "bool"},
              {"name": "tags", "type": "select", "values": ["a", "b", "B"], "max_select": 3}]
    collection = await create_collection(client, admin_token, "mixed", fields)
    rng = random.Random(10)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    docs = []
    for n in range(200):
        doc: dict[str, Any] = {"_id": f"r{n}", "created": start + timedelta(seconds=n % 11, milliseconds=n),
                               "updated": start}
        for name, choices in (("title", ["Abc", "xab", "ABBA", "", None]), ("owner", ["ann", "bob", "", None]),
                              ("status", ["draft", "published", None]), ("views", [0, 1, 3, 5, 5.0, 7, 8, 9, None]),
                              ("flag", [True, False, None]), ("tags", [["a"], ["b", "B"], [], ["a", "b"], None])):
            value = rng.choice(choices)
            if value is not None:
                doc[name] = value
        if n == 7:
            doc["_id"] = "ann"
        docs.append(doc)
    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(config.mongodb_url, retryWrites=False, tz_aware=True)
    try:
        stored = mongo[config.mongodb_db][records_mongo_name(collection["id"])]
        await stored.insert_many(docs)
        resolver = CollectionFields(_collection_of(collection))
        for rule in RULES:
            for context in (RequestContext(auth_id="ann"), RequestContext()):
                cond = bind_rule(rule, resolver, context)
                query = render(cond)
                if isinstance(query, bool):
                    continue
                from_db = {d["_id"] async for d in stored.find(query, {"_id": 1})}
                in_memory = {d["_id"] for d in docs if evaluate(cond, d)}
                assert in_memory == from_db, (rule, query)
    finally:
        await mongo.close()


def _collection_of(body: dict[str, Any]) -> Collection:
    now = datetime.now(UTC)
    return Collection(id=body["id"], name=body["name"], type="base", fields=parse_schema(body["schema"]),
                      created=now, updated=now)


def test_record_helper_shapes() -> None:
    record = Record(id="r", created=datetime(2026, 1, 1, tzinfo=UTC), updated=datetime(2026, 1, 1, tzinfo=UTC),
                    data={"a": 1})
    assert record_document(record) == {"_id": "r", "created": record.created, "updated": record.updated, "a": 1}
