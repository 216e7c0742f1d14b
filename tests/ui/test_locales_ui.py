"""Localized fields in the admin UI, in a real browser (decisions.md, Localized fields; issue 40, item 7): the
`locales` setting edited with its checks (a cycle refused inline, nothing changed), and the record editor's
locale switcher: which locales a record fills, one locale edited at a time, an unset value shown greyed
with the value its fallback chain answers, and saving one locale leaving the others as they were."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage
from tests.ui.test_audit_ui import readme_screenshot
from tests.ui.test_collections_ui import collection_named
from tests.ui.test_media_ui import drop, loaded_width, png
from tests.ui.test_settings_ui import save

LOCALES = [{"code": "en"}, {"code": "de", "fallback": "en"}, {"code": "de-AT", "fallback": "de"}]


def set_locales(api: Api, value: list[dict[str, Any]]) -> None:
    status, body = api.call("POST", "/api/v1/settings", {"key": "locales", "value": json.dumps(value)})
    assert status == 200, body


@pytest.fixture
def locales(api: Api) -> Iterator[None]:
    """Three locales for the test (`en` stays the default, so the other screens' tests see no change)."""
    set_locales(api, LOCALES)
    yield
    set_locales(api, [{"code": "en"}])


def stored_locales(api: Api) -> Any:
    status, body = api.call("GET", "/api/v1/settings")
    assert status == 200, body
    return json.loads(next(s["value"] for s in body if s["key"] == "locales"))


def test_the_locales_setting_is_edited_with_its_checks(admin_page: BrowserPage, api: Api, locales: None):
    admin_page.watch.allow(r"status of 422")
    page = admin_page.page
    admin_page.goto("/_/settings")
    field = page.locator("textarea#input-locales")
    assert json.loads(field.input_value()) == LOCALES
    cycle = '[{"code": "en", "fallback": "de"}, {"code": "de", "fallback": "en"}]'
    field.fill(cycle)
    assert save(page, "locales").status == 422
    expect(page.locator("#setting-locales .setting-error")).to_contain_text("cycle: en -> de -> en")
    assert page.locator("textarea#input-locales").input_value() == cycle  # the refused text stays to fix
    assert stored_locales(api) == LOCALES
    page.locator("textarea#input-locales").fill('[{"code": "en"}, {"code": "fr", "fallback": "en"}]')
    save(page, "locales")
    page.wait_for_url("**/_/settings#setting-locales")
    assert stored_locales(api) == [{"code": "en"}, {"code": "fr", "fallback": "en"}]


def test_the_editor_switches_locales_and_shows_fallbacks_greyed(admin_page: BrowserPage, api: Api, locales: None):
    name = f"pages_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "schema": [
        {"name": "title", "type": "text", "localized": True, "validation": {"required": True}},
        {"name": "summary", "type": "editor", "localized": True},
        {"name": "featured", "type": "bool", "localized": True},
        {"name": "views", "type": "number"}]})
    assert status == 201, body
    page = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/new")
    expect(page.locator('#locale-switcher a[aria-current="page"]')).to_have_text("en 0/3")
    page.fill("#field-title", "Hello")
    page.fill("#field-summary", "A page")
    page.fill("#field-views", "7")
    page.click("#save-record")
    expect(page.locator(".flash")).to_have_text("Record created")
    record_id = page.locator("#record-id").inner_text()
    tabs = page.locator("#locale-switcher a.locale-tab")
    assert tabs.evaluate_all("tabs => tabs.map(t => t.textContent.trim())") == ["en 2/3", "de 0/3", "de-AT 0/3"]
    assert "filled" not in (tabs.nth(0).get_attribute("class") or "").split()  # 2 of 3: partial

    page.click('#locale-switcher a[data-locale="de-AT"]')
    page.wait_for_url(f"**/records/{record_id}?locale=de-AT")
    title = page.locator("#field-title")
    assert title.input_value() == "" and title.get_attribute("placeholder") == "Hello"
    expect(page.locator('[data-fallback-for="title"]')).to_contain_text("shows the en value Hello")
    assert page.locator('.record-field[data-field="title"]').get_attribute("class") == "record-field falls-back"
    grey = page.locator('[data-fallback-for="title"]').evaluate("e => getComputedStyle(e).color")
    assert grey == "rgb(136, 136, 136)"
    assert page.locator("#field-views").input_value() == "7"  # not localized: the same in every locale
    readme_screenshot(page, "locale-editor")  # with CMS_UI_README_SHOTS=1: docs/concepts/localization.md

    page.fill("#field-title", "Servus")
    page.select_option("#field-featured", "true")
    page.click("#save-record")
    expect(page.locator(".flash")).to_have_text("Record saved")
    page.wait_for_url(f"**/records/{record_id}?locale=de-AT")
    status, stored = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}?locale=*")
    assert status == 200, stored
    assert stored["title"] == {"en": "Hello", "de-AT": "Servus"} and stored["featured"] == {"de-AT": True}
    assert stored["summary"] == {"en": "A page"} and stored["views"] == 7
    assert tabs.evaluate_all("tabs => tabs.map(t => t.textContent.trim())") == ["en 2/3", "de 0/3", "de-AT 2/3"]

    page.click('#locale-switcher a[data-locale="de"]')
    page.wait_for_url(f"**/records/{record_id}?locale=de")
    assert page.locator("#field-title").get_attribute("placeholder") == "Hello"  # de falls back to en, not de-AT
    page.click('#locale-switcher a[data-locale="de-AT"]')
    page.wait_for_url(f"**/records/{record_id}?locale=de-AT")
    page.fill("#field-title", "")  # emptied: the locale's value goes, the fallback shows again
    page.click("#save-record")
    expect(page.locator(".flash")).to_have_text("Record saved")
    status, stored = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}?locale=*")
    assert stored["title"] == {"en": "Hello"}
    assert page.locator("#field-title").get_attribute("placeholder") == "Hello"

    admin_page.watch.allow(r"status of 400")
    assert admin_page.goto(f"/_/collections/{name}/records/{record_id}?locale=fr").status == 400


