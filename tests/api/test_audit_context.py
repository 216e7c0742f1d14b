"""Every audit entry carries the user, client address and user agent of the request that caused it,
however it is written: directly, from an event subscriber after the commit, or from a job; only
entries with no request behind them leave address and agent empty (decisions.md, Audit context).

Each scenario provokes one event type over HTTP through a client whose every request sends a
distinctive `User-Agent`, and returns the user id the entry must name; the entry is read back
through `GET /api/v1/audit?event_type=...`."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from cms.app import create_app
from cms.services.delivery.events import AuditEvent
from cms.services.operations.audit import SEVERITIES
from cms.services.origin import RequestOrigin, origin_scope
from cms.wiring import open_services
from tests.api.test_collection_auth import AUTH as MEMBERS_AUTH
from tests.api.test_collection_auth import EMAIL as MEMBER_EMAIL
from tests.api.test_collection_auth import create_members, registered_member
from tests.api.test_password_reset import FORGOT, RESET, reset_link
from tests.api.test_two_factor import code_at, first_step, turn_on
from tests.api.test_two_factor import post as post_2fa
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, COLLECTIONS, USER_PASSWORD, bearer, link_token, login
from tests.user_systems import ADMIN_TABLE, EMAIL, PASSWORD, prepare
from workers.auth import job_origin

CLIENT_IP = "127.0.0.1"
USER_EMAIL = "audited@example.com"


@dataclass
class Env:
    """What a scenario works with: `agent` sends the distinctive User-Agent on every request,
    `client` is the suite's client (setup steps), `admin_token` / `admin_id` the fixture's admin."""

    agent: Any
    client: Any
    admin_token: str
    admin_id: str
    services: Any
    clock: Any
    run_jobs: Callable[[], Awaitable[None]]
    mailbox: Any


async def call(client: Any, method: str, path: str, status: int, auth: str | None = None, **json: Any) -> Any:
    """One request with bearer `auth` and the JSON body `json` (asserting `status`); its JSON answer, or None."""
    response = await client.request(method, path, headers=bearer(auth) if auth else {}, json=json or None)
    assert response.status == status, await response.text()
    return await response.json() if response.content_type == "application/json" else None


async def registered_user(env: Env) -> tuple[str, str]:
    """An admin-table user registered and logged in by `client`: (id, access token)."""
    user = await call(env.client, "POST", "/api/v1/auth/register", 201, email=USER_EMAIL, password=USER_PASSWORD)
    return user["user"]["id"], (await login(env.client, USER_EMAIL, USER_PASSWORD))["token"]["access_token"]


# --- one scenario per event type: provoke it through `env.agent`, return the entry's user id -----------


async def login_success(env: Env) -> str | None:
    return str((await login(env.agent, ADMIN_EMAIL, ADMIN_PASSWORD))["user"]["id"])


async def login_failed(env: Env) -> str | None:
    await call(env.agent, "POST", "/api/v1/auth/login", 401, email=ADMIN_EMAIL, password="wrong-password")
    return env.admin_id


async def logout(env: Env) -> str | None:
    token = (await login(env.agent, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"]
    await call(env.agent, "POST", "/api/v1/auth/logout", 200, token)
    return env.admin_id


async def register(env: Env) -> str | None:
    body = await call(env.agent, "POST", "/api/v1/auth/register", 201, email=USER_EMAIL, password=USER_PASSWORD)
    return str(body["user"]["id"])


async def email_verified(env: Env) -> str | None:
    user_id, _ = await registered_user(env)
    await env.run_jobs()
    await call(env.agent, "POST", "/api/v1/auth/verify-email", 200, token=link_token(env.mailbox.last_to(USER_EMAIL)))
    return user_id


async def password_reset_requested(env: Env) -> str | None:  # written by the worker's job
    user_id, _ = await registered_user(env)
    await call(env.agent, "POST", FORGOT, 200, email=USER_EMAIL)
    await env.run_jobs()
    return user_id


async def password_reset_completed(env: Env) -> str | None:
    user_id, _ = await registered_user(env)
    token = await reset_link(env.client, env.run_jobs, env.mailbox, USER_EMAIL)
    await call(env.agent, "POST", RESET, 200, token=token, new_password="brand-new-password-2")
    return user_id


async def password_changed(env: Env) -> str | None:
    user_id, token = await registered_user(env)
    await call(env.agent, "POST", "/api/v1/auth/me/change-password", 200, token, old_password=USER_PASSWORD,
               new_password="brand-new-password-2", password_confirm="brand-new-password-2")
    return user_id


async def session_revoked(env: Env) -> str | None:
    user_id, token = await registered_user(env)
    await call(env.agent, "DELETE", "/api/v1/auth/sessions/all", 204, token)
    return user_id


async def refresh_token_reuse(env: Env) -> str | None:  # a SessionEvent subscriber
    user_id, _ = await registered_user(env)
    spent = (await login(env.client, USER_EMAIL, USER_PASSWORD))["token"]["refresh_token"]
    await call(env.client, "POST", "/api/v1/auth/refresh", 200, refresh_token=spent)
    await call(env.agent, "POST", "/api/v1/auth/refresh", 401, refresh_token=spent)
    return user_id


async def otp_failed(env: Env) -> str | None:
    await create_members(env.client, env.admin_token, otp_enabled=True)
    member = await registered_member(env.client)
    await call(env.agent, "POST", f"{MEMBERS_AUTH}/otp/verify", 400, email=MEMBER_EMAIL, code="123456")
    return str(member["id"])


async def rate_limited_general(env: Env) -> str | None:
    """The general limit refuses before the principal is known: an anonymous entry."""
    await env.services.settings.set("rate_limit_per_minute", 1)
    try:
        await call(env.agent, "GET", "/api/v1/collections", 200)
        await call(env.agent, "GET", "/api/v1/collections", 429, env.admin_token)
    finally:
        await env.services.settings.set("rate_limit_per_minute", 600)
        await env.services.rate_limits.reset()
    return None


async def rate_limited_mail(env: Env) -> str | None:
    """A signed-in user refused by the mail limit: the entry names the caller."""
    user_id, token = await registered_user(env)
    await call(env.agent, "POST", "/api/v1/auth/resend-verification", 200, token)
    await call(env.agent, "POST", "/api/v1/auth/resend-verification", 429, token)
    return user_id


async def collection_created(env: Env) -> str | None:
    await call(env.agent, "POST", COLLECTIONS, 201, env.admin_token, name="audited", schema=[])
    return env.admin_id


async def collection_updated(env: Env) -> str | None:
    created = await call(env.client, "POST", COLLECTIONS, 201, env.admin_token, name="audited", schema=[])
    await call(env.agent, "PATCH", f"{COLLECTIONS}/{created['id']}", 200, env.admin_token, name="audited2")
    return env.admin_id


async def collection_deleted(env: Env) -> str | None:
    created = await call(env.client, "POST", COLLECTIONS, 201, env.admin_token, name="audited", schema=[])
    await call(env.agent, "DELETE", f"{COLLECTIONS}/{created['id']}", 204, env.admin_token)
    return env.admin_id


async def api_key_created(env: Env) -> str | None:
    await call(env.agent, "POST", "/api/v1/api-keys", 201, env.admin_token, name="k", scopes=["read"])
    return env.admin_id


async def api_key_revoked(env: Env) -> str | None:
    key = await call(env.client, "POST", "/api/v1/api-keys", 201, env.admin_token, name="k", scopes=["read"])
    await call(env.agent, "DELETE", f"/api/v1/api-keys/{key['id']}", 204, env.admin_token)
    return env.admin_id


async def setting_changed(env: Env) -> str | None:
    await call(env.agent, "POST", "/api/v1/settings", 200, env.admin_token, key="password_min_length", value=9)
    return env.admin_id


async def backup_created(env: Env) -> str | None:
    await call(env.agent, "POST", "/api/v1/backups", 201, env.admin_token)
    return env.admin_id


async def _backup_then(env: Env, method: str, suffix: str, status: int) -> str | None:
    backup = await call(env.client, "POST", "/api/v1/backups", 201, env.admin_token)
    response = await env.agent.request(method, f"/api/v1/backups/{backup['filename']}{suffix}",
                                       headers=bearer(env.admin_token))
    assert response.status == status, await response.text()
    return env.admin_id


async def backup_restored(env: Env) -> str | None:  # written after the restore replaced the audit log
    return await _backup_then(env, "POST", "/restore", 200)


async def backup_deleted(env: Env) -> str | None:
    return await _backup_then(env, "DELETE", "", 204)


async def backup_downloaded(env: Env) -> str | None:
    return await _backup_then(env, "GET", "", 200)


async def schema_applied(env: Env) -> str | None:
    snapshot = await call(env.client, "GET", "/api/v1/schema", 200, env.admin_token)
    snapshot["collections"].append({"name": "audited", "type": "base", "schema": {"fields": []}})
    diff = await call(env.client, "POST", "/api/v1/schema/diff", 200, env.admin_token, **snapshot)
    await call(env.agent, "POST", "/api/v1/schema/apply", 200, env.admin_token, hash=diff["hash"], snapshot=snapshot)
    return env.admin_id


async def _two_factor_user(env: Env) -> tuple[str, list[str]]:
    """EMAIL of the admin table with 2FA turned on through `agent`: (user id, recovery codes)."""
    await env.services.settings.set("mfa_enabled", True)
    await prepare(ADMIN_TABLE, env.client, env.admin_token)
    _, codes = await turn_on(env.agent, ADMIN_TABLE, env.clock)
    return str((await first_step(env.client, ADMIN_TABLE))["user"]["id"]), codes


async def mfa_enabled(env: Env) -> str | None:
    return (await _two_factor_user(env))[0]


async def mfa_failed(env: Env) -> str | None:
    user_id, _ = await _two_factor_user(env)
    mfa_token = (await first_step(env.client, ADMIN_TABLE))["mfa_token"]
    await call(env.agent, "POST", "/api/v1/auth/2fa/verify", 400, mfa_token=mfa_token, code="not-a-code")
    return user_id


async def mfa_recovery_used(env: Env) -> str | None:
    user_id, codes = await _two_factor_user(env)
    mfa_token = (await first_step(env.client, ADMIN_TABLE))["mfa_token"]
    await call(env.agent, "POST", "/api/v1/auth/2fa/verify", 200, mfa_token=mfa_token, code=codes[0])
    return user_id


async def mfa_disabled(env: Env) -> str | None:
    await env.services.settings.set("mfa_enabled", True)
    await prepare(ADMIN_TABLE, env.client, env.admin_token)
    access = (await ADMIN_TABLE.login(env.client))["access_token"]
    secret = (await (await post_2fa(env.client, ADMIN_TABLE, "setup", access)).json())["secret"]
    response = await post_2fa(env.client, ADMIN_TABLE, "enable", access, code=code_at(secret, env.clock))
    assert response.status == 200, await response.text()
    env.clock.advance(seconds=30)
    response = await post_2fa(env.agent, ADMIN_TABLE, "disable", access, password=PASSWORD,
                              code=code_at(secret, env.clock))
    assert response.status == 200, await response.text()
    return str((await ADMIN_TABLE.login_response(env.client, EMAIL))["user"]["id"])


async def record_publish_failed(env: Env) -> str | None:
    """A publish scheduled through `agent` fails when it runs (in the worker, no request of its own): the
    entry carries the request that scheduled it."""
    await call(env.client, "POST", COLLECTIONS, 201, env.admin_token, name="drafted", drafts=True,
               schema=[{"name": "title", "type": "text", "validation": {"required": True}}])
    record = await call(env.client, "POST", f"{COLLECTIONS}/drafted/records", 201, env.admin_token, data={})
    at = (env.clock() + timedelta(minutes=1)).isoformat()
    await call(env.agent, "POST", f"{COLLECTIONS}/drafted/records/{record['id']}/publish", 200, env.admin_token, at=at)
    env.clock.advance(minutes=1)
    assert await env.services.drafts.scheduler.run_due() == 1
    return env.admin_id


async def release_publish_failed(env: Env) -> str | None:
    """A release scheduled through `agent` fails when it runs (an item without its required title): the
    entry carries the request that scheduled it."""
    await call(env.client, "POST", COLLECTIONS, 201, env.admin_token, name="released", drafts=True,
               schema=[{"name": "title", "type": "text", "validation": {"required": True}}])
    record = await call(env.client, "POST", f"{COLLECTIONS}/released/records", 201, env.admin_token, data={})
    release = await call(env.client, "POST", "/api/v1/releases", 201, env.admin_token, name="r",
                         items=[{"collection": "released", "record_id": record["id"]}])
    at = (env.clock() + timedelta(minutes=1)).isoformat()
    await call(env.agent, "POST", f"/api/v1/releases/{release['id']}/publish", 200, env.admin_token, at=at)
    env.clock.advance(minutes=1)
    assert await env.services.drafts.scheduler.run_due() == 1
    return env.admin_id


Scenario = Callable[[Env], Awaitable[str | None]]
ONE_PER_TYPE: tuple[Scenario, ...] = (
    login_success, login_failed, logout, register, email_verified, password_reset_requested,
    password_reset_completed, password_changed, session_revoked, refresh_token_reuse, otp_failed,
    collection_created, collection_updated, collection_deleted, api_key_created, api_key_revoked, setting_changed,
    backup_created, backup_restored, backup_deleted, backup_downloaded, mfa_enabled, mfa_disabled, mfa_failed,
    mfa_recovery_used, record_publish_failed, release_publish_failed, schema_applied,
)
"""Each named after the event type it provokes."""
SCENARIOS: dict[str, tuple[str, Scenario]] = {
    **{scenario.__name__: (scenario.__name__, scenario) for scenario in ONE_PER_TYPE},
    "rate_limited-general": ("rate_limited", rate_limited_general),
    "rate_limited-mail": ("rate_limited", rate_limited_mail),
}


async def entries(client: Any, admin_token: str, event_type: str) -> list[dict[str, Any]]:
    """Every stored entry of `event_type`, newest first, through the API."""
    response = await client.get("/api/v1/audit", headers=bearer(admin_token),
                                params={"event_type": event_type, "limit": "200"})
    assert response.status == 200, await response.text()
    items: list[dict[str, Any]] = (await response.json())["items"]
    return items


def test_every_event_type_has_a_scenario():
    assert {event_type for event_type, _ in SCENARIOS.values()} == set(SEVERITIES)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_the_entry_carries_the_request(name, aiohttp_client, config, services, client, admin_token, clock,
                                             run_jobs, mailbox):
    event_type, scenario = SCENARIOS[name]
    user_agent = f"audit-context-test/{name}"
    agent = await aiohttp_client(create_app(config, services=services), headers={"User-Agent": user_agent})
    admin_id = (await call(client, "GET", "/api/v1/auth/me", 200, admin_token))["id"]
    expected_user_id = await scenario(Env(agent=agent, client=client, admin_token=admin_token, admin_id=admin_id,
                                          services=services, clock=clock, run_jobs=run_jobs, mailbox=mailbox))

    stored = await entries(client, admin_token, event_type)
    mine = [entry for entry in stored if entry["user_agent"] == user_agent]
    assert mine, stored
    for entry in mine:
        assert entry["user_id"] == expected_user_id, entry
        assert entry["ip_address"] == CLIENT_IP, entry
    # whatever else wrote this type in the test came through a request too
    assert all(entry["ip_address"] == CLIENT_IP and entry["user_agent"] for entry in stored), stored


async def test_the_address_is_the_one_trusted_proxies_forwarded(aiohttp_client, config, services, clock):
    proxied = replace(config, trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),))
    async with open_services(proxied, clock=clock) as behind_proxy:
        client = await aiohttp_client(create_app(proxied, services=behind_proxy))
        await behind_proxy.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
        token = (await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"]
        # the client prepends a forged hop; the proxy (127.0.0.1, trusted) appends the real client
        headers = {**bearer(token), "User-Agent": "behind-a-proxy/1", "X-Forwarded-For": "10.9.9.9, 203.0.113.7"}
        response = await client.post(COLLECTIONS, headers=headers, json={"name": "proxied", "schema": []})
        assert response.status == 201, await response.text()
        (entry,) = await entries(client, token, "collection_created")
    assert entry["ip_address"] == "203.0.113.7"
    assert entry["user_agent"] == "behind-a-proxy/1"


async def test_an_admin_ui_action_is_audited_with_its_request(aiohttp_client, config, services, client, admin_token):
    user_agent = "audit-context-test/admin-ui"
    browser = await aiohttp_client(create_app(config, services=services), headers={"User-Agent": user_agent})
    page = await (await browser.get("/_/login")).text()
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf, page
    response = await browser.post("/_/login", allow_redirects=False, data={
        "email": ADMIN_EMAIL, "password": ADMIN_PASSWORD, "csrf_token": csrf.group(1), "next": "/_/api-keys"})
    assert response.status == 303, await response.text()
    page = await (await browser.get("/_/api-keys")).text()
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)
    assert csrf, page
    response = await browser.post("/_/api-keys", data={"name": "from-the-ui", "scopes": "read",
                                                      "csrf_token": csrf.group(1)})
    assert response.status == 201, await response.text()

    admin_id = (await call(client, "GET", "/api/v1/auth/me", 200, admin_token))["id"]
    (created,) = await entries(client, admin_token, "api_key_created")
    assert (created["user_id"], created["ip_address"], created["user_agent"]) == (admin_id, CLIENT_IP, user_agent)
    signed_in = [e for e in await entries(client, admin_token, "login_success") if e["user_agent"] == user_agent]
    assert [(e["user_id"], e["ip_address"]) for e in signed_in] == [(admin_id, CLIENT_IP)]


async def test_an_entry_with_no_request_behind_it_has_no_address(client, services, admin_token):
    """A start-up or operator action (here a backup by the command line's principal, None) is not
    a request: user, address and agent stay empty."""
    await services.backups.create(None)
    (entry,) = await entries(client, admin_token, "backup_created")
    assert (entry["user_id"], entry["ip_address"], entry["user_agent"]) == (None, "", "")


async def test_an_unknown_users_failed_login_names_nobody_even_with_a_token_attached(client, admin_token):
    """`user_id` is whom the event concerns, never the bearer of whatever token came along: a failed
    login for an unknown address sent with the admin's token is filed under no user."""
    await call(client, "POST", "/api/v1/auth/login", 401, admin_token, email="nobody@example.com", password="x")
    (entry,) = await entries(client, admin_token, "login_failed")
    assert entry["user_id"] is None and entry["ip_address"] == CLIENT_IP, entry


async def test_an_event_held_until_after_its_unit_keeps_the_origin_it_was_created_under(client, services, admin_token):
    """The subscriber runs when the unit ends, outside the scope the event was created in."""
    origin = RequestOrigin(user_id="u-1", ip_address="192.0.2.1", user_agent="held/1", request_id="r-1")
    async with services.events.unit():
        with origin_scope(origin):
            await services.events.emit([AuditEvent("setting_changed", user_id="u-1", details={"key": "k"})])
        assert await entries(client, admin_token, "setting_changed") == []  # held
    (entry,) = await entries(client, admin_token, "setting_changed")
    assert (entry["user_id"], entry["ip_address"], entry["user_agent"]) == ("u-1", "192.0.2.1", "held/1")


def test_a_job_argument_gives_back_the_origin_and_an_earlier_versions_job_its_address_and_agent():
    origin = RequestOrigin(user_id="u-1", ip_address="198.51.100.4", user_agent="agent/1", request_id="r-1")
    assert job_origin(origin.to_json()) == origin
    assert job_origin("198.51.100.4", "old/1") == RequestOrigin(ip_address="198.51.100.4", user_agent="old/1")
    assert job_origin(None) == RequestOrigin()
