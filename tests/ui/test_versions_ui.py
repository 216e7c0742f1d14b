"""A record's version history in a real browser (issue 39, item 6): the record's page lists the versions
with writer and time, a version's page compares it with the record field by field, Restore writes it
back (checked through the REST API), a refused restore (a relation whose record is gone) is shown on the
version's page, and the collection form sets `versions`."""

from __future__ import annotations

import uuid

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage


def test_history_compare_and_restore(admin_page: BrowserPage, api: Api):
    name = f"versioned_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "versions": 10, "schema": [
        {"name": "title", "type": "text"}, {"name": "body", "type": "text"}, {"name": "views", "type": "number"}]})
    assert status == 201, body
    records = f"/api/v1/collections/{name}/records"
    status, record = api.call("POST", records, {"data": {"title": "First title", "views": 1}})
    assert status == 201, record
    status, _ = api.call("PATCH", f"{records}/{record['id']}", {"data": {"title": "Second title", "body": "added"}})
    assert status == 200
    status, me = api.call("GET", "/api/v1/auth/me")
    assert status == 200

    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/{record['id']}")
    rows = ui.locator("#version-list tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-version", "2")
    expect(rows.nth(1).locator(".version-by")).to_contain_text(me["id"])
    expect(rows.nth(1).locator(".version-by")).to_contain_text("(you)")
    expect(ui.locator("#version-count")).to_contain_text("2 kept, up to 10")

    rows.nth(1).locator("a.compare").click()
    expect(ui.locator("#version-number")).to_have_text("1")
    expect(ui.locator("#diff-summary")).to_have_text("2 fields differ from the record now.")
    title = ui.locator('#version-diff tr[data-field="title"]')
    expect(title).to_have_class("changed")
    expect(title.locator("td.old")).to_have_text("First title")
    expect(title.locator("td.new")).to_have_text("Second title")
    expect(ui.locator('#version-diff tr[data-field="body"] td.old')).to_have_text("—")
    expect(ui.locator('#version-diff tr[data-field="views"]')).to_have_class("same")

    ui.click("#restore-version")
    expect(ui.locator(".flash")).to_have_text("Version 1 restored")
    status, now = api.call("GET", f"{records}/{record['id']}")
    assert status == 200
    assert (now["title"], now.get("body"), now["views"]) == ("First title", None, 1)
    expect(ui.locator("#version-list tbody tr")).to_have_count(3)
    expect(ui.locator("#version-list tbody tr").first).to_have_attribute("data-version", "3")
    expect(ui.locator("#field-title")).to_have_value("First title")
    admin_page.watch.assert_clean()


def test_a_refused_restore_is_shown_on_the_version_page(admin_page: BrowserPage, api: Api):
    admin_page.watch.allow(r"status of 422")
    suffix = uuid.uuid4().hex[:6]
    status, authors = api.call("POST", "/api/v1/collections", {"name": f"authors_{suffix}",
                                                              "schema": [{"name": "name", "type": "text"}]})
    assert status == 201, authors
    name = f"posts_{suffix}"
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "versions": 5, "schema": [
        {"name": "title", "type": "text"}, {"name": "author", "type": "relation", "collection_id": authors["id"]}]})
    assert status == 201, body
    status, ada = api.call("POST", f"/api/v1/collections/{authors['name']}/records", {"data": {"name": "Ada"}})
    assert status == 201
    records = f"/api/v1/collections/{name}/records"
    status, post = api.call("POST", records, {"data": {"title": "p", "author": ada["id"]}})
    assert status == 201
    assert api.call("DELETE", f"/api/v1/collections/{authors['name']}/records/{ada['id']}")[0] == 204

    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/{post['id']}/versions/1")
    ui.click("#restore-version")
    expect(ui.locator("#restore-error")).to_contain_text("Relation points to a missing record")
    expect(ui.locator("#restore-error")).to_contain_text("author")
    status, now = api.call("GET", f"{records}/{post['id']}")
    assert status == 200 and now.get("author") is None
    admin_page.watch.assert_clean()


def test_the_collection_form_sets_versions(admin_page: BrowserPage, api: Api):
    admin_page.watch.allow(r"status of 422")
    name = f"kept_{uuid.uuid4().hex[:6]}"
    status, created = api.call("POST", "/api/v1/collections", {"name": name, "schema": [
        {"name": "title", "type": "text"}]})
    assert status == 201, created
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/edit")
    expect(ui.locator("#collection-versions")).to_have_value("0")
    ui.fill("#collection-versions", "1001")
    ui.click("#save-collection")
    expect(ui.locator("#error-versions")).to_contain_text("from 0 to 1,000")
    ui.fill("#collection-versions", "25")
    ui.click("#save-collection")
    expect(ui.locator(".flash")).to_have_text(f"Collection {name} saved")
    status, changed = api.call("GET", f"/api/v1/collections/{created['id']}")
    assert status == 200 and changed["versions"] == 25
    expect(ui.locator("#collection-versions")).to_have_value("25")
    admin_page.watch.assert_clean()
