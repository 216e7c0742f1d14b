"""OAuth2 account takeovers (issue 28, item 3: the class of PocketBase's two OAuth2 takeovers,
GHSA-m93w-4fxv-r35v and GHSA-pq7p-mc74-g65w), against the real OpenID provider of
`tests/oidc_provider.py`:

- a provider account whose address differs from its linked user's signs in as that user only: it
  neither reaches nor links the account that has the other address;
- an attacker who pre-registers a victim's address (unverified) keeps nothing once the victim signs
  in through a provider that verified it: no session, refresh token, password, pending link (an
  email change to the attacker's address), nor a provider link of its own;
- an email change ends the user's provider links (docs/concepts/auth.md, OAuth2 login: the old address's provider
  account no longer signs in as the user; a provider that verifies the new address links again).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.api.test_collection_auth import mail_with_subject
from tests.api.test_oauth import config, configure, providers_value, sign_in  # noqa: F401 (config: a fixture)
from tests.conftest import bearer, error_of, link_token
from tests.oidc_provider import OidcProvider, ProviderUser, running_provider
from tests.user_systems import ADMIN_TABLE, EMAIL, MEMBERS, PASSWORD, System, prepare

OTHER = "other@example.com"


@pytest.fixture
async def provider() -> AsyncIterator[OidcProvider]:
    async with running_provider() as running:
        yield running


async def configured(client: Any, admin_token: str, provider: OidcProvider, system: System) -> System:
    response = await configure(client, admin_token, providers_value(provider))
    assert response.status == 200, await response.text()
    return await prepare(system, client, admin_token)


async def verify(client: Any, system: System, mailbox: Any, run_jobs: Any, email: str = EMAIL) -> None:
    await run_jobs()
    token = link_token(mail_with_subject(mailbox, email, "Verify your email address"))
    path = "/api/v1/auth/verify-email" if system is ADMIN_TABLE else f"{system.auth}/verify-email"
    response = await client.post(path, json={"token": token})
    assert response.status == 200, await response.text()


async def signed_in_as(client: Any, system: System, provider: OidcProvider, user: ProviderUser) -> dict[str, Any]:
    provider.user = user
    response = await sign_in(client, system, provider)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_a_provider_address_that_differs_from_the_linked_users_reaches_only_the_linked_user(
        client, admin_token, provider, mailbox, run_jobs):
    system = await configured(client, admin_token, provider, MEMBERS)
    await verify(client, system, mailbox, run_jobs)
    owner = await signed_in_as(client, system, provider, ProviderUser(sub="s-1", email=EMAIL, email_verified=True))
    await system.register(client, OTHER)
    await verify(client, system, mailbox, run_jobs, OTHER)
    other = (await system.login_response(client, OTHER))["user"]

    # the provider account now claims OTHER's (verified) address: it is still the owner's account
    again = await signed_in_as(client, system, provider, ProviderUser(sub="s-1", email=OTHER, email_verified=True))
    assert again["user"]["id"] == owner["user"]["id"] and again["user"]["email"] == EMAIL
    # OTHER's account was neither reached nor changed: its own password signs in, as itself
    assert (await system.login_response(client, OTHER))["user"] == other
    # and an unverified claim of OTHER's address by a new provider account links nothing
    provider.user = ProviderUser(sub="s-2", email=OTHER, email_verified=False)
    await error_of(await sign_in(client, system, provider), 400, "already_exists")


async def test_a_pre_registered_squatter_keeps_nothing_after_the_owner_signs_in(
        client, admin_token, provider, mailbox, run_jobs):
    """The squatter registers the victim's address with a password, signs in twice (a session and a
    refresh token), and asks to move the account to its own address (the link goes to the squatter's
    mailbox). The victim then signs in through a provider that verified the address."""
    system = await configured(client, admin_token, provider, MEMBERS)
    sessions = [await system.login(client), await system.login(client)]
    response = await client.post(f"{system.auth}/me/request-email-change",
                                 headers=bearer(sessions[0]["access_token"]),
                                 json={"new_email": "squatter@example.com", "password": PASSWORD})
    assert response.status == 200, await response.text()
    await run_jobs()
    pending = link_token(mail_with_subject(mailbox, "squatter@example.com", "Confirm your new email address"))

    victim = await signed_in_as(client, system, provider, ProviderUser(sub="victim", email=EMAIL, email_verified=True))
    assert victim["user"]["verified"] is True

    for session in sessions:
        assert await system.me_status(client, session) == 401
        refreshed = await client.post(f"{system.auth}/refresh", json={"refresh_token": session["refresh_token"]})
        assert refreshed.status == 401
    await error_of(await client.post(f"{system.auth}/login", json={"email": EMAIL, "password": PASSWORD}),
                   401, "invalid_credentials")
    response = await client.post(f"{system.auth}/me/confirm-email-change", json={"token": pending})
    assert response.status in (400, 401), await response.text()
    me = await client.get(f"{system.auth}/me", headers=bearer(victim["token"]["access_token"]))
    assert (await me.json())["email"] == EMAIL


async def test_an_unverified_provider_account_made_first_is_never_linked_to_the_owners_account(
        client, admin_token, provider):
    """PocketBase's GHSA-pq7p-mc74-g65w: the attacker signs in first with a provider account that
    claims the victim's address without verifying it; the victim signs up later through a provider
    that verified it. The attacker's provider account must not sign in as the victim, before or after."""
    for system in (ADMIN_TABLE, MEMBERS):
        if system is MEMBERS:
            await configured(client, admin_token, provider, MEMBERS)
        else:
            assert (await configure(client, admin_token, providers_value(provider))).status == 200
        address = f"victim-{system.name}@example.com"
        attacker = ProviderUser(sub=f"attacker-{system.name}", email=address, email_verified=False)
        provider.user = attacker
        await error_of(await sign_in(client, system, provider), 400, "bad_request")  # no account made
        owner = await signed_in_as(client, system, provider,
                                   ProviderUser(sub=f"owner-{system.name}", email=address, email_verified=True))
        provider.user = attacker
        await error_of(await sign_in(client, system, provider), 400, "already_exists")
        assert owner["user"]["email"] == address


async def test_an_email_change_ends_the_users_provider_links(client, admin_token, provider, mailbox, run_jobs):
    system = await configured(client, admin_token, provider, MEMBERS)
    await verify(client, system, mailbox, run_jobs)
    linked = await signed_in_as(client, system, provider, ProviderUser(sub="work", email=EMAIL, email_verified=True))
    response = await client.post(f"{system.auth}/me/request-email-change",
                                 headers=bearer(linked["token"]["access_token"]),
                                 json={"new_email": "moved@example.com", "password": PASSWORD})
    assert response.status == 200, await response.text()
    await run_jobs()
    token = link_token(mail_with_subject(mailbox, "moved@example.com", "Confirm your new email address"))
    assert (await client.post(f"{system.auth}/me/confirm-email-change", json={"token": token})).status == 200

    # the old address's provider account no longer signs in as the user: it is someone new
    old = await signed_in_as(client, system, provider, ProviderUser(sub="work", email=EMAIL, email_verified=True))
    assert old["user"]["id"] != linked["user"]["id"] and old["user"]["email"] == EMAIL
    # a provider account that verifies the new address links to the user again
    new = await signed_in_as(client, system, provider,
                             ProviderUser(sub="personal", email="moved@example.com", email_verified=True))
    assert new["user"]["id"] == linked["user"]["id"]
