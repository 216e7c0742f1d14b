"""Two-factor login with TOTP, for both user systems (issue 14, item 1; decisions.md: Two-factor
login (TOTP)). Codes are computed by the test from the secret, at the injected clock's time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyotp
import pytest

from tests.conftest import bearer, create_collection, error_of
from tests.user_systems import ADMIN_TABLE, EMAIL, MEMBERS, PASSWORD, System, prepare


@pytest.fixture(params=[ADMIN_TABLE, MEMBERS], ids=["admin-table", "auth-collection"])
async def system(request, client, admin_token, services) -> System:
    """Each user system in turn with its 2FA switch on (the setting for the admin table, the
    collection's own attribute for `members`) and EMAIL registered."""
    if request.param is ADMIN_TABLE:
        await services.settings.set("mfa_enabled", True)
    return await prepare(request.param, client, admin_token, mfa_enabled=True)


def code_at(secret: str, clock: Any, **offset: float) -> str:
    """The TOTP code of `secret` at the test clock's time (moved by `offset`, e.g. seconds=-30)."""
    return pyotp.TOTP(secret).at(clock() + timedelta(**offset))


async def post(client: Any, system: System, path: str, token: str | None = None, **body: Any) -> Any:
    headers = bearer(token) if token else {}
    return await client.post(f"{system.auth}/2fa/{path}", headers=headers, json=body)


async def turn_on(client: Any, system: System, clock: Any) -> tuple[str, list[str]]:
    """Set up and enable 2FA for EMAIL; returns (secret, recovery codes). Moves the clock one step
    on, so the enabling code's step is spent and the next code is a new one."""
    access = (await system.login(client))["access_token"]
    response = await post(client, system, "setup", access)
    assert response.status == 200, await response.text()
    setup = await response.json()
    response = await post(client, system, "enable", access, code=code_at(setup["secret"], clock))
    assert response.status == 200, await response.text()
    codes: list[str] = (await response.json())["recovery_codes"]
    clock.advance(seconds=30)
    return setup["secret"], codes


async def first_step(client: Any, system: System) -> dict[str, Any]:
    body = await system.login_response(client)
    assert body["requires_2fa"] is True and body["token"] is None, body
    return body


async def test_setup_returns_a_secret_url_and_qr_code_and_enables_nothing(client, clock, system):
    access = (await system.login(client))["access_token"]
    response = await post(client, system, "setup", access)
    assert response.status == 200, await response.text()
    setup = await response.json()
    assert set(setup) == {"secret", "otpauth_url", "qr_svg"}
    parsed = pyotp.parse_uri(setup["otpauth_url"])
    assert parsed.secret == setup["secret"] and parsed.name == EMAIL
    assert setup["qr_svg"].startswith("<svg") and setup["qr_svg"].rstrip().endswith("</svg>")
    # not on until a code proves the secret
    assert (await system.login_response(client))["requires_2fa"] is False


async def test_login_with_two_factor_needs_the_second_step(client, clock, services, system):
    secret, _ = await turn_on(client, system, clock)
    body = await first_step(client, system)
    assert body["user"].keys() == {"id", "email"} and body["user"]["email"] == EMAIL
    assert isinstance(body["mfa_token"], str) and body["message"]
    sessions_before = await services.audit.count(event_type="login_success")

    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=code_at(secret, clock))
    assert response.status == 200, await response.text()
    done = await response.json()
    assert done["requires_2fa"] is False and done["token"]["access_token"]
    assert "mfa_token" not in done and done["user"]["email"] == EMAIL
    assert await system.me_status(client, done["token"]) == 200
    assert await services.audit.count(event_type="login_success") == sessions_before + 1
    assert await services.audit.count(event_type="mfa_enabled") == 1

    # the token is single use, and the code's step is spent
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=code_at(secret, clock))
    await error_of(response, 400, "token_invalid")
    again = await first_step(client, system)
    response = await post(client, system, "verify", mfa_token=again["mfa_token"], code=code_at(secret, clock))
    await error_of(response, 400, "otp_invalid")
    assert await services.audit.count(event_type="mfa_failed") == 1


