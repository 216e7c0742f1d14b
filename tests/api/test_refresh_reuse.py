"""The refresh reuse interval (`refresh_reuse_interval_s`): off by default, so a spent refresh token
revokes its session; when set, the token spent by the last rotation may be presented again within
that many seconds (two tabs refreshing at once) and gets a token object for the same session."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import jwt
import pytest

from cms.models import ADMIN_AUDIENCE, collection_audience
from cms.store.client import open_client
from cms.store.sessions import SessionRepository
from tests.conftest import bearer, create_collection
from tests.fixtures import REGISTERED_EMAIL, REGISTERED_PASSWORD

REGISTER = "/api/v1/auth/register"
REFRESH_PATH = "/api/v1/auth/refresh"
ME = "/api/v1/auth/me"
EMAIL, PASSWORD = REGISTERED_EMAIL, REGISTERED_PASSWORD  # the `user` fixture (tests/fixtures.py)
INTERVAL_S = 10

MEMBERS = "members"
MEMBERS_AUTH = f"/api/v1/collections/{MEMBERS}/auth"


@pytest.fixture
async def interval(services):
    """The reuse interval switched on (INTERVAL_S seconds)."""
    await services.settings.set("refresh_reuse_interval_s", INTERVAL_S)
    return INTERVAL_S


async def refresh(client, refresh_token, path=REFRESH_PATH):
    return await client.post(path, json={"refresh_token": refresh_token})


async def refreshed(client, refresh_token, path=REFRESH_PATH):
    """Refresh, asserting 200, and return the token object."""
    response = await refresh(client, refresh_token, path)
    assert response.status == 200, await response.text()
    return await response.json()


async def me_status(client, access_token, path=ME) -> int:
    status: int = (await client.get(path, headers=bearer(access_token))).status
    return status


def jti(token: str) -> str:
    claims: dict[str, str] = jwt.decode(token, options={"verify_signature": False})
    return claims["jti"]


async def reuse_alerts(services, user_id) -> int:
    count: int = await services.audit.count(event_type="refresh_token_reuse", severity="critical", user_id=user_id)
    return count


async def assert_revoked(client, services, user, token_objects, path=REFRESH_PATH, me=ME, audience=ADMIN_AUDIENCE):
    """Every token of the session is dead, the session is not active and one critical entry was written."""
    for token_object in token_objects:
        assert await me_status(client, token_object["access_token"], me) == 401
        assert (await refresh(client, token_object["refresh_token"], path)).status == 401
    assert await services.sessions.list_active(user["id"], audience) == []
    assert await reuse_alerts(services, user["id"]) == 1


# --- default: off ----------------------------------------------------------------------------------


async def test_default_is_off_and_a_spent_token_revokes_the_session(client, services, user, tokens):
    assert (await services.settings.values())["refresh_reuse_interval_s"] == 0
    rotated = await refreshed(client, tokens["refresh_token"])

    response = await refresh(client, tokens["refresh_token"])

    assert response.status == 401, await response.text()
    assert (await response.json())["code"] == "unauthorized"
    await assert_revoked(client, services, user, [tokens, rotated])


async def test_default_concurrent_refreshes_still_revoke(client, services, user, tokens):
    responses = await asyncio.gather(*(refresh(client, tokens["refresh_token"]) for _ in range(2)))

    assert sorted(r.status for r in responses) == [200, 401]
    winner = await next(r for r in responses if r.status == 200).json()
    await assert_revoked(client, services, user, [tokens, winner])


# --- with the interval ------------------------------------------------------------------------------


async def test_concurrent_refreshes_within_the_interval_both_succeed(client, services, user, tokens, interval):
    responses = await asyncio.gather(*(refresh(client, tokens["refresh_token"]) for _ in range(2)))

    assert [r.status for r in responses] == [200, 200], [await r.text() for r in responses]
    pairs = [await r.json() for r in responses]
    for pair in pairs:
        assert set(pair) == {"access_token", "refresh_token", "token_type", "expires_in"}
        assert await me_status(client, pair["access_token"]) == 200
    # one rotation happened: both carry the session's one current refresh jti
    assert jti(pairs[0]["refresh_token"]) == jti(pairs[1]["refresh_token"]) != jti(tokens["refresh_token"])
    active = await services.sessions.list_active(user["id"], ADMIN_AUDIENCE)
    assert [s.refresh_jti for s in active] == [jti(pairs[0]["refresh_token"])]
    assert await reuse_alerts(services, user["id"]) == 0
    # either tab goes on
    assert await me_status(client, (await refreshed(client, pairs[1]["refresh_token"]))["access_token"]) == 200


async def test_many_concurrent_refreshes_leave_one_current_jti(client, services, user, tokens, interval):
    responses = await asyncio.gather(*(refresh(client, tokens["refresh_token"]) for _ in range(5)))

    assert [r.status for r in responses] == [200] * 5
    jtis = {jti((await r.json())["refresh_token"]) for r in responses}
    active = await services.sessions.list_active(user["id"], ADMIN_AUDIENCE)
    assert jtis == {active[0].refresh_jti}


async def test_presenting_again_at_the_end_of_the_interval_succeeds(client, clock, services, user, tokens, interval):
    rotated = await refreshed(client, tokens["refresh_token"])
    clock.advance(seconds=INTERVAL_S)

    again = await refreshed(client, tokens["refresh_token"])

    assert jti(again["refresh_token"]) == jti(rotated["refresh_token"])
    assert await me_status(client, again["access_token"]) == 200
    assert await reuse_alerts(services, user["id"]) == 0


async def test_reuse_after_the_interval_revokes(client, clock, services, user, tokens, interval):
    rotated = await refreshed(client, tokens["refresh_token"])
    clock.advance(seconds=INTERVAL_S + 1)

    assert (await refresh(client, tokens["refresh_token"])).status == 401
    await assert_revoked(client, services, user, [tokens, rotated])


async def test_a_grace_answer_does_not_extend_the_interval(client, clock, services, user, tokens, interval):
    rotated = await refreshed(client, tokens["refresh_token"])
    clock.advance(seconds=INTERVAL_S - 2)
    await refreshed(client, tokens["refresh_token"])
    clock.advance(seconds=3)

    assert (await refresh(client, tokens["refresh_token"])).status == 401
    await assert_revoked(client, services, user, [tokens, rotated])


async def test_a_token_two_rotations_back_revokes_inside_the_interval(client, services, user, tokens, interval):
    first = await refreshed(client, tokens["refresh_token"])
    second = await refreshed(client, first["refresh_token"])

    assert (await refresh(client, tokens["refresh_token"])).status == 401
    await assert_revoked(client, services, user, [tokens, first, second])


async def test_a_session_revoked_after_the_rotation_gets_no_grace(config, clock, services, user, tokens, interval):
    # the race refresh's first read cannot see: revoked between the failed rotation and the grace read
    mongo = open_client(config.mongodb_url)
    try:
        repository = SessionRepository(mongo[config.mongodb_db])
        [session] = await services.sessions.list_active(user["id"], ADMIN_AUDIENCE)
        assert await repository.rotate_refresh(session.id, session.refresh_jti, "next-jti", clock())
        since = clock() - timedelta(seconds=INTERVAL_S)
        found = await repository.get_if_just_rotated(session.id, session.refresh_jti, since)
        assert found is not None and found.refresh_jti == "next-jti"

        assert await services.sessions.revoke(session.id)

        assert await repository.get_if_just_rotated(session.id, session.refresh_jti, since) is None
    finally:
        await mongo.close()


async def test_a_session_stored_before_the_upgrade_loads_and_rotates(client, config, services, user, tokens,
                                                                    interval):
    mongo = open_client(config.mongodb_url)
    try:
        result = await mongo[config.mongodb_db]["sessions"].update_many(
            {}, {"$unset": {"previous_refresh_jti": "", "refresh_rotated_at": ""}})
        assert result.modified_count == 1
    finally:
        await mongo.close()
    [session] = await services.sessions.list_active(user["id"], ADMIN_AUDIENCE)
    assert session.previous_refresh_jti is None and session.refresh_rotated_at is None

    rotated = await refreshed(client, tokens["refresh_token"])
    assert jti((await refreshed(client, tokens["refresh_token"]))["refresh_token"]) == jti(rotated["refresh_token"])


# --- auth-collection users -------------------------------------------------------------------------


async def test_concurrent_refreshes_of_a_collection_user(client, clock, services, admin_token, interval):
    collection = await create_collection(client, admin_token, MEMBERS, [], type="auth")
    response = await client.post(f"{MEMBERS_AUTH}/register", json={"email": EMAIL, "password": PASSWORD})
    assert response.status == 201, await response.text()
    member = (await response.json())["user"]
    response = await client.post(f"{MEMBERS_AUTH}/login", json={"email": EMAIL, "password": PASSWORD})
    assert response.status == 200, await response.text()
    tokens = (await response.json())["token"]
    path, me, audience = f"{MEMBERS_AUTH}/refresh", f"{MEMBERS_AUTH}/me", collection_audience(collection["id"])

    responses = await asyncio.gather(*(refresh(client, tokens["refresh_token"], path) for _ in range(2)))

    assert [r.status for r in responses] == [200, 200], [await r.text() for r in responses]
    pairs = [await r.json() for r in responses]
    for pair in pairs:
        assert await me_status(client, pair["access_token"], me) == 200
    assert len(await services.sessions.list_active(member["id"], audience)) == 1

    clock.advance(seconds=INTERVAL_S + 1)
    assert (await refresh(client, tokens["refresh_token"], path)).status == 401
    await assert_revoked(client, services, member, [tokens, *pairs], path=path, me=me, audience=audience)
