"""The releases screen in a real browser (issue 39, item 3): a release is created by name, records are
added from the picker and by id (an unknown id is refused), one that does not validate makes Publish fail
naming that item (nothing published), Remove takes it out, Publish now makes the two others readers';
Schedule and Cancel schedule do what their REST endpoints do, checked through the API."""

from __future__ import annotations

import os
import uuid
from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage
from tests.ui.test_audit_ui import README_SHOTS, README_VIEWPORT
from tests.ui.test_drafts_ui import drafted_collection, reader_view


def draft(api: Api, name: str, data: dict[str, Any]) -> str:
    status, body = api.call("POST", f"/api/v1/collections/{name}/records", {"data": data})
    assert status == 201, body
    return str(body["id"])


def test_a_release_of_two_records_is_built_and_published(admin_page: BrowserPage, api: Api):
    name = drafted_collection(api)
    first, second = draft(api, name, {"title": "First"}), draft(api, name, {"title": "Second"})
    broken = draft(api, name, {"views": 3})  # no title: it cannot be published
    ui = admin_page.page
    release_name = f"Launch {uuid.uuid4().hex[:4]}"

    admin_page.goto("/_/releases")
    ui.fill("#create-release input[name=name]", release_name)
    ui.click("#create-release button[type=submit]")
    expect(ui.locator(".flash")).to_contain_text("Release created")
    expect(ui.locator("#release-status")).to_have_text("pending")
    release_id = ui.url.rstrip("/").rsplit("/", 1)[1]

    ui.select_option("#pick-records", [f"{name}/{first}", f"{name}/{broken}"])
    ui.click("#add-records")
    expect(ui.locator(".flash")).to_have_text("2 record(s) added")
    ui.select_option("#pick-collection", name)  # one more by its id
    ui.fill("#pick-record-id", second)
    ui.click("#add-records")
    expect(ui.locator(".flash")).to_have_text("1 record(s) added")
    expect(ui.locator("#release-items tbody tr")).to_have_count(3)
    ui.fill("#pick-record-id", "no-such-record")
    ui.click("#add-records")
    expect(ui.locator(".flash")).to_contain_text("Record not found")
    expect(ui.locator("#release-items tbody tr")).to_have_count(3)

    ui.click("#publish-release")
    expect(ui.locator(".flash")).to_contain_text("nothing was published")
    expect(ui.locator("#release-status")).to_have_text("failed")
    expect(ui.locator(f"#release-items tr[data-record='{broken}'] .item-error")).to_contain_text("title")
    if os.environ.get("CMS_UI_README_SHOTS") == "1":  # docs/concepts/releases.md's picture
        ui.set_viewport_size(README_VIEWPORT)
        ui.screenshot(path=str(README_SHOTS / "release-failed.png"), animations="disabled")
    assert reader_view(api, name, first)[0] == 404 and reader_view(api, name, second)[0] == 404

    ui.locator(f"#release-items tr[data-record='{broken}'] .remove-item").click()
    expect(ui.locator(".flash")).to_have_text("Item removed")
    expect(ui.locator("#release-items tbody tr")).to_have_count(2)
    expect(ui.locator("#release-status")).to_have_text("pending")

    # schedule, then cancel: the API shows the same
    ui.fill("#schedule-release input[name=at]", "2031-01-01T10:30:00")
    ui.click("#schedule-release button[type=submit]")
    expect(ui.locator("#release-status")).to_have_text("scheduled")
    expect(ui.locator("#release-scheduled")).to_contain_text("2031-01-01 10:30:00")
    status, shown = api.call("GET", f"/api/v1/releases/{release_id}")
    assert status == 200 and shown["scheduled_at"] == "2031-01-01T10:30:00.000Z", shown
    ui.click("#unschedule-release")
    expect(ui.locator("#release-status")).to_have_text("pending")

    ui.click("#publish-release")
    expect(ui.locator(".flash")).to_have_text("Release published: 2 record(s)")
    expect(ui.locator("#release-status")).to_have_text("published")
    for record_id, title in [(first, "First"), (second, "Second")]:
        status, body = reader_view(api, name, record_id)
        assert status == 200 and body["title"] == title, body
    assert reader_view(api, name, broken)[0] == 404
    status, listed = api.call("GET", "/api/v1/releases")
    assert status == 200 and any(r["id"] == release_id and r["status"] == "published" for r in listed["items"])

    admin_page.goto("/_/releases")
    expect(ui.locator(f"#releases tr[data-id='{release_id}'] .badge")).to_have_text("published")
    admin_page.watch.assert_clean()
