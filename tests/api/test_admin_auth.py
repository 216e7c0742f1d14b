"""Admin-table users: register, login, me (spec: Admin authentication; decisions.md: Identity and
tokens, Response shapes, Errors)."""

from __future__ import annotations

import pytest
from argon2 import PasswordHasher

from cms.clock import utcnow
from cms.models import ADMIN_AUDIENCE
from cms.security import passwords
from cms.store.admin_users import AdminUserRepository
from cms.store.client import open_client
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, bearer, login
from tests.fixtures import dummy_verifications, post_raw_json

REGISTER = "/api/v1/auth/register"
LOGIN = "/api/v1/auth/login"
ME = "/api/v1/auth/me"
PASSWORD = "password-1"


async def register(client, email="new@example.com", password=PASSWORD, **extra):
    return await client.post(REGISTER, json={"email": email, "password": password, **extra})


# --- register ----------------------------------------------------------------------------------


async def test_register_creates_unverified_user_with_role_user(client, services):
    response = await register(client, name="New User", password_confirm=PASSWORD)
    assert response.status == 201, await response.text()
    body = await response.json()
    assert set(body) == {"user", "message"}
    assert isinstance(body["message"], str) and body["message"]
    user = body["user"]
    assert set(user) == {"id", "email", "role", "verified", "name", "created", "updated"}
    assert user["email"] == "new@example.com"
    assert user["role"] == "user"
    assert user["verified"] is False
    assert user["name"] == "New User"
    assert user["created"].endswith("Z")

    stored = await services.identity.systems.admin.get(user["id"])
    assert stored.email == "new@example.com" and stored.role == "user" and not stored.verified
    assert stored.password_hash.startswith("$argon2id$")
    assert passwords.verify_password(stored.password_hash, PASSWORD)


@pytest.mark.parametrize("extra, field_name", [
    ({"role": "admin"}, "role"),
    ({"password_confirm": "password-2"}, "password_confirm"),
], ids=["role-in-the-body", "password-confirm-mismatch"])
async def test_register_refuses_and_creates_nothing(client, extra, field_name):
    response = await register(client, **extra)
    assert response.status == 422
    body = await response.json()
    assert body["code"] == "validation_error"
    assert field_name in body["errors"]
    # nothing was created: the same address can still register, and as a plain user
    again = await register(client, password_confirm=PASSWORD)
    assert again.status == 201 and (await again.json())["user"]["role"] == "user"


async def test_register_lower_stored_minimum_allows_short_passwords(client, services):
    await services.settings.set("password_min_length", 4)
    assert (await register(client, password="abcd")).status == 201


@pytest.mark.parametrize(
    "body, field",
    [
        ({"email": 5, "password": PASSWORD}, "email"),
        ({"email": ["a@example.com"], "password": PASSWORD}, "email"),
        ({"email": "not-an-email", "password": PASSWORD}, "email"),
        ({"email": "a@example.com", "password": 12345678}, "password"),
        ({"email": "a@example.com", "password": None}, "password"),
        ({"email": "a@example.com", "password": PASSWORD, "password_confirm": 5}, "password_confirm"),
        ({"email": "a@example.com", "password": PASSWORD, "name": {"first": "A"}}, "name"),
        ({"email": "a@example.com"}, "password"),
        ({"password": PASSWORD}, "email"),
        ({}, "email"),
        ({"email": "a@example.com", "password": PASSWORD, "verified": True}, "verified"),
    ],
    ids=["email-int", "email-list", "email-invalid", "password-int", "password-null", "confirm-int",
         "name-object", "no-password", "no-email", "empty", "unknown-key"],
)
async def test_register_validation_errors(client, body, field):
    response = await client.post(REGISTER, json=body)
    assert response.status == 422, await response.text()
    payload = await response.json()
    assert payload["code"] == "validation_error"
    assert field in payload["errors"]


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"email": "a@example.com",}', b"\xff\xfe", b"not json"],
    ids=["truncated", "trailing-comma", "not-utf8", "text"],
)
async def test_register_malformed_json_is_400(client, raw):
    response = await post_raw_json(client, REGISTER, raw)
    assert response.status == 400
    body = await response.json()
    assert body["code"] == "bad_request"
    assert set(body) == {"detail", "code"}


@pytest.mark.parametrize("body", [[], ["a@example.com"], "a@example.com", 5, True], ids=str)
async def test_register_body_not_an_object_is_400(client, body):
    response = await client.post(REGISTER, json=body)
    assert response.status == 400
    assert (await response.json())["code"] == "bad_request"


async def test_register_empty_body_is_422(client):
    response = await client.post(REGISTER, data=b"")
    assert response.status == 422
    assert (await response.json())["code"] == "validation_error"


