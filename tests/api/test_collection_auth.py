"""Auth collections as user systems: register, verification, login, refresh, me, audiences, records
never exposing credentials, change password, email change, sessions (spec: Auth collection
endpoints, States and transitions; decisions.md: Identity and tokens, Response shapes, Errors)."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import aiohttp
import pytest

from cms.app import create_app
from cms.models import collection_audience
from cms.security import passwords
from cms.store.client import open_client
from cms.wiring import open_services
from tests.conftest import (
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    bearer,
    create_collection,
    error_of,
    link_token,
    records_path,
    text_body,
)
from tests.fixtures import dummy_verifications

PASSWORD = "member-password-1"
EMAIL = "member@example.com"
NAME = "members"
AUTH = f"/api/v1/collections/{NAME}/auth"
FIELDS = [{"name": "nickname", "type": "text", "validation": {"max": 40}},
          {"name": "age", "type": "number", "validation": {"min": 0}}]


def auth_path(collection: str, suffix: str) -> str:
    return f"/api/v1/collections/{collection}/auth{suffix}"


async def create_members(client, admin_token, otp_enabled=True):
    """Create the auth collection `members` (nickname, age) and return it."""
    return await create_collection(client, admin_token, NAME, FIELDS, type="auth", otp_enabled=otp_enabled)


async def registered_member(client):
    """Register EMAIL in `members` and return its record as register returned it."""
    response = await register_member(client, nickname="Mem")
    assert response.status == 201, await response.text()
    return (await response.json())["user"]


@pytest.fixture
async def members(client, admin_token):
    """An auth collection `members` (nickname, age) with OTP login enabled."""
    return await create_members(client, admin_token)


async def register_member(client, email=EMAIL, password=PASSWORD, collection=NAME, **fields):
    return await client.post(auth_path(collection, "/register"), json={"email": email, "password": password, **fields})


async def member_login(client, email=EMAIL, password=PASSWORD, collection=NAME, user_agent="pytest"):
    response = await client.post(auth_path(collection, "/login"), json={"email": email, "password": password},
                                 headers={"User-Agent": user_agent})
    assert response.status == 200, await response.text()
    return await response.json()


@pytest.fixture
async def member(client, members):
    """A registered user of `members`: its record as returned by register."""
    return await registered_member(client)


async def stored_documents(config, mongo_collection):
    mongo = open_client(config.mongodb_url)
    try:
        return [doc async for doc in mongo[config.mongodb_db][mongo_collection].find({})]
    finally:
        await mongo.close()


def mail_with_subject(mailbox, address, subject):
    """The newest message to `address` with this subject (jobs run concurrently: order is not fixed)."""
    found = [m for m in mailbox.to(address) if m["Subject"] == subject]
    assert found, f"no '{subject}' email to {address}"
    return found[-1]


def assert_no_secrets(text: str) -> None:
    assert "password" not in text
    assert "argon2" not in text
    assert PASSWORD not in text


# --- register ------------------------------------------------------------------------------------


async def test_register_creates_an_unverified_user_record(client, config, members, admin_token):
    response = await register_member(client, email="New.Member@Example.COM", nickname="Neo", age=30,
                                     password_confirm=PASSWORD)
    assert response.status == 201, await response.text()
    body = await response.json()
    assert set(body) == {"user", "message"} and body["message"]
    user = body["user"]
    assert set(user) == {"id", "created", "updated", "email", "verified", "nickname", "age"}
    assert user["email"] == "new.member@example.com"
    assert user["verified"] is False
    assert (user["nickname"], user["age"]) == ("Neo", 30)
    assert_no_secrets(await response.text())

    # the user is a record of the collection, and its credentials are stored apart, hashed
    records = await (await client.get(records_path(NAME), headers=bearer(admin_token))).json()
    assert records["items"] == [user]
    credentials = await stored_documents(config, "auth_credentials")
    assert [c["_id"] for c in credentials] == [user["id"]]
    assert credentials[0]["password_hash"].startswith("$argon2id$")
    assert passwords.verify_password(credentials[0]["password_hash"], PASSWORD)
    record_docs = await stored_documents(config, f"records_{members['id'].replace('-', '')}")
    assert "password" not in repr(record_docs) and "argon2" not in repr(record_docs)


async def test_register_sends_a_verification_email_for_the_collection(client, mailbox, run_jobs, member):
    assert mailbox.to(EMAIL) == []  # queued, not sent inline
    await run_jobs()
    message = mailbox.last_to(EMAIL)
    assert message["Subject"] == "Verify your email address"
    assert re.search(r"http://cms\.test/_/verify-email\?token=[\w-]+&collection=members", text_body(message))
    token = link_token(message)

    # the spec's POST /api/v1/auth/verify-email serves auth-collection users too: the token's
    # audience names the user system
    response = await client.post("/api/v1/auth/verify-email", json={"token": token})
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}
    login = await member_login(client)
    assert login["user"]["verified"] is True
    own = bearer(login["token"]["access_token"])
    record = await (await client.get(records_path(NAME, member["id"]), headers=own)).json()
    assert record["verified"] is True

    await error_of(await client.post(f"{AUTH}/verify-email", json={"token": token}), 400, "token_invalid")


async def test_collection_verify_endpoint_verifies_and_refuses_admin_tokens(client, mailbox, run_jobs, member):
    await run_jobs()
    token = link_token(mailbox.last_to(EMAIL))
    response = await client.post(f"{AUTH}/verify-email", json={"token": token})
    assert response.status == 200, await response.text()
    assert (await member_login(client))["user"]["verified"] is True
    # an admin-table user's verification token is refused on a collection's endpoint
    await client.post("/api/v1/auth/register", json={"email": "staff@example.com", "password": "staff-pass-1"})
    await run_jobs()
    admin_token = link_token(mailbox.last_to("staff@example.com"))
    await error_of(await client.post(f"{AUTH}/verify-email", json={"token": admin_token}), 400, "token_invalid")
    assert (await client.post("/api/v1/auth/verify-email", json={"token": admin_token})).status == 200


async def test_expired_verification_token_is_token_expired(client, clock, mailbox, run_jobs, member):
    await run_jobs()
    token = link_token(mailbox.last_to(EMAIL))
    clock.advance(hours=24, seconds=1)
    await error_of(await client.post(f"{AUTH}/verify-email", json={"token": token}), 400, "token_expired")
    assert (await member_login(client))["user"]["verified"] is False


async def test_resend_verification_for_a_collection_user(client, mailbox, run_jobs, member):
    await run_jobs()
    old = link_token(mailbox.last_to(EMAIL))
    access = (await member_login(client))["token"]["access_token"]
    response = await client.post(f"{AUTH}/resend-verification", headers=bearer(access))
    assert response.status == 200
    await run_jobs()
    new = link_token(mailbox.last_to(EMAIL))
    assert new != old
    await error_of(await client.post(f"{AUTH}/verify-email", json={"token": old}), 400, "token_invalid")
    assert (await client.post(f"{AUTH}/verify-email", json={"token": new})).status == 200
    response = await client.post(f"{AUTH}/resend-verification", headers=bearer(access))
    assert "already verified" in (await response.json())["message"]


async def test_register_email_is_unique_per_collection_case_insensitively(client, admin_token, members, member):
    for email in (EMAIL, EMAIL.upper(), f"  {EMAIL} "):
        body = await error_of(await register_member(client, email=email.strip()), 400, "already_exists")
        assert set(body) == {"detail", "code"}
    # another auth collection, and the admin-table users, are separate user systems
    await create_collection(client, admin_token, "vendors", [], type="auth")
    assert (await register_member(client, collection="vendors")).status == 201
    response = await client.post("/api/v1/auth/register", json={"email": EMAIL, "password": PASSWORD})
    assert response.status == 201


@pytest.mark.parametrize(
    "body, field",
    [
        ({"email": EMAIL, "password": PASSWORD, "unknown": 1}, "unknown"),
        ({"email": EMAIL, "password": PASSWORD, "verified": True}, "verified"),
        ({"email": EMAIL, "password": PASSWORD, "age": "old"}, "age"),
        ({"email": EMAIL, "password": PASSWORD, "age": -1}, "age"),
        ({"email": EMAIL, "password": PASSWORD, "nickname": "x" * 41}, "nickname"),
        ({"email": EMAIL, "password": "short"}, "password"),
        ({"email": EMAIL, "password": PASSWORD, "password_confirm": "other-password"}, "password_confirm"),
        ({"email": "not-an-email", "password": PASSWORD}, "email"),
        ({"password": PASSWORD}, "email"),
        ({"email": EMAIL}, "password"),
    ],
    ids=["unknown-field", "verified", "age-type", "age-min", "nickname-max", "policy", "confirm", "email-invalid",
         "no-email", "no-password"],
)
async def test_register_validation_errors(client, config, members, body, field):
    response = await client.post(f"{AUTH}/register", json=body)
    payload = await error_of(response, 422, "validation_error")
    assert field in payload["errors"], payload
    assert await stored_documents(config, "auth_credentials") == []


async def test_required_schema_fields_are_required_at_register(client, admin_token):
    await create_collection(client, admin_token, "staff", [{"name": "team", "type": "text",
                                                            "validation": {"required": True}}], type="auth")
    payload = await error_of(await register_member(client, collection="staff"), 422, "validation_error")
    assert "team" in payload["errors"]
    assert (await register_member(client, collection="staff", team="ops")).status == 201


async def test_auth_endpoints_of_a_base_or_unknown_collection_are_404(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    for collection in ("posts", "nothing"):
        await error_of(await register_member(client, collection=collection), 404, "not_found")
        response = await client.post(auth_path(collection, "/login"), json={"email": EMAIL, "password": PASSWORD})
        await error_of(response, 404, "not_found")


# --- login, refresh, me ----------------------------------------------------------------------------


async def test_login_returns_the_login_response_and_a_session(client, services, members, member):
    body = await member_login(client, email=EMAIL.upper(), user_agent="agent/1")
    assert set(body) == {"user", "token", "message", "requires_2fa"}
    assert body["user"] == member
    assert body["message"] is None and body["requires_2fa"] is False
    assert set(body["token"]) == {"access_token", "refresh_token", "token_type", "expires_in"}
    assert body["token"]["token_type"] == "bearer" and body["token"]["expires_in"] == 86400
    sessions = await services.sessions.list_active(member["id"], collection_audience(members["id"]))
    assert [(s.user_agent, s.ip) for s in sessions] == [("agent/1", "127.0.0.1")]
    assert await services.audit.count(event_type="login_success") == 2  # the admin fixture's and this one


async def test_login_failures_are_identical_and_audited(client, services, member):
    before = dummy_verifications()
    unknown = await client.post(f"{AUTH}/login", json={"email": "nobody@example.com", "password": PASSWORD})
    assert dummy_verifications() == before + 1  # the same argon2 work as for a known address
    wrong = await client.post(f"{AUTH}/login", json={"email": EMAIL, "password": "wrong-password"})
    assert dummy_verifications() == before + 1
    assert unknown.status == wrong.status == 401
    assert await unknown.json() == await wrong.json()
    assert (await unknown.json())["code"] == "invalid_credentials"
    assert await services.audit.count(event_type="login_failed") == 2
    assert await services.audit.count(event_type="login_failed", user_id=member["id"]) == 1


async def test_admin_credentials_do_not_log_in_to_a_collection(client, members):
    response = await client.post(f"{AUTH}/login", json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    await error_of(response, 401, "invalid_credentials")


async def test_me_and_refresh(client, member):
    tokens = (await member_login(client))["token"]
    response = await client.get(f"{AUTH}/me", headers=bearer(tokens["access_token"]))
    assert response.status == 200
    assert await response.json() == member

    response = await client.post(f"{AUTH}/refresh", json={"refresh_token": tokens["refresh_token"]})
    assert response.status == 200, await response.text()
    renewed = await response.json()
    assert set(renewed) == {"access_token", "refresh_token", "token_type", "expires_in"}
    assert (await client.get(f"{AUTH}/me", headers=bearer(renewed["access_token"]))).status == 200
    # the spent refresh token revokes the session when presented again
    response = await client.post(f"{AUTH}/refresh", json={"refresh_token": tokens["refresh_token"]})
    await error_of(response, 401, "unauthorized")
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(renewed["access_token"])), 401, "unauthorized")


async def test_tokens_are_refused_outside_their_user_system(client, admin_token, member):
    await create_collection(client, admin_token, "vendors", [], type="auth")
    assert (await register_member(client, collection="vendors")).status == 201
    member_tokens = (await member_login(client))["token"]
    vendor_tokens = (await member_login(client, collection="vendors"))["token"]

    # a collection token on the admin-table endpoints, and an admin token on the collection's
    await error_of(await client.get("/api/v1/auth/me", headers=bearer(member_tokens["access_token"])), 401,
                   "unauthorized")
    response = await client.post("/api/v1/auth/refresh", json={"refresh_token": member_tokens["refresh_token"]})
    await error_of(response, 401, "unauthorized")
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(admin_token)), 401, "unauthorized")
    await error_of(await client.get(f"{AUTH}/sessions", headers=bearer(admin_token)), 401, "unauthorized")
    # another auth collection's tokens
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(vendor_tokens["access_token"])), 401,
                   "unauthorized")
    response = await client.post(f"{AUTH}/refresh", json={"refresh_token": vendor_tokens["refresh_token"]})
    await error_of(response, 401, "unauthorized")
    # a refresh token is not an access token
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(member_tokens["refresh_token"])), 401,
                   "unauthorized")
    # nothing was spent or revoked by the refusals
    assert (await client.get(f"{AUTH}/me", headers=bearer(member_tokens["access_token"]))).status == 200
    assert (await client.get(auth_path("vendors", "/me"), headers=bearer(vendor_tokens["access_token"]))).status == 200


async def test_admin_only_operations_refuse_collection_users(client, member):
    access = (await member_login(client))["token"]["access_token"]
    response = await client.post("/api/v1/collections", headers=bearer(access), json={"name": "x", "schema": []})
    await error_of(response, 403, "forbidden")


async def test_a_collection_user_may_write_records(client, admin_token, member):
    await create_collection(client, admin_token, "notes", [{"name": "text", "type": "text"}])
    access = (await member_login(client))["token"]["access_token"]
    response = await client.post(records_path("notes"), headers=bearer(access), json={"data": {"text": "hi"}})
    assert response.status == 201


# --- auth records through the records API ---------------------------------------------------------


async def test_records_api_never_exposes_credentials(client, admin_token, member):
    own = bearer((await member_login(client))["token"]["access_token"])
    admin = bearer(admin_token)
    texts = [await (await client.get(records_path(NAME), headers=admin)).text(),
             await (await client.get(records_path(NAME, member["id"]), headers=admin)).text(),
             await (await client.get(records_path(NAME), params={"search": "Mem"}, headers=admin)).text(),
             await (await client.get(records_path(NAME), headers=own)).text(),
             await (await client.get(records_path(NAME, member["id"]), headers=own)).text()]
    for text in texts:
        assert member["id"] in text
        assert_no_secrets(text)
        assert "token" not in text


async def test_records_api_cannot_set_credentials_or_email(client, admin_token, member):
    for data in ({"password": "plain-text-1"}, {"email": "other@example.com"}, {"verified": True},
                 {"password_hash": "x"}):
        response = await client.patch(records_path(NAME, member["id"]), headers=bearer(admin_token),
                                      json={"data": data})
        await error_of(response, 422, "validation_error")
        response = await client.post(records_path(NAME), headers=bearer(admin_token), json={"data": data})
        await error_of(response, 400, "bad_request")  # no user records through the records API at all
    # schema fields can be changed, and the user still logs in
    response = await client.patch(records_path(NAME, member["id"]), headers=bearer(admin_token),
                                  json={"data": {"nickname": "Renamed"}})
    assert response.status == 200
    assert (await member_login(client))["user"]["nickname"] == "Renamed"


async def test_deleting_a_user_record_ends_its_sessions_and_login(client, admin_token, config, member):
    tokens = (await member_login(client))["token"]
    response = await client.delete(records_path(NAME, member["id"]), headers=bearer(admin_token))
    assert response.status == 204
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(tokens["access_token"])), 401, "unauthorized")
    response = await client.post(f"{AUTH}/refresh", json={"refresh_token": tokens["refresh_token"]})
    await error_of(response, 401, "unauthorized")
    response = await client.post(f"{AUTH}/login", json={"email": EMAIL, "password": PASSWORD})
    await error_of(response, 401, "invalid_credentials")
    assert await stored_documents(config, "auth_credentials") == []
    # the address is free again
    assert (await register_member(client)).status == 201


# --- change password -------------------------------------------------------------------------------


async def test_change_password_keeps_this_session_and_revokes_the_others(client, services, member):
    mine = (await member_login(client))["token"]
    other = (await member_login(client))["token"]
    response = await client.post(f"{AUTH}/me/change-password", headers=bearer(mine["access_token"]),
                                 json={"old_password": PASSWORD, "new_password": "new-password-2",
                                       "password_confirm": "new-password-2"})
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}

    assert (await client.get(f"{AUTH}/me", headers=bearer(mine["access_token"]))).status == 200
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(other["access_token"])), 401, "unauthorized")
    response = await client.post(f"{AUTH}/refresh", json={"refresh_token": other["refresh_token"]})
    await error_of(response, 401, "unauthorized")
    response = await client.post(f"{AUTH}/login", json={"email": EMAIL, "password": PASSWORD})
    await error_of(response, 401, "invalid_credentials")
    await member_login(client, password="new-password-2")
    assert await services.audit.count(event_type="password_changed", user_id=member["id"]) == 1


@pytest.mark.parametrize(
    "body, field",
    [({"old_password": "wrong-password", "new_password": "new-password-2"}, "old_password"),
     ({"old_password": PASSWORD, "new_password": "short"}, "new_password"),
     ({"old_password": PASSWORD, "new_password": "new-password-2", "password_confirm": "x"}, "password_confirm"),
     ({"new_password": "new-password-2"}, "old_password")],
    ids=["wrong-current", "policy", "confirm", "missing-current"],
)
async def test_change_password_refusals(client, member, body, field):
    tokens = [(await member_login(client))["token"] for _ in range(2)]
    response = await client.post(f"{AUTH}/me/change-password", headers=bearer(tokens[0]["access_token"]), json=body)
    payload = await error_of(response, 422, "validation_error")
    assert field in payload["errors"]
    # nothing changed: the old password works and no session was revoked
    await member_login(client)
    for token in tokens:
        assert (await client.get(f"{AUTH}/me", headers=bearer(token["access_token"]))).status == 200


async def test_wrong_current_password_is_audited(client, services, member):
    access = (await member_login(client))["token"]["access_token"]
    await client.post(f"{AUTH}/me/change-password", headers=bearer(access),
                      json={"old_password": "wrong-password", "new_password": "new-password-2"})
    assert await services.audit.count(event_type="login_failed", user_id=member["id"]) == 1


async def test_change_password_needs_a_token_of_this_collection(client, admin_token, member):
    body = {"old_password": PASSWORD, "new_password": "new-password-2"}
    await error_of(await client.post(f"{AUTH}/me/change-password", json=body), 401, "unauthorized")
    response = await client.post(f"{AUTH}/me/change-password", headers=bearer(admin_token), json=body)
    await error_of(response, 401, "unauthorized")


# --- email change ----------------------------------------------------------------------------------

NEW_EMAIL = "renamed@example.com"


async def request_change(client, access, new_email=NEW_EMAIL, password=PASSWORD):
    return await client.post(f"{AUTH}/me/request-email-change", headers=bearer(access),
                             json={"new_email": new_email, "password": password})


async def test_email_change_happens_only_at_confirmation(client, mailbox, run_jobs, member):
    await run_jobs()  # the registration email
    tokens = (await member_login(client))["token"]
    response = await request_change(client, tokens["access_token"], new_email="Renamed@Example.com")
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}
    await run_jobs()
    assert len(mailbox.to(EMAIL)) == 1  # nothing new to the old address
    message = mailbox.last_to(NEW_EMAIL)
    assert message["Subject"] == "Confirm your new email address"
    assert re.search(r"http://cms\.test/_/confirm-email-change\?token=[\w-]+&collection=members",
                     text_body(message))
    token = link_token(message)

    # not changed yet
    me = await (await client.get(f"{AUTH}/me", headers=bearer(tokens["access_token"]))).json()
    assert me["email"] == EMAIL
    await member_login(client)

    response = await client.post(f"{AUTH}/me/confirm-email-change", json={"token": token})
    assert response.status == 200, await response.text()
    login = await member_login(client, email=NEW_EMAIL)
    assert login["user"]["email"] == NEW_EMAIL and login["user"]["verified"] is True
    response = await client.post(f"{AUTH}/login", json={"email": EMAIL, "password": PASSWORD})
    await error_of(response, 401, "invalid_credentials")
    # the sessions of the old address are over, and the link is spent
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(tokens["access_token"])), 401, "unauthorized")
    response = await client.post(f"{AUTH}/me/confirm-email-change", json={"token": token})
    await error_of(response, 400, "token_invalid")
    # the old address is free now
    assert (await register_member(client)).status == 201


async def test_email_change_needs_the_current_password(client, mailbox, run_jobs, member):
    access = (await member_login(client))["token"]["access_token"]
    payload = await error_of(await request_change(client, access, password="wrong-password"), 422,
                             "validation_error")
    assert "password" in payload["errors"]
    await run_jobs()
    assert mailbox.to(NEW_EMAIL) == []


async def test_email_change_to_a_taken_or_the_same_address(client, member):
    assert (await register_member(client, email=NEW_EMAIL)).status == 201
    access = (await member_login(client))["token"]["access_token"]
    await error_of(await request_change(client, access, new_email=NEW_EMAIL.upper()), 400, "already_exists")
    payload = await error_of(await request_change(client, access, new_email=EMAIL), 422, "validation_error")
    assert "new_email" in payload["errors"]


async def test_email_change_link_expires(client, clock, mailbox, run_jobs, member):
    access = (await member_login(client))["token"]["access_token"]
    assert (await request_change(client, access)).status == 200
    await run_jobs()
    token = link_token(mailbox.last_to(NEW_EMAIL))
    clock.advance(hours=24, seconds=1)
    response = await client.post(f"{AUTH}/me/confirm-email-change", json={"token": token})
    await error_of(response, 400, "token_expired")
    assert (await member_login(client))["user"]["email"] == EMAIL


async def test_email_change_token_belongs_to_its_collection(client, admin_token, mailbox, run_jobs, member):
    await create_collection(client, admin_token, "vendors", [], type="auth")
    access = (await member_login(client))["token"]["access_token"]
    assert (await request_change(client, access)).status == 200
    await run_jobs()
    token = link_token(mailbox.last_to(NEW_EMAIL))
    response = await client.post(auth_path("vendors", "/me/confirm-email-change"), json={"token": token})
    await error_of(response, 400, "token_invalid")
    assert (await client.post(f"{AUTH}/me/confirm-email-change", json={"token": token})).status == 200


async def test_confirm_email_change_page_is_html(client):
    response = await client.get("/_/confirm-email-change", params={"token": "abc", "collection": NAME})
    assert response.status == 200 and response.content_type == "text/html"
    assert '"me/confirm-email-change"' in await response.text()


# --- sessions --------------------------------------------------------------------------------------


async def test_sessions_list_shows_the_callers_sessions(client, clock, member):
    first = (await member_login(client, user_agent="phone/1"))["token"]
    clock.advance(seconds=5)
    await member_login(client, user_agent="laptop/2")
    response = await client.get(f"{AUTH}/sessions", headers=bearer(first["access_token"]))
    assert response.status == 200
    sessions = await response.json()
    assert [s["user_agent"] for s in sessions] == ["laptop/2", "phone/1"]  # newest first
    assert [s["current"] for s in sessions] == [False, True]
    for session in sessions:
        assert set(session) == {"id", "created", "last_used", "user_agent", "ip", "current"}
        assert session["created"].endswith("Z") and session["ip"] == "127.0.0.1"
        assert "token" not in str(session)


async def test_revoke_one_session(client, services, member):
    first = (await member_login(client))["token"]
    second = (await member_login(client))["token"]
    sessions = await (await client.get(f"{AUTH}/sessions", headers=bearer(first["access_token"]))).json()
    other_id = next(s["id"] for s in sessions if not s["current"])

    response = await client.delete(f"{AUTH}/sessions/{other_id}", headers=bearer(first["access_token"]))
    assert response.status == 204
    await error_of(await client.get(f"{AUTH}/me", headers=bearer(second["access_token"])), 401, "unauthorized")
    response = await client.post(f"{AUTH}/refresh", json={"refresh_token": second["refresh_token"]})
    await error_of(response, 401, "unauthorized")
    remaining = await (await client.get(f"{AUTH}/sessions", headers=bearer(first["access_token"]))).json()
    assert [s["current"] for s in remaining] == [True]
    assert await services.audit.count(event_type="session_revoked", user_id=member["id"]) == 1

    # already revoked, unknown, or someone else's: 404
    response = await client.delete(f"{AUTH}/sessions/{other_id}", headers=bearer(first["access_token"]))
    await error_of(response, 404, "not_found")
    response = await client.delete(f"{AUTH}/sessions/no-such-session", headers=bearer(first["access_token"]))
    await error_of(response, 404, "not_found")
    assert (await register_member(client, email="second@example.com")).status == 201
    stranger = (await member_login(client, email="second@example.com"))["token"]
    own_id = remaining[0]["id"]
    response = await client.delete(f"{AUTH}/sessions/{own_id}", headers=bearer(stranger["access_token"]))
    await error_of(response, 404, "not_found")
    assert (await client.get(f"{AUTH}/me", headers=bearer(first["access_token"]))).status == 200


async def test_revoke_all_sessions_logs_out_every_device(client, member):
    tokens = [(await member_login(client))["token"] for _ in range(3)]
    response = await client.delete(f"{AUTH}/sessions/all", headers=bearer(tokens[0]["access_token"]))
    assert response.status == 204
    for token in tokens:
        await error_of(await client.get(f"{AUTH}/me", headers=bearer(token["access_token"])), 401, "unauthorized")
    await member_login(client)


async def test_sessions_endpoints_need_a_token(client, member):
    await error_of(await client.get(f"{AUTH}/sessions"), 401, "unauthorized")
    await error_of(await client.delete(f"{AUTH}/sessions/all"), 401, "unauthorized")
    await error_of(await client.delete(f"{AUTH}/sessions/x"), 401, "unauthorized")


# --- rate limits -------------------------------------------------------------------------------------


async def test_login_limit_is_reached_per_collection_and_address(client, admin_token, member):
    await create_collection(client, admin_token, "vendors", [], type="auth")
    for _ in range(10):
        response = await client.post(f"{AUTH}/login", json={"email": EMAIL, "password": "wrong-password"})
        assert response.status == 401
    response = await client.post(f"{AUTH}/login", json={"email": EMAIL.upper(), "password": PASSWORD})
    await error_of(response, 429, "rate_limited")
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert response.headers["X-RateLimit-Limit"] == "10"
    assert response.headers["X-RateLimit-Remaining"] == "0"
    # another address here, and the same address in another collection, are counted apart
    response = await client.post(f"{AUTH}/login", json={"email": "other@example.com", "password": PASSWORD})
    assert response.status == 401
    response = await client.post(auth_path("vendors", "/login"), json={"email": EMAIL, "password": PASSWORD})
    assert response.status == 401


async def test_auth_limit_is_released_after_its_window(aiohttp_client, config, clock, member):
    # a second app on the same database whose limiter window is 1 s, so the release is observable;
    # OTP checks hash little, so ten of them fit in the window (OTP requests send mail: mail limit)
    own = replace(config, rate_limit_window_s=1)
    async with open_services(own, clock=clock) as fast_services:
        fast = await aiohttp_client(create_app(own, services=fast_services))
        try:
            attempt = {"email": EMAIL, "code": "123456"}
            statuses = [(await fast.post(f"{AUTH}/otp/verify", json=attempt)).status for _ in range(11)]
            assert statuses == [400] * 10 + [429]
            for _ in range(50):
                response = await fast.post(f"{AUTH}/otp/verify", json=attempt)
                if response.status != 429:
                    break
                await asyncio.sleep(0.1)
            assert response.status == 400, "the limit was not released"
        finally:
            await fast.close()


async def test_register_is_rate_limited(client, members):
    for _ in range(10):
        await register_member(client, password="short")
    await error_of(await register_member(client), 429, "rate_limited")


async def test_deleting_an_auth_collection_revokes_sessions_and_drops_credentials(
        client, config, admin_token, members, member):
    login = await member_login(client)
    access = login["token"]["access_token"]
    assert (await client.get(f"{AUTH}/me", headers=bearer(access))).status == 200
    response = await client.delete(f"/api/v1/collections/{members['id']}", headers=bearer(admin_token))
    assert response.status == 204
    assert await stored_documents(config, "auth_credentials") == []
    sessions = await stored_documents(config, "sessions")
    assert [s for s in sessions if s["audience"] == f"collection:{members['id']}" and s["revoked_at"] is None] == []
    assert (await client.get("/api/v1/auth/me", headers=bearer(access))).status == 401


async def test_records_api_and_import_cannot_create_auth_users(client, admin_token, members):
    response = await client.post(records_path(NAME), headers=bearer(admin_token), json={"data": {}})
    body = await error_of(response, 400, "bad_request")
    assert f"/collections/{NAME}/auth/register" in body["detail"]
    form = aiohttp.FormData()
    form.add_field("file", b"id\n", filename="users.csv", content_type="text/csv")
    response = await client.post(f"{records_path(NAME)}/import/csv", headers=bearer(admin_token), data=form)
    await error_of(response, 400, "bad_request")
    assert (await (await client.get(records_path(NAME), headers=bearer(admin_token))).json())["total"] == 0
