"""Field rules in the admin UI (issue 37, item 2; decisions.md, Field rules), in a real browser: a field's
`view_rule` and `write_rule` and an auth collection's `email_view_rule` set in the collection editor and
stored (read back through the API, and shown again on the edit page), a bad field rule shown in its
row with nothing stored; and a record's "view as" page, which shows the fields a user of an auth
collection (or an anonymous caller) would see and those their field rules hide, as the REST API
answers that user. With CMS_UI_README_SHOTS=1 the editor's rows and the view-as page are saved as
docs/screenshots/field-rules-editor.png and view-as.png (docs/admin-ui.md)."""

from __future__ import annotations

import os
import uuid
from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage
from tests.ui.test_audit_ui import README_SHOTS, README_VIEWPORT, readme_screenshot
from tests.ui.test_collections_ui import UNPROCESSABLE, collection_named, unique

PASSWORD = "member-password-1"


def readme_element_shot(ui: BrowserPage, selector: str, name: str) -> None:
    """With CMS_UI_README_SHOTS=1, save the element `selector` (at the docs' viewport width) as
    docs/screenshots/<name>.png."""
    if os.environ.get("CMS_UI_README_SHOTS") != "1":
        return
    README_SHOTS.mkdir(parents=True, exist_ok=True)
    ui.page.set_viewport_size(README_VIEWPORT)
    ui.page.locator(selector).screenshot(path=str(README_SHOTS / f"{name}.png"), animations="disabled")


def fields_of(api: Api, name: str) -> dict[str, dict[str, Any]]:
    collection = collection_named(api, name)
    assert collection is not None
    return {f["name"]: f for f in collection["schema"]["fields"]}


def make(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    status, created = api.call("POST", "/api/v1/collections", body)
    assert status == 201, created
    return dict(created)


def register(api: Api, collection: str, who: str) -> tuple[str, str, str]:
    """A new user of `collection`: (id, email, access token)."""
    email = f"{who}-{uuid.uuid4().hex[:6]}@example.com"
    status, body = api.call("POST", f"/api/v1/collections/{collection}/auth/register",
                            {"email": email, "password": PASSWORD})
    assert status == 201, body
    status, body = api.call("POST", f"/api/v1/collections/{collection}/auth/login",
                            {"email": email, "password": PASSWORD})
    assert status == 200, body
    return body["user"]["id"], email, body["token"]["access_token"]


def test_field_rules_set_in_the_editor_are_stored_and_a_bad_one_is_shown_in_its_row(admin_page: BrowserPage,
                                                                                      api: Api):
    ui, page = admin_page, admin_page.page
    ui.watch.allow(UNPROCESSABLE)
    name = unique("notes")
    make(api, {"name": name, "schema": [{"name": "title", "type": "text"}, {"name": "secret", "type": "text"},
                                         {"name": "owner", "type": "text"}]})
    ui.goto(f"/_/collections/{name}/edit")
    expect(page.locator("#field-1-view_rule")).to_have_attribute("placeholder", "no restriction")
    page.fill("#field-1-view_rule", "owner = @request.auth.id")
    page.fill("#field-1-write_rule", "@request.data.owner = @request.auth.id")
    page.check("#field-2-write_rule_locked")
    expect(page.locator("#field-2-write_rule")).to_have_attribute("readonly", "")
    expect(page.locator("#field-2-write_rule")).to_have_attribute("placeholder", "admins only")
    expect(page.locator("#rule-email_view_rule")).to_be_hidden()  # base collections have no email
    page.click("#save-collection")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} saved")

    stored = fields_of(api, name)
    assert stored["secret"]["view_rule"] == "owner = @request.auth.id"
    assert stored["secret"]["write_rule"] == "@request.data.owner = @request.auth.id"
    assert stored["owner"]["write_rule"] is None and stored["owner"]["view_rule"] == ""
    assert stored["title"]["view_rule"] == "" and stored["title"]["write_rule"] == ""
    # The edit page shows the stored rules again.
    expect(page.locator("#field-1-view_rule")).to_have_value("owner = @request.auth.id")
    expect(page.locator("#field-1-write_rule")).to_have_value("@request.data.owner = @request.auth.id")
    expect(page.locator("#field-2-write_rule_locked")).to_be_checked()
    expect(page.locator("#field-0-view_rule_locked")).not_to_be_checked()

    # A rule naming a field that does not exist: the service's message beside that rule of that row.
    page.fill("#field-0-view_rule", "nope = @request.auth.id")
    page.click("#save-collection")
    expect(page.locator("#field-0-view_rule-error")).to_contain_text("unknown field 'nope'")
    expect(page.locator("#form-error")).to_be_visible()
    expect(page.locator("#field-1-view_rule-error")).to_have_count(0)
    expect(page.locator("#field-0-view_rule")).to_have_value("nope = @request.auth.id")  # kept, to fix
    assert fields_of(api, name)["title"]["view_rule"] == ""  # nothing stored
    # A write rule may read @request.data, a view rule may not: refused in the row that has it.
    page.fill("#field-0-view_rule", "")
    page.fill("#field-2-view_rule", "@request.data.owner = 'x'")
    page.click("#save-collection")
    expect(page.locator("#field-2-view_rule-error")).to_contain_text("@request.data")
    expect(page.locator("#field-0-view_rule-error")).to_have_count(0)
    assert fields_of(api, name)["owner"]["view_rule"] == ""
    readme_element_shot(ui, "#schema", "field-rules-editor")

    # A row added in the page gets working rule inputs too.
    page.fill("#field-2-view_rule", "")
    page.click("#add-field")
    page.locator("#field-rows .field-row").nth(3).locator("input.field-name").fill("note")
    page.check("#field-3-view_rule_locked")
    page.click("#save-collection")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} saved")
    assert fields_of(api, name)["note"]["view_rule"] is None
    ui.watch.assert_clean()


