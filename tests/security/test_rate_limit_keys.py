"""Every rate-limit key built from an address in a body counts the address as `normalize_email` makes
it: whitespace around it and its case give no fresh budget (Strapi's `body.email` key; issue 28, item 4).
The auth limit is 10 attempts a minute per client IP and address, the mail limit 1 a minute per address."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from cms.services.operations.rate_limits import AUTH_LIMIT, MAIL_PER_MINUTE
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, USER_PASSWORD, bearer, create_collection, error_of

ADDRESS = "someone@example.test"
VARIANTS = (" someone@example.test", "\tSomeone@example.test", "\nSOMEONE@EXAMPLE.TEST", "someone@Example.test \n",
            " \t someone@example.TEST", "someone@example.test")
"""One address written six ways: each is `ADDRESS` once trimmed and lower-cased."""
AUTH = "/api/v1/auth"
PEOPLE = "/api/v1/collections/people/auth"

Body = Callable[[str], dict[str, Any]]


@pytest.fixture
async def people(client, admin_token, services):
    """The auth collection `people`, OTP login on, with `ADDRESS` registered (not over HTTP, which
    would spend one attempt of the register budget)."""
    await create_collection(client, admin_token, "people", [], type="auth", otp_enabled=True)
    identity = services.identity
    await identity.registration.register(await identity.systems.collection("people"), ADDRESS, USER_PASSWORD, None, {})


async def spend(client, path: str, body: Body, limit: int) -> None:
    """Send `limit` requests with the variants of `ADDRESS` in turn, none refused by a limit of `limit`,
    then one more, which must be: every variant counted in one budget."""
    for n in range(limit):
        response = await client.post(path, json=body(VARIANTS[n % len(VARIANTS)]))
        refused_here = response.status == 429 and response.headers["X-RateLimit-Limit"] == str(limit)
        assert not refused_here, f"attempt {n + 1} refused: {await response.text()}"
    refused = await client.post(path, json=body(VARIANTS[limit % len(VARIANTS)]))
    await error_of(refused, 429, "rate_limited")
    assert refused.headers["X-RateLimit-Limit"] == str(limit)


AUTH_KEYS: dict[str, tuple[str, Body]] = {
    "admin-login": (f"{AUTH}/login", lambda email: {"email": email, "password": "wrong-password"}),
    "collection-login": (f"{PEOPLE}/login", lambda email: {"email": email, "password": "wrong-password"}),
    "admin-register": (f"{AUTH}/register", lambda email: {"email": email, "password": USER_PASSWORD}),
    "collection-register": (f"{PEOPLE}/register", lambda email: {"email": email, "password": USER_PASSWORD}),
    "otp-request": (f"{PEOPLE}/otp/request", lambda email: {"email": email}),
    "otp-verify": (f"{PEOPLE}/otp/verify", lambda email: {"email": email, "code": "000000"}),
    "reset-request": (f"{AUTH}/request-password-reset", lambda email: {"email": email}),
    "collection-reset-request": (f"{AUTH}/request-password-reset",
                                 lambda email: {"email": email, "collection": "people"}),
    "forgot-password": (f"{AUTH}/forgot-password", lambda email: {"email": email}),
}


@pytest.mark.parametrize("key", list(AUTH_KEYS))
async def test_address_variants_share_one_auth_budget(client, people, key):
    path, body = AUTH_KEYS[key]
    await spend(client, path, body, AUTH_LIMIT)


MAIL_KEYS: dict[str, tuple[str, Body]] = {
    "otp-request": (f"{PEOPLE}/otp/request", lambda email: {"email": email}),
    "reset-request": (f"{AUTH}/request-password-reset", lambda email: {"email": email}),
    "collection-reset-request": (f"{AUTH}/request-password-reset",
                                 lambda email: {"email": email, "collection": "people"}),
    "forgot-password": (f"{AUTH}/forgot-password", lambda email: {"email": email}),
}


@pytest.mark.parametrize("key", list(MAIL_KEYS))
async def test_address_variants_share_one_mail_budget(client, people, key):
    path, body = MAIL_KEYS[key]
    await spend(client, path, body, MAIL_PER_MINUTE)


async def test_a_new_address_variants_share_one_mail_budget(client, people):
    response = await client.post(f"{PEOPLE}/login", json={"email": ADDRESS, "password": USER_PASSWORD})
    token = (await response.json())["token"]["access_token"]
    path = f"{PEOPLE}/me/request-email-change"
    first = await client.post(path, headers=bearer(token), json={"new_email": " New@example.test",
                                                                  "password": USER_PASSWORD})
    assert first.status == 200, await first.text()
    again = await client.post(path, headers=bearer(token), json={"new_email": "NEW@example.test\n",
                                                                  "password": USER_PASSWORD})
    await error_of(again, 429, "rate_limited")


async def test_a_login_with_a_variant_signs_in_and_counts_in_the_same_budget(client, people):
    for n in range(AUTH_LIMIT - 1):
        response = await client.post(f"{PEOPLE}/login", json={"email": VARIANTS[n % len(VARIANTS)],
                                                              "password": "wrong-password"})
        await error_of(response, 401, "invalid_credentials")
    signed_in = await client.post(f"{PEOPLE}/login", json={"email": "\tSomeone@Example.test ",
                                                           "password": USER_PASSWORD})
    assert signed_in.status == 200, await signed_in.text()
    assert (await signed_in.json())["user"]["email"] == ADDRESS
    refused = await client.post(f"{PEOPLE}/login", json={"email": ADDRESS, "password": USER_PASSWORD})
    await error_of(refused, 429, "rate_limited")


async def test_a_registered_variant_is_stored_normalised(client, people):
    response = await client.post(f"{PEOPLE}/register", json={"email": " Other@Example.test\n",
                                                              "password": USER_PASSWORD})
    assert response.status == 201, await response.text()
    assert (await response.json())["user"]["email"] == "other@example.test"
    again = await client.post(f"{PEOPLE}/register", json={"email": "OTHER@example.test", "password": USER_PASSWORD})
    await error_of(again, 400, "already_exists")


async def test_the_admin_ui_sign_in_counts_in_the_api_login_budget(client, admin_token):
    for n in range(AUTH_LIMIT - 2):  # admin_token's login was the first
        email = f" {ADMIN_EMAIL.upper()}" if n % 2 else ADMIN_EMAIL
        response = await client.post(f"{AUTH}/login", json={"email": email, "password": "wrong-password"})
        await error_of(response, 401, "invalid_credentials")
    page = await (await client.get("/_/login")).text()
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf, page
    form = {"email": f"\t{ADMIN_EMAIL.upper()}\n", "password": ADMIN_PASSWORD, "csrf_token": csrf.group(1),
            "next": "/_/"}
    signed_in = await client.post("/_/login", allow_redirects=False, data=form)
    assert signed_in.status == 303, await signed_in.text()
    refused = await client.post("/_/login", allow_redirects=False, data=form)
    assert refused.status == 429, await refused.text()
