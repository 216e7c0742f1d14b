"""Password reset of admin-table users and auth-collection users: the fixed answer, the queued
lookup, the emailed link, the single-use 1-hour token, revocation of every session (spec: Admin
authentication rules 1-2, States and transitions, Errors rules 2 and 4)."""

from __future__ import annotations

import re

import pytest

from cms.models import ADMIN_AUDIENCE
from cms.store.client import open_client
from tests.api.test_collection_auth import (
    AUTH,
    create_members,
    mail_with_subject,
    member_login,
    registered_member,
)
from tests.conftest import bearer, create_collection, error_of, link_token, login, text_body

FORGOT = "/api/v1/auth/forgot-password"
REQUEST = "/api/v1/auth/request-password-reset"
RESET = "/api/v1/auth/reset-password"
ME = "/api/v1/auth/me"
EMAIL = "reset@example.com"
MEMBER_EMAIL = "member@example.com"
PASSWORD = "password-1"
NEW_PASSWORD = "brand-new-password-2"
LINK = re.compile(r"http://cms\.test/_/reset-password\?token=[\w-]+")
MESSAGE = "If an account with this email exists, a password reset link has been sent to it."


@pytest.fixture
async def members(client, admin_token):
    return await create_members(client, admin_token)


@pytest.fixture
async def member(client, members):
    return await registered_member(client)


def reset_mail(mailbox, email=EMAIL):
    return mail_with_subject(mailbox, email, "Reset your password")


@pytest.fixture
async def user(client):
    """A registered admin-table user (role user): its JSON."""
    response = await client.post("/api/v1/auth/register", json={"email": EMAIL, "password": PASSWORD})
    assert response.status == 201, await response.text()
    return (await response.json())["user"]


async def stored_tokens(config):
    mongo = open_client(config.mongodb_url)
    try:
        return [doc async for doc in mongo[config.mongodb_db]["one_time_tokens"].find({"purpose": "password_reset"})]
    finally:
        await mongo.close()


async def reset_link(client, run_jobs, mailbox, email=EMAIL, **body):
    """Request a reset (forgot-password, or request-password-reset with `body`), run the jobs and
    return the token of the emailed link."""
    if body:
        response = await client.post(REQUEST, json={"email": email, **body})
    else:
        response = await client.post(FORGOT, json={"email": email})
    assert response.status == 200, await response.text()
    await run_jobs()
    return link_token(reset_mail(mailbox, email))


async def reset(client, token, new_password=NEW_PASSWORD, **extra):
    return await client.post(RESET, json={"token": token, "new_password": new_password, **extra})


# --- the request -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FORGOT, REQUEST])
async def test_request_answers_alike_for_known_and_unknown_addresses(client, config, mailbox, run_jobs,
                                                                     services, user, path):
    known = await client.post(path, json={"email": EMAIL})
    unknown = await client.post(path, json={"email": "nobody@example.com"})
    assert known.status == unknown.status == 200
    assert await known.json() == await unknown.json() == {"message": MESSAGE}
    # nothing was looked up or issued while the client waited: the work is queued
    assert await stored_tokens(config) == []
    assert mailbox.messages == []

    await run_jobs()
    assert len(await stored_tokens(config)) == 1
    message = reset_mail(mailbox)
    assert LINK.search(text_body(message))
    assert "1 hour" in text_body(message)
    assert mailbox.to("nobody@example.com") == []
    assert await services.audit.count(event_type="password_reset_requested") == 2
    assert await services.audit.count(event_type="password_reset_requested", user_id=user["id"]) == 1


async def test_the_address_is_compared_case_insensitively(client, mailbox, run_jobs, user):
    assert (await client.post(FORGOT, json={"email": "  RESET@example.COM "})).status == 200
    await run_jobs()
    assert reset_mail(mailbox)


@pytest.mark.parametrize(
    "path, body",
    [(FORGOT, {}), (FORGOT, {"email": 5}), (REQUEST, {"email": EMAIL, "collection": ""}),
     (REQUEST, {"email": EMAIL, "extra": 1}), (RESET, {"token": "x"}), (RESET, {"new_password": NEW_PASSWORD}),
     (RESET, {"token": "", "new_password": NEW_PASSWORD})],
    ids=["no-email", "email-int", "empty-collection", "unknown-key", "no-password", "no-token", "empty-token"],
)
async def test_bad_input_is_422(client, path, body):
    await error_of(await client.post(path, json=body), 422, "validation_error")


