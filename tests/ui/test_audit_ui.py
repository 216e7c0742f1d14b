"""The audit log screen (`/_/audit`) in a real browser (issue 15, scenario "an audit entry of each
of these actions"): a setting changed in the UI, a collection created, changed and deleted, an API
key made and revoked, a backup made and deleted, and a failed login through the API (a restore, a
session revocation and a verification by an admin are checked in the audit log by the backups and
users screens' tests), each found with the UI's filters, page for page the same
entries as `GET /api/v1/audit` gives for the same query; the security view and its counts against
`GET /api/v1/audit/security` and `/statistics`; a bad filter shown inline as the API refuses it."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tests.ui.conftest import ADMIN_EMAIL, Api, BrowserPage

README_SHOTS = Path(__file__).parents[2] / "docs" / "screenshots"
README_VIEWPORT = {"width": 1280, "height": 760}


def readme_screenshot(page: Any, name: str) -> None:
    """With CMS_UI_README_SHOTS=1, save the page at a fixed viewport as docs/screenshots/<name>.png
    (the pictures of docs/admin-ui.md; off by default so a test run leaves the repository unchanged)."""
    if os.environ.get("CMS_UI_README_SHOTS") != "1":
        return
    README_SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(README_VIEWPORT)
    page.screenshot(path=str(README_SHOTS / f"{name}.png"), full_page=False, animations="disabled")


def rest_audit(api: Api, path: str = "/api/v1/audit", **query: str) -> dict[str, Any]:
    status, body = api.call("GET", path + ("?" + urlencode(query) if query else ""))
    assert status == 200, body
    return dict(body)


def shown_ids(page: Any) -> list[str]:
    return list(page.locator("table#audit tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)"))


def apply_filters(page: Any, **fields: str) -> None:
    """Fill the filter form (selects and inputs by name) and submit it."""
    form = page.locator("#audit-filters")
    for name, value in fields.items():
        control = form.locator(f'[name="{name}"]')
        if control.evaluate("e => e.tagName") == "SELECT":
            control.select_option(value)
        else:
            control.fill(value)
    with page.expect_navigation():
        form.locator("button[type=submit]").click()


def test_an_audit_entry_of_each_action(admin_page: BrowserPage, api: Api):
    page = admin_page.page
    since = (datetime.now(UTC) - timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    status, me = api.call("GET", "/api/v1/auth/me")
    assert status == 200 and me["email"] == ADMIN_EMAIL

    # the actions: a setting in the UI, then a collection, an API key and a failed login through the API
    admin_page.goto("/_/settings")
    old = page.locator("#input-csv_import_max_rows").input_value()
    page.locator("#input-csv_import_max_rows").fill("4545")
    with page.expect_navigation():
        page.locator("#setting-csv_import_max_rows button[type=submit]").click()
    status, listed = api.call("GET", "/api/v1/settings")
    assert next(s["value"] for s in listed if s["key"] == "csv_import_max_rows") == "4545"
    name = f"audited_{uuid.uuid4().hex[:6]}"
    status, collection = api.call("POST", "/api/v1/collections",
                                  {"name": name, "schema": [{"name": "t", "type": "text"}]})
    assert status == 201, collection
    status, changed = api.call("PATCH", f"/api/v1/collections/{collection['id']}", {"list_rule": ""})
    assert status == 200, changed
    assert api.call("DELETE", f"/api/v1/collections/{collection['id']}")[0] == 204
    status, key = api.call("POST", "/api/v1/api-keys", {"name": f"key-{name}", "scopes": ["read"]})
    assert status == 201, key
    assert api.call("DELETE", f"/api/v1/api-keys/{key['id']}")[0] == 204
    status, backup = api.call("POST", "/api/v1/backups")
    assert status == 201, backup
    assert api.call("DELETE", f"/api/v1/backups/{backup['filename']}")[0] == 204
    wrong_email = f"nobody-{name}@example.com"
    assert api.call("POST", "/api/v1/auth/login", {"email": wrong_email, "password": "wrong-password-1"})[0] == 401

    expected = {
        "setting_changed": lambda d: d == {"key": "csv_import_max_rows", "old_value": old, "new_value": "4545"},
        "collection_created": lambda d: d.get("name") == name,
        "collection_updated": lambda d: d.get("name") == name and d.get("collection_id") == collection["id"],
        "collection_deleted": lambda d: d.get("name") == name,
        "api_key_created": lambda d: d.get("api_key_id") == key["id"],
        "api_key_revoked": lambda d: d.get("api_key_id") == key["id"],
        "backup_created": lambda d: d.get("filename") == backup["filename"],
        "backup_deleted": lambda d: d.get("filename") == backup["filename"],
        "login_failed": lambda d: d.get("email") == wrong_email,
    }
    admin_page.goto("/_/audit")
    for event, matches in expected.items():
        apply_filters(page, event_type=event, from_date=since)
        rest = rest_audit(api, event_type=event, from_date=since)
        ours = [e for e in rest["items"] if matches(e["details"])]
        assert len(ours) == 1, (event, rest["items"])
        assert shown_ids(page) == [e["id"] for e in rest["items"]], event
        assert page.locator("#audit-total").inner_text() == str(rest["total"])
        row = page.locator(f'tr[data-id="{ours[0]["id"]}"]')
        assert row.locator("td.event").inner_text() == event
        assert row.locator("td.ip").inner_text().startswith(ours[0]["ip_address"])
        if event != "login_failed":  # the admin did it; the failed login names no user
            assert row.locator("td.user").get_attribute("data-user") == me["id"]
            assert me["id"].startswith(row.locator("td.user").inner_text().rstrip("…"))

    admin_page.goto("/_/audit?" + urlencode({"from_date": since, "limit": "20"}))
    readme_screenshot(page, "audit-log")

    # the IP filter (collection changes are audited without an address)
    # the same page size as the page's (its URL's limit of 20): the window opens 2 s before this test, so
    # the tests before it may have written entries too
    by_ip = rest_audit(api, ip_address="127.0.0.1", from_date=since, limit="20")
    apply_filters(page, event_type="", ip_address="127.0.0.1", from_date=since)
    assert shown_ids(page) == [e["id"] for e in by_ip["items"]]
    assert {"api_key_created", "login_failed", "setting_changed"} <= {e["event_type"] for e in by_ip["items"]}

    # user, severity and a date range together, paged by the links (the URL's limit of 2 keeps its pages)
    query = {"user_id": me["id"], "severity": "info", "from_date": since,
             "to_date": (datetime.now(UTC) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"), "limit": "20"}
    admin_page.goto("/_/audit?" + urlencode({**query, "limit": "2"}))
    rest = rest_audit(api, **{**query, "limit": "2"})
    assert rest["total"] >= 3  # collection created, deleted, API key created
    assert shown_ids(page) == [e["id"] for e in rest["items"]]
    with page.expect_navigation():
        page.click("#page-next")
    assert shown_ids(page) == [e["id"] for e in rest_audit(api, **{**query, "limit": "2", "offset": "2"})["items"]]
    with page.expect_navigation():
        page.click("#page-previous")
    assert shown_ids(page) == [e["id"] for e in rest["items"]]
    admin_page.goto("/_/audit?" + urlencode(query))
    assert page.locator('select[name="severity"]').input_value() == "info"
    assert page.locator('input[name="user_id"]').input_value() == me["id"]
    assert shown_ids(page) == [e["id"] for e in rest_audit(api, **query)["items"]]

    # the security view: failed logins and the setting change are there, as the API lists them
    with page.expect_navigation():
        page.click("#security-tab")
    security = rest_audit(api, "/api/v1/audit/security")
    assert shown_ids(page) == [e["id"] for e in security["items"]]
    assert page.locator('tr[data-event="login_failed"]').count() >= 1
    statistics = rest_audit(api, "/api/v1/audit/statistics")
    assert int(page.locator("#stat-total").inner_text()) == statistics["total"]
    assert int(page.locator('[data-count="login_failed"]').inner_text()) == statistics["by_event_type"]["login_failed"]
    admin_page.goto("/_/audit/security?severity=critical")
    assert shown_ids(page) == [e["id"] for e in rest_audit(api, "/api/v1/audit/security", severity="critical")["items"]]
    api.call("POST", "/api/v1/settings", {"key": "csv_import_max_rows", "value": old})
    admin_page.watch.assert_clean()


def test_bad_filter_is_refused_inline(admin_page: BrowserPage, api: Api):
    admin_page.watch.allow(r"status of 422")
    page = admin_page.page
    response = admin_page.goto("/_/audit?from_date=last+tuesday&event_type=login_failed")
    assert response.status == 422
    status, body = api.call("GET", "/api/v1/audit?from_date=last+tuesday&event_type=login_failed")
    assert status == 422
    box = page.locator("div.error")
    assert body["errors"]["from_date"][0] in box.inner_text()
    assert page.locator("table#audit").count() == 0
    assert page.locator('input[name="from_date"]').input_value() == "last tuesday"  # kept to correct it
    page.wait_for_load_state("load")
    admin_page.watch.assert_clean()
