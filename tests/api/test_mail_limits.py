"""Mail limits: every endpoint that sends mail allows MAIL_PER_MINUTE and MAIL_PER_HOUR emails per
endpoint and address (register's own mail does not count), 429 `rate_limited` with `Retry-After`
the same for known and unknown addresses; and rate-limit refusals are audited once per key and
window (decisions.md: Limits, Errors, Audit events)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from cms.app import create_app
from cms.services.operations.rate_limits import RateLimitService
from tests.api import test_collection_auth
from tests.api.test_collection_auth import AUTH, create_members, member_login, registered_member
from tests.conftest import bearer, error_of, login

REGISTER = "/api/v1/auth/register"
RESEND = "/api/v1/auth/resend-verification"
FORGOT = "/api/v1/auth/forgot-password"
REQUEST = "/api/v1/auth/request-password-reset"
LOGIN = "/api/v1/auth/login"
EMAIL = "mailer@example.com"
UNKNOWN = "nobody@example.com"
MEMBER_EMAIL = test_collection_auth.EMAIL
MEMBER_PASSWORD = test_collection_auth.PASSWORD
PASSWORD = "password-1"
VERIFY_SUBJECT = "Verify your email address"
RESET_SUBJECT = "Reset your password"
MAIL_PER_HOUR = 5  # docs/api/conventions.md, Rate limits: "at most 1 email a minute and 5 an hour per address"


def subjects(mailbox, address):
    """The subjects of the messages received by `address`, sorted (jobs run concurrently)."""
    return sorted(m["Subject"] for m in mailbox.to(address))


async def register(client, email=EMAIL):
    """Register an admin-table user and return an access token of a login."""
    response = await client.post(REGISTER, json={"email": email, "password": PASSWORD})
    assert response.status == 201, await response.text()
    return (await login(client, email, PASSWORD))["token"]["access_token"]


async def assert_mail_refused(response, max_retry_after_s=60):
    """A mail-limit refusal: 429 rate_limited, `Retry-After` within the window; returns the body."""
    body = await error_of(response, 429, "rate_limited")
    assert 1 <= int(response.headers["Retry-After"]) <= max_retry_after_s
    return body


@pytest.fixture
async def members(client, admin_token):
    return await create_members(client, admin_token, otp_enabled=True)


# --- resend-verification -----------------------------------------------------------------------


async def test_resend_twice_in_a_row_sends_one_mail(client, mailbox, run_jobs, services):
    token = await register(client)
    assert (await client.post(RESEND, headers=bearer(token))).status == 200
    await assert_mail_refused(await client.post(RESEND, headers=bearer(token)))
    await run_jobs()
    # register's own mail plus one resend; the refused call queued nothing
    assert subjects(mailbox, EMAIL) == [VERIFY_SUBJECT] * 2
    assert await services.audit.count(event_type="rate_limited", **{"details.limit": "mail:resend_verification"}) == 1


async def test_collection_resend_and_email_change_are_limited(client, mailbox, run_jobs, members):
    await registered_member(client)
    token = (await member_login(client))["token"]["access_token"]
    assert (await client.post(f"{AUTH}/resend-verification", headers=bearer(token))).status == 200
    await assert_mail_refused(await client.post(f"{AUTH}/resend-verification", headers=bearer(token)))
    change = {"new_email": "new.member@example.com", "password": MEMBER_PASSWORD}
    assert (await client.post(f"{AUTH}/me/request-email-change", headers=bearer(token), json=change)).status == 200
    await assert_mail_refused(await client.post(f"{AUTH}/me/request-email-change", headers=bearer(token), json=change))
    await run_jobs()
    assert subjects(mailbox, MEMBER_EMAIL) == [VERIFY_SUBJECT] * 2
    assert subjects(mailbox, "new.member@example.com") == ["Confirm your new email address"]


# --- the first call of each endpoint always sends ---------------------------------------------------


async def test_register_then_each_admin_mail_endpoint_sends(client, mailbox, run_jobs):
    token = await register(client)
    assert (await client.post(FORGOT, json={"email": EMAIL})).status == 200
    assert (await client.post(REQUEST, json={"email": EMAIL})).status == 200
    assert (await client.post(RESEND, headers=bearer(token))).status == 200
    await run_jobs()
    assert subjects(mailbox, EMAIL) == [RESET_SUBJECT] * 2 + [VERIFY_SUBJECT] * 2


async def test_register_then_each_collection_mail_endpoint_sends(client, mailbox, run_jobs, members):
    await registered_member(client)
    token = (await member_login(client))["token"]["access_token"]
    assert (await client.post(f"{AUTH}/otp/request", json={"email": MEMBER_EMAIL})).status == 200
    response = await client.post(REQUEST, json={"email": MEMBER_EMAIL, "collection": "members"})
    assert response.status == 200
    assert (await client.post(f"{AUTH}/resend-verification", headers=bearer(token))).status == 200
    await run_jobs()
    assert subjects(mailbox, MEMBER_EMAIL) == [RESET_SUBJECT, VERIFY_SUBJECT, VERIFY_SUBJECT, "Your login code"]


# --- reset requests: known and unknown addresses alike ----------------------------------------------


async def test_second_reset_within_a_minute_is_429_for_known_and_unknown_alike(client, mailbox, run_jobs,
                                                                                services):
    await register(client)
    answers = {}
    for address in (EMAIL, UNKNOWN):
        assert (await client.post(FORGOT, json={"email": address})).status == 200
        refused = await client.post(FORGOT, json={"email": address.upper()})  # addresses compare lower-cased
        answers[address] = (await assert_mail_refused(refused), refused.headers["X-RateLimit-Limit"])
    assert answers[EMAIL] == answers[UNKNOWN]
    await run_jobs()
    assert subjects(mailbox, EMAIL) == [RESET_SUBJECT, VERIFY_SUBJECT]
    assert mailbox.to(UNKNOWN) == []


async def test_otp_request_is_limited_per_address(client, mailbox, run_jobs, members):
    await registered_member(client)
    for address in (MEMBER_EMAIL, UNKNOWN):
        assert (await client.post(f"{AUTH}/otp/request", json={"email": address})).status == 200
        await assert_mail_refused(await client.post(f"{AUTH}/otp/request", json={"email": address}))
    await run_jobs()
    assert subjects(mailbox, MEMBER_EMAIL) == [VERIFY_SUBJECT, "Your login code"]


# --- windows ------------------------------------------------------------------------------------------


@pytest.fixture
async def short_windows(aiohttp_client, config, services):
    """An app on the test's services whose mail windows are 1 s ("minute") and 20 s ("hour")."""
    limiter = RateLimitService(services.redis, services.settings,
                               key_prefix=f"cms:ratelimit:{config.mongodb_db}:short",
                               mail_minute_window_s=1, mail_hour_window_s=20)
    return await aiohttp_client(create_app(config, services=replace(services, rate_limits=limiter)))


