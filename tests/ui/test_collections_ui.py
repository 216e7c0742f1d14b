"""The collections screen in a real browser (issue 15): create a collection with the schema editor,
an invalid rule refused inline, an owner rule that changes an auth user's REST list, stored HTML
shown as text, and the delete with its confirmation. Each end state is asserted through the REST API."""

from __future__ import annotations

import uuid
from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage

UNPROCESSABLE = r"status of (400|422)"
"""The console line Chromium logs for a form page answered 400/422 (refused input shown inline)."""


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:6]}"


def collection_named(api: Api, name: str) -> dict[str, Any] | None:
    status, collections = api.call("GET", "/api/v1/collections")
    assert status == 200, collections
    return next((c for c in collections if c["name"] == name), None)


def fill_row(ui: BrowserPage, index: int, name: str, kind: str) -> Any:
    """Fill field row `index` (adding rows as needed) with a name and a type; returns the row."""
    rows = ui.page.locator("#field-rows .field-row")
    while rows.count() <= index:
        ui.page.click("#add-field")
    row = rows.nth(index)
    row.locator("input.field-name").fill(name)
    row.locator("select.field-type").select_option(kind)
    return row


def test_create_collection_with_five_field_types(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    status, target = api.call("POST", "/api/v1/collections", {"name": unique("authors"),
                                                               "schema": [{"name": "name", "type": "text"}]})
    assert status == 201, target
    name = unique("posts")
    ui.goto("/_/collections")
    page.click("#new-collection")
    page.wait_for_url(ui.base + "/_/collections/new")
    page.fill("#collection-name", name)
    title = fill_row(ui, 0, "title", "text")
    title.locator("input[name$=-required]").check()
    title.locator("input[name$=-unique]").check()
    title.locator("input[name$=-min]").fill("3")
    title.locator("input[name$=-max]").fill("80")
    title.locator("input[name$=-pattern]").fill("^[A-Z]")
    views = fill_row(ui, 1, "views", "number")
    views.locator("input[name$=-min]").fill("0")
    expect(views.locator("input[name$=-pattern]")).to_be_hidden()  # pattern is for text types only
    status_row = fill_row(ui, 2, "status", "select")
    status_row.locator("textarea[name$=-values]").fill("draft\npublished")
    fill_row(ui, 3, "published", "bool")
    author = fill_row(ui, 4, "author", "relation")
    author.locator("select[name$=-collection_id]").select_option(label=target["name"])
    author.locator("input[name$=-cascade_delete]").check()
    fill_row(ui, 5, "scratch", "json")
    page.locator("#field-rows .field-row").nth(5).locator(".remove-field").click()  # removed again
    page.click("#add-field")  # a row left blank is not a field
    page.fill("#rule-input-list_rule", 'status = "published"')
    page.check("#lock-delete_rule")
    page.click("#save-collection")
    page.wait_for_url(ui.base + f"/_/collections/{name}/edit")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} created")
    expect(page.locator("#field-rows .field-row")).to_have_count(5)

    created = collection_named(api, name)
    assert created is not None and created["type"] == "base"
    fields = {f["name"]: f for f in created["schema"]["fields"]}
    assert [f["name"] for f in created["schema"]["fields"]] == ["title", "views", "status", "published", "author"]
    assert {n: f["type"] for n, f in fields.items()} == {
        "title": "text", "views": "number", "status": "select", "published": "bool", "author": "relation"}
    assert {k: fields["title"]["validation"][k] for k in ("required", "unique", "min", "max", "pattern")} == {
        "required": True, "unique": True, "min": 3, "max": 80, "pattern": "^[A-Z]"}
    assert fields["views"]["validation"]["min"] == 0
    assert fields["status"]["values"] == ["draft", "published"]
    assert fields["author"]["collection_id"] == target["id"] and fields["author"]["cascade_delete"] is True
    assert created["list_rule"] == 'status = "published"' and created["view_rule"] == ""
    assert created["delete_rule"] is None and created["create_rule"] == '@request.auth.id != ""'
    ui.watch.assert_clean()


