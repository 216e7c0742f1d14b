"""Contract audit of the round's features (decisions.md: Field rules; Drafts, versions and scheduled
publishing; Files in records, thumbnails and file tokens; Schema as code): the deviations a hostile review found, each
pinned by the request that showed it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.api import test_field_rules, test_media_tokens
from tests.api.test_access_rules import listed
from tests.api.test_api_keys import api_key, make_key
from tests.api.test_csv import form, import_path
from tests.api.test_field_rules import by_title
from tests.api.test_files import FILES, upload
from tests.api.test_locales_files import banners, german_and_english, read
from tests.api.test_media_fields import PHOTOS, created_with_files, photo
from tests.api.test_record_writes import stored
from tests.api.test_schema_as_code import INVOICES, TOTALS, applied, collection_of, diff, export
from tests.api.test_views import make_view
from tests.conftest import bearer, create_collection, create_record, error_of, records_path

people = test_field_rules.people  # fixtures: Ann and Bob, and `notes` with field rules
notes = test_field_rules.notes
deeds = test_media_tokens.deeds  # fixture: Ann's deed with a scan in a protected file field


async def test_a_csv_import_naming_a_field_its_write_rule_refuses_is_403_and_stores_nothing(
        client, admin_token, people, notes):
    """Field rules: a write naming a field whose `write_rule` does not hold is 403 naming the field,
    and a CSV import is all or nothing (not a per-row failure beside stored rows)."""
    (ann, ann_auth), _ = people
    content = f"title,owner,featured\nfine,{ann},\nrefused,{ann},true\n".encode()
    refused = await error_of(await client.post(import_path("notes"), headers=ann_auth, data=form(content)),
                             403, "forbidden")
    assert "'featured'" in refused["detail"]
    assert set(by_title(await listed(client, "notes", bearer(admin_token)))) == {"ann's", "bob's"}
    allowed = await client.post(import_path("notes"), headers=ann_auth,
                                data=form(f"title,owner\nfine,{ann}\n".encode()))
    assert allowed.status == 200 and (await allowed.json())["imported"] == 1


async def test_a_record_published_again_after_an_unpublish_stores_its_next_version(client, admin_token):
    """Drafts and versions: an unpublished record keeps its versions; publishing it again is a
    publish like any (200) and stores the next version, not a 400 "retry" on every try."""
    fields: list[dict[str, Any]] = [{"name": "title", "type": "text"}]
    await create_collection(client, admin_token, "pages", fields, drafts=True, versions=5)
    auth = bearer(admin_token)
    record_id = (await create_record(client, admin_token, "pages", {"title": "one"}))["id"]
    path = records_path("pages", record_id)
    assert (await client.post(path + "/publish", headers=auth)).status == 200
    assert (await client.post(path + "/unpublish", headers=auth)).status == 200
    again = await client.post(path + "/publish", headers=auth)
    assert again.status == 200, await again.text()
    assert (await again.json())["status"] == "published"
    versions = await (await client.get(path + "/versions", headers=auth)).json()
    assert [v["version"] for v in versions["items"]] == [2, 1]


async def test_a_read_only_api_key_gets_a_file_token_and_reads_a_protected_file(client, deeds, admin_token):
    """Files: `POST /files/token` takes any credentials; it only reads, so an API key with the `read`
    scope alone gets one (as a realtime subscription needs `read` only), and a `write`-only key does not."""
    _, _, deed = deeds
    reader = await make_key(client, admin_token, ["read"])
    token = await test_media_tokens.file_token(client, api_key(reader))
    response = await client.get(f"{FILES}/{deed['scan']}", params={"token": token})
    assert response.status == 200 and await response.read() == b"%PDF-1.4 deed"
    writer = await make_key(client, admin_token, ["write"])
    await error_of(await client.post(f"{FILES}/token", headers=api_key(writer)), 403, "forbidden")


async def test_the_versions_of_a_record_readers_do_not_see_are_its_editors_only(client, admin_token, user_token):
    """Drafts: a record never published, or unpublished, does not exist for readers (404 on view), so
    its versions are 404 to them too, like a missing record's; its editors (the update rule, as
    `?draft=true`) still read them."""
    fields: list[dict[str, Any]] = [{"name": "title", "type": "text"}]
    await create_collection(client, admin_token, "pages", fields, drafts=True, versions=5,
                            update_rule=None)
    auth = bearer(admin_token)
    draft = (await create_record(client, admin_token, "pages", {"title": "never published"}))["id"]
    unpublished = (await create_record(client, admin_token, "pages", {"title": "once public"}))["id"]
    assert (await client.post(records_path("pages", unpublished) + "/publish", headers=auth)).status == 200
    assert (await client.post(records_path("pages", unpublished) + "/unpublish", headers=auth)).status == 200
    for record_id in (draft, unpublished, "no-such-record"):
        path = records_path("pages", record_id)
        await error_of(await client.get(path), 404, "not_found")
        for headers in ({}, bearer(user_token)):
            await error_of(await client.get(path + "/versions", headers=headers), 404, "not_found")
            await error_of(await client.get(path + "/versions/1", headers=headers), 404, "not_found")
    kept = await (await client.get(records_path("pages", unpublished) + "/versions", headers=auth)).json()
    assert [v["data"]["title"] for v in kept["items"]] == ["once public"]
    assert (await client.post(records_path("pages", unpublished) + "/publish", headers=auth)).status == 200
    public = await (await client.get(records_path("pages", unpublished) + "/versions")).json()
    assert public["total"] == 2


async def test_changing_or_deleting_a_view_loses_no_data(client, admin_token):
    """Schema as code: `data_loss` marks changes that lose stored values; a view stores none (its
    records are computed groups), so dropping one of its aggregates, or the view, is no data loss and
    applies without `allow_data_loss`."""
    await create_collection(client, admin_token, "invoices", INVOICES)
    assert (await client.post("/api/v1/collections", headers=bearer(admin_token), json=TOTALS)).status == 201
    _, snapshot = await export(client, admin_token)
    collection_of(snapshot, "invoice_totals")["view"]["aggregates"] = "count()"
    changes = (await diff(client, admin_token, snapshot))["changes"]
    assert ("delete", "sum_amount", False) in [(c["op"], c["field"], c["data_loss"]) for c in changes]
    snapshot = await applied(client, admin_token, snapshot)
    snapshot["collections"] = [c for c in snapshot["collections"] if c["name"] != "invoice_totals"]
    changes = (await diff(client, admin_token, snapshot))["changes"]
    assert [(c["op"], c["collection"], c["data_loss"]) for c in changes] == [("delete", "invoice_totals", False)]
    await applied(client, admin_token, snapshot)


async def test_an_empty_list_clears_a_single_file_field_as_null_does(client, admin_token, config):
    """Files in records: a file field's `null` (or `[]`) clears the field and deletes its files, also
    for a single-value field (max_select 1), whose value is otherwise one id; a required one is 422."""
    await create_collection(client, admin_token, "photos", PHOTOS)
    record = await created_with_files(client, admin_token, "photos", {"title": "t"},
                                      ("cover", "a.jpg", photo(), "image/jpeg"))
    cover = record["cover"]
    cleared = await client.patch(records_path("photos", record["id"]), headers=bearer(admin_token),
                                 json={"data": {"cover": []}})
    assert cleared.status == 200, await cleared.text()
    assert (await cleared.json()).get("cover") is None
    assert (await client.get(f"{FILES}/{cover}")).status == 404
    await create_collection(client, admin_token, "deeds", [{"name": "scan", "type": "file",
                                                            "validation": {"required": True}}])
    refused = await error_of(await client.post(records_path("deeds"), headers=bearer(admin_token),
                                               json={"data": {"scan": []}}), 422, "validation_error")
    assert refused["errors"] == {"scan": ["Missing data for required field."]}


async def test_an_upload_to_a_file_field_its_write_rule_refuses_is_403_and_stores_nothing(
        client, admin_token, user_token, config):
    """Field rules: an upload naming a file field (`POST /files` with `field`) is a write of that field:
    403 `forbidden` naming it when its `write_rule` does not hold for the caller, and nothing stored."""
    fields = [{"name": "title", "type": "text"}, {"name": "open", "type": "file"},
              {"name": "locked", "type": "file", "write_rule": None},
              {"name": "theirs", "type": "file", "write_rule": "@request.auth.id = 'someone else'"}]
    await create_collection(client, admin_token, "docs", fields, list_rule="", view_rule="", update_rule="")
    record_id = (await create_record(client, admin_token, "docs", {"title": "t"}))["id"]
    for field in ("locked", "theirs"):
        refused = await error_of(await upload(client, user_token, b"%PDF-1.4 x", "docs", record_id, field=field),
                                 403, "forbidden")
        assert f"'{field}'" in refused["detail"]
        assert "fs.files" not in await stored(config)
    assert (await upload(client, user_token, b"%PDF-1.4 x", "docs", record_id, field="open")).status == 201
    assert (await upload(client, admin_token, b"%PDF-1.4 x", "docs", record_id, field="locked")).status == 201


async def test_publishing_now_cancels_the_pending_schedule(client, admin_token, services, clock):
    """Scheduled publishing: a publish now (no `at`) of a record with a pending schedule ends that
    schedule (`scheduled_at` null), so it never publishes a later edit of the working copy."""
    fields: list[dict[str, Any]] = [{"name": "title", "type": "text"}]
    await create_collection(client, admin_token, "pages", fields, drafts=True)
    auth = bearer(admin_token)
    path = records_path("pages", (await create_record(client, admin_token, "pages", {"title": "one"}))["id"])
    at = (clock() + timedelta(minutes=5)).isoformat()
    assert (await (await client.post(path + "/publish", headers=auth, json={"at": at})).json())["scheduled_at"]
    now = await client.post(path + "/publish", headers=auth)
    assert now.status == 200 and (await now.json())["scheduled_at"] is None, await now.text()
    assert (await client.patch(path, headers=auth, json={"data": {"title": "two"}})).status == 200
    working = await (await client.get(path, headers=auth, params={"draft": "true"})).json()
    assert working["scheduled_at"] is None and working["title"] == "two"
    clock.advance(minutes=6)
    assert await services.drafts.scheduler.run_due() == 0
    assert (await (await client.get(path)).json())["title"] == "one"


async def test_publishing_a_scheduled_release_now_clears_its_schedule(client, admin_token, services, clock):
    """Releases: publishing a scheduled release now publishes it once and clears its `scheduled_at`."""
    fields: list[dict[str, Any]] = [{"name": "title", "type": "text"}]
    await create_collection(client, admin_token, "pages", fields, drafts=True)
    auth = bearer(admin_token)
    record_id = (await create_record(client, admin_token, "pages", {"title": "one"}))["id"]
    release = await (await client.post("/api/v1/releases", headers=auth, json={
        "name": "r", "items": [{"collection": "pages", "record_id": record_id}]})).json()
    path = f"/api/v1/releases/{release['id']}/publish"
    at = (clock() + timedelta(minutes=5)).isoformat()
    assert (await (await client.post(path, headers=auth, json={"at": at})).json())["status"] == "scheduled"
    now = await (await client.post(path, headers=auth)).json()
    assert now["status"] == "published" and now["scheduled_at"] is None, now
    clock.advance(minutes=6)
    assert await services.drafts.scheduler.run_due() == 0


async def test_a_release_published_now_ends_its_records_own_schedules(client, admin_token, services, clock):
    """Releases: a release published now ends the pending schedules of its records, as a publish now of
    one record does (`scheduled_at` null), so an edit made after the release is not published later by
    the old schedule."""
    await create_collection(client, admin_token, "pages", [{"name": "title", "type": "text"}], drafts=True)
    auth = bearer(admin_token)
    record_id = (await create_record(client, admin_token, "pages", {"title": "one"}))["id"]
    at = (clock() + timedelta(minutes=5)).isoformat()
    publish = records_path("pages", record_id) + "/publish"
    assert (await (await client.post(publish, headers=auth, json={"at": at})).json())["scheduled_at"] is not None
    release = await (await client.post("/api/v1/releases", headers=auth, json={
        "name": "r", "items": [{"collection": "pages", "record_id": record_id}]})).json()
    published = await client.post(f"/api/v1/releases/{release['id']}/publish", headers=auth)
    assert published.status == 200, await published.text()
    working = await (await client.get(records_path("pages", record_id), headers=auth, params={"draft": "true"})).json()
    assert working["status"] == "published" and working["scheduled_at"] is None, working
    edited = await client.patch(records_path("pages", record_id), headers=auth, json={"data": {"title": "two"}})
    assert edited.status == 200
    clock.advance(minutes=6)
    await services.drafts.scheduler.run_due()  # the old schedule comes due: no longer shown, dropped unrun
    shown = await (await client.get(records_path("pages", record_id))).json()
    assert shown["title"] == "one", shown  # the edit waits for its own publish


async def test_an_unknown_or_over_long_locale_is_400_on_reads_and_aggregates(client, admin_token):
    """Localized fields: an unknown locale is 400 `bad_request`, however long, on record reads and on
    `.../aggregate` too (one locale parser); a configured one is taken."""
    await create_collection(client, admin_token, "pages", [{"name": "title", "type": "text"}])
    auth = bearer(admin_token)
    for path in (records_path("pages"), "/api/v1/collections/pages/aggregate"):
        for locale in ("xx", "x" * 101):
            refused = await error_of(await client.get(path, headers=auth, params={"locale": locale}),
                                     400, "bad_request")
            assert "Unknown locale" in refused["detail"]
        assert (await client.get(path, headers=auth, params={"locale": "en"})).status == 200


async def test_a_405_from_a_view_lists_the_methods_its_path_allows(client, admin_token):
    """Aggregation and view collections: writes to a view's records are 405 with `Allow` listing the
    methods the path supports (RFC 9110 15.5.6): its reads, and none for the write-only paths."""
    await create_collection(client, admin_token, "posts", [{"name": "views", "type": "number"}])
    await create_record(client, admin_token, "posts", {"views": 1})
    await make_view(client, admin_token, view={"source": "posts", "aggregates": "count()"})
    auth = bearer(admin_token)
    record_id = (await listed(client, "stats", auth))["items"][0]["id"]
    listing = await client.post(records_path("stats"), headers=auth, json={"data": {"count": 1}})
    one = await client.patch(records_path("stats", record_id), headers=auth, json={"data": {"count": 1}})
    assert (await client.head(records_path("stats"), headers=auth)).status == 405  # no path serves HEAD
    for response in (listing, one):
        await error_of(response, 405, "method_not_allowed")
        assert response.headers["Allow"] == "GET"
    for path, body in [("/bulk-update", {"record_ids": [record_id], "data": {"count": 1}}),
                       ("/bulk-delete", {"record_ids": [record_id]})]:
        response = await client.post(records_path("stats") + path, headers=auth, json=body)
        await error_of(response, 405, "method_not_allowed")
        assert response.headers["Allow"] == ""
    response = await client.post(import_path("stats"), headers=auth, data=form(b"count\n1\n"))
    await error_of(response, 405, "method_not_allowed")
    assert response.headers["Allow"] == ""


async def test_a_view_shows_its_rows_by_its_own_rules_and_only_admins_define_views(
        client, admin_token, user_token, people):
    """Aggregation and view collections (docs/concepts/aggregation.md): a view may aggregate a field
    whose `view_rule` hides it from a caller, who cannot aggregate it through `.../aggregate`; the
    view's own rules decide who sees its rows, and only admins define views."""
    (ann, ann_auth), (bob, _) = people
    fields = [{"name": "team", "type": "text"}, {"name": "owner", "type": "text"},
              {"name": "salary", "type": "number", "view_rule": "owner = @request.auth.id"}]
    await create_collection(client, admin_token, "staff", fields, list_rule="", view_rule="")
    for owner, salary in ((ann, 10), (bob, 20)):
        await create_record(client, admin_token, "staff", {"team": "a", "owner": owner, "salary": salary})
    await error_of(await client.get("/api/v1/collections/staff/aggregate", headers=ann_auth,
                                    params={"aggregates": "sum(salary)"}), 400, "invalid_filter")
    view = {"source": "staff", "group_by": "team", "aggregates": "sum(salary)"}
    for headers in (ann_auth, bearer(user_token)):
        await error_of(await client.post("/api/v1/collections", headers=headers,
                                         json={"name": "team_pay", "type": "view", "view": view}), 403, "forbidden")
    rule = "@request.auth.id != ''"
    await make_view(client, admin_token, "team_pay", view, list_rule=rule, view_rule=rule)
    rows = (await listed(client, "team_pay", ann_auth))["items"]
    assert [(row["team"], row["sum_salary"]) for row in rows] == [("a", 30)]