def test_the_schema_editor_keeps_and_sets_localized(admin_page: BrowserPage, api: Api, locales: None):
    """A collection saved from the schema editor keeps its fields' `localized`, and a field can be made
    localized there (its stored values become the default locale's)."""
    name = f"docs_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "schema": [
        {"name": "title", "type": "text", "localized": True}, {"name": "flag", "type": "bool"}]})
    assert status == 201, body
    status, made = api.call("POST", f"/api/v1/collections/{name}/records", {"data": {"title": "Hi", "flag": True}})
    assert status == 201, made
    page = admin_page.page
    admin_page.goto(f"/_/collections/{name}/edit")
    assert page.locator('input[name="field-0-localized"]').is_checked()
    flag = page.locator('input[name="field-1-localized"]')
    assert flag.is_visible() and not flag.is_checked()  # a bool may be localized too
    flag.check()
    page.click("#save-collection")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} saved")
    collection = collection_named(api, name)
    assert collection is not None and [f["localized"] for f in collection["schema"]["fields"]] == [True, True]
    status, record = api.call("GET", f"/api/v1/collections/{name}/records/{made['id']}?locale=*")
    assert record["title"] == {"en": "Hi"} and record["flag"] == {"en": True}


def test_publish_one_locale_from_the_drafts_panel(admin_page: BrowserPage, api: Api, locales: None):
    """Issue 40, item 7: the drafts panel names the locales with pending changes and publishes the edited
    locale's values only; readers of that locale see them, the other locales and plain fields stay as
    published."""
    name = f"news_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "drafts": True, "schema": [
        {"name": "title", "type": "text", "localized": True, "validation": {"required": True}},
        {"name": "views", "type": "number"}]})
    assert status == 201, body
    records = f"/api/v1/collections/{name}/records"
    status, made = api.call("POST", records + "?locale=*", {"data": {"title": {"en": "Hello", "de": "Hallo"},
                                                                      "views": 1}})
    assert status == 201, made
    record_id = made["id"]
    assert api.call("POST", f"{records}/{record_id}/publish", {})[0] == 200
    status, edited = api.call("PATCH", f"{records}/{record_id}?locale=*", {"data": {
        "title": {"en": "Hello again", "de": "Hallo wieder"}, "views": 2}})
    assert status == 200 and edited["status"] == "changed", edited

    page = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/{record_id}?locale=de")
    expect(page.locator("#draft-locales")).to_have_text("Pending changes in en, de")
    expect(page.locator("#publish-locale")).to_have_text("Publish de")
    page.click("#publish-locale")
    expect(page.locator(".flash")).to_contain_text("Published the de values")
    page.wait_for_url(f"**/records/{record_id}?locale=de")
    expect(page.locator("#draft-status")).to_have_text("changed")  # en and views are still pending
    expect(page.locator("#draft-locales")).to_have_text("Pending changes in en")
    expect(page.locator("#publish-locale")).to_have_count(0)  # nothing of de is pending now

    status, german = api.call("GET", f"{records}/{record_id}?locale=de")  # readers: the published copy
    assert status == 200 and german["title"] == "Hallo wieder" and german["views"] == 1, german
    status, english = api.call("GET", f"{records}/{record_id}?locale=en")
    assert status == 200 and english["title"] == "Hello" and english["views"] == 1, english
    status, working = api.call("GET", f"{records}/{record_id}?draft=true&locale=*")
    assert working["title"] == {"en": "Hello again", "de": "Hallo wieder"} and working["views"] == 2, working

    page.check("#schedule-locale")  # "only de": a scheduled publish of the de values
    page.fill("#schedule-at", "2031-01-01T10:30:00")
    page.click("#schedule-record")
    expect(page.locator(".flash")).to_contain_text("Publish of the de values scheduled at 2031-01-01")
    status, working = api.call("GET", f"{records}/{record_id}?draft=true")
    assert working["scheduled_at"] == "2031-01-01T10:30:00.000Z", working
    admin_page.watch.assert_clean()


