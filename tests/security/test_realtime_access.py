"""Realtime fails closed (issue 28, item 3: the realtime class of our peers' advisories): a bad
credential subscribes nothing, a delete of a record the subscriber may not view is not sent, an
auth-collection user event carries no hidden field even to an admin, client ids are random UUID4s
(122 random bits), and a POST naming another principal's client is refused (docs/concepts/realtime.md:
a client is bound to its principal; tests/realtime/test_realtime_binding.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import bearer, create_collection, create_record, records_path
from tests.realtime.sse import data

HIDDEN = ("password", "password_hash", "passwordHash", "totp", "totp_secret", "token_key", "tokenKey", "mfa")


@pytest.fixture
async def notes(client: Any, admin_token: str) -> None:
    """`notes`: listed and viewed by anyone only when `published`."""
    await create_collection(client, admin_token, "notes", [{"name": "title", "type": "text"},
                                                           {"name": "published", "type": "bool"}],
                            list_rule="published = true", view_rule="published = true")


async def test_a_bad_credential_is_401_and_subscribes_nothing(client, admin_token, notes, streams):
    stream = streams()
    await stream.open()
    for headers in ({"Authorization": "Bearer not-a-token"}, {"X-API-Key": "cms_forged"}):
        answer = await stream.subscribe(["notes/*"], headers=headers)
        assert answer.status_code == 401, answer.text
    await create_record(client, admin_token, "notes", {"title": "public", "published": True})
    await stream.nothing()  # not even as anonymous: nothing was subscribed


async def test_a_delete_of_a_record_the_subscriber_may_not_view_is_not_sent(client, admin_token, notes, streams):
    stream = streams()
    await stream.open()
    assert (await stream.subscribe(["notes/*"])).status_code == 204
    hidden = await create_record(client, admin_token, "notes", {"title": "draft", "published": False})
    shown = await create_record(client, admin_token, "notes", {"title": "public", "published": True})
    assert data(await stream.next())["record"]["id"] == shown["id"]
    assert (await client.delete(records_path("notes", hidden["id"]), headers=bearer(admin_token))).status == 204
    await stream.nothing()


async def test_a_user_event_carries_no_hidden_field_even_to_an_admin(client, admin_token, streams):
    await create_collection(client, admin_token, "people", [{"name": "nickname", "type": "text"}], type="auth",
                            list_rule="", view_rule="")
    stream = streams()
    await stream.open()
    assert (await stream.subscribe(["people/*"], headers=bearer(admin_token))).status_code == 204
    response = await client.post("/api/v1/collections/people/auth/register",
                                 json={"email": "p@example.com", "password": "people-password-1"})
    assert response.status == 201, await response.text()
    event = await stream.next()
    record = data(event)["record"]
    assert record["email"] == "p@example.com"
    assert not set(record) & set(HIDDEN), record
    assert "people-password-1" not in event.data and "$argon2" not in event.data


async def test_client_ids_are_random_uuid4s_and_another_principal_cannot_touch_a_bound_client(
        client, admin_token, notes, streams):
    admin_stream = streams()
    await admin_stream.open()
    other = streams()
    await other.open()
    for stream in (admin_stream, other):
        assert uuid.UUID(stream.client_id).version == 4
    assert admin_stream.client_id != other.client_id
    assert (await admin_stream.subscribe(["notes/*"], headers=bearer(admin_token))).status_code == 204
    # an anonymous POST naming the admin's client is refused: the client is bound to the admin
    answer = await other.subscribe(["notes/*"], client_id=admin_stream.client_id)
    assert answer.status_code == 403, answer.text
    draft = await create_record(client, admin_token, "notes", {"title": "draft", "published": False})
    shown = await create_record(client, admin_token, "notes", {"title": "public", "published": True})
    assert [data(await admin_stream.next())["record"]["id"] for _ in range(2)] == [draft["id"], shown["id"]]
    await other.nothing()