def test_email_view_rule_of_an_auth_collection(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    ui.watch.allow(UNPROCESSABLE)
    name = unique("members")
    make(api, {"name": name, "type": "auth", "schema": [{"name": "nick", "type": "text"}]})
    ui.goto(f"/_/collections/{name}/edit")
    expect(page.locator("#rule-input-email_view_rule")).to_have_value("id = @request.auth.id")  # the default
    page.fill("#rule-input-email_view_rule", "nope = 1")
    page.click("#save-collection")
    expect(page.locator("#rule-email_view_rule-error")).to_contain_text("nope")
    assert collection_named(api, name)["email_view_rule"] == "id = @request.auth.id"  # type: ignore[index]
    page.fill("#rule-input-email_view_rule", "@request.auth.verified = true")
    page.click("#save-collection")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} saved")
    assert collection_named(api, name)["email_view_rule"] == "@request.auth.verified = true"  # type: ignore[index]
    expect(page.locator("#rule-input-email_view_rule")).to_have_value("@request.auth.verified = true")
    page.check("#lock-email_view_rule")
    page.click("#save-collection")
    expect(page.locator(".flash")).to_have_text(f"Collection {name} saved")
    assert collection_named(api, name)["email_view_rule"] is None  # type: ignore[index]
    ui.watch.assert_clean()


def shown_fields(ui: BrowserPage) -> dict[str, bool]:
    rows = ui.page.locator("#view-as-fields tbody tr")
    return {str(r["field"]): r["shown"] == "true"
            for r in rows.evaluate_all("rows => rows.map(r => ({field: r.dataset.field, shown: r.dataset.shown}))")}


