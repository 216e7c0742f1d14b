"""Users of an auth collection (issue 15, scenario S8): the list with the verified flag, marking a
user verified, a user's sessions, and revoking them all so the REST API refuses the user's token."""

from __future__ import annotations

import uuid
from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage

PASSWORD = "member-password-1"


def auth_collection(api: Api) -> str:
    name = f"members_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {
        "name": name, "type": "auth", "schema": [{"name": "nickname", "type": "text"}]})
    assert status == 201, body
    return name


def register(api: Api, collection: str, nickname: str = "x") -> dict[str, Any]:
    email = f"m-{uuid.uuid4().hex[:8]}@example.com"
    status, body = api.call("POST", f"/api/v1/collections/{collection}/auth/register",
                            {"email": email, "password": PASSWORD, "nickname": nickname}, token="-")
    assert status == 201, body
    user: dict[str, Any] = body["user"]
    return user


def login(api: Api, collection: str, email: str) -> str:
    status, body = api.call("POST", f"/api/v1/collections/{collection}/auth/login",
                            {"email": email, "password": PASSWORD}, token="-")
    assert status == 200, body
    return str(body["token"]["access_token"])


def test_revoke_all_sessions_of_a_user(admin_page: BrowserPage, api: Api):
    ui = admin_page.page
    collection = auth_collection(api)
    user = register(api, collection)
    other = register(api, collection)
    tokens = [login(api, collection, user["email"]) for _ in range(2)]
    other_token = login(api, collection, other["email"])
    me = f"/api/v1/collections/{collection}/auth/me"
    assert all(api.call("GET", me, token=t)[0] == 200 for t in tokens)

    admin_page.goto(f"/_/collections/{collection}/users")
    row = ui.locator(f'tr[data-id="{user["id"]}"]')
    expect(row.locator(".email")).to_have_text(user["email"])
    expect(row.locator(".verified .badge")).to_have_text("unverified")
    row.locator(".email a").click()
    expect(ui.locator("#user-email")).to_have_text(user["email"])
    expect(ui.locator("#session-count")).to_have_text("2")
    status, sessions = api.call("GET", f"/api/v1/collections/{collection}/auth/sessions", token=tokens[0])
    assert status == 200
    assert {s["id"] for s in sessions} == set(ui.locator("#sessions tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.id)"))

    ui.click("#revoke-all")
    expect(ui.locator("#confirm-revoke-all")).to_contain_text(user["email"])
    ui.click("#confirm-revoke-all button[type=submit]")
    expect(ui.locator(".flash")).to_have_text(f"Revoked 2 sessions of {user['email']}")
    expect(ui.locator("#no-sessions")).to_be_visible()

    assert all(api.call("GET", me, token=t)[0] == 401 for t in tokens)  # refused at once
    assert api.call("GET", me, token=other_token)[0] == 200  # another user keeps theirs
    assert api.call("GET", me, token=login(api, collection, user["email"]))[0] == 200  # may sign in again
    assert_audited_by_admin(api, "session_revoked", user["id"])
    admin_page.watch.assert_clean()


def assert_audited_by_admin(api: Api, event: str, target_user_id: str) -> None:
    """The newest `event` entry names the signed-in admin as its user and the target in its details."""
    status, admin = api.call("GET", "/api/v1/auth/me")
    assert status == 200
    status, audit = api.call("GET", f"/api/v1/audit?event_type={event}&limit=20")
    assert status == 200, audit
    ours = [e for e in audit["items"] if e["details"].get("target_user_id") == target_user_id]
    assert ours and ours[0]["user_id"] == admin["id"], audit["items"]


def test_mark_a_user_verified(admin_page: BrowserPage, api: Api):
    ui = admin_page.page
    collection = auth_collection(api)
    user = register(api, collection, nickname="<img src=x onerror=alert(1)>")
    assert user["verified"] is False
    admin_page.goto(f"/_/collections/{collection}/users")
    expect(ui.locator("#user-total")).to_have_text("1 user")
    row = ui.locator(f'tr[data-id="{user["id"]}"]')
    row.locator("form.verify button").click()
    expect(ui.locator(".flash")).to_have_text(f"{user['email']} is verified")
    expect(ui.locator("#user-verified .badge")).to_have_text("verified")
    expect(ui.locator("#user")).to_contain_text("<img src=x onerror=alert(1)>")  # shown as text
    assert ui.locator("#user img").count() == 0

    status, record = api.call("GET", f"/api/v1/collections/{collection}/records/{user['id']}")
    assert status == 200 and record["verified"] is True
    assert api.call("GET", f"/api/v1/collections/{collection}/auth/me",
                    token=login(api, collection, user["email"]))[1]["verified"] is True
    admin_page.goto(f"/_/collections/{collection}/users?email={user['email'].upper()}")
    expect(ui.locator("#user-total")).to_have_text("1 user")
    expect(ui.locator(f'tr[data-id="{user["id"]}"] .verified .badge')).to_have_text("verified")
    assert_audited_by_admin(api, "email_verified", user["id"])
    admin_page.watch.assert_clean()
