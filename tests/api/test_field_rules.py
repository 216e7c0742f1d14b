"""Field rules (decisions.md, Field rules), end to end over HTTP: per-field `view_rule` on every read
path (list, view, expand and back-relations, CSV export, batch and write answers, `fields=`),
filter, sort and search joined to the field's rule, null-rule fields unknown to non-admins, no
oracle, per-field `write_rule` on create, update, bulk and batch, and an auth collection's
`email_view_rule`."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from cms.services.access import check, compile_filter, record_document
from tests.api import test_webhooks
from tests.api.test_access_rules import customer, listed
from tests.api.test_files import uploaded
from tests.conftest import bearer, create_collection, create_record, error_of, records_path
from tests.realtime.sse import data

config = test_webhooks.config  # fixtures: loopback receivers are allowed, as in the webhook tests
receiver = test_webhooks.receiver
OWNER_ONLY = "owner = @request.auth.id"
NOTES: list[dict[str, Any]] = [
    {"name": "title", "type": "text"},
    {"name": "owner", "type": "text"},
    {"name": "secret", "type": "text", "view_rule": OWNER_ONLY},
    {"name": "score", "type": "number", "view_rule": OWNER_ONLY},
    {"name": "internal", "type": "text", "view_rule": None},
    {"name": "featured", "type": "bool", "write_rule": None},
    {"name": "note", "type": "text", "write_rule": "@request.data.owner = @request.auth.id"},
]
RULES = {"list_rule": "", "view_rule": "", "create_rule": '@request.auth.id != ""', "update_rule": "",
         "delete_rule": ""}


@pytest.fixture
async def people(client, admin_token):
    """Ann and Bob, users of the auth collection `customers`: ((id, headers), (id, headers))."""
    await create_collection(client, admin_token, "customers", [], type="auth", list_rule="", view_rule="")
    ann = await customer(client, "customers", "ann@example.com")
    return ann, await customer(client, "customers", "bob@example.com")


@pytest.fixture
async def notes(client, admin_token, people):
    """`notes` with field rules, one note of Ann's and one of Bob's (made by the admin)."""
    (ann, _), (bob, _) = people
    await create_collection(client, admin_token, "notes", NOTES, **RULES)
    ann_note = await create_record(client, admin_token, "notes", {
        "title": "ann's", "owner": ann, "secret": "alpha-secret", "score": 3, "internal": "i-ann"})
    bob_note = await create_record(client, admin_token, "notes", {
        "title": "bob's", "owner": bob, "secret": "bravo-secret", "score": 9, "internal": "i-bob"})
    return ann_note, bob_note


async def collection_id(client: Any, admin_token: str, name: str) -> str:
    listing = await (await client.get("/api/v1/collections", headers=bearer(admin_token))).json()
    items = listing["items"] if isinstance(listing, dict) else listing
    return next(str(c["id"]) for c in items if c["name"] == name)


def by_title(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["title"]: item for item in body["items"]}


async def test_field_rules_are_returned_and_validated(client, admin_token):
    created = await create_collection(client, admin_token, "notes", NOTES, **RULES)
    fields = {f["name"]: f for f in created["schema"]["fields"]}
    assert fields["secret"]["view_rule"] == OWNER_ONLY and fields["secret"]["write_rule"] == ""
    assert fields["internal"]["view_rule"] is None and fields["featured"]["write_rule"] is None
    bad = [{"name": "x", "type": "text", "view_rule": "nope = 1"}]
    body = await error_of(await client.post("/api/v1/collections", headers=bearer(admin_token),
                                            json={"name": "bad", "schema": bad}), 400, "invalid_filter")
    assert "field 'x' view_rule" in body["detail"] and "unknown field 'nope'" in body["detail"]
    bad = [{"name": "x", "type": "text", "view_rule": "@request.data.x = 1"}]
    body = await error_of(await client.post("/api/v1/collections", headers=bearer(admin_token),
                                            json={"name": "bad", "schema": bad}), 400, "invalid_filter")
    assert "field 'x' view_rule" in body["detail"]


async def test_list_and_view_leave_out_hidden_values(client, admin_token, people, notes):
    (_, ann_auth), _ = people
    ann_note, bob_note = notes
    seen = by_title(await listed(client, "notes", ann_auth))
    assert seen["ann's"]["secret"] == "alpha-secret" and seen["ann's"]["score"] == 3
    assert "secret" not in seen["bob's"] and "score" not in seen["bob's"]
    assert all("internal" not in item for item in seen.values())
    anonymous = by_title(await listed(client, "notes"))
    assert all("secret" not in item and "internal" not in item for item in anonymous.values())
    admin = by_title(await listed(client, "notes", bearer(admin_token)))
    assert admin["bob's"]["secret"] == "bravo-secret" and admin["bob's"]["internal"] == "i-bob"
    one = await client.get(records_path("notes", bob_note["id"]), headers=ann_auth)
    assert one.status == 200 and "secret" not in await one.json()
    own = await client.get(records_path("notes", ann_note["id"]), headers=ann_auth)
    assert (await own.json())["secret"] == "alpha-secret"
    # `fields=` cannot bring a hidden value back
    narrowed = await client.get(records_path("notes", bob_note["id"]), headers=ann_auth,
                                params={"fields": "title,secret,internal"})
    assert await narrowed.json() == {"title": "bob's"}


async def test_a_filter_on_a_hidden_value_finds_nothing_and_says_nothing(client, people, notes):
    (_, ann_auth), _ = people
    found = await listed(client, "notes", ann_auth, filter="secret = 'bravo-secret'")
    absent = await listed(client, "notes", ann_auth, filter="secret = 'no-such-value'")
    assert found["items"] == [] and found["total"] == absent["total"] == 0
    assert (await listed(client, "notes", ann_auth, filter="score > 5"))["total"] == 0
    assert (await listed(client, "notes", ann_auth, filter="score < 5"))["total"] == 1
    # `!=` holds only where the field is visible too
    assert [i["title"] for i in (await listed(client, "notes", ann_auth, filter="secret != 'x'"))["items"]] == ["ann's"]
    assert (await listed(client, "notes", ann_auth, search="bravo"))["total"] == 0
    assert (await listed(client, "notes", ann_auth, search="alpha"))["total"] == 1


async def test_a_null_rule_field_is_unknown_to_everyone_but_admins(client, admin_token, people, notes):
    (_, ann_auth), _ = people
    for params in ({"filter": "internal = 'i-bob'"}, {"sort": "internal"}):
        hidden = await error_of(await client.get(records_path("notes"), headers=ann_auth, params=params),
                                400, "invalid_filter")
        missing_params = {k: v.replace("internal", "nosuchfield") for k, v in params.items()}
        missing = await error_of(await client.get(records_path("notes"), headers=ann_auth, params=missing_params),
                                 400, "invalid_filter")
        assert hidden["detail"].replace("internal", "nosuchfield") == missing["detail"]
    admin = await listed(client, "notes", bearer(admin_token), filter="internal = 'i-bob'")
    assert admin["total"] == 1


async def test_sort_treats_hidden_values_as_null(client, admin_token, people, notes):
    (ann, ann_auth), _ = people
    await create_record(client, admin_token, "notes", {"title": "ann's 2", "owner": ann, "score": 1})
    await create_record(client, admin_token, "notes", {"title": "no score", "owner": ann})
    ascending = [i["title"] for i in (await listed(client, "notes", ann_auth, sort="score,title"))["items"]]
    # null first (Bob's hidden 9 sorts as null, with the record that has none), then 1, 3
    assert ascending == ["bob's", "no score", "ann's 2", "ann's"]
    descending = [i["title"] for i in (await listed(client, "notes", ann_auth, sort="-score,title"))["items"]]
    assert descending == ["ann's", "ann's 2", "bob's", "no score"]


async def test_csv_export_leaves_hidden_values_and_unknown_columns_out(client, people, notes):
    (_, ann_auth), _ = people
    response = await client.get(records_path("notes") + "/export/csv", headers=ann_auth, params={"sort": "title"})
    assert response.status == 200, await response.text()
    rows = list(csv.DictReader(io.StringIO(await response.text())))
    assert "internal" not in rows[0]
    assert [(r["title"], r["secret"]) for r in rows] == [("ann's", "alpha-secret"), ("bob's", "")]


async def test_expand_and_back_relations_respect_field_rules(client, admin_token, people, notes):
    (_, ann_auth), _ = people
    ann_note, bob_note = notes
    notes_id = await collection_id(client, admin_token, "notes")
    await create_collection(client, admin_token, "pins", [
        {"name": "label", "type": "text"},
        {"name": "note", "type": "relation", "collection_id": notes_id},
        {"name": "owner", "type": "text"},
        {"name": "target", "type": "relation", "collection_id": notes_id, "view_rule": OWNER_ONLY},
    ], **RULES)
    await create_record(client, admin_token, "pins", {"label": "p1", "note": bob_note["id"], "owner": "bob",
                                                      "target": bob_note["id"]})
    pins = await listed(client, "pins", ann_auth, expand="note,target")
    pin = pins["items"][0]
    assert "target" not in pin and set(pin["expand"]) == {"note"}
    assert pin["expand"]["note"]["title"] == "bob's" and "secret" not in pin["expand"]["note"]
    # the back-relation through the hidden `target` shows nothing; through `note` it shows the pin
    note = await client.get(records_path("notes", bob_note["id"]), headers=ann_auth,
                            params={"expand": "pins_via_target,pins_via_note"})
    body = await note.json()
    assert list(body.get("expand", {})) == ["pins_via_note"]
    assert "target" not in body["expand"]["pins_via_note"][0]


async def test_write_answers_and_batches_leave_hidden_values_out(client, people, notes):
    (ann, ann_auth), (bob, _) = people
    created = await client.post(records_path("notes"), headers=ann_auth,
                                json={"data": {"title": "gift", "owner": bob, "secret": "for bob", "internal": "x"}})
    assert created.status == 201, await created.text()
    body = await created.json()
    assert body["title"] == "gift" and "secret" not in body and "internal" not in body
    batch = await client.post("/api/v1/batch", headers=ann_auth, json={"requests": [
        {"method": "POST", "url": records_path("notes"), "body": {"data": {"title": t, "owner": o, "secret": s}}}
        for t, o, s in (("b1", bob, "s"), ("b2", ann, "t"))]})
    assert batch.status == 200, await batch.text()
    answers = [a["body"] for a in await batch.json()]
    assert "secret" not in answers[0] and answers[1]["secret"] == "t"


async def test_write_rules_refuse_the_write_and_change_nothing(client, admin_token, people, notes):
    (ann, ann_auth), (bob, _) = people
    ann_note, bob_note = notes
    refused = await error_of(await client.post(records_path("notes"), headers=ann_auth, json={
        "data": {"title": "x", "owner": ann, "featured": True}}), 403, "forbidden")
    assert "'featured'" in refused["detail"]
    refused = await error_of(await client.patch(records_path("notes", ann_note["id"]), headers=ann_auth, json={
        "data": {"title": "changed", "note": "n", "owner": bob}}), 403, "forbidden")
    assert "'note'" in refused["detail"]
    allowed = await client.patch(records_path("notes", ann_note["id"]), headers=ann_auth,
                                 json={"data": {"note": "mine", "owner": ann}})
    assert allowed.status == 200, await allowed.text()
    bulk = await client.post(records_path("notes") + "/bulk-update", headers=ann_auth,
                             json={"record_ids": [ann_note["id"], bob_note["id"]], "data": {"featured": True}})
    assert bulk.status == 403
    batch = await client.post("/api/v1/batch", headers=ann_auth, json={"requests": [
        {"method": "POST", "url": records_path("notes"), "body": {"data": {"title": "ok", "owner": ann}}},
        {"method": "PATCH", "url": records_path("notes", bob_note["id"]), "body": {"data": {"featured": True}}},
    ]})
    assert batch.status == 400
    stored = by_title(await listed(client, "notes", bearer(admin_token)))
    assert set(stored) == {"ann's", "bob's"} and stored["ann's"]["note"] == "mine"
    assert not any(item.get("featured") for item in stored.values())
    admin = await client.patch(records_path("notes", bob_note["id"]), headers=bearer(admin_token),
                               json={"data": {"featured": True}})
    assert admin.status == 200


async def test_email_is_shown_to_its_user_and_under_email_view_rule(client, admin_token, people):
    (ann, ann_auth), (bob, bob_auth) = people
    users = {u["id"]: u for u in (await listed(client, "customers", ann_auth))["items"]}
    assert users[ann]["email"] == "ann@example.com" and "email" not in users[bob]
    assert (await listed(client, "customers"))["items"][0].get("email") is None
    collection = await (await client.get(f"/api/v1/collections/{await collection_id(client, admin_token, 'customers')}",
                                         headers=bearer(admin_token))).json()
    assert collection["email_view_rule"] == "id = @request.auth.id"
    changed = await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                                 json={"email_view_rule": ""})
    assert changed.status == 200, await changed.text()
    users = {u["id"]: u for u in (await listed(client, "customers", bob_auth))["items"]}
    assert users[ann]["email"] == "ann@example.com"


async def test_webhook_deliveries_leave_out_what_their_creator_may_not_see(client, admin_token, user_token,
                                                                           receiver, run_jobs):
    await create_collection(client, admin_token, "ledger", [
        {"name": "title", "type": "text"}, {"name": "amount", "type": "number", "view_rule": None}])
    await test_webhooks.make_webhook(client, user_token, receiver.url, events=["create"],
                                     collection_name="ledger")  # role `user`
    await test_webhooks.make_webhook(client, admin_token, receiver.url, events=["create"],
                                     collection_name="ledger")  # role `admin`
    await create_record(client, admin_token, "ledger", {"title": "t", "amount": 5})
    await run_jobs()
    bodies = sorted(("amount" in b["data"]) for b in receiver.bodies())
    assert bodies == [False, True]


# --- list, view and realtime agree for the same caller ------------------------------------------------

AGREEMENT_RULES = [
    ("", "owner = @request.auth.id", "title ~ a"),
    ("owner = @request.auth.id || score > 4", "score < 5", "secret != 'x'"),
    ("title != ''", "@request.auth.verified = true", "score >= 3"),
    ("score = null || owner != @request.auth.id", "title ~ b", "title ~ s || secret ~ alpha"),
    ('@request.auth.id != ""', "owner != @request.auth.id", "score > 0 && score < 10"),
]


@pytest.mark.parametrize("rule, field_rule, filter_text", AGREEMENT_RULES)
async def test_list_view_and_the_realtime_decision_agree(client, admin_token, services, people, rule: str,
                                                         field_rule: str, filter_text: str) -> None:
    (ann, ann_auth), (bob, bob_auth) = people
    fields = [{"name": "title", "type": "text"}, {"name": "owner", "type": "text"},
              {"name": "secret", "type": "text", "view_rule": field_rule},
              {"name": "score", "type": "number", "view_rule": field_rule}]
    await create_collection(client, admin_token, "agree", fields, list_rule=rule, view_rule=rule)
    for n, (owner, score) in enumerate([(ann, 3), (bob, 9), ("", None), (ann, 5), (bob, 1), ("zed", 4)]):
        await create_record(client, admin_token, "agree", {"title": f"t{n}ab"[: 2 + n % 3], "owner": owner,
                                                           "secret": f"alpha{n}", "score": score})
    collection = await services.catalog.by_name("agree")
    stored = {r.id: r for r in await services.records.repository.find(collection.id, {}, [("_id", 1)], 0, 100)}
    callers: list[dict[str, str]] = [{}, ann_auth, bob_auth]
    for headers in callers:
        principal = await services.authenticator.authenticate(headers["Authorization"].split()[1]) if headers else None
        listing = await client.get(records_path("agree"), headers=headers, params={"filter": filter_text})
        listed_ids = {r["id"]: r for r in (await listing.json())["items"]} if listing.status == 200 else {}
        listed_ok = listing.status == 200
        view = check(principal, collection, "list")
        condition = compile_filter(collection, filter_text, principal)
        decided = {record_id for record_id, record in stored.items()
                   if view.allows_document(record_document(record))
                   and condition.matches(record_document(record))}
        assert set(listed_ids) == (decided if listed_ok else set()), (headers, rule, filter_text)
        for record_id, record in stored.items():
            one = await client.get(records_path("agree", record_id), headers=headers)
            assert (one.status == 200) == (listed_ok and view.allows_document(record_document(record)))
            if one.status == 200:
                shown = set(await one.json())
                hidden = view.fields.hidden(record_document(record))
                assert not shown & hidden and "secret" in shown | hidden
                if record_id in listed_ids:
                    assert set(listed_ids[record_id]) == shown


async def test_a_filter_on_email_follows_email_view_rule(client, admin_token, people):
    (ann, ann_auth), (bob, bob_auth) = people
    mine = await listed(client, "customers", ann_auth, filter="email = 'ann@example.com'")
    theirs = await listed(client, "customers", ann_auth, filter="email = 'bob@example.com'")
    nobody = await listed(client, "customers", ann_auth, filter="email = 'nobody@example.com'")
    assert [u["id"] for u in mine["items"]] == [ann] and theirs["total"] == nobody["total"] == 0
    assert (await listed(client, "customers", bob_auth, filter="verified = false"))["total"] == 2


async def test_realtime_events_leave_out_hidden_values(client, admin_token, people, notes, streams):
    (ann, ann_auth), (bob, bob_auth) = people
    ann_stream, bob_stream, expanded = streams(), streams(), streams()
    for stream, headers, topics in ((ann_stream, ann_auth, ["notes/*"]), (bob_stream, bob_auth, ["notes/*"]),
                                    (expanded, ann_auth, ["notes/*?fields=title,secret,internal"])):
        await stream.open()
        assert (await stream.subscribe(topics, headers=headers)).status_code == 204
    await create_record(client, admin_token, "notes", {"title": "ann's 2", "owner": ann, "secret": "s2",
                                                      "internal": "i"})
    seen_by_ann = data(await ann_stream.next())["record"]
    seen_by_bob = data(await bob_stream.next())["record"]
    assert seen_by_ann["secret"] == "s2" and "internal" not in seen_by_ann
    assert "secret" not in seen_by_bob and "score" not in seen_by_bob and "internal" not in seen_by_bob
    assert data(await expanded.next())["record"] == {"title": "ann's 2", "secret": "s2"}
    # a filter on a hidden value finds nothing, and a null-rule field is unknown in a topic
    topics = ["notes/*", "notes/*?filter=secret='s3'"]  # the set replaces the last one
    assert (await bob_stream.subscribe(topics, headers=bob_auth)).status_code == 204
    await create_record(client, admin_token, "notes", {"title": "x", "owner": ann, "secret": "s3"})
    assert "secret" not in data(await bob_stream.next())["record"]  # the plain topic only
    await bob_stream.nothing()
    refused = await bob_stream.subscribe(["notes/*?filter=internal='i'"], headers=bob_auth)
    missing = await bob_stream.subscribe(["notes/*?filter=nosuch='i'"], headers=bob_auth)
    assert refused.status_code == missing.status_code == 422


async def test_a_file_in_a_hidden_file_field_is_not_downloadable(client, admin_token, people):
    (ann, ann_auth), (bob, bob_auth) = people
    await create_collection(client, admin_token, "deeds", [
        {"name": "owner", "type": "text"}, {"name": "scan", "type": "file", "view_rule": OWNER_ONLY}], **RULES)
    deed = await create_record(client, admin_token, "deeds", {"owner": ann})
    stored = await uploaded(client, admin_token, b"%PDF-deed", "deeds", deed["id"], field="scan")
    changed = await client.patch(records_path("deeds", deed["id"]), headers=bearer(admin_token),
                                 json={"data": {"scan": stored["id"]}})
    assert changed.status == 200, await changed.text()
    mine = await client.get(f"/api/v1/files/{stored['id']}", headers=ann_auth)
    assert mine.status == 200 and await mine.read() == b"%PDF-deed"
    theirs = await client.get(f"/api/v1/files/{stored['id']}", headers=bob_auth)
    missing = await client.get("/api/v1/files/no-such-file", headers=bob_auth)
    assert theirs.status == missing.status == 404
    assert (await theirs.json())["detail"] == (await missing.json())["detail"]