async def test_after_the_minute_window_another_mail_goes_out_and_the_hour_cap_holds(short_windows, mailbox,
                                                                                   run_jobs):
    client = short_windows
    await register(client)
    for sent in range(1, MAIL_PER_HOUR + 1):
        assert (await client.post(FORGOT, json={"email": EMAIL})).status == 200, f"mail {sent}"
        if sent < MAIL_PER_HOUR:
            # refused within the "minute"; a refused call must not use up the "hour"
            refused = await client.post(FORGOT, json={"email": EMAIL})
            await assert_mail_refused(refused, max_retry_after_s=1)
        await asyncio.sleep(1.1)
    # the "minute" has passed again, but the "hour" is full: Retry-After counts to its end
    refused = await client.post(FORGOT, json={"email": EMAIL})
    await assert_mail_refused(refused, max_retry_after_s=20)
    assert int(refused.headers["Retry-After"]) > 1
    assert refused.headers["X-RateLimit-Limit"] == str(MAIL_PER_HOUR)
    await run_jobs()
    assert subjects(mailbox, EMAIL).count(RESET_SUBJECT) == MAIL_PER_HOUR


# --- switch -------------------------------------------------------------------------------------------


async def test_no_mail_limit_with_rate_limiting_switched_off(client, mailbox, run_jobs, services):
    await services.settings.set("rate_limit_enabled", False)
    token = await register(client)
    for _ in range(3):
        assert (await client.post(FORGOT, json={"email": EMAIL})).status == 200
        assert (await client.post(RESEND, headers=bearer(token))).status == 200
    await run_jobs()
    assert subjects(mailbox, EMAIL) == [RESET_SUBJECT] * 3 + [VERIFY_SUBJECT] * 4


# --- audit once per key and window ------------------------------------------------------------------


async def test_fifty_refused_logins_write_one_audit_entry(client, services):
    assert (await client.post(REGISTER, json={"email": EMAIL, "password": PASSWORD})).status == 201
    statuses = [(await client.post(LOGIN, json={"email": EMAIL, "password": "guess-123"})).status
                for _ in range(60)]
    assert statuses == [401] * 10 + [429] * 50
    assert await services.audit.count(event_type="rate_limited") == 1
    # another key (another address) is refused and audited on its own
    for _ in range(11):
        await client.post(LOGIN, json={"email": UNKNOWN, "password": "guess-123"})
    assert await services.audit.count(event_type="rate_limited") == 2
