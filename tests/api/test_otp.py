"""OTP email-code login of auth collections: 6 digits, 10 minutes, single use, 5 tries, stored
hashed, `otp_enabled` per collection (spec: Auth collection endpoints, Authentication 6, Limits;
decisions.md: Limits, Errors)."""

from __future__ import annotations

import re

import pytest

from cms.models import collection_audience
from cms.store.client import open_client
from tests.api.test_collection_auth import (
    AUTH,
    EMAIL,
    NAME,
    create_members,
    mail_with_subject,
    registered_member,
)
from tests.conftest import bearer, error_of, text_body

REQUEST = f"{AUTH}/otp/request"
VERIFY = f"{AUTH}/otp/verify"
MESSAGE = "If an account with this email exists, a login code has been sent to it."


@pytest.fixture
async def members(client, admin_token):
    return await create_members(client, admin_token, otp_enabled=True)


@pytest.fixture
async def member(client, members):
    return await registered_member(client)


def code_of(message) -> str:
    match = re.search(r"^\s*(\d{6})\s*$", text_body(message), re.MULTILINE)
    assert match, text_body(message)
    return match.group(1)


def other_code(code: str, step: int = 1) -> str:
    return f"{(int(code) + step) % 10**6:06d}"


async def request_code(client, run_jobs, mailbox, email=EMAIL) -> str:
    response = await client.post(REQUEST, json={"email": email})
    assert response.status == 200, await response.text()
    await run_jobs()
    return code_of(mail_with_subject(mailbox, email, "Your login code"))


async def verify(client, code, email=EMAIL):
    return await client.post(VERIFY, json={"email": email, "code": code})


async def stored_codes(config):
    mongo = open_client(config.mongodb_url)
    try:
        return [doc async for doc in mongo[config.mongodb_db]["otp_codes"].find({})]
    finally:
        await mongo.close()


async def test_otp_login(client, mailbox, run_jobs, services, members, member):
    code = await request_code(client, run_jobs, mailbox)
    assert len(code) == 6 and code.isdigit()
    assert "10 minutes" in text_body(mail_with_subject(mailbox, EMAIL, "Your login code"))

    response = await verify(client, code, email=EMAIL.upper())
    assert response.status == 200, await response.text()
    body = await response.json()
    assert set(body) == {"user", "token", "message", "requires_2fa"}
    assert body["user"]["id"] == member["id"] and body["requires_2fa"] is False
    assert body["user"]["verified"] is True  # the code proved the address
    assert set(body["token"]) == {"access_token", "refresh_token", "token_type", "expires_in"}
    assert "password" not in await response.text()
    assert (await client.get(f"{AUTH}/me", headers=bearer(body["token"]["access_token"]))).status == 200
    sessions = await services.sessions.list_active(member["id"], collection_audience(members["id"]))
    assert len(sessions) == 1
    # OTP and password login coexist
    response = await client.post(f"{AUTH}/login", json={"email": EMAIL, "password": "member-password-1"})
    assert response.status == 200


async def test_request_answers_alike_and_queues_the_work(client, config, mailbox, run_jobs, member):
    known = await client.post(REQUEST, json={"email": EMAIL})
    unknown = await client.post(REQUEST, json={"email": "nobody@example.com"})
    assert known.status == unknown.status == 200
    assert await known.json() == await unknown.json() == {"message": MESSAGE}
    assert await stored_codes(config) == []  # nothing looked up or issued while the client waited
    await run_jobs()
    assert len(await stored_codes(config)) == 1
    assert mail_with_subject(mailbox, EMAIL, "Your login code")
    assert mailbox.to("nobody@example.com") == []


async def test_code_is_single_use(client, mailbox, run_jobs, member):
    code = await request_code(client, run_jobs, mailbox)
    assert (await verify(client, code)).status == 200
    await error_of(await verify(client, code), 400, "otp_invalid")


async def test_code_expires_after_ten_minutes(client, clock, mailbox, run_jobs, member):
    code = await request_code(client, run_jobs, mailbox)
    clock.advance(minutes=10)
    await error_of(await verify(client, code), 400, "otp_invalid")


