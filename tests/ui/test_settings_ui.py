"""The settings screen (`/_/settings`) in a real browser: grouped by category with typed inputs,
a change saved through the settings service (seen by `GET /api/v1/settings`), a refused value shown
inline without changing anything, and write-only secrets masked as the API masks them."""

from __future__ import annotations

import json
from typing import Any

from tests.ui.conftest import Api, BrowserPage

SECRET = "very-secret-client-secret-42"


def save(page: Any, key: str) -> Any:
    """Submit the form of setting `key` and wait until the answer page has loaded; the response."""
    with page.expect_navigation() as navigation:
        page.locator(f"#setting-{key} button[type=submit]").click()
    return navigation.value


def settings(api: Api) -> dict[str, dict[str, str]]:
    status, body = api.call("GET", "/api/v1/settings")
    assert status == 200, body
    return {s["key"]: s for s in body}


def test_settings_grouped_typed_and_saved(admin_page: BrowserPage, api: Api):
    page = admin_page.page
    before = settings(api)
    assert admin_page.goto("/_/settings").status == 200
    for category in {s["category"] for s in before.values()}:
        keys = page.locator(f'section[data-category="{category}"] form.setting').evaluate_all(
            "forms => forms.map(f => f.dataset.key)")
        assert sorted(keys) == sorted(k for k, s in before.items() if s["category"] == category)
    assert page.locator("#input-read_cache_enabled").get_attribute("type") == "checkbox"
    number = page.locator("#input-bulk_max_ids")
    assert number.get_attribute("type") == "number"
    assert (number.get_attribute("min"), number.get_attribute("max")) == ("1", "100000")
    assert number.input_value() == before["bulk_max_ids"]["value"]
    assert page.locator("textarea#input-oauth_providers").count() == 1

    try:
        number.fill("777")
        save(page, "bulk_max_ids")
        page.wait_for_url("**/_/settings#setting-bulk_max_ids")
        assert page.locator(".flash.success").inner_text() == "Saved bulk_max_ids"
        assert settings(api)["bulk_max_ids"]["value"] == "777"
        assert page.locator("#input-bulk_max_ids").input_value() == "777"

        checkbox = page.locator("#input-read_cache_enabled")
        assert checkbox.is_checked() == (before["read_cache_enabled"]["value"] == "true")
        checkbox.set_checked(not checkbox.is_checked())
        save(page, "read_cache_enabled")
        page.wait_for_url("**/_/settings#setting-read_cache_enabled")
        flipped = "false" if before["read_cache_enabled"]["value"] == "true" else "true"
        assert settings(api)["read_cache_enabled"]["value"] == flipped
        assert page.locator("#input-read_cache_enabled").is_checked() == (flipped == "true")

        status, audit = api.call("GET", "/api/v1/audit?event_type=setting_changed&limit=5")
        assert status == 200
        changed = [e["details"] for e in audit["items"]]
        assert {"key": "bulk_max_ids", "old_value": before["bulk_max_ids"]["value"], "new_value": "777"} in changed
    finally:
        for key in ("bulk_max_ids", "read_cache_enabled"):
            api.call("POST", "/api/v1/settings", {"key": key, "value": before[key]["value"]})
    admin_page.watch.assert_clean()


def test_invalid_setting_is_shown_inline_and_changes_nothing(admin_page: BrowserPage, api: Api):
    admin_page.watch.allow(r"status of 422")
    page = admin_page.page
    before = settings(api)
    admin_page.goto("/_/settings")
    page.locator("#input-bulk_max_ids").fill("0")
    assert save(page, "bulk_max_ids").status == 422
    form = page.locator("#setting-bulk_max_ids")
    assert "invalid" in (form.get_attribute("class") or "")
    assert form.locator(".setting-error").inner_text() == "Must be between 1 and 100000."
    assert "bulk_max_ids" in page.locator("#settings-error").inner_text()
    assert page.locator("#input-bulk_max_ids").input_value() == "0"  # what was typed, to correct it
    assert settings(api) == before  # nothing changed
    status, expected = api.call("POST", "/api/v1/settings", {"key": "bulk_max_ids", "value": 0})
    assert status == 422 and expected["errors"]["value"] == ["Must be between 1 and 100000."]

    page.locator("#input-oauth_providers").fill("not json")
    save(page, "oauth_providers")
    assert "JSON" in page.locator("#setting-oauth_providers .setting-error").inner_text()
    assert settings(api) == before
    admin_page.watch.assert_clean()


def test_write_only_secret_is_masked(admin_page: BrowserPage, api: Api):
    page = admin_page.page
    value = json.dumps([{"name": "custom", "client_id": "ui-client", "client_secret": SECRET,
                         "discovery_url": "https://idp.example.com/.well-known/openid-configuration"}])
    status, body = api.call("POST", "/api/v1/settings", {"key": "oauth_providers", "value": value})
    assert status == 200, body
    try:
        admin_page.goto("/_/settings")
        shown = page.locator("#input-oauth_providers").input_value()
        assert SECRET not in page.content()
        assert shown == settings(api)["oauth_providers"]["value"] and "********" in shown
        save(page, "oauth_providers")  # written back as shown
        page.wait_for_url("**/_/settings#setting-oauth_providers")
        assert page.locator(".flash.success").count() == 1
        assert settings(api)["oauth_providers"]["value"] == shown
        assert SECRET not in page.content()
    finally:
        api.call("POST", "/api/v1/settings", {"key": "oauth_providers", "value": "[]"})
    admin_page.watch.assert_clean()
