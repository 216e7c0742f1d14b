"""The admin UI's refresh of an expired access token, shared across replicas (two apps on one
Redis): parallel requests that present the same spent refresh token get one new pair, and the
session survives (spending it twice would revoke it as a reused token)."""

from __future__ import annotations

import asyncio
from typing import Any

from cms.admin_ui import session as ui_session
from cms.app import create_app
from cms.models import TokenPair
from cms.wiring import Services
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, login


def cookie_of(response: Any) -> str | None:
    morsel = response.cookies.get(ui_session.SESSION_COOKIE)
    return None if morsel is None else str(morsel.value)


async def test_two_replicas_refreshing_one_cookie_share_one_refresh(
        aiohttp_client: Any, config: Any, services: Services) -> None:
    await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
    replica_a = await aiohttp_client(create_app(config, services=services))
    replica_b = await aiohttp_client(create_app(config, services=services))
    refresh = (await login(replica_a, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["refresh_token"]
    expired = {ui_session.SESSION_COOKIE: f"not-a-valid-token~{refresh}"}

    async def dashboard(client: Any) -> Any:
        response = await client.get("/_/", cookies=expired, allow_redirects=False)
        await response.read()
        return response

    answers = await asyncio.gather(*(dashboard(c) for c in (replica_a, replica_b, replica_a, replica_b)))
    assert [a.status for a in answers] == [200] * 4
    cookies = {cookie_of(a) for a in answers}
    assert len(cookies) == 1 and None not in cookies  # one refresh, handed to all four
    (cookie,) = cookies
    assert cookie is not None and cookie.split("~")[1] != refresh
    again = await replica_b.get("/_/", cookies={ui_session.SESSION_COOKIE: cookie}, allow_redirects=False)
    assert again.status == 200  # the session was not revoked as a reuse


async def test_a_refused_refresh_signs_out_on_every_replica(
        aiohttp_client: Any, config: Any, services: Services) -> None:
    replica_a = await aiohttp_client(create_app(config, services=services))
    replica_b = await aiohttp_client(create_app(config, services=services))
    forged = {ui_session.SESSION_COOKIE: "not-a-valid-token~not-a-refresh-token"}
    answers = await asyncio.gather(*(c.get("/_/", cookies=forged, allow_redirects=False)
                                     for c in (replica_a, replica_b)))
    assert [a.status for a in answers] == [303, 303]
    assert all(a.headers["Location"].startswith("/_/login") for a in answers)


def test_a_shared_pair_opens_only_with_the_spent_token() -> None:
    pair = TokenPair(access_token="a.b.c", refresh_token="d.e.f", expires_in=60)
    sealed = ui_session.seal_pair("spent-token", pair)
    assert b"a.b.c" not in sealed and b"d.e.f" not in sealed
    assert ui_session.open_pair("spent-token", sealed) == pair
    assert ui_session.open_pair("another-token", sealed) is None
    assert ui_session.open_pair("spent-token", b"not base64!") is None
    assert ui_session.open_pair("spent-token", sealed[:-4]) is None
