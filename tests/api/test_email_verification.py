"""Email verification of admin-table users: the queued email, its delivery over real SMTP, the
single-use 24-hour token, resend (spec: States and transitions, Limits; decisions.md, Errors)."""

from __future__ import annotations

import re

import pytest

from cms.models import ADMIN_AUDIENCE, collection_audience
from cms.security.codes import hash_token
from cms.services.identity.one_time_tokens import PASSWORD_RESET, VERIFY_EMAIL, OneTimeTokens
from cms.store.client import open_client
from cms.store.one_time_tokens import OneTimeTokenRepository
from tests.conftest import bearer, error_of, link_token, login, text_body
from tests.fixtures import post_raw_json

REGISTER = "/api/v1/auth/register"
VERIFY = "/api/v1/auth/verify-email"
RESEND = "/api/v1/auth/resend-verification"
ME = "/api/v1/auth/me"
EMAIL = "verify@example.com"
PASSWORD = "password-1"
LINK = re.compile(r"http://cms\.test/_/verify-email\?token=([A-Za-z0-9_\-]+)")


@pytest.fixture
async def one_time(config, clock, services):
    """A OneTimeTokens service on the test database, to issue tokens the API does not issue yet."""
    mongo = open_client(config.mongodb_url)
    yield OneTimeTokens(OneTimeTokenRepository(mongo[config.mongodb_db]), clock=clock)
    await mongo.close()


@pytest.fixture
async def registered(client, mailbox, run_jobs):
    """Register EMAIL, deliver the queued email; returns the access token of a login."""
    response = await client.post(REGISTER, json={"email": EMAIL, "password": PASSWORD})
    assert response.status == 201, await response.text()
    await run_jobs()
    return (await login(client, EMAIL, PASSWORD))["token"]["access_token"]


async def verify(client, token):
    return await client.post(VERIFY, json={"token": token})


async def verified_flag(client, access_token) -> bool:
    response = await client.get(ME, headers=bearer(access_token))
    assert response.status == 200
    verified: bool = (await response.json())["verified"]
    return verified


async def test_register_sends_a_verification_email(client, mailbox, run_jobs, config):
    response = await client.post(REGISTER, json={"email": "Fresh@Example.com", "password": PASSWORD})
    assert response.status == 201
    assert mailbox.to("fresh@example.com") == []  # queued, not sent by the web request
    await run_jobs()

    messages = mailbox.to("fresh@example.com")
    assert len(messages) == 1
    message = messages[0]
    assert message["From"] == f"CMS <{config.smtp_from_email}>"
    assert message["Subject"] == "Verify your email address"
    assert message["Message-ID"]
    assert message.get_content_type() == "multipart/alternative"
    assert [part.get_content_type() for part in message.get_payload()] == ["text/plain", "text/html"]

    text = text_body(message)
    match = LINK.search(text)
    assert match, text
    token = match.group(1)
    assert "24 hours" in text
    html = text_body(message, "text/html")
    assert f'href="http://cms.test/_/verify-email?token={token}"' in html
    assert link_token(message) == token


async def test_verify_email_marks_the_user_verified(client, mailbox, registered):
    assert await verified_flag(client, registered) is False
    response = await verify(client, link_token(mailbox.last_to(EMAIL)))
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}
    assert await verified_flag(client, registered) is True
    assert (await login(client, EMAIL, PASSWORD))["user"]["verified"] is True


async def test_verification_token_is_single_use(client, mailbox, registered):
    token = link_token(mailbox.last_to(EMAIL))
    assert (await verify(client, token)).status == 200
    response = await verify(client, token)
    assert response.status == 400
    body = await response.json()
    assert body == {"detail": body["detail"], "code": "token_invalid"}


async def test_expired_verification_token(client, clock, mailbox, registered):
    token = link_token(mailbox.last_to(EMAIL))
    clock.advance(hours=25)
    response = await verify(client, token)
    assert response.status == 400
    assert (await response.json())["code"] == "token_expired"
    # still unverified, and the refusal did not spend anything else
    relogin = (await login(client, EMAIL, PASSWORD))["token"]["access_token"]
    assert await verified_flag(client, relogin) is False


async def test_verification_token_is_good_for_just_under_24_hours(client, clock, mailbox, registered):
    token = link_token(mailbox.last_to(EMAIL))
    clock.advance(hours=23, minutes=59)
    assert (await verify(client, token)).status == 200


