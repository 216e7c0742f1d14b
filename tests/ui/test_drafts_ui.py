"""The drafts panel of the record editor in a real browser (issue 39, item 6): a draft created in the
editor is listed with its status and invisible to readers; Publish makes it readers'; an edit shows the
working copy beside the published values; Discard draft, Schedule (and its refusal of a past time),
Cancel schedule and Unpublish do what their REST endpoints do, checked through the API."""

from __future__ import annotations

import os
import uuid
from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage
from tests.ui.test_audit_ui import README_SHOTS, README_VIEWPORT


def drafted_collection(api: Api) -> str:
    name = f"drafts_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {
        "name": name, "drafts": True,
        "schema": [{"name": "title", "type": "text", "validation": {"required": True}},
                   {"name": "views", "type": "number"}]})
    assert status == 201, body
    return name


def reader_view(api: Api, name: str, record_id: str) -> tuple[int, Any]:
    return api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")  # the published copy


def test_a_draft_is_published_edited_discarded_scheduled_and_unpublished(admin_page: BrowserPage, api: Api):
    name = drafted_collection(api)
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/new")
    ui.fill("#field-title", "First")
    ui.fill("#field-views", "1")
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record created")
    record_id = ui.locator("#record-id").inner_text()
    expect(ui.locator("#draft-status")).to_have_text("draft")
    expect(ui.locator("#draft-dates")).to_contain_text("never published")
    expect(ui.locator("#draft-diff tr[data-field=title] td.working")).to_have_text("First")
    assert reader_view(api, name, record_id)[0] == 404

    admin_page.goto(f"/_/collections/{name}/records")
    expect(ui.locator(f"#records tr[data-id='{record_id}'] td[data-column=status]")).to_have_text("draft")

    admin_page.goto(f"/_/collections/{name}/records/{record_id}")
    ui.click("#publish-record")
    expect(ui.locator(".flash")).to_have_text("Published")
    expect(ui.locator("#draft-status")).to_have_text("published")
    expect(ui.locator("#draft-same")).to_be_visible()
    status, shown = reader_view(api, name, record_id)
    assert status == 200 and shown["title"] == "First", shown

    # an edit is the working copy: shown beside the published value, readers unchanged
    ui.fill("#field-title", "Second")
    ui.click("#save-record")
    expect(ui.locator("#draft-status")).to_have_text("changed")
    expect(ui.locator("#draft-diff tr[data-field=title] td.published")).to_have_text("First")
    expect(ui.locator("#draft-diff tr[data-field=title] td.working")).to_have_text("Second")
    expect(ui.locator("#draft-diff tr[data-field=views]")).to_have_count(0)
    assert reader_view(api, name, record_id)[1]["title"] == "First"
    if os.environ.get("CMS_UI_README_SHOTS") == "1":  # docs/admin-ui.md's picture: the panel alone
        ui.set_viewport_size(README_VIEWPORT)
        ui.locator("#drafts").screenshot(path=str(README_SHOTS / "drafts-panel.png"), animations="disabled")

    ui.click("#discard-draft")
    expect(ui.locator("#draft-status")).to_have_text("published")
    expect(ui.locator("#field-title")).to_have_value("First")

    # schedule: a past time is refused, a future one shows, and can be cancelled
    ui.fill("#field-title", "Third")
    ui.click("#save-record")
    expect(ui.locator("#draft-status")).to_have_text("changed")
    ui.fill("#schedule-at", "2001-01-01T00:00:00")
    ui.click("#schedule-record")
    expect(ui.locator(".flash")).to_contain_text("must be in the future")
    ui.fill("#schedule-at", "2031-01-01T10:30:00")
    ui.click("#schedule-record")
    expect(ui.locator("#draft-scheduled")).to_contain_text("2031-01-01T10:30:00")
    status, working = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}?draft=true")
    assert working["scheduled_at"] == "2031-01-01T10:30:00.000Z", working
    ui.click("#unschedule-record")
    expect(ui.locator("#draft-scheduled")).to_have_count(0)
    assert api.call("GET", f"/api/v1/collections/{name}/records/{record_id}?draft=true")[1]["scheduled_at"] is None

    ui.click("#unpublish-record")
    expect(ui.locator("#draft-status")).to_have_text("draft")
    expect(ui.locator("#field-title")).to_have_value("Third")  # the pending change is kept
    assert reader_view(api, name, record_id)[0] == 404
    admin_page.watch.assert_clean()