def test_invalid_rule_is_shown_inline_and_nothing_is_created(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    ui.watch.allow(UNPROCESSABLE)
    name = unique("notes")
    ui.goto("/_/collections/new")
    page.fill("#collection-name", name)
    fill_row(ui, 0, "body", "editor")
    fill_row(ui, 1, "owner", "text")
    expect(page.locator("#suggest-data option[value='@request.data.owner']")).to_have_count(1)  # suggestions follow
    page.fill("#rule-input-view_rule", "nope = @request.auth.id")
    page.click("#save-collection")
    expect(page.locator("#rule-view_rule-error")).to_contain_text("nope")
    expect(page.locator("#form-error")).to_be_visible()
    # What was typed is still there, to fix.
    expect(page.locator("#collection-name")).to_have_value(name)
    expect(page.locator("#rule-input-view_rule")).to_have_value("nope = @request.auth.id")
    expect(page.locator("#field-rows .field-row")).to_have_count(2)
    assert collection_named(api, name) is None

    # A field error lands on its row; a bad number on its key.
    page.locator("#field-rows .field-row").nth(1).locator("input.field-name").fill("id")
    page.locator("#field-rows .field-row").nth(0).locator("input[name$=-max]").fill("lots")
    page.fill("#rule-input-view_rule", "")
    page.click("#save-collection")
    expect(page.locator("#field-0-error")).to_contain_text("validation.max")
    page.locator("#field-rows .field-row").nth(0).locator("input[name$=-max]").fill("")
    page.click("#save-collection")
    expect(page.locator("#field-1-error")).to_contain_text("reserved")
    assert collection_named(api, name) is None
    ui.watch.assert_clean()


def test_owner_rule_changes_an_auth_users_list(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    members, notes = unique("members"), unique("notes")
    status, body = api.call("POST", "/api/v1/collections", {"name": members, "type": "auth", "schema": []})
    assert status == 201, body
    tokens, ids = {}, {}
    for who in ("ann", "bob"):
        email = f"{who}-{uuid.uuid4().hex[:6]}@example.com"
        status, body = api.call("POST", f"/api/v1/collections/{members}/auth/register",
                                {"email": email, "password": "member-password-1"})
        assert status == 201, body
        status, body = api.call("POST", f"/api/v1/collections/{members}/auth/login",
                                {"email": email, "password": "member-password-1"})
        assert status == 200, body
        tokens[who], ids[who] = body["token"]["access_token"], body["user"]["id"]
    status, body = api.call("POST", "/api/v1/collections", {
        "name": notes, "schema": [{"name": "text", "type": "text"}, {"name": "owner", "type": "text"}]})
    assert status == 201, body
    for owner, text in (("ann", "a1"), ("ann", "a2"), ("bob", "b1")):
        status, body = api.call("POST", f"/api/v1/collections/{notes}/records",
                                {"data": {"text": text, "owner": ids[owner]}})
        assert status == 201, body

    def ann_sees() -> list[str]:
        status, listing = api.call("GET", f"/api/v1/collections/{notes}/records", token=tokens["ann"])
        assert status == 200, listing
        return sorted(item["text"] for item in listing["items"])

    assert ann_sees() == ["a1", "a2", "b1"]

    ui.goto("/_/collections")
    page.locator(f'tr[data-collection="{notes}"] a.edit').click()
    page.wait_for_url(ui.base + f"/_/collections/{notes}/edit")
    expect(page.locator("#rule-input-list_rule")).to_have_value("")
    expect(page.locator("#suggest option[value=owner]")).to_have_count(1)
    page.fill("#rule-input-list_rule", "owner = @request.auth.id")
    page.click("#save-collection")
    expect(page.locator(".flash")).to_have_text(f"Collection {notes} saved")
    expect(page.locator("#rule-input-list_rule")).to_have_value("owner = @request.auth.id")

    assert collection_named(api, notes)["list_rule"] == "owner = @request.auth.id"  # type: ignore[index]
    assert ann_sees() == ["a1", "a2"]
    status, listing = api.call("GET", f"/api/v1/collections/{notes}/records", token=tokens["bob"])
    assert status == 200 and [item["text"] for item in listing["items"]] == ["b1"]
    ui.watch.assert_clean()


def test_stored_html_in_rules_and_names_is_shown_as_text(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    ui.watch.allow(UNPROCESSABLE)
    payload = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    rule = f'title = "{payload}"'
    name = unique("xss")
    status, body = api.call("POST", "/api/v1/collections", {
        "name": name, "schema": [{"name": "title", "type": "text"}], "view_rule": rule})
    assert status == 201, body
    ui.goto(f"/_/collections/{name}/edit")
    expect(page.locator("#rule-input-view_rule")).to_have_value(rule)
    assert page.locator("img").count() == 0

    # A name that is HTML is refused by the service and shown back as text.
    ui.goto("/_/collections/new")
    page.fill("#collection-name", payload)
    fill_row(ui, 0, "title", "text")
    page.click("#save-collection")
    expect(page.locator("#error-name")).to_be_visible()
    expect(page.locator("#collection-name")).to_have_value(payload)
    assert page.locator("img").count() == 0
    assert page.locator("script:not([src])").count() == 0
    assert collection_named(api, payload) is None
    ui.watch.assert_clean()  # no dialog opened


def test_delete_collection_after_confirmation(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    ui.watch.allow(UNPROCESSABLE)
    name = unique("trash")
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "schema": [{"name": "t", "type": "text"}]})
    assert status == 201, body
    ui.goto(f"/_/collections/{name}/edit")
    page.click("#delete-collection")
    page.fill("#confirm-name", "not-the-name")
    page.click("#confirm-delete")
    expect(page.locator("div.error")).to_contain_text("Type the collection's name")
    assert collection_named(api, name) is not None
    page.fill("#confirm-name", name)
    page.click("#confirm-delete")
    page.wait_for_url(ui.base + "/_/collections")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} deleted")
    expect(page.locator(f'tr[data-collection="{name}"]')).to_have_count(0)
    assert collection_named(api, name) is None
    assert api.call("GET", f"/api/v1/collections/{body['id']}")[0] == 404
    ui.watch.assert_clean()


def test_auth_collection_type_switches_and_default_rules(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    name = unique("people")
    ui.goto("/_/collections/new")
    expect(page.locator("#auth-switches")).to_be_hidden()  # base collections have no sign-in methods
    page.fill("#collection-name", name)
    page.select_option("#collection-type", "auth")
    expect(page.locator("#auth-switches")).to_be_visible()
    expect(page.locator("#rule-input-list_rule")).to_have_value("id = @request.auth.id")  # the auth defaults
    expect(page.locator("#lock-create_rule")).to_be_checked()
    page.select_option("#switch-otp_enabled", "on")
    page.select_option("#switch-mfa_enabled", "off")
    fill_row(ui, 0, "nickname", "text")
    fill_row(ui, 1, "born", "date")
    fill_row(ui, 2, "site", "url")
    fill_row(ui, 3, "avatar", "file").locator("input[name$=-max_select]").fill("2")
    page.click("#save-collection")
    page.wait_for_url(ui.base + f"/_/collections/{name}/edit")
    created = collection_named(api, name)
    assert created is not None and created["type"] == "auth"
    assert [(f["name"], f["type"]) for f in created["schema"]["fields"]] == [
        ("nickname", "text"), ("born", "date"), ("site", "url"), ("avatar", "file")]
    assert created["schema"]["fields"][3]["max_select"] == 2
    assert created["otp_enabled"] is True and created["mfa_enabled"] is False
    assert created["list_rule"] == "id = @request.auth.id" and created["create_rule"] is None

    expect(page.locator("#switch-otp_enabled")).to_be_checked()
    page.uncheck("#switch-otp_enabled")
    page.check("#switch-mfa_enabled")
    page.click("#save-collection")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} saved")
    changed = collection_named(api, name)
    assert changed is not None and changed["otp_enabled"] is False and changed["mfa_enabled"] is True
    ui.watch.assert_clean()