@pytest.mark.parametrize("token", ["garbage", "x" * 512, "a.b.c", "../../etc"], ids=["word", "long", "jwt", "path"])
async def test_garbage_verification_token_is_token_invalid(client, token):
    response = await verify(client, token)
    assert response.status == 400
    assert (await response.json())["code"] == "token_invalid"


@pytest.mark.parametrize(
    "body, status",
    [({}, 422), ({"token": ""}, 422), ({"token": 5}, 422), ({"token": None}, 422), ({"token": "x" * 513}, 422),
     ({"token": "abc", "extra": 1}, 422), (["abc"], 400)],
    ids=["missing", "empty", "int", "null", "too-long", "unknown-key", "array"],
)
async def test_verify_email_bad_input(client, body, status):
    response = await client.post(VERIFY, json=body)
    assert response.status == status, await response.text()


async def test_verify_email_malformed_json_is_400(client):
    await error_of(await post_raw_json(client, VERIFY, b'{"token": '), 400, "bad_request")


async def test_a_token_of_another_purpose_is_refused_and_not_spent(client, one_time, registered):
    user = await (await client.get(ME, headers=bearer(registered))).json()
    reset = await one_time.issue(PASSWORD_RESET, user["id"], ADMIN_AUDIENCE)
    response = await verify(client, reset)
    assert response.status == 400
    assert (await response.json())["code"] == "token_invalid"
    # the reset token is still good for its own purpose
    assert (await one_time.consume(reset, PASSWORD_RESET)).user_id == user["id"]


async def test_a_collection_token_is_refused_here_and_not_spent(client, one_time, registered):
    user = await (await client.get(ME, headers=bearer(registered))).json()
    audience = collection_audience("c1")
    token = await one_time.issue(VERIFY_EMAIL, user["id"], audience)
    response = await verify(client, token)
    assert response.status == 400
    assert (await response.json())["code"] == "token_invalid"
    assert await verified_flag(client, registered) is False
    assert (await one_time.consume(token, VERIFY_EMAIL, audience=audience)).user_id == user["id"]


async def test_only_the_hash_of_the_token_is_stored(client, config, mailbox, registered):
    token = link_token(mailbox.last_to(EMAIL))
    mongo = open_client(config.mongodb_url)
    try:
        stored = [doc async for doc in mongo[config.mongodb_db]["one_time_tokens"].find({})]
    finally:
        await mongo.close()
    assert [doc["_id"] for doc in stored] == [hash_token(token)]
    assert token not in repr(stored)
    assert stored[0]["purpose"] == VERIFY_EMAIL and stored[0]["audience"] == ADMIN_AUDIENCE
    assert (stored[0]["expires_at"] - stored[0]["created"]).total_seconds() == 24 * 3600


# --- resend ------------------------------------------------------------------------------------


async def test_resend_verification_needs_a_bearer_token(client):
    response = await client.post(RESEND)
    assert response.status == 401
    assert (await response.json())["code"] == "unauthorized"
    response = await client.post(RESEND, headers={"Authorization": "Bearer garbage"})
    assert response.status == 401


async def test_resend_sends_a_new_link_and_voids_the_old_one(client, mailbox, run_jobs, registered):
    old = link_token(mailbox.last_to(EMAIL))
    response = await client.post(RESEND, headers=bearer(registered))
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}
    await run_jobs()
    messages = mailbox.to(EMAIL)
    assert len(messages) == 2
    new = link_token(messages[-1])
    assert new != old

    response = await verify(client, old)
    assert response.status == 400
    assert (await response.json())["code"] == "token_invalid"
    assert await verified_flag(client, registered) is False

    assert (await verify(client, new)).status == 200
    assert await verified_flag(client, registered) is True


async def test_resend_for_a_verified_user_says_so_and_sends_nothing(client, mailbox, run_jobs, registered):
    assert (await verify(client, link_token(mailbox.last_to(EMAIL)))).status == 200
    response = await client.post(RESEND, headers=bearer(registered))
    assert response.status == 200
    assert "already verified" in (await response.json())["message"]
    await run_jobs()
    assert len(mailbox.to(EMAIL)) == 1


async def test_create_admin_sends_no_verification_email(client, services, mailbox, run_jobs):
    await services.identity.registration.create_admin("boss@example.com", "boss-password-1")
    await run_jobs()
    assert mailbox.to("boss@example.com") == []


# --- the browser page ---------------------------------------------------------------------------


async def test_verify_email_page_is_html(client):
    response = await client.get("/_/verify-email", params={"token": "abc"})
    assert response.status == 200
    assert response.content_type == "text/html"
    text = await response.text()
    assert "/api/v1/auth/verify-email" in text
    assert "<html" in text
