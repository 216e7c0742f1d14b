"""One identity core for both user systems (issue 13): the flows the spec gave only to auth
collections work the same for admin-table users (change password, sessions list and revocation),
and a confirmed email change tells the old address.

Each test runs against both systems: the admin table (`/api/v1/auth`) and the auth collection
`members` (`/api/v1/collections/members/auth`)."""

from __future__ import annotations

import pytest

from tests.conftest import bearer, create_collection, error_of, link_token, text_body
from tests.user_systems import ADMIN_TABLE, EMAIL, MEMBERS, NEW_PASSWORD, PASSWORD, System, prepare


@pytest.fixture(params=[ADMIN_TABLE, MEMBERS], ids=["admin-table", "auth-collection"])
async def system(request, client, admin_token) -> System:
    """Each user system in turn, with EMAIL registered in it."""
    return await prepare(request.param, client, admin_token)


async def test_change_password_keeps_this_session_and_revokes_the_others(client, services, system):
    mine, other = await system.login(client), await system.login(client)
    response = await client.post(f"{system.auth}/me/change-password", headers=bearer(mine["access_token"]),
                                 json={"old_password": PASSWORD, "new_password": NEW_PASSWORD,
                                       "password_confirm": NEW_PASSWORD})
    assert response.status == 200, await response.text()
    assert set(await response.json()) == {"message"}
    assert await system.me_status(client, mine) == 200
    assert await system.me_status(client, other) == 401
    response = await client.post(f"{system.auth}/refresh", json={"refresh_token": other["refresh_token"]})
    await error_of(response, 401, "unauthorized")
    response = await client.post(f"{system.auth}/login", json={"email": EMAIL, "password": PASSWORD})
    await error_of(response, 401, "invalid_credentials")
    await system.login(client, password=NEW_PASSWORD)
    assert await services.audit.count(event_type="password_changed") == 1


@pytest.mark.parametrize(
    "body, field",
    [({"old_password": "wrong-password", "new_password": NEW_PASSWORD}, "old_password"),
     ({"old_password": PASSWORD, "new_password": "short"}, "new_password"),
     ({"old_password": PASSWORD, "new_password": NEW_PASSWORD, "password_confirm": "x"}, "password_confirm")],
    ids=["wrong-current", "policy", "confirm"],
)
async def test_change_password_refusals_change_nothing(client, system, body, field):
    tokens = [await system.login(client) for _ in range(2)]
    response = await client.post(f"{system.auth}/me/change-password", headers=bearer(tokens[0]["access_token"]),
                                 json=body)
    payload = await error_of(response, 422, "validation_error")
    assert field in payload["errors"]
    await system.login(client)
    assert [await system.me_status(client, token) for token in tokens] == [200, 200]


async def test_the_other_systems_tokens_are_refused(client, admin_token, system):
    body = {"old_password": PASSWORD, "new_password": NEW_PASSWORD}
    await error_of(await client.post(f"{system.auth}/me/change-password", json=body), 401, "unauthorized")
    await error_of(await client.get(f"{system.auth}/sessions"), 401, "unauthorized")
    if system is MEMBERS:
        foreign = admin_token
    else:
        await create_collection(client, admin_token, "members", [], type="auth")
        await MEMBERS.register(client)
        foreign = (await MEMBERS.login(client))["access_token"]
    for response in (await client.post(f"{system.auth}/me/change-password", headers=bearer(foreign), json=body),
                     await client.get(f"{system.auth}/sessions", headers=bearer(foreign)),
                     await client.delete(f"{system.auth}/sessions/all", headers=bearer(foreign))):
        await error_of(response, 401, "unauthorized")
    await system.login(client)  # the password did not change


async def test_sessions_list_shows_the_callers_sessions_newest_first(client, clock, system):
    first = await system.login(client, user_agent="phone/1")
    clock.advance(seconds=5)
    await system.login(client, user_agent="laptop/2")
    response = await client.get(f"{system.auth}/sessions", headers=bearer(first["access_token"]))
    assert response.status == 200, await response.text()
    sessions = await response.json()
    assert [s["user_agent"] for s in sessions] == ["laptop/2", "phone/1"]
    assert [s["current"] for s in sessions] == [False, True]
    for session in sessions:
        assert set(session) == {"id", "created", "last_used", "user_agent", "ip", "current"}


async def test_revoke_one_session_then_all(client, services, system):
    first, second, third = [await system.login(client) for _ in range(3)]
    sessions = await (await client.get(f"{system.auth}/sessions", headers=bearer(first["access_token"]))).json()
    others = [s["id"] for s in sessions if not s["current"]]
    response = await client.delete(f"{system.auth}/sessions/{others[0]}", headers=bearer(first["access_token"]))
    assert response.status == 204
    assert sorted([await system.me_status(client, t) for t in (first, second, third)]) == [200, 200, 401]
    # already revoked or unknown: 404, and nothing else changes
    for session_id in (others[0], "no-such-session"):
        response = await client.delete(f"{system.auth}/sessions/{session_id}", headers=bearer(first["access_token"]))
        await error_of(response, 404, "not_found")
    # someone else's session: 404
    await system.register(client, email="stranger@example.com")
    stranger = await system.login(client, email="stranger@example.com")
    response = await client.delete(f"{system.auth}/sessions/{others[1]}", headers=bearer(stranger["access_token"]))
    await error_of(response, 404, "not_found")
    assert await services.audit.count(event_type="session_revoked") == 1

    response = await client.delete(f"{system.auth}/sessions/all", headers=bearer(first["access_token"]))
    assert response.status == 204
    assert [await system.me_status(client, t) for t in (first, second, third)] == [401, 401, 401]
    assert await system.me_status(client, stranger) == 200
    await system.login(client)


async def test_a_confirmed_email_change_tells_the_old_address(client, admin_token, mailbox, run_jobs):
    await create_collection(client, admin_token, "members", [], type="auth")
    await MEMBERS.register(client)
    token = await MEMBERS.login(client)
    response = await client.post(f"{MEMBERS.auth}/me/request-email-change", headers=bearer(token["access_token"]),
                                 json={"new_email": "moved@example.com", "password": PASSWORD})
    assert response.status == 200, await response.text()
    await run_jobs()
    assert [m["Subject"] for m in mailbox.to(EMAIL)] == ["Verify your email address"]  # nothing yet
    link = link_token(mailbox.last_to("moved@example.com"))
    response = await client.post(f"{MEMBERS.auth}/me/confirm-email-change", json={"token": link})
    assert response.status == 200, await response.text()
    await run_jobs()
    notice = mailbox.last_to(EMAIL)
    assert notice["Subject"] == "Your email address was changed"
    assert "moved@example.com" in text_body(notice)
    assert link not in text_body(notice)
    assert [m["Subject"] for m in mailbox.to("moved@example.com")] == ["Confirm your new email address"]
