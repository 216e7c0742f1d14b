"""A password reset or an email change ends every session of the user: each access token and refresh
token of each session answers 401, and every realtime stream subscribed with one of them gets no more
events (issue 28, item 3: revocation; the class of our peers' advisories where a reset left a stolen
session or refresh token alive). Both user systems, two sessions each (two devices)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.test_collection_auth import mail_with_subject
from tests.conftest import bearer, create_collection, create_record, link_token
from tests.realtime.sse import Stream, data
from tests.user_systems import ADMIN_TABLE, EMAIL, MEMBERS, PASSWORD, System, prepare


@pytest.fixture
async def news(client: Any, admin_token: str) -> None:
    """`news`: a collection any signed-in caller may list and view (an anonymous caller may not)."""
    await create_collection(client, admin_token, "news", [{"name": "title", "type": "text"}],
                            list_rule="@request.auth.id != ''", view_rule="@request.auth.id != ''")


async def signed_in_everywhere(client: Any, system: System, streams: Callable[[], Stream]
                               ) -> tuple[list[dict[str, Any]], list[Stream]]:
    """Two sessions of EMAIL and, for each, a realtime stream subscribed to `news/*` with its token."""
    tokens = [await system.login(client, user_agent=f"device {n}") for n in (1, 2)]
    subscribed = []
    for token in tokens:
        stream = streams()
        await stream.open()
        answer = await stream.subscribe(["news/*"], headers=bearer(token["access_token"]))
        assert answer.status_code == 204, answer.text
        subscribed.append(stream)
    return tokens, subscribed


async def assert_all_ended(client: Any, admin_token: str, system: System, tokens: list[dict[str, Any]],
                           subscribed: list[Stream], witness: Stream) -> None:
    for token in tokens:
        assert await system.me_status(client, token) == 401
        response = await client.post(f"{system.auth}/refresh", json={"refresh_token": token["refresh_token"]})
        assert response.status == 401, await response.text()
    await create_record(client, admin_token, "news", {"title": "after"})
    assert data(await witness.next())["record"]["title"] == "after"  # the event was published
    for stream in subscribed:
        await stream.nothing()


@pytest.fixture(params=[ADMIN_TABLE, MEMBERS], ids=["admin-table", "auth-collection"])
async def system(request, client, admin_token, news) -> System:
    return await prepare(request.param, client, admin_token)


async def witness_stream(streams: Callable[[], Stream], admin_token: str) -> Stream:
    stream = streams()
    await stream.open()
    assert (await stream.subscribe(["news/*"], headers=bearer(admin_token))).status_code == 204
    return stream


async def test_a_password_reset_ends_every_session_refresh_token_and_stream(
        client, admin_token, system, streams, mailbox, run_jobs):
    tokens, subscribed = await signed_in_everywhere(client, system, streams)
    witness = await witness_stream(streams, admin_token)
    await create_record(client, admin_token, "news", {"title": "before"})
    for stream in (*subscribed, witness):
        assert data(await stream.next())["record"]["title"] == "before"

    body = {"email": EMAIL} if system is ADMIN_TABLE else {"email": EMAIL, "collection": "members"}
    assert (await client.post("/api/v1/auth/request-password-reset", json=body)).status == 200
    await run_jobs()
    token = link_token(mail_with_subject(mailbox, EMAIL, "Reset your password"))
    response = await client.post("/api/v1/auth/reset-password", json={"token": token, "new_password": "reset-pw-12"})
    assert response.status == 200, await response.text()

    await assert_all_ended(client, admin_token, system, tokens, subscribed, witness)
    assert (await system.login_response(client, password="reset-pw-12"))["user"]["email"] == EMAIL


async def test_an_email_change_ends_every_session_refresh_token_and_stream(
        client, admin_token, news, streams, mailbox, run_jobs):
    system = await prepare(MEMBERS, client, admin_token)  # only auth collections change addresses
    tokens, subscribed = await signed_in_everywhere(client, system, streams)
    witness = await witness_stream(streams, admin_token)
    response = await client.post(f"{system.auth}/me/request-email-change", headers=bearer(tokens[0]["access_token"]),
                                 json={"new_email": "moved@example.com", "password": PASSWORD})
    assert response.status == 200, await response.text()
    await run_jobs()
    token = link_token(mail_with_subject(mailbox, "moved@example.com", "Confirm your new email address"))
    response = await client.post(f"{system.auth}/me/confirm-email-change", json={"token": token})
    assert response.status == 200, await response.text()

    await assert_all_ended(client, admin_token, system, tokens, subscribed, witness)
    assert (await system.login_response(client, email="moved@example.com"))["user"]["email"] == "moved@example.com"


async def test_a_password_reset_voids_an_email_change_asked_with_the_old_password(client, admin_token, news,
                                                                                   mailbox, run_jobs):
    """Whoever knew the old password asked to move the account to its own address; the owner resets
    the password: the pending change must not go through afterwards."""
    system = await prepare(MEMBERS, client, admin_token)
    token = await system.login(client)
    response = await client.post(f"{system.auth}/me/request-email-change", headers=bearer(token["access_token"]),
                                 json={"new_email": "thief@example.com", "password": PASSWORD})
    assert response.status == 200, await response.text()
    await run_jobs()
    pending = link_token(mail_with_subject(mailbox, "thief@example.com", "Confirm your new email address"))
    body = {"email": EMAIL, "collection": "members"}
    assert (await client.post("/api/v1/auth/request-password-reset", json=body)).status == 200
    await run_jobs()
    reset = link_token(mail_with_subject(mailbox, EMAIL, "Reset your password"))
    response = await client.post("/api/v1/auth/reset-password", json={"token": reset, "new_password": "reset-pw-12"})
    assert response.status == 200, await response.text()
    response = await client.post(f"{system.auth}/me/confirm-email-change", json={"token": pending})
    assert (response.status, (await response.json())["code"]) == (400, "token_invalid")
    assert (await system.login_response(client, password="reset-pw-12"))["user"]["email"] == EMAIL


async def test_an_email_change_voids_a_reset_link_mailed_to_the_old_address(client, admin_token, news,
                                                                            mailbox, run_jobs):
    system = await prepare(MEMBERS, client, admin_token)
    token = await system.login(client)
    body = {"email": EMAIL, "collection": "members"}
    assert (await client.post("/api/v1/auth/request-password-reset", json=body)).status == 200
    await run_jobs()
    reset = link_token(mail_with_subject(mailbox, EMAIL, "Reset your password"))
    response = await client.post(f"{system.auth}/me/request-email-change", headers=bearer(token["access_token"]),
                                 json={"new_email": "moved@example.com", "password": PASSWORD})
    assert response.status == 200, await response.text()
    await run_jobs()
    change = link_token(mail_with_subject(mailbox, "moved@example.com", "Confirm your new email address"))
    assert (await client.post(f"{system.auth}/me/confirm-email-change", json={"token": change})).status == 200
    response = await client.post("/api/v1/auth/reset-password", json={"token": reset, "new_password": "stolen-pw-12"})
    assert (response.status, (await response.json())["code"]) == (400, "token_invalid")
    assert (await system.login_response(client, email="moved@example.com"))["user"]["email"] == "moved@example.com"
