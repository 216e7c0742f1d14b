"""OAuth2 / OpenID Connect login for both user systems (issue 14, item 2), against a real OpenID
provider served on loopback by the test (`tests/oidc_provider.py`): the full code flow with PKCE,
state checks, ID token validation, linking by verified email, and new users."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pyotp
import pytest

from cms.config import Config
from tests.conftest import bearer, create_collection, error_of, link_token
from tests.oidc_provider import OidcProvider, ProviderUser, running_provider
from tests.user_systems import ADMIN_TABLE, EMAIL, MEMBERS, PASSWORD, System, prepare

REDIRECT_URI = "http://app.test/oauth-return"


@pytest.fixture
def config(config: Config) -> Config:
    """The test's provider listens on loopback: private addresses are allowed, as in the webhook tests
    (production mode refuses them at connect time: tests/security/test_ssrf.py)."""
    return replace(config, webhook_allow_private=True)


@pytest.fixture
async def provider() -> AsyncIterator[OidcProvider]:
    async with running_provider() as running:
        yield running


def providers_value(provider: OidcProvider, **extra: Any) -> str:
    return json.dumps([{"name": "local", "client_id": provider.client_id, "client_secret": provider.client_secret,
                        "discovery_url": provider.discovery_url, "scopes": ["openid", "email", "profile"], **extra}])


async def configure(client: Any, admin_token: str, value: str) -> Any:
    return await client.post("/api/v1/settings", headers=bearer(admin_token),
                             json={"key": "oauth_providers", "value": value})


@pytest.fixture(params=[ADMIN_TABLE, MEMBERS], ids=["admin-table", "auth-collection"])
async def system(request, client, admin_token, provider) -> System:
    """Each user system in turn, with EMAIL registered (unverified) and the local provider configured."""
    response = await configure(client, admin_token, providers_value(provider))
    assert response.status == 200, await response.text()
    return await prepare(request.param, client, admin_token)


async def start(client: Any, system: System, redirect_uri: str = REDIRECT_URI) -> dict[str, Any]:
    response = await client.get(f"{system.auth}/oauth2/providers", params={"redirect_uri": redirect_uri})
    assert response.status == 200, await response.text()
    links: list[dict[str, Any]] = await response.json()
    assert [link["name"] for link in links] == ["local"]
    return links[0]


async def finish(client: Any, system: System, link: dict[str, Any], code: str, state: str,
                 redirect_uri: str = REDIRECT_URI, **changes: Any) -> Any:
    body = {"provider": "local", "code": code, "code_verifier": link["code_verifier"], "state": state,
            "redirect_uri": redirect_uri, **changes}
    return await client.post(f"{system.auth}/oauth2/callback", json=body)


async def sign_in(client: Any, system: System, provider: OidcProvider) -> Any:
    link = await start(client, system)
    code, state = await provider.authorize(link["auth_url"])
    return await finish(client, system, link, code, state)


async def test_the_provider_list_carries_pkce_state_and_nonce(client, system, provider):
    link = await start(client, system)
    assert set(link) == {"name", "auth_url", "state", "code_verifier", "code_challenge", "code_challenge_method"}
    assert link["code_challenge_method"] == "S256" and link["auth_url"].startswith(provider.issuer)
    for part in ("code_challenge=", "state=", "nonce=", "response_type=code", "redirect_uri="):
        assert part in link["auth_url"]
    second = await start(client, system)
    assert second["state"] != link["state"] and second["code_verifier"] != link["code_verifier"]
    response = await client.get(f"{system.auth}/oauth2/providers")  # the client appends redirect_uri
    assert (await response.json())[0]["auth_url"].endswith("&redirect_uri=")


async def test_a_new_account_creates_a_verified_user_and_signs_in(client, system, provider, services):
    provider.user = ProviderUser(sub="new-1", email="newcomer@example.com", email_verified=True, name="New Comer")
    response = await sign_in(client, system, provider)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["requires_2fa"] is False and body["user"]["email"] == "newcomer@example.com"
    assert body["user"]["verified"] is True
    assert await system.me_status(client, body["token"]) == 200
    # the provider received the PKCE verifier and the redirect URI
    assert provider.token_requests[-1]["code_verifier"] and provider.token_requests[-1]["redirect_uri"] == REDIRECT_URI
    # a later login with a changed address at the provider finds the same user through the link
    provider.user = ProviderUser(sub="new-1", email="renamed@example.com", email_verified=True)
    again = await (await sign_in(client, system, provider)).json()
    assert again["user"]["id"] == body["user"]["id"]
    assert await services.audit.count(event_type="login_success") >= 2


async def test_a_verified_provider_email_links_the_verified_existing_user(client, system, provider, mailbox,
                                                                             run_jobs):
    await run_jobs()
    response = await client.post("/api/v1/auth/verify-email", json={"token": link_token(mailbox.last_to(EMAIL))})
    assert response.status == 200, await response.text()
    provider.user = ProviderUser(sub="linked-1", email=EMAIL.upper(), email_verified=True)
    response = await sign_in(client, system, provider)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["user"]["email"] == EMAIL
    # the password still works, and it is the same user
    assert (await system.login_response(client))["user"]["id"] == body["user"]["id"]


async def test_an_unverified_existing_account_is_secured_before_it_is_linked(client, system, provider):
    """Whoever registered the address without proving the mailbox (a pre-hijacking attempt) loses
    the account's password and sessions when the provider proves the address belongs to someone."""
    squatter = await system.login(client)
    provider.user = ProviderUser(sub="owner", email=EMAIL, email_verified=True)
    response = await sign_in(client, system, provider)
    assert response.status == 200, await response.text()
    owner = await response.json()
    assert owner["user"]["email"] == EMAIL and await system.me_status(client, owner["token"]) == 200
    me = await (await client.get(f"{system.auth}/me", headers=bearer(owner["token"]["access_token"]))).json()
    assert me["verified"] is True
    assert await system.me_status(client, squatter) == 401
    response = await client.post(f"{system.auth}/login", json={"email": EMAIL, "password": PASSWORD})
    await error_of(response, 401, "invalid_credentials")


