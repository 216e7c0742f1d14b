"""The admin UI in a real browser (issue 15): sign-in, sign-out, role `user` refused, CSRF,
security headers, escaping of stored text, session refresh and revocation."""

from __future__ import annotations

import uuid

import pyotp

from tests.ui.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, Api, BrowserPage

ADMIN_PAGES = ("/_/", "/_/collections", "/_/collections/posts/records", "/_/collections/people/users",
               "/_/webhooks", "/_/api-keys", "/_/settings", "/_/audit", "/_/logs", "/_/backups")
CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"


def session_cookie(ui: BrowserPage) -> str:
    return str(next(c["value"] for c in ui.context.cookies() if c["name"] == "cms_admin"))


def active_sessions(api: Api, ui: BrowserPage) -> int:
    status, sessions = api.call("GET", "/api/v1/auth/sessions", token=session_cookie(ui).split("~")[0])
    return len(sessions) if status == 200 else 0


def test_sign_in_and_wrong_password(page: BrowserPage):
    page.watch.allow(r"status of 401")
    page.sign_in(ADMIN_EMAIL, "not-the-password")
    assert page.page.url.endswith("/_/login")
    assert page.page.locator("#login-error").inner_text() == "Wrong email or password."
    assert not [c for c in page.context.cookies() if c["name"] == "cms_admin"]

    page.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    assert page.page.url == page.base + "/_/"
    assert page.page.locator("h1").inner_text() == "Dashboard"
    assert page.page.locator("#health .badge").inner_text() == "ok"
    assert page.page.locator("#queue-depth").inner_text().isdigit()
    cookie = next(c for c in page.context.cookies() if c["name"] == "cms_admin")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/_/"
    for label in ("Dashboard", "Collections", "Webhooks", "API keys", "Settings", "Audit log", "Request logs",
                  "Backups"):
        assert page.page.locator("nav.side").get_by_role("link", name=label, exact=True).count() == 1
    page.watch.assert_clean()


def test_sign_out_revokes_the_session(page: BrowserPage, api: Api):
    page.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    access_token = session_cookie(page).split("~")[0]
    assert api.call("GET", "/api/v1/auth/me", token=access_token)[0] == 200
    page.page.click("#sign-out")
    page.page.wait_for_url(page.base + "/_/login")
    assert page.page.locator(".flash").inner_text() == "You are signed out."
    assert api.call("GET", "/api/v1/auth/me", token=access_token)[0] == 401  # the session is revoked
    page.goto("/_/collections")
    assert page.page.url == page.base + "/_/login?next=/_/collections"
    page.watch.assert_clean()


def test_role_user_is_refused_on_every_admin_page(page: BrowserPage, api: Api):
    page.watch.allow(r"status of 403")
    email = f"user-{uuid.uuid4().hex[:8]}@example.com"
    status, body = api.call("POST", "/api/v1/auth/register", {"email": email, "password": "user-password-1"})
    assert status == 201, body
    page.sign_in(email, "user-password-1")
    for path in ADMIN_PAGES:
        response = page.goto(path)
        assert response.status == 403, path
        assert "role admin" in page.page.locator("#error-message").inner_text()
        assert page.page.locator("nav.side").count() == 0  # no admin navigation either
    page.watch.assert_clean()


def test_state_change_without_the_csrf_token_is_refused(admin_page: BrowserPage, api: Api, browser, ui_server):
    ui = browser.new_context(base_url=ui_server.url)  # a session of its own: the shared one must stay
    own = BrowserPage(page=ui.new_page(), context=ui, watch=admin_page.watch, base=ui_server.url)
    own.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    before = active_sessions(api, own)
    access_token = session_cookie(own).split("~")[0]
    for headers, form in (({}, {}), ({"X-CSRF-Token": "0" * 64}, {}), ({}, {"csrf_token": "forged"})):
        response = own.page.request.post(ui_server.url + "/_/logout", headers=headers, form=form or None,
                                         max_redirects=0)
        assert response.status == 403
        assert "CSRF" in response.text()
        assert response.headers["content-security-policy"] == CSP
    assert active_sessions(api, own) == before  # still signed in: nothing changed
    assert own.goto("/_/").status == 200

    # the sign-in form needs its pre-session token too: no cookie is set without it
    response = own.page.request.post(ui_server.url + "/_/login", max_redirects=0,
                                     form={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD, "csrf_token": "x"})
    assert response.status == 403
    assert "cms_admin=" not in response.headers.get("set-cookie", "")

    # htmx requests carry the token from <meta name="csrf-token"> (app.js): this one signs out
    # (not awaiting htmx.ajax's promise: the sign-out navigates, which would end the evaluation)
    own.page.evaluate("() => { htmx.ajax('POST', '/_/logout', {swap: 'none'}); }")
    own.page.wait_for_url(ui_server.url + "/_/login")
    assert api.call("GET", "/api/v1/auth/me", token=access_token)[0] == 401
    ui.close()
    admin_page.goto("/_/")
    admin_page.watch.assert_clean()


