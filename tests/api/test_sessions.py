"""Sessions and JWTs of admin-table users: refresh rotation and reuse detection, expiry, typ/aud/key
checks, logout on every replica (decisions.md, Identity and tokens)."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from cms.app import create_app
from cms.models import ADMIN_AUDIENCE
from cms.security.tokens import ACCESS, REFRESH, TokenCodec
from cms.wiring import open_services
from tests.conftest import bearer, error_of, login
from tests.fixtures import REGISTERED_EMAIL, REGISTERED_PASSWORD, post_raw_json

REGISTER = "/api/v1/auth/register"
REFRESH_PATH = "/api/v1/auth/refresh"
ME = "/api/v1/auth/me"
LOGOUT = "/api/v1/auth/logout"
EMAIL, PASSWORD = REGISTERED_EMAIL, REGISTERED_PASSWORD  # the `user` fixture (tests/fixtures.py)


async def refresh(client, refresh_token):
    return await client.post(REFRESH_PATH, json={"refresh_token": refresh_token})


async def me_status(client, access_token) -> int:
    status: int = (await client.get(ME, headers=bearer(access_token))).status
    return status


async def assert_401(response, code="unauthorized"):
    assert response.status == 401, await response.text()
    body = await response.json()
    assert body["code"] == code
    assert set(body) == {"detail", "code"}


# --- refresh -----------------------------------------------------------------------------------


async def test_refresh_returns_a_new_token_object(client, tokens):
    response = await refresh(client, tokens["refresh_token"])
    assert response.status == 200, await response.text()
    body = await response.json()
    assert set(body) == {"access_token", "refresh_token", "token_type", "expires_in"}
    assert body["token_type"] == "bearer"
    assert body["expires_in"] == 86400
    assert body["refresh_token"] != tokens["refresh_token"]
    assert await me_status(client, body["access_token"]) == 200
    # the access token of the session before the refresh is still good: same session
    assert await me_status(client, tokens["access_token"]) == 200


async def test_refresh_rotates_and_the_new_refresh_token_works(client, tokens):
    first = await (await refresh(client, tokens["refresh_token"])).json()
    second_response = await refresh(client, first["refresh_token"])
    assert second_response.status == 200
    second = await second_response.json()
    assert len({tokens["refresh_token"], first["refresh_token"], second["refresh_token"]}) == 3
    assert await me_status(client, second["access_token"]) == 200


async def test_reusing_a_spent_refresh_token_revokes_the_whole_session(client, services, user, tokens):
    rotated = await (await refresh(client, tokens["refresh_token"])).json()

    await assert_401(await refresh(client, tokens["refresh_token"]))

    # every token of that session is dead now, the rotated ones included
    assert await me_status(client, tokens["access_token"]) == 401
    assert await me_status(client, rotated["access_token"]) == 401
    await assert_401(await refresh(client, rotated["refresh_token"]))
    assert await services.sessions.list_active(user["id"], ADMIN_AUDIENCE) == []


async def test_refresh_token_reuse_does_not_touch_other_sessions(client, tokens):
    other = (await login(client, EMAIL, PASSWORD))["token"]
    await refresh(client, tokens["refresh_token"])
    await assert_401(await refresh(client, tokens["refresh_token"]))
    assert await me_status(client, other["access_token"]) == 200
    assert (await refresh(client, other["refresh_token"])).status == 200


async def test_access_token_is_not_a_refresh_token(client, tokens):
    await assert_401(await refresh(client, tokens["access_token"]))
    # and the refusal did not harm the session
    assert (await refresh(client, tokens["refresh_token"])).status == 200


async def test_refresh_token_is_not_an_access_token(client, tokens):
    await assert_401(await client.get(ME, headers=bearer(tokens["refresh_token"])))
    await assert_401(await client.post(LOGOUT, headers=bearer(tokens["refresh_token"])))
    assert await me_status(client, tokens["access_token"]) == 200


async def test_expired_refresh_token_is_401(client, clock, tokens):
    clock.advance(days=8)
    await assert_401(await refresh(client, tokens["refresh_token"]))


async def test_refresh_token_is_good_until_its_lifetime_ends(client, clock, tokens):
    clock.advance(days=6, hours=23)
    response = await refresh(client, tokens["refresh_token"])
    assert response.status == 200
    # the access token issued now is valid now, although it was issued in the (wall-clock) future
    assert await me_status(client, (await response.json())["access_token"]) == 200


async def test_refresh_lifetime_follows_the_setting(client, clock, services, user):
    await services.settings.set("refresh_token_expiry_days", 1)
    tokens = (await login(client, EMAIL, PASSWORD))["token"]
    clock.advance(hours=25)
    await assert_401(await refresh(client, tokens["refresh_token"]))


async def test_expired_access_token_is_401_and_refresh_renews_it(client, clock, tokens):
    clock.advance(hours=23, minutes=59)
    assert await me_status(client, tokens["access_token"]) == 200
    clock.advance(hours=1)
    await assert_401(await client.get(ME, headers=bearer(tokens["access_token"])))
    renewed = await (await refresh(client, tokens["refresh_token"])).json()
    assert await me_status(client, renewed["access_token"]) == 200


async def test_login_after_the_clock_moved_issues_current_tokens(client, clock, user):
    clock.advance(hours=25)
    tokens = (await login(client, EMAIL, PASSWORD))["token"]
    assert await me_status(client, tokens["access_token"]) == 200


@pytest.mark.parametrize(
    "body, status",
    [({}, 422), ({"refresh_token": 5}, 422), ({"refresh_token": None}, 422),
     ({"refresh_token": "garbage"}, 401), ({"refresh_token": ""}, 401),
     ({"refresh_token": "a.b.c"}, 401)],
    ids=["missing", "int", "null", "garbage", "empty", "three-parts"],
)
async def test_refresh_bad_input(client, body, status):
    response = await client.post(REFRESH_PATH, json=body)
    assert response.status == status, await response.text()


async def test_refresh_malformed_json_is_400(client):
    await error_of(await post_raw_json(client, REFRESH_PATH, b"{refresh"), 400, "bad_request")


# --- forged and foreign tokens -----------------------------------------------------------------


def session_claims(access_token: str) -> dict[str, Any]:
    return jwt.decode(access_token, options={"verify_signature": False})


async def test_token_signed_with_another_key_is_401(client, clock, tokens):
    claims = session_claims(tokens["access_token"])
    other = TokenCodec("another-secret-key-" + "y" * 32, clock=clock)
    forged_access, _ = other.issue(sub=claims["sub"], sid=claims["sid"], typ=ACCESS, aud=ADMIN_AUDIENCE,
                                   lifetime_s=3600)
    await assert_401(await client.get(ME, headers=bearer(forged_access)))
    forged_refresh, _ = other.issue(sub=claims["sub"], sid=claims["sid"], typ=REFRESH, aud=ADMIN_AUDIENCE,
                                    lifetime_s=3600)
    await assert_401(await refresh(client, forged_refresh))


async def test_token_of_another_audience_is_401(client, clock, config, tokens):
    claims = session_claims(tokens["access_token"])
    codec = TokenCodec(config.secret_key, clock=clock)
    foreign, _ = codec.issue(sub=claims["sub"], sid=claims["sid"], typ=ACCESS, aud="collection:x",
                             lifetime_s=3600)
    await assert_401(await client.get(ME, headers=bearer(foreign)))
    foreign_refresh, _ = codec.issue(sub=claims["sub"], sid=claims["sid"], typ=REFRESH, aud="collection:x",
                                     lifetime_s=3600)
    await assert_401(await refresh(client, foreign_refresh))


async def test_well_signed_token_of_an_unknown_session_is_401(client, clock, config, tokens):
    claims = session_claims(tokens["access_token"])
    codec = TokenCodec(config.secret_key, clock=clock)
    token, _ = codec.issue(sub=claims["sub"], sid="no-such-session", typ=ACCESS, aud=ADMIN_AUDIENCE,
                           lifetime_s=3600)
    await assert_401(await client.get(ME, headers=bearer(token)))


async def test_well_signed_token_naming_another_user_of_the_session_is_401(client, clock, config, tokens):
    claims = session_claims(tokens["access_token"])
    codec = TokenCodec(config.secret_key, clock=clock)
    token, _ = codec.issue(sub="someone-else", sid=claims["sid"], typ=ACCESS, aud=ADMIN_AUDIENCE,
                           lifetime_s=3600)
    await assert_401(await client.get(ME, headers=bearer(token)))


async def test_unsigned_alg_none_token_is_401(client, tokens):
    claims = session_claims(tokens["access_token"])
    unsigned = jwt.encode(claims, key="", algorithm="none")
    await assert_401(await client.get(ME, headers=bearer(unsigned)))


@pytest.mark.parametrize(
    "header",
    ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "bearer", "Token abc", "Bearer not-a-jwt", "Bearer a.b.c",
     "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", ""],
    ids=["basic", "bearer-alone", "bearer-space", "lowercase-alone", "other-scheme", "not-jwt", "three-parts",
         "empty-claims", "empty"],
)
async def test_garbage_authorization_headers_are_401(client, header):
    response = await client.get(ME, headers={"Authorization": header})
    await assert_401(response)


async def test_bearer_scheme_is_case_insensitive(client, tokens):
    response = await client.get(ME, headers={"Authorization": "bearer " + tokens["access_token"]})
    assert response.status == 200


# --- logout ------------------------------------------------------------------------------------


async def test_logout_revokes_only_that_session(client, services, user, tokens):
    other = (await login(client, EMAIL, PASSWORD))["token"]

    response = await client.post(LOGOUT, headers=bearer(tokens["access_token"]))
    assert response.status == 200
    assert set(await response.json()) == {"message"}

    await assert_401(await client.get(ME, headers=bearer(tokens["access_token"])))
    await assert_401(await refresh(client, tokens["refresh_token"]))
    await assert_401(await client.post(LOGOUT, headers=bearer(tokens["access_token"])))

    assert await me_status(client, other["access_token"]) == 200
    assert (await refresh(client, other["refresh_token"])).status == 200
    assert len(await services.sessions.list_active(user["id"], ADMIN_AUDIENCE)) == 1


async def test_logout_without_a_token_is_401(client):
    await assert_401(await client.post(LOGOUT))


async def test_logout_holds_on_every_replica(aiohttp_client, client, config, clock, tokens):
    async with open_services(config, clock=clock) as second_services:
        replica = await aiohttp_client(create_app(config, services=second_services))
        try:
            # a token from one replica works on the other
            assert await me_status(replica, tokens["access_token"]) == 200
            other = (await login(replica, EMAIL, PASSWORD))["token"]
            assert await me_status(client, other["access_token"]) == 200

            response = await client.post(LOGOUT, headers=bearer(tokens["access_token"]))
            assert response.status == 200
            await assert_401(await replica.get(ME, headers=bearer(tokens["access_token"])))
            await assert_401(await refresh(replica, tokens["refresh_token"]))

            response = await replica.post(LOGOUT, headers=bearer(other["access_token"]))
            assert response.status == 200
            await assert_401(await client.get(ME, headers=bearer(other["access_token"])))
        finally:
            await replica.close()


async def test_refresh_reuse_detected_across_replicas(aiohttp_client, client, config, clock, tokens):
    async with open_services(config, clock=clock) as second_services:
        replica = await aiohttp_client(create_app(config, services=second_services))
        try:
            rotated = await (await refresh(client, tokens["refresh_token"])).json()
            await assert_401(await refresh(replica, tokens["refresh_token"]))
            await assert_401(await client.get(ME, headers=bearer(rotated["access_token"])))
        finally:
            await replica.close()


async def test_refresh_attempts_are_limited_per_token(client, tokens):
    for _ in range(10):
        await assert_401(await refresh(client, "garbage-token"))
    response = await refresh(client, "garbage-token")
    assert response.status == 429
    assert (await response.json())["code"] == "rate_limited"
    assert (await refresh(client, tokens["refresh_token"])).status == 200