async def test_an_unverified_provider_email_is_not_linked_and_makes_no_account(client, system, provider):
    provider.user = ProviderUser(sub="intruder", email=EMAIL, email_verified=False)
    await error_of(await sign_in(client, system, provider), 400, "already_exists")
    # nor does an unverified address make a new account (it could squat someone's address)
    provider.user = ProviderUser(sub="fresh", email="fresh@example.com", email_verified=False)
    await error_of(await sign_in(client, system, provider), 400, "bad_request")
    provider.user = ProviderUser(sub="fresh", email="fresh@example.com", email_verified=True)
    assert (await sign_in(client, system, provider)).status == 200
    # the squatter-free account kept its password: nothing was linked or secured by the refusals
    assert (await system.login_response(client))["user"]["email"] == EMAIL


async def test_a_state_that_does_not_match_is_refused(client, system, provider):
    link = await start(client, system)
    other = await start(client, system)
    code, state = await provider.authorize(link["auth_url"])
    # the other login's state (another PKCE pair), a forged one, and a state of another provider name
    await error_of(await finish(client, system, link, code, other["state"]), 400, "token_invalid")
    forged = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
    await error_of(await finish(client, system, link, code, forged), 400, "token_invalid")
    response = await finish(client, system, link, code, state, provider="nope")
    await error_of(response, 422, "validation_error")
    # the real one still works: nothing was spent by the refusals
    assert (await finish(client, system, link, code, state)).status == 200


async def test_a_wrong_audience_or_expired_id_token_is_refused(client, system, provider):
    provider.id_token_overrides = {"aud": "someone-else"}
    await error_of(await sign_in(client, system, provider), 400, "token_invalid")
    provider.id_token_overrides = {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}
    await error_of(await sign_in(client, system, provider), 400, "token_invalid")
    provider.id_token_overrides = {"nonce": "another-login"}
    await error_of(await sign_in(client, system, provider), 400, "token_invalid")
    provider.id_token_overrides = {}
    assert (await sign_in(client, system, provider)).status == 200


async def test_a_refused_code_is_a_clear_error(client, system, provider):
    link = await start(client, system)
    code, state = await provider.authorize(link["auth_url"])
    assert (await finish(client, system, link, code, state)).status == 200
    await error_of(await finish(client, system, link, code, state), 400, "bad_request")  # codes are single use


async def switch(client: Any, admin_token: str, services: Any, system: System, key: str, on: bool) -> None:
    """Set `key` (oauth_enabled, mfa_enabled): the setting for the admin table, the collection's own for members."""
    if system is ADMIN_TABLE:
        await services.settings.set(key, on)
        return
    listed = await (await client.get("/api/v1/collections", headers=bearer(admin_token))).json()
    collection = next(c for c in listed if c["name"] == "members")
    response = await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                                  json={key: on})
    assert response.status == 200 and (await response.json())[key] is on


async def test_oauth_off_is_403(client, admin_token, services, system, provider):
    link = await start(client, system)
    code, state = await provider.authorize(link["auth_url"])
    await switch(client, admin_token, services, system, "oauth_enabled", False)
    await error_of(await client.get(f"{system.auth}/oauth2/providers"), 403, "forbidden")
    await error_of(await finish(client, system, link, code, state), 403, "forbidden")