async def test_password_hash_is_never_in_a_response(client, services):
    texts = []
    response = await register(client, email="h@example.com", name="H")
    texts.append(await response.text())
    user_id = (await response.json())["user"]["id"]
    response = await client.post(LOGIN, json={"email": "h@example.com", "password": PASSWORD})
    texts.append(await response.text())
    access_token = (await response.json())["token"]["access_token"]
    response = await client.get(ME, headers=bearer(access_token))
    texts.append(await response.text())

    stored = await services.identity.systems.admin.get(user_id)
    digest = stored.password_hash.rsplit("$", 1)[-1]
    for text in texts:
        assert "password" not in text
        assert "argon2" not in text
        assert digest not in text
        assert PASSWORD not in text


# --- login -------------------------------------------------------------------------------------


async def test_login_returns_the_login_response(client, services):
    await register(client, email="login@example.com")
    response = await client.post(
        LOGIN, json={"email": "login@example.com", "password": PASSWORD}, headers={"User-Agent": "pytest-agent/1"}
    )
    assert response.status == 200, await response.text()
    body = await response.json()
    assert set(body) == {"user", "token", "message", "requires_2fa"}
    assert body["requires_2fa"] is False
    assert body["message"] is None
    user = body["user"]
    assert {"id", "email", "role", "verified"} <= set(user)
    assert user["email"] == "login@example.com" and user["role"] == "user" and user["verified"] is False
    token = body["token"]
    assert set(token) == {"access_token", "refresh_token", "token_type", "expires_in"}
    assert token["token_type"] == "bearer"
    assert token["expires_in"] == 86400
    assert token["access_token"] != token["refresh_token"]
    assert "access_token" not in body and "refresh_token" not in body

    sessions = await services.sessions.list_active(user["id"], ADMIN_AUDIENCE)
    assert len(sessions) == 1
    assert sessions[0].user_agent == "pytest-agent/1"


async def test_login_expires_in_follows_the_token_expiry_setting(client, services):
    await services.settings.set("token_expiry_hours", 2)
    await register(client, email="short@example.com")
    body = await login(client, "short@example.com", PASSWORD)
    assert body["token"]["expires_in"] == 7200


async def test_every_login_creates_a_session(client, services):
    response = await register(client, email="many@example.com")
    user_id = (await response.json())["user"]["id"]
    first = await login(client, "many@example.com", PASSWORD)
    second = await login(client, "many@example.com", PASSWORD)
    sessions = await services.sessions.list_active(user_id, ADMIN_AUDIENCE)
    assert len(sessions) == 2
    assert first["token"]["access_token"] != second["token"]["access_token"]
    for body in (first, second):
        assert (await client.get(ME, headers=bearer(body["token"]["access_token"]))).status == 200


async def test_login_admin_user(client, services):
    await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
    body = await login(client, ADMIN_EMAIL, ADMIN_PASSWORD)
    assert body["user"]["role"] == "admin"
    assert body["user"]["verified"] is True


async def test_login_failures_are_identical_for_unknown_email_and_wrong_password(client):
    await register(client, email="known@example.com")
    unknown = await client.post(LOGIN, json={"email": "unknown@example.com", "password": PASSWORD})
    wrong = await client.post(LOGIN, json={"email": "known@example.com", "password": "wrong-password"})
    assert unknown.status == wrong.status == 401
    unknown_body, wrong_body = await unknown.json(), await wrong.json()
    assert unknown_body == wrong_body
    assert unknown_body["code"] == "invalid_credentials"
    assert set(unknown_body) == {"detail", "code"}


async def test_login_for_unknown_email_spends_a_dummy_verification(client):
    """No timing oracle (decisions.md, Failed login): an unknown email still runs one argon2
    verification, against the dummy hash; a wrong password for a known email runs the real one."""
    await register(client, email="known@example.com")

    before = dummy_verifications()
    response = await client.post(LOGIN, json={"email": "nobody@example.com", "password": PASSWORD})
    assert response.status == 401
    assert dummy_verifications() == before + 1

    before = dummy_verifications()
    response = await client.post(LOGIN, json={"email": "known@example.com", "password": "wrong-password"})
    assert response.status == 401
    assert dummy_verifications() == before


async def test_login_password_is_case_sensitive_and_exact(client):
    await register(client, email="exact@example.com")
    for password in (PASSWORD.upper(), PASSWORD + " ", " " + PASSWORD, ""):
        response = await client.post(LOGIN, json={"email": "exact@example.com", "password": password})
        assert response.status == 401
        assert (await response.json())["code"] == "invalid_credentials"


@pytest.mark.parametrize(
    "body",
    [{"email": "a@example.com"}, {"password": PASSWORD}, {"email": 1, "password": PASSWORD},
     {"email": "a@example.com", "password": ["x"]}, {}],
    ids=["no-password", "no-email", "email-int", "password-list", "empty"],
)
async def test_login_validation_errors(client, body):
    response = await client.post(LOGIN, json=body)
    assert response.status == 422
    assert (await response.json())["code"] == "validation_error"


