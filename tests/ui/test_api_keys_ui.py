"""API keys screen (issue 15, scenario S7): create a key in the UI, its secret is shown once and
works against the REST API; revoked in the UI, the REST API refuses it."""

from __future__ import annotations

import uuid

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage


def test_api_key_shown_once_and_refused_after_revoke(admin_page: BrowserPage, api: Api):
    ui = admin_page.page
    collection = f"keyed_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": collection,
                                                            "schema": [{"name": "title", "type": "text"}]})
    assert status == 201, body
    records = f"/api/v1/collections/{collection}/records"
    name = f"ci <b>key</b> {uuid.uuid4().hex[:6]}"

    admin_page.goto("/_/api-keys")
    ui.fill("#create-key input[name=name]", name)
    ui.check("#create-key input[name=scopes][value=write]")
    ui.fill("#create-key input[name=expires_at]", "2099-01-01T12:00")
    ui.click("#create-key button[type=submit]")
    secret_box = ui.locator("#new-key-secret")
    expect(secret_box).to_be_visible()
    secret = secret_box.inner_text().strip()
    assert len(secret) > 20
    row = ui.locator("#api-keys tr", has_text=name)
    expect(row).to_have_count(1)  # the name is text, not markup
    key_id = row.get_attribute("data-id")

    # the REST API knows it, without its secret, and it works
    status, keys = api.call("GET", "/api/v1/api-keys")
    listed = next(k for k in keys if k["id"] == key_id)
    assert listed["name"] == name and listed["scopes"] == ["read", "write"] and "key" not in listed
    assert listed["expires_at"].startswith("2099-01-01T12:00")
    assert api.call("GET", records, token=secret)[0] == 200
    status, created = api.call("POST", records, {"data": {"title": "by key"}}, token=secret)
    assert status == 201, created

    # reloading (and any later visit) never shows the secret again
    ui.reload()
    expect(ui.locator("#api-keys tr", has_text=name)).to_have_count(1)
    assert ui.locator("#new-key-secret").count() == 0
    assert secret not in ui.content()

    # revoke, after a confirmation page
    ui.locator(f'tr[data-id="{key_id}"] a.revoke').click()
    expect(ui.locator("#confirm-revoke")).to_contain_text(name)
    assert api.call("GET", records, token=secret)[0] == 200  # nothing changed yet
    ui.click("#confirm-revoke button[type=submit]")
    expect(ui.locator(".flash")).to_have_text("API key revoked")
    expect(ui.locator(f'tr[data-id="{key_id}"]')).to_have_count(0)
    assert api.call("GET", records, token=secret)[0] == 401
    assert key_id not in [k["id"] for k in api.call("GET", "/api/v1/api-keys")[1]]
    admin_page.watch.assert_clean()