async def test_two_factor_applies_to_oauth_logins(client, clock, admin_token, services, system, provider, mailbox,
                                                  run_jobs):
    await run_jobs()  # a verified account keeps its factor when the provider account is linked
    response = await client.post("/api/v1/auth/verify-email", json={"token": link_token(mailbox.last_to(EMAIL))})
    assert response.status == 200, await response.text()
    await switch(client, admin_token, services, system, "mfa_enabled", True)
    access = (await system.login(client))["access_token"]
    secret = (await (await client.post(f"{system.auth}/2fa/setup", headers=bearer(access))).json())["secret"]
    response = await client.post(f"{system.auth}/2fa/enable", headers=bearer(access),
                                 json={"code": pyotp.TOTP(secret).at(clock())})
    assert response.status == 200, await response.text()
    provider.user = ProviderUser(sub="two-factor", email=EMAIL, email_verified=True)
    body = await (await sign_in(client, system, provider)).json()
    assert body["requires_2fa"] is True and body["token"] is None and body["mfa_token"]


async def test_provider_secrets_are_write_only(client, admin_token, provider):
    response = await configure(client, admin_token, providers_value(provider))
    assert response.status == 200, await response.text()
    shown = await response.json()
    assert provider.client_secret not in json.dumps(shown) and "********" in shown["value"]
    listed = await (await client.get("/api/v1/settings", headers=bearer(admin_token))).json()
    value = next(s for s in listed if s["key"] == "oauth_providers")["value"]
    assert provider.client_secret not in value
    # writing back what a read showed keeps the secret: logins still work
    assert (await configure(client, admin_token, value)).status == 200
    await prepare(ADMIN_TABLE, client, admin_token)
    provider.user = ProviderUser(sub="after-rewrite", email="later@example.com")
    assert (await sign_in(client, ADMIN_TABLE, provider)).status == 200
    audit = await (await client.get("/api/v1/audit", headers=bearer(admin_token),
                                    params={"event_type": "setting_changed"})).json()
    assert provider.client_secret not in json.dumps(audit)


@pytest.mark.parametrize("value, problem", [
    ("not json", "JSON"), ('{"name": "x"}', "list"), ('[{"name": "local"}]', "client_id"),
    ('[{"name": "Bad Name", "client_id": "x", "discovery_url": "https://x"}]', "name"),
    ('[{"name": "custom", "client_id": "x"}]', "discovery_url"),
    ('[{"name": "custom", "client_id": "x", "discovery_url": "ftp://x"}]', "http"),
])
async def test_bad_provider_settings_are_422_and_change_nothing(client, admin_token, value, problem):
    payload = await error_of(await configure(client, admin_token, value), 422, "validation_error")
    assert problem in " ".join(payload["errors"]["value"])
    listed = await (await client.get("/api/v1/settings", headers=bearer(admin_token))).json()
    assert next(s for s in listed if s["key"] == "oauth_providers")["value"] == "[]"


async def test_presets_fill_in_the_endpoints(client, admin_token):
    value = json.dumps([{"name": "github", "client_id": "gh-id", "client_secret": "gh-secret"}])
    response = await configure(client, admin_token, value)
    assert response.status == 200, await response.text()
    stored = json.loads((await response.json())["value"])
    assert stored[0]["auth_url"] == "https://github.com/login/oauth/authorize"
    assert stored[0]["client_secret"] == "********" and "user:email" in stored[0]["scopes"]


async def test_members_collection_copies_the_oauth_switch(client, admin_token, services):
    await services.settings.set("oauth_enabled", False)
    created = await create_collection(client, admin_token, "people", [], type="auth")
    assert created["oauth_enabled"] is False


async def test_a_user_created_by_oauth_sets_a_password_through_reset(client, system, provider, mailbox, run_jobs):
    provider.user = ProviderUser(sub="social-only", email="social@example.com", email_verified=True)
    assert (await sign_in(client, system, provider)).status == 200
    body = {"email": "social@example.com", **({"collection": "members"} if system is MEMBERS else {})}
    assert (await client.post("/api/v1/auth/request-password-reset", json=body)).status == 200
    await run_jobs()
    token = link_token(mailbox.last_to("social@example.com"))
    response = await client.post("/api/v1/auth/reset-password", json={"token": token, "new_password": "chosen-pw-1"})
    assert response.status == 200, await response.text()
    assert (await system.login_response(client, email="social@example.com", password="chosen-pw-1"))["token"]
