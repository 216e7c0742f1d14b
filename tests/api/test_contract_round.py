"""Contract audit of the round's features (decisions.md: Field rules; Drafts, versions and scheduled
publishing; Files in records, thumbnails and file tokens; Schema as code): the deviations a hostile review found, each
pinned by the request that showed it."""

from __future__ import annotations

from typing import Any

from tests.api import test_field_rules, test_media_tokens
from tests.api.test_access_rules import listed
from tests.api.test_api_keys import api_key, make_key
from tests.api.test_csv import form, import_path
from tests.api.test_field_rules import by_title
from tests.api.test_files import FILES
from tests.api.test_schema_as_code import INVOICES, TOTALS, applied, collection_of, diff, export
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