async def test_an_empty_list_clears_one_locale_of_a_localized_file_field(client, admin_token):
    """Files in records and Localized fields: with `?locale=*`, a locale's `[]` in a single file field's
    object clears that locale as its null does (dropped from the object; its file deleted)."""
    await banners(client, admin_token)
    record_id, german, english = await german_and_english(client, admin_token)
    path = records_path("banners", record_id)
    changed = await client.patch(path, headers=bearer(admin_token), params={"locale": "*"},
                                 json={"data": {"banner": {"en": english, "de": []}}})
    assert changed.status == 200, await changed.text()
    assert (await read(client, path, "*"))["banner"] == {"en": english}
    assert (await client.get(f"{FILES}/{german}")).status == 404


async def test_publishing_now_with_nothing_pending_still_cancels_the_schedule(client, admin_token, services, clock):
    """Scheduled publishing: a publish now of a record with nothing pending changes nothing published
    but still ends its pending schedule, which would otherwise publish a later edit."""
    fields: list[dict[str, Any]] = [{"name": "title", "type": "text"}]
    await create_collection(client, admin_token, "pages", fields, drafts=True)
    auth = bearer(admin_token)
    path = records_path("pages", (await create_record(client, admin_token, "pages", {"title": "one"}))["id"])
    assert (await client.post(path + "/publish", headers=auth)).status == 200
    at = (clock() + timedelta(minutes=5)).isoformat()
    assert (await (await client.post(path + "/publish", headers=auth, json={"at": at})).json())["scheduled_at"]
    now = await client.post(path + "/publish", headers=auth)
    assert now.status == 200 and (await now.json())["scheduled_at"] is None, await now.text()
    assert (await client.patch(path, headers=auth, json={"data": {"title": "two"}})).status == 200
    assert (await (await client.get(path, headers=auth, params={"draft": "true"})).json())["scheduled_at"] is None
    clock.advance(minutes=6)
    assert await services.drafts.scheduler.run_due() == 0
    assert (await (await client.get(path)).json())["title"] == "one"