async def test_codes_are_accepted_one_step_early_or_late_and_no_further(client, clock, system):
    secret, _ = await turn_on(client, system, clock)
    for offset, expected in ((-60, 400), (60, 400), (-30, 200)):
        clock.advance(seconds=90)  # a fresh step each round, later than any accepted before
        body = await first_step(client, system)
        response = await post(client, system, "verify", mfa_token=body["mfa_token"],
                              code=code_at(secret, clock, seconds=offset))
        assert response.status == expected, (offset, await response.text())
    clock.advance(seconds=90)
    body = await first_step(client, system)
    late = code_at(secret, clock, seconds=30)
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=late)
    assert response.status == 200, await response.text()


async def test_a_recovery_code_works_once(client, clock, services, system):
    _, codes = await turn_on(client, system, clock)
    assert len(codes) == 10 and len(set(codes)) == 10
    body = await first_step(client, system)
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=codes[0].upper())
    assert response.status == 200, await response.text()
    assert await services.audit.count(event_type="mfa_recovery_used") == 1
    body = await first_step(client, system)
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=codes[0])
    await error_of(response, 400, "otp_invalid")
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=codes[1].replace("-", ""))
    assert response.status == 200, await response.text()


async def test_five_wrong_codes_void_the_mfa_token(client, clock, system):
    secret, _ = await turn_on(client, system, clock)
    body = await first_step(client, system)
    for _ in range(5):
        response = await post(client, system, "verify", mfa_token=body["mfa_token"], code="000000")
        await error_of(response, 400, "otp_invalid")
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=code_at(secret, clock))
    await error_of(response, 400, "token_invalid")


async def test_an_expired_or_foreign_mfa_token_is_refused(client, clock, admin_token, system):
    secret, _ = await turn_on(client, system, clock)
    body = await first_step(client, system)
    clock.advance(seconds=301)
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=code_at(secret, clock))
    await error_of(response, 400, "token_expired")
    # another user system's verify endpoint does not take it
    other = MEMBERS if system is ADMIN_TABLE else ADMIN_TABLE
    if other is MEMBERS:
        await create_collection(client, admin_token, "members", [], type="auth")
    fresh = await first_step(client, system)
    response = await post(client, other, "verify", mfa_token=fresh["mfa_token"], code=code_at(secret, clock))
    await error_of(response, 400, "token_invalid")
    for garbage in ("not-a-jwt", admin_token):
        response = await post(client, system, "verify", mfa_token=garbage, code=code_at(secret, clock))
        await error_of(response, 400, "token_invalid")


async def test_an_mfa_token_is_no_access_token_anywhere(client, clock, system):
    await turn_on(client, system, clock)
    body = await first_step(client, system)
    for method, path in (("GET", f"{system.auth}/me"), ("GET", f"{system.auth}/sessions"),
                         ("POST", f"{system.auth}/2fa/setup"), ("GET", "/api/v1/collections/members/records"),
                         ("GET", "/api/v1/api-keys"), ("GET", "/api/v1/webhooks")):
        response = await client.request(method, path, headers=bearer(body["mfa_token"]))
        if response.status != 404:  # an unknown collection in the admin-table case
            await error_of(response, 401, "unauthorized")
    response = await client.post(f"{system.auth}/refresh", json={"refresh_token": body["mfa_token"]})
    await error_of(response, 401, "unauthorized")


