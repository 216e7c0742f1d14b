"""The schema screen (`/_/schema`) in a real browser (decisions.md, Schema as code; issue 43, item 5): the
snapshot downloaded as a file, a changed copy uploaded, its diff shown as a table (collection, field, from,
to; data loss highlighted), applied against the diff's hash (refused while data loss is not accepted, and
when the schema moved since the diff), and the end state read through the API.

The UI server is shared by every UI test: the snapshot uploaded here is the whole current schema with this
test's collection changed, so no other test's collection is touched."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.ui.conftest import Api, BrowserPage


def current(api: Api) -> dict[str, Any]:
    status, snapshot = api.call("GET", "/api/v1/schema")
    assert status == 200, snapshot
    result: dict[str, Any] = snapshot
    return result


def upload(page: Any, path: Path) -> None:
    page.set_input_files("#upload-schema input[name=snapshot]", str(path))
    with page.expect_navigation():
        page.click("#upload-schema button[type=submit]")


def test_download_upload_see_the_diff_and_apply_it(admin_page: BrowserPage, api: Api, tmp_path: Path) -> None:
    page = admin_page.page
    name = f"schema_{uuid.uuid4().hex[:6]}"
    status, created = api.call("POST", "/api/v1/collections", {"name": name, "schema": [
        {"name": "title", "type": "text"}, {"name": "note", "type": "text"}]})
    assert status == 201, created
    status, record = api.call("POST", f"/api/v1/collections/{name}/records", {"data": {"title": "kept <b>",
                                                                                      "note": "lost"}})
    assert status == 201, record

    admin_page.goto("/_/schema")
    assert page.locator("#schema-hash").inner_text() == current(api)["hash"]
    with page.expect_download() as download:
        page.click("#download-schema")
    assert download.value.suggested_filename == "schema.json"
    snapshot = json.loads(Path(download.value.path()).read_text())
    assert snapshot == current(api)

    mine = next(c for c in snapshot["collections"] if c["name"] == name)
    mine["schema"]["fields"] = [{**mine["schema"]["fields"][0], "name": "headline", "renamed_from": "title"}]
    mine["list_rule"] = None
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(snapshot))
    upload(page, changed)
    rows = page.locator("#schema-diff tbody tr")
    seen = [(rows.nth(i).get_attribute("data-collection"), rows.nth(i).get_attribute("data-field"),
             rows.nth(i).get_attribute("data-loss")) for i in range(rows.count())]
    assert seen == [(name, "", "false"), (name, "headline", "false"), (name, "note", "true")]
    lossy = page.locator('#schema-diff tr[data-field="note"]')
    assert "data-loss" in (lossy.get_attribute("class") or "") and lossy.locator(".badge.bad").count() == 1
    renamed = page.locator('#schema-diff tr[data-field="headline"]')
    assert renamed.locator("td.from").inner_text() == 'name "title"'
    assert renamed.locator("td.to").inner_text() == 'name "headline"'

    admin_page.watch.allow(r"status of 422 \(Unprocessable Entity\)")  # the refusals below are pages of 422
    with page.expect_navigation():  # data loss not accepted: refused, the diff shown again
        page.click("#apply-schema button[type=submit]")
    assert "loses data" in page.locator(".error").inner_text()
    assert page.locator("#schema-diff tbody tr").count() == 3
    status, still = api.call("GET", f"/api/v1/collections/{name}/records/{record['id']}")
    assert still["title"] == "kept <b>" and still["note"] == "lost"

    page.check("#allow-data-loss")
    with page.expect_navigation():
        page.click("#apply-schema button[type=submit]")
    assert page.url.endswith("/_/schema")
    assert page.locator(".flash.success").inner_text() == f"Schema applied: its hash is now {current(api)['hash']}"
    status, stored = api.call("GET", f"/api/v1/collections/{name}/records/{record['id']}")
    assert status == 200 and stored["headline"] == "kept <b>" and "note" not in stored and "title" not in stored
    status, audit = api.call("GET", "/api/v1/audit?event_type=schema_applied&limit=1")
    assert any(c["collection"] == name for c in audit["items"][0]["details"]["changes"])
    admin_page.watch.assert_clean()


def test_an_apply_against_a_schema_that_moved_is_refused(admin_page: BrowserPage, api: Api, tmp_path: Path) -> None:
    page = admin_page.page
    name = f"moved_{uuid.uuid4().hex[:6]}"
    assert api.call("POST", "/api/v1/collections", {"name": name, "schema": [{"name": "a", "type": "text"}]})[0] == 201
    snapshot = current(api)
    next(c for c in snapshot["collections"] if c["name"] == name)["update_rule"] = None
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    admin_page.goto("/_/schema")
    upload(page, path)
    assert page.locator("#schema-diff tbody tr").count() == 1
    status, collection = api.call("GET", "/api/v1/collections")
    mine = next(c for c in collection if c["name"] == name)
    assert api.call("PATCH", f"/api/v1/collections/{mine['id']}", {"delete_rule": None})[0] == 200  # moved on
    admin_page.watch.allow(r"status of 409 \(Conflict\)")  # the refusal is a page of 409
    with page.expect_navigation():
        page.click("#apply-schema button[type=submit]")
    assert "hash differs" in page.locator(".error").inner_text()
    status, after = api.call("GET", f"/api/v1/collections/{mine['id']}")
    assert after["update_rule"] != None  # noqa: E711 - nothing applied
    admin_page.watch.assert_clean()


def test_a_bad_file_is_shown_inline_and_the_forms_need_their_token(admin_page: BrowserPage, api: Api,
                                                                   tmp_path: Path) -> None:
    page = admin_page.page
    admin_page.watch.allow(r"status of (422 \(Unprocessable Entity\)|400 \(Bad Request\)|403 \(Forbidden\))")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": 2, "collections": []}))
    admin_page.goto("/_/schema")
    upload(page, path)
    assert "This service reads snapshot format 1." in page.locator(".error").inner_text()
    path.write_text("{not json")
    upload(page, path)
    assert "not JSON" in page.locator(".error").inner_text()
    before = current(api)["hash"]
    refused = page.request.post(admin_page.base + "/_/schema/apply", multipart={
        "hash": before, "snapshot": json.dumps({"format": 1, "collections": []})}, max_redirects=0)
    assert refused.status == 403
    assert current(api)["hash"] == before
    admin_page.watch.assert_clean()