def test_security_headers(admin_page: BrowserPage):
    response = admin_page.goto("/_/collections")
    headers = response.headers
    assert headers["content-security-policy"] == CSP
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["cache-control"] == "no-store"
    login = admin_page.page.request.get(admin_page.base + "/_/login", max_redirects=0)
    assert login.headers["content-security-policy"] == CSP
    asset = admin_page.page.request.get(admin_page.base + "/_/static/htmx.min.js")
    assert asset.status == 200 and asset.headers["content-security-policy"] == CSP
    assert "no-store" not in asset.headers.get("cache-control", "")
    inline = admin_page.page.locator("script:not([src]), style, [style]")
    assert inline.count() == 0
    config = admin_page.page.evaluate("[htmx.config.includeIndicatorStyles, htmx.config.allowEval, htmx.version]")
    assert config == [False, False, "2.0.11"]
    admin_page.watch.assert_clean()


def test_stored_html_is_shown_as_text(admin_page: BrowserPage, api: Api):
    payload = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    rule = f'title = "{payload}"'
    name = f"xss_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {
        "name": name, "schema": [{"name": "title", "type": "text"}], "list_rule": rule})
    assert status == 201, body
    assert body["list_rule"] == rule
    admin_page.goto("/_/collections")
    row = admin_page.page.locator(f'tr[data-collection="{name}"]')
    assert payload in row.locator(".rules").inner_text()
    assert admin_page.page.locator("img").count() == 0
    assert admin_page.page.locator("script").count() == 2  # htmx and app.js only
    admin_page.watch.assert_clean()  # no dialog opened


def test_expired_access_token_is_refreshed_and_revocation_is_immediate(page: BrowserPage, api: Api):
    page.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    access, refresh = session_cookie(page).split("~")
    page.context.add_cookies([{"name": "cms_admin", "value": f"not-a-valid-token~{refresh}",
                               "url": page.base + "/_/"}])
    assert page.goto("/_/collections").status == 200  # refreshed through the refresh service
    new_access, new_refresh = session_cookie(page).split("~")
    assert new_refresh != refresh and new_access != access

    status, sessions = api.call("GET", "/api/v1/auth/sessions", token=new_access)
    current = next(s["id"] for s in sessions if s["current"])
    assert api.call("DELETE", f"/api/v1/auth/sessions/{current}", token=new_access)[0] == 204  # this one only
    page.goto("/_/collections")
    assert page.page.url == page.base + "/_/login?next=/_/collections"
    page.watch.assert_clean()


def test_two_factor_sign_in(page: BrowserPage, api: Api):
    page.watch.allow(r"status of (400|403)")
    email, password = f"mfa-{uuid.uuid4().hex[:8]}@example.com", "user-password-1"
    assert api.call("POST", "/api/v1/auth/register", {"email": email, "password": password})[0] == 201
    assert api.call("POST", "/api/v1/settings", {"key": "mfa_enabled", "value": True})[0] == 200
    try:
        access = api.login(email, password)["access_token"]
        status, setup = api.call("POST", "/api/v1/auth/2fa/setup", {}, token=access)
        assert status == 200, setup
        code = pyotp.TOTP(setup["secret"]).now()
        status, enabled = api.call("POST", "/api/v1/auth/2fa/enable", {"code": code}, token=access)
        assert status == 200, enabled

        page.sign_in(email, password)
        assert page.page.locator("#two-factor-form").count() == 1
        assert not [c for c in page.context.cookies() if c["name"] == "cms_admin"]
        page.page.fill("input[name=code]", "000000")
        page.page.click("button[type=submit]")
        assert page.page.locator("#login-error").inner_text() == "Wrong code; try again."
        page.page.fill("input[name=code]", enabled["recovery_codes"][0])
        page.page.click("button[type=submit]")
        page.page.wait_for_load_state()
        assert page.page.url == page.base + "/_/"
        status, me = api.call("GET", "/api/v1/auth/me", token=session_cookie(page).split("~")[0])
        assert status == 200 and me["email"] == email
    finally:
        api.call("POST", "/api/v1/settings", {"key": "mfa_enabled", "value": False})
    page.watch.assert_clean()