def test_view_as_shows_hidden_and_shown_fields_as_the_api_answers_that_user(admin_page: BrowserPage, api: Api):
    ui, page = admin_page, admin_page.page
    ui.watch.allow(r"status of 404")
    members, notes = unique("members"), unique("notes")
    make(api, {"name": members, "type": "auth", "schema": []})
    ann_id, ann_email, ann_token = register(api, members, "ann")
    bob_id, bob_email, bob_token = register(api, members, "bob")
    make(api, {"name": notes, "list_rule": "", "view_rule": "", "schema": [
        {"name": "title", "type": "text"}, {"name": "owner", "type": "text"},
        {"name": "secret", "type": "text", "view_rule": "owner = @request.auth.id"},
        {"name": "internal", "type": "text", "view_rule": None}]})
    status, record = api.call("POST", f"/api/v1/collections/{notes}/records",
                              {"data": {"title": "hello", "owner": ann_id, "secret": "s3cret", "internal": "x"}})
    assert status == 201, record

    ui.goto(f"/_/collections/{notes}/records/{record['id']}")
    page.select_option("#view-as-collection", members)
    page.fill("#view-as-user", bob_email)
    page.click("#view-as-submit")
    page.wait_for_url(f"**/records/{record['id']}/view-as?*")
    expect(page.locator("#view-as-who")).to_have_text(bob_email)
    expect(page.locator("#view-as-record")).to_contain_text("can see this record")
    assert shown_fields(ui) == {"title": True, "owner": True, "secret": False, "internal": False}
    expect(page.locator('tr[data-field="title"] td.value')).to_have_text("hello")
    expect(page.locator('tr[data-field="secret"] td.value')).not_to_contain_text("s3cret")
    # The REST API answers bob the same.
    status, seen = api.call("GET", f"/api/v1/collections/{notes}/records/{record['id']}", token=bob_token)
    assert status == 200 and "secret" not in seen and "internal" not in seen and seen["title"] == "hello"
    readme_screenshot(page, "view-as")

    # ann, by id, owns it: the secret is shown to her; the admins-only field is not.
    page.select_option("#view-as-collection", members)
    page.fill("#view-as-user", ann_id)
    page.click("#view-as-submit")
    expect(page.locator("#view-as-who")).to_have_text(ann_email)
    assert shown_fields(ui) == {"title": True, "owner": True, "secret": True, "internal": False}
    status, seen = api.call("GET", f"/api/v1/collections/{notes}/records/{record['id']}", token=ann_token)
    assert status == 200 and seen["secret"] == "s3cret" and "internal" not in seen

    # Anonymous: the public fields only.
    page.select_option("#view-as-collection", "")
    page.fill("#view-as-user", "")
    page.click("#view-as-submit")
    expect(page.locator("#view-as-who")).to_have_text("anonymous")
    assert shown_fields(ui) == {"title": True, "owner": True, "secret": False, "internal": False}

    # Someone who is not a user: said beside the form, no result.
    page.select_option("#view-as-collection", members)
    page.fill("#view-as-user", "nobody@example.com")
    page.click("#view-as-submit")
    expect(page.locator("#view-as-error")).to_contain_text("No user 'nobody@example.com'")
    expect(page.locator("#view-as-result")).to_have_count(0)

    # A user's own record: bob may not see ann's at all (the auth view rule), nor her email.
    ui.goto(f"/_/collections/{members}/records/{ann_id}/view-as?as={members}&user={bob_id}")
    expect(page.locator("#view-as-record")).to_contain_text("cannot see this record")
    assert shown_fields(ui) == {"email": False}
    assert api.call("GET", f"/api/v1/collections/{members}/records/{ann_id}", token=bob_token)[0] == 404
    ui.goto(f"/_/collections/{members}/records/{ann_id}/view-as?as={members}&user={ann_id}")
    expect(page.locator("#view-as-record")).to_contain_text("can see this record")
    assert shown_fields(ui) == {"email": True}
    expect(page.locator('tr[data-field="email"] td.value')).to_have_text(ann_email)
    ui.watch.assert_clean()


def test_view_as_is_for_admins_only(page: BrowserPage, api: Api):
    page.watch.allow(r"status of 403")
    members, notes = unique("members"), unique("notes")
    make(api, {"name": members, "type": "auth", "schema": []})
    ann_id, _, _ = register(api, members, "ann")
    make(api, {"name": notes, "schema": [{"name": "title", "type": "text"}]})
    status, record = api.call("POST", f"/api/v1/collections/{notes}/records", {"data": {"title": "t"}})
    assert status == 201, record
    email = f"user-{uuid.uuid4().hex[:8]}@example.com"  # an admin-table user of role `user`
    status, body = api.call("POST", "/api/v1/auth/register", {"email": email, "password": "user-password-1"})
    assert status == 201, body
    page.sign_in(email, "user-password-1")
    response = page.goto(f"/_/collections/{notes}/records/{record['id']}/view-as?as={members}&user={ann_id}")
    assert response.status == 403
    assert page.page.locator("#view-as-result").count() == 0
    page.watch.assert_clean()