async def test_request_for_an_unknown_or_base_collection_is_404(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    for name in ("posts", "nothing"):
        response = await client.post(REQUEST, json={"email": EMAIL, "collection": name})
        await error_of(response, 404, "not_found")


async def test_reset_requests_are_rate_limited(client):
    # the mail limit (1 a minute per endpoint and address) refuses from the second request on ...
    statuses = [(await client.post(FORGOT, json={"email": EMAIL})).status for _ in range(10)]
    assert statuses == [200] + [429] * 9
    # ... and the auth limit (10 attempts per address) refuses the other endpoint's first request
    response = await client.post(REQUEST, json={"email": EMAIL})
    await error_of(response, 429, "rate_limited")
    assert "Retry-After" in response.headers
    assert response.headers["X-RateLimit-Limit"] == "10"


# --- the reset: admin-table users --------------------------------------------------------------------


async def test_reset_sets_the_password_and_revokes_every_session(client, mailbox, run_jobs, services, user):
    sessions = [(await login(client, EMAIL, PASSWORD))["token"] for _ in range(2)]
    token = await reset_link(client, run_jobs, mailbox)

    response = await reset(client, token, password_confirm=NEW_PASSWORD)
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}

    for tokens in sessions:
        await error_of(await client.get(ME, headers=bearer(tokens["access_token"])), 401, "unauthorized")
        response = await client.post("/api/v1/auth/refresh", json={"refresh_token": tokens["refresh_token"]})
        await error_of(response, 401, "unauthorized")
    assert await services.sessions.list_active(user["id"], ADMIN_AUDIENCE) == []
    response = await client.post("/api/v1/auth/login", json={"email": EMAIL, "password": PASSWORD})
    await error_of(response, 401, "invalid_credentials")
    body = await login(client, EMAIL, NEW_PASSWORD)
    assert body["user"]["verified"] is True  # the link proved the address
    assert await services.audit.count(event_type="password_reset_completed", user_id=user["id"]) == 1


async def test_reset_token_is_single_use(client, mailbox, run_jobs, user):
    token = await reset_link(client, run_jobs, mailbox)
    assert (await reset(client, token)).status == 200
    await error_of(await reset(client, token, new_password="yet-another-password-3"), 400, "token_invalid")
    await login(client, EMAIL, NEW_PASSWORD)


async def test_reset_token_expires_after_one_hour(client, clock, mailbox, run_jobs, user):
    token = await reset_link(client, run_jobs, mailbox)
    clock.advance(hours=1)
    await error_of(await reset(client, token), 400, "token_expired")
    await login(client, EMAIL, PASSWORD)


async def test_reset_token_works_just_under_one_hour(client, clock, mailbox, run_jobs, user):
    token = await reset_link(client, run_jobs, mailbox)
    clock.advance(minutes=59, seconds=59)
    assert (await reset(client, token)).status == 200


async def test_a_refused_password_leaves_the_link_usable(client, mailbox, run_jobs, services, user):
    await services.settings.set("password_require_number", True)
    token = await reset_link(client, run_jobs, mailbox)
    payload = await error_of(await reset(client, token, new_password="no-digits-here"), 422, "validation_error")
    assert payload["errors"] == {"new_password": ["must contain a number"]}
    payload = await error_of(await reset(client, token, password_confirm="other"), 422, "validation_error")
    assert "password_confirm" in payload["errors"]
    assert (await reset(client, token)).status == 200


async def test_a_new_request_voids_the_older_link(client, mailbox, run_jobs, services, user):
    first = await reset_link(client, run_jobs, mailbox)
    await services.rate_limits.reset()  # a minute later: the mail limit (1 a minute) has passed
    second = await reset_link(client, run_jobs, mailbox)
    assert first != second
    await error_of(await reset(client, first), 400, "token_invalid")
    assert (await reset(client, second)).status == 200