async def test_enable_needs_a_right_code_and_disable_the_password_and_a_code(client, clock, services, system):
    access = (await system.login(client))["access_token"]
    await error_of(await post(client, system, "enable", access, code="123456"), 400, "otp_invalid")  # no setup
    secret = (await (await post(client, system, "setup", access)).json())["secret"]
    wrong = "000000" if code_at(secret, clock) != "000000" else "111111"
    await error_of(await post(client, system, "enable", access, code=wrong), 400, "otp_invalid")
    assert (await post(client, system, "enable", access, code=code_at(secret, clock))).status == 200
    await error_of(await post(client, system, "setup", access), 400, "bad_request")  # already on
    clock.advance(seconds=30)

    payload = await error_of(await post(client, system, "disable", access, password="wrong-password",
                                        code=code_at(secret, clock)), 422, "validation_error")
    assert "password" in payload["errors"]
    await error_of(await post(client, system, "disable", access, password=PASSWORD, code=wrong), 400, "otp_invalid")
    response = await post(client, system, "disable", access, password=PASSWORD, code=code_at(secret, clock))
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}
    assert (await system.login_response(client))["requires_2fa"] is False
    assert await services.audit.count(event_type="mfa_disabled") == 1
    await error_of(await post(client, system, "disable", access, password=PASSWORD, code="123456"), 400, "bad_request")


async def test_the_systems_switch_decides(client, clock, admin_token, services, system):
    await turn_on(client, system, clock)
    if system is ADMIN_TABLE:
        await services.settings.set("mfa_enabled", False)
    else:
        listed = await (await client.get("/api/v1/collections", headers=bearer(admin_token))).json()
        collection = next(c for c in listed if c["name"] == "members")
        response = await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                                      json={"mfa_enabled": False})
        assert response.status == 200 and (await response.json())["mfa_enabled"] is False
    body = await system.login_response(client)
    assert body["requires_2fa"] is False and body["token"]["access_token"]


async def test_the_2fa_endpoints_need_a_token_of_their_system(client, admin_token, system):
    for path in ("setup", "enable", "disable"):
        await error_of(await post(client, system, path, code="123456", password=PASSWORD), 401, "unauthorized")
    if system is MEMBERS:
        await error_of(await post(client, system, "setup", admin_token), 401, "unauthorized")


async def test_auth_collections_copy_the_global_switch_and_base_collections_refuse_it(client, admin_token, services):
    await services.settings.set("mfa_enabled", True)
    created = await create_collection(client, admin_token, "staff", [], type="auth")
    assert created["mfa_enabled"] is True
    await services.settings.set("mfa_enabled", False)
    created = await create_collection(client, admin_token, "guests", [], type="auth")
    assert created["mfa_enabled"] is False
    response = await client.post("/api/v1/collections", headers=bearer(admin_token),
                                 json={"name": "posts", "schema": [], "mfa_enabled": True})
    payload = await error_of(response, 422, "validation_error")
    assert "mfa_enabled" in payload["errors"]


async def test_setup_and_enable_are_refused_while_the_switch_is_off(client, clock, admin_token, services, system):
    access = (await system.login(client))["access_token"]
    secret = (await (await post(client, system, "setup", access)).json())["secret"]
    if system is ADMIN_TABLE:
        await services.settings.set("mfa_enabled", False)
    else:
        listed = await (await client.get("/api/v1/collections", headers=bearer(admin_token))).json()
        collection = next(c for c in listed if c["name"] == "members")
        await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                           json={"mfa_enabled": False})
    await error_of(await post(client, system, "setup", access), 403, "forbidden")
    await error_of(await post(client, system, "enable", access, code=code_at(secret, clock)), 403, "forbidden")


async def test_wrong_codes_are_counted_per_user_across_tokens(client, clock, system):
    secret, _ = await turn_on(client, system, clock)
    wrong = "000000" if code_at(secret, clock) != "000000" else "111111"
    for _ in range(2):  # two logins: five and five wrong codes, each token voided in turn
        body = await first_step(client, system)
        for _ in range(5):
            response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=wrong)
            await error_of(response, 400, "otp_invalid")
    body = await first_step(client, system)
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=code_at(secret, clock))
    await error_of(response, 429, "rate_limited")
    assert 0 < int(response.headers["Retry-After"]) <= 900
    clock.advance(seconds=901)  # the window ends: the right code works again
    body = await first_step(client, system)
    response = await post(client, system, "verify", mfa_token=body["mfa_token"], code=code_at(secret, clock))
    assert response.status == 200, await response.text()