async def test_login_malformed_json_and_non_object(client):
    response = await post_raw_json(client, LOGIN, b'{"email":')
    assert response.status == 400 and (await response.json())["code"] == "bad_request"
    response = await client.post(LOGIN, json=[{"email": "a@example.com", "password": PASSWORD}])
    assert response.status == 400 and (await response.json())["code"] == "bad_request"


# --- me ----------------------------------------------------------------------------------------


async def test_me_returns_the_current_user(client):
    response = await register(client, email="me@example.com", name="Me")
    registered = (await response.json())["user"]
    body = await login(client, "me@example.com", PASSWORD)
    response = await client.get(ME, headers=bearer(body["token"]["access_token"]))
    assert response.status == 200
    me = await response.json()
    assert me == registered


async def test_me_without_a_token_is_401(client):
    response = await client.get(ME)
    assert response.status == 401
    body = await response.json()
    assert body["code"] == "unauthorized"
    assert set(body) == {"detail", "code"}


async def test_login_upgrades_a_hash_made_with_other_parameters(client, config, services):
    response = await register(client, email="old-hash@example.com")
    user_id = (await response.json())["user"]["id"]
    weak = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1).hash(PASSWORD)
    mongo = open_client(config.mongodb_url)
    try:
        await AdminUserRepository(mongo[config.mongodb_db]).update(user_id, utcnow(), password_hash=weak)
    finally:
        await mongo.close()

    await login(client, "old-hash@example.com", PASSWORD)
    stored = await services.identity.systems.admin.get(user_id)
    assert stored.password_hash != weak
    assert not passwords.needs_rehash(stored.password_hash)
    await login(client, "old-hash@example.com", PASSWORD)


# --- text JSON can carry but nothing can store: lone surrogates ----------------------------------

# 400 once read_json refuses such bodies as malformed; until then each field check answers. Never 500.
@pytest.mark.parametrize(
    "path, raw, statuses",
    [
        (REGISTER, b'{"email": "s@example.com", "password": "\\ud800abcdefgh"}', {400, 422}),
        (REGISTER, b'{"email": "s@example.com", "password": "abcdefghij", "name": "\\udfff"}', {400, 422}),
        (REGISTER, b'{"email": "\\ud800s@example.com", "password": "abcdefghij"}', {400, 422}),
        (LOGIN, b'{"email": "known@example.com", "password": "\\ud800abcdefgh"}', {400, 401}),
        (LOGIN, b'{"email": "nobody@example.com", "password": "\\ud800abcdefgh"}', {400, 401}),
        (LOGIN, b'{"email": "\\ud800@example.com", "password": "abcdefgh"}', {400, 401}),
        ("/api/v1/auth/refresh", b'{"refresh_token": "\\ud800"}', {400, 401}),
        ("/api/v1/auth/verify-email", b'{"token": "\\ud800"}', {400}),
    ],
    ids=["register-password", "register-name", "register-email", "login-known", "login-unknown",
         "login-email", "refresh", "verify-email"],
)
async def test_lone_surrogates_are_refused_never_500(client, path, raw, statuses):
    await register(client, email="known@example.com")
    response = await post_raw_json(client, path, raw)
    assert response.status in statuses, await response.text()
    assert (await response.json())["code"] != "internal_error"


async def test_non_ascii_bearer_token_is_401(client):
    response = await client.get(ME, headers={"Authorization": "Bearer \u00e9t\u00e9.e30.x"})
    assert response.status == 401


# --- auth rate limit (decisions.md, Limits: 10 per minute per IP and identifier) ----------------


async def test_login_attempts_are_limited_per_email(client, services):
    await register(client, email="target@example.com")
    for _ in range(10):
        response = await client.post(LOGIN, json={"email": "target@example.com", "password": "guess-123"})
        assert response.status == 401
    # the limit counts attempts, so the right password is refused too, and says when to come back
    response = await client.post(LOGIN, json={"email": "TARGET@example.com", "password": PASSWORD})
    assert response.status == 429
    assert (await response.json())["code"] == "rate_limited"
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert await services.audit.count(event_type="rate_limited") == 1
    # another address from the same client is not affected
    response = await client.post(LOGIN, json={"email": "other@example.com", "password": "guess-123"})
    assert response.status == 401


async def test_auth_limit_is_off_with_rate_limiting_switched_off(client, services):
    await services.settings.set("rate_limit_enabled", False)
    await register(client, email="off@example.com")
    for _ in range(10):
        await client.post(LOGIN, json={"email": "off@example.com", "password": "guess-123"})
    assert (await client.post(LOGIN, json={"email": "off@example.com", "password": PASSWORD})).status == 200