@pytest.mark.parametrize("token", ["garbage", "x" * 512, "a.b.c"], ids=["word", "long", "jwt"])
async def test_garbage_reset_tokens_are_token_invalid(client, token):
    await error_of(await reset(client, token), 400, "token_invalid")


async def test_a_verification_token_is_not_a_reset_token(client, mailbox, run_jobs, user):
    await run_jobs()
    verification = link_token(mail_with_subject(mailbox, EMAIL, "Verify your email address"))
    await error_of(await reset(client, verification), 400, "token_invalid")
    # and it was not spent
    assert (await client.post("/api/v1/auth/verify-email", json={"token": verification})).status == 200


async def test_reset_password_page_is_html(client):
    response = await client.get("/_/reset-password", params={"token": "abc"})
    assert response.status == 200 and response.content_type == "text/html"
    text = await response.text()
    assert "/api/v1/auth/reset-password" in text and "new_password" in text


# --- the reset: auth-collection users ------------------------------------------------------------------


async def test_collection_user_reset(client, mailbox, run_jobs, services, member):
    await run_jobs()  # the registration email
    sessions = [(await member_login(client))["token"] for _ in range(2)]
    # an admin-table user with the same address is a different account
    response = await client.post("/api/v1/auth/register", json={"email": MEMBER_EMAIL, "password": PASSWORD})
    assert response.status == 201

    response = await client.post(REQUEST, json={"email": MEMBER_EMAIL, "collection": "members"})
    assert response.status == 200 and await response.json() == {"message": MESSAGE}
    await run_jobs()
    token = link_token(reset_mail(mailbox, MEMBER_EMAIL))
    assert (await reset(client, token)).status == 200

    for tokens in sessions:
        await error_of(await client.get(f"{AUTH}/me", headers=bearer(tokens["access_token"])), 401, "unauthorized")
        response = await client.post(f"{AUTH}/refresh", json={"refresh_token": tokens["refresh_token"]})
        await error_of(response, 401, "unauthorized")
    response = await client.post(f"{AUTH}/login", json={"email": MEMBER_EMAIL, "password": "member-password-1"})
    await error_of(response, 401, "invalid_credentials")
    body = await member_login(client, password=NEW_PASSWORD)
    assert body["user"]["verified"] is True
    # the admin-table account is untouched
    await login(client, MEMBER_EMAIL, PASSWORD)
    assert await services.audit.count(event_type="password_reset_completed", user_id=member["id"]) == 1


async def test_a_reset_request_reaches_only_its_user_system(client, mailbox, run_jobs, member):
    # the address exists in the collection only: an admin-table request sends nothing
    assert (await client.post(FORGOT, json={"email": MEMBER_EMAIL})).status == 200
    await run_jobs()
    assert [m["Subject"] for m in mailbox.to(MEMBER_EMAIL)] == ["Verify your email address"]


async def test_collection_reset_token_expires_and_is_single_use(client, clock, mailbox, run_jobs, services, member):
    token = await reset_link(client, run_jobs, mailbox, email=MEMBER_EMAIL, collection="members")
    assert (await reset(client, token)).status == 200
    await error_of(await reset(client, token), 400, "token_invalid")
    await services.rate_limits.reset()  # a minute later: the mail limit (1 a minute) has passed
    token = await reset_link(client, run_jobs, mailbox, email=MEMBER_EMAIL, collection="members")
    clock.advance(hours=2)
    await error_of(await reset(client, token), 400, "token_expired")


async def test_unknown_collection_address_gets_the_same_answer(client, mailbox, run_jobs, members):
    response = await client.post(REQUEST, json={"email": "nobody@example.com", "collection": "members"})
    assert response.status == 200 and await response.json() == {"message": MESSAGE}
    await run_jobs()
    assert mailbox.messages == []


async def test_reset_of_a_deleted_user_is_token_invalid(client, admin_token, mailbox, run_jobs, member):
    token = await reset_link(client, run_jobs, mailbox, email=MEMBER_EMAIL, collection="members")
    response = await client.delete(f"/api/v1/collections/members/records/{member['id']}", headers=bearer(admin_token))
    assert response.status == 204
    await error_of(await reset(client, token), 400, "token_invalid")
