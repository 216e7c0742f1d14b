"""No secret comes back from the API, nor reaches the audit log, the webhook delivery log, the
backups' listing or the process's log (issue 28, item 3: secrets in logs and listings; STYLE rule
16: "Tokens, passwords and secrets are never logged").

One test does what a busy day does (sign-ups, a wrong password, a reset, 2FA, a refresh, an API
key, a signed webhook delivered, a backup), keeping every secret it handles, then reads every
listing an admin may read and the captured log, and finds none of them. A secret is shown once,
to its owner, where it is made (the API key's `key`, the 2FA `secret`): those answers are not
read again."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pyotp
import pytest
from aiohttp import web

from tests.conftest import USER_PASSWORD, bearer, create_collection, create_record, link_token

PEOPLE = "/api/v1/collections/people/auth"
ALICE = "alice@example.com"
WRONG_PASSWORD = "wrong-but-secret-password-7"
NEW_PASSWORD = "new-secret-password-8"
WEBHOOK_SECRET = "whsec-signing-secret-0123456789"


@pytest.fixture
def config(config):
    """Webhook receivers run on loopback."""
    return replace(config, webhook_allow_private=True)


@pytest.fixture
async def receiver(aiohttp_server) -> str:
    """A receiver that answers with every header it got (as a careless one would)."""

    async def handle(request: web.Request) -> web.Response:
        return web.json_response(dict(request.headers))

    app = web.Application()
    app.router.add_post("/hook", handle)
    return str((await aiohttp_server(app)).make_url("/hook"))


async def ok(response: Any, status: int = 200) -> Any:
    assert response.status == status, await response.text()
    return await response.json()


async def busy_day(client, admin_token, services, mailbox, run_jobs, clock, receiver) -> dict[str, str]:
    """Everything that handles a secret, done once; returns each secret by name."""
    secrets = {"password": USER_PASSWORD, "wrong_password": WRONG_PASSWORD, "new_password": NEW_PASSWORD,
               "webhook_secret": WEBHOOK_SECRET}
    await create_collection(client, admin_token, "people", [], type="auth", mfa_enabled=True,
                            list_rule="", view_rule="")
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    webhook = await ok(await client.post("/api/v1/webhooks", headers=bearer(admin_token), json={
        "url": receiver, "collection_name": "posts", "events": ["create"], "secret": WEBHOOK_SECRET}), 201)
    key = await ok(await client.post("/api/v1/api-keys", headers=bearer(admin_token),
                                     json={"name": "ci", "scopes": ["read", "write"]}), 201)
    secrets["api_key"] = key["key"]
    await ok(await client.post(f"{PEOPLE}/register", json={"email": ALICE, "password": USER_PASSWORD}), 201)
    assert (await client.post(f"{PEOPLE}/login", json={"email": ALICE, "password": WRONG_PASSWORD})).status == 401
    login = await ok(await client.post(f"{PEOPLE}/login", json={"email": ALICE, "password": USER_PASSWORD}))
    secrets["access_token"] = login["token"]["access_token"]
    secrets["refresh_token"] = login["token"]["refresh_token"]
    refreshed = await ok(await client.post(f"{PEOPLE}/refresh", json={"refresh_token": secrets["refresh_token"]}))
    secrets["second_refresh_token"] = refreshed["refresh_token"]
    access = refreshed["access_token"]
    setup = await ok(await client.post(f"{PEOPLE}/2fa/setup", headers=bearer(access), json={}))
    secrets["totp_secret"] = setup["secret"]
    enabled = await ok(await client.post(f"{PEOPLE}/2fa/enable", headers=bearer(access),
                                         json={"code": pyotp.TOTP(setup["secret"]).at(clock())}))
    secrets.update({f"recovery_{n}": code for n, code in enumerate(enabled["recovery_codes"])})
    await ok(await client.post("/api/v1/auth/request-password-reset", json={"email": ALICE, "collection": "people"}))
    await create_record(client, admin_token, "posts", {"title": "delivered"})
    await run_jobs()
    for message in mailbox.to(ALICE):
        secrets[f"mail_token_{len(secrets)}"] = link_token(message)
    reset_token = link_token(mailbox.to(ALICE)[-1])
    await ok(await client.post("/api/v1/auth/reset-password", json={"token": reset_token,
                                                                     "new_password": NEW_PASSWORD}))
    await ok(await client.post("/api/v1/backups", headers=bearer(admin_token)), 201)
    await run_jobs()
    user = await (await services.identity.systems.collection("people")).get(login["user"]["id"])
    secrets["password_hash"] = user.password_hash
    secrets["webhook_id"] = webhook["id"]
    return secrets


async def test_no_listing_and_no_log_line_holds_a_secret(client, admin_token, services, mailbox, run_jobs, clock,
                                                          receiver, caplog):
    caplog.set_level(logging.INFO)  # the driver's DEBUG command log is off in every deployment
    caplog.set_level(logging.DEBUG, logger="cms")
    secrets = await busy_day(client, admin_token, services, mailbox, run_jobs, clock, receiver)
    webhook_id = secrets.pop("webhook_id")
    deliveries = await ok(await client.get(f"/api/v1/webhooks/{webhook_id}/deliveries", headers=bearer(admin_token)))
    assert deliveries["items"] and all(d["success"] for d in deliveries["items"]), deliveries
    listings = ["/api/v1/audit?per_page=100", "/api/v1/audit/security?per_page=100", "/api/v1/audit/statistics",
                "/api/v1/webhooks", f"/api/v1/webhooks/{webhook_id}", f"/api/v1/webhooks/{webhook_id}/deliveries",
                "/api/v1/webhooks/deliveries/recent", "/api/v1/api-keys", "/api/v1/backups", "/api/v1/settings",
                "/api/v1/collections", "/api/v1/auth/sessions", "/api/v1/stats",
                "/api/v1/collections/people/records", "/api/v1/collections/people/records/export/csv"]
    for path in listings:
        response = await client.get(path, headers=bearer(admin_token))
        text = await response.text()
        assert response.status == 200, (path, text)
        for name, secret in secrets.items():
            assert secret not in text, f"{name} in {path}: {text[:400]}"
        assert "$argon2" not in text, (path, text[:400])  # a signature (sha256=...) is no secret
    audit = json.dumps(await ok(await client.get("/api/v1/audit?per_page=100", headers=bearer(admin_token))))
    for event_type in ("login_failed", "login_success", "password_reset_completed", "api_key_created"):
        assert event_type in audit
    logged = "\n".join(record.getMessage() + " " + repr(getattr(record, "__dict__", {})) for record in caplog.records)
    for name, secret in secrets.items():
        assert secret not in logged, f"{name} is logged"