def test_a_localized_file_field_follows_the_locale_switcher(admin_page: BrowserPage, api: Api, locales: None):
    """Issue 40, item 2: the editor shows the edited locale's files, an upload goes to that locale, and a
    locale without files names its fallback's."""
    name = f"banners_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "schema": [
        {"name": "title", "type": "text"},
        {"name": "banner", "type": "file", "localized": True, "mime_types": ["image/*"]}]})
    assert status == 201, body
    page = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/new")
    page.fill("#field-title", "Sale")
    drop(page, "#drop-banner", [("red.png", png((255, 0, 0)), "image/png")])
    page.click("#save-record")
    expect(page.locator(".flash")).to_have_text("Record created")
    record_id = page.locator("#record-id").inner_text()
    records = f"/api/v1/collections/{name}/records/{record_id}"
    status, made = api.call("GET", records + "?locale=*")
    english = made["banner"]["en"]
    assert status == 200 and made["banner"] == {"en": english}, made
    assert loaded_width(page, f'li[data-file="{english}"] img.preview') == 100  # loaded before leaving the page

    page.click('#locale-switcher a[data-locale="de"]')
    page.wait_for_url(f"**/records/{record_id}?locale=de")
    expect(page.locator(f'li[data-file="{english}"]')).to_have_count(0)  # not de's file
    expect(page.locator('[data-fallback-for="banner"]')).to_contain_text("shows the en value red.png")
    drop(page, "#drop-banner", [("blue.png", png((0, 0, 255)), "image/png")])
    page.click("#save-record")
    expect(page.locator(".flash")).to_have_text("Record saved")
    page.wait_for_url(f"**/records/{record_id}?locale=de")
    status, changed = api.call("GET", records + "?locale=*")
    german = changed["banner"]["de"]
    assert changed["banner"] == {"en": english, "de": german} and german != english, changed
    assert loaded_width(page, f'li[data-file="{german}"] img.preview') == 100
    expect(page.locator(f'li[data-file="{english}"]')).to_have_count(0)
    expect(page.locator('[data-fallback-for="banner"]')).to_have_count(0)

    page.click('#locale-switcher a[data-locale="en"]')
    page.wait_for_url(f"**/records/{record_id}?locale=en")
    assert loaded_width(page, f'li[data-file="{english}"] img.preview') == 100
    expect(page.locator(f'li[data-file="{german}"]')).to_have_count(0)
    admin_page.watch.assert_clean()