async def test_code_works_just_under_ten_minutes(client, clock, mailbox, run_jobs, member):
    code = await request_code(client, run_jobs, mailbox)
    clock.advance(minutes=9, seconds=59)
    assert (await verify(client, code)).status == 200


async def test_five_wrong_tries_void_the_code(client, mailbox, run_jobs, services, member):
    code = await request_code(client, run_jobs, mailbox)
    for step in range(1, 6):
        await error_of(await verify(client, other_code(code, step)), 400, "otp_invalid")
    await error_of(await verify(client, code), 400, "otp_invalid")
    assert await services.audit.count(event_type="otp_failed", user_id=member["id"]) == 6
    # a new code works
    await services.rate_limits.reset()  # a minute later: the mail limit (1 a minute) has passed
    fresh = await request_code(client, run_jobs, mailbox)
    assert (await verify(client, fresh)).status == 200


async def test_four_wrong_tries_leave_the_last_one(client, mailbox, run_jobs, member):
    code = await request_code(client, run_jobs, mailbox)
    for step in range(1, 5):
        await error_of(await verify(client, other_code(code, step)), 400, "otp_invalid")
    assert (await verify(client, code)).status == 200


async def test_a_new_code_voids_the_older_one(client, clock, mailbox, run_jobs, services, member):
    first = await request_code(client, run_jobs, mailbox)
    clock.advance(seconds=1)
    await services.rate_limits.reset()  # a minute later: the mail limit (1 a minute) has passed
    second = await request_code(client, run_jobs, mailbox)
    if first != second:
        await error_of(await verify(client, first), 400, "otp_invalid")
    assert (await verify(client, second)).status == 200


async def test_codes_are_stored_hashed(client, config, mailbox, run_jobs, member):
    code = await request_code(client, run_jobs, mailbox)
    stored = await stored_codes(config)
    assert len(stored) == 1
    assert code not in repr(stored)
    assert len(stored[0]["code_hash"]) == 64
    assert (stored[0]["expires_at"] - stored[0]["created"]).total_seconds() == 600


async def test_unknown_address_is_otp_invalid(client, member):
    await error_of(await verify(client, "123456", email="nobody@example.com"), 400, "otp_invalid")
    await error_of(await verify(client, "123456"), 400, "otp_invalid")  # known address, no code requested


@pytest.mark.parametrize("code", ["12345", "1234567", "abcdef", 123456, None, ""],
                         ids=["five", "seven", "letters", "int", "null", "empty"])
async def test_malformed_codes_are_422(client, member, code):
    await error_of(await client.post(VERIFY, json={"email": EMAIL, "code": code}), 422, "validation_error")


async def test_otp_disabled_is_403(client, admin_token, mailbox, run_jobs, members, member):
    response = await client.patch(f"/api/v1/collections/{members['id']}", headers=bearer(admin_token),
                                  json={"otp_enabled": False})
    assert response.status == 200
    await error_of(await client.post(REQUEST, json={"email": EMAIL}), 403, "otp_disabled")
    await error_of(await verify(client, "123456"), 403, "otp_disabled")
    await run_jobs()
    assert [m["Subject"] for m in mailbox.to(EMAIL)] == ["Verify your email address"]


async def test_a_code_issued_before_otp_was_disabled_no_longer_works(client, admin_token, mailbox, run_jobs,
                                                                     members, member):
    code = await request_code(client, run_jobs, mailbox)
    await client.patch(f"/api/v1/collections/{members['id']}", headers=bearer(admin_token),
                       json={"otp_enabled": False})
    await error_of(await verify(client, code), 403, "otp_disabled")


async def test_otp_on_a_base_collection_is_404(client, admin_token):
    response = await client.post("/api/v1/collections", headers=bearer(admin_token),
                                 json={"name": NAME, "type": "base", "schema": []})
    assert response.status == 201
    await error_of(await client.post(REQUEST, json={"email": EMAIL}), 404, "not_found")


async def test_verify_attempts_are_rate_limited(client, member):
    for _ in range(10):
        await error_of(await verify(client, "000000"), 400, "otp_invalid")
    response = await verify(client, "000000")
    await error_of(response, 429, "rate_limited")
    assert response.headers["X-RateLimit-Remaining"] == "0"
