"""A realtime client is bound to its principal (decisions.md, Realtime; issue 37, item 3): the first POST
with credentials binds it; a later POST, or a resume carrying credentials, of another principal (anonymous
included, an API key of another owner too) is 403 `forbidden` and changes nothing: the owner's stream stays
open, keeps its subscriptions and credential, and still receives its private records. The owner itself (a
token or an API key of its own) and a resume without credentials (a browser's EventSource) still work.
Across replicas: tests/realtime/test_realtime_replicas.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.test_api_keys import api_key, make_key
from tests.conftest import Client, bearer, create_collection, create_record
from tests.realtime.sse import REALTIME, Stream, data

PRIVATE = "private"
"""A collection only signed-in callers may list: what an anonymous takeover would have lost."""


@pytest.fixture
async def private(client: Client, admin_token: str) -> None:
    await create_collection(client, admin_token, PRIVATE, [{"name": "title", "type": "text"}],
                            list_rule='@request.auth.id != ""', view_rule='@request.auth.id != ""')


@pytest.fixture
async def owned(user_token: str, private: None, streams: Callable[[], Stream]) -> Stream:
    """A stream of the registered user's, subscribed to `private/*` (bound to that user by the POST)."""
    stream = streams()
    await stream.open()
    assert (await stream.subscribe([f"{PRIVATE}/*"])).status_code == 204  # anonymous first: binds nothing
    assert (await stream.subscribe([f"{PRIVATE}/*"], headers=bearer(user_token))).status_code == 204
    return stream


async def others(client: Client, admin_token: str, collection_user_token: str) -> dict[str, dict[str, str]]:
    """The credentials of principals other than the registered user, by name."""
    return {"another user": bearer(admin_token), "an auth-collection user": bearer(collection_user_token),
            "an API key of another owner": api_key(await make_key(client, admin_token, ["read"]))}


async def test_a_post_of_another_principal_is_403_and_changes_nothing(
        client: Client, admin_token: str, collection_user_token: str, user_token: str, owned: Stream,
        streams: Callable[[], Stream]) -> None:
    attacker = streams()
    await attacker.open()
    for who, headers in {"anonymous": {}, **await others(client, admin_token, collection_user_token)}.items():
        for topics in ([], [f"{PRIVATE}/*"]):  # clear it, or take it over with one's own subscriptions
            answer = await attacker.subscribe(topics, headers=headers, client_id=owned.client_id)
            assert answer.status_code == 403, (who, answer.text)
            assert answer.json()["code"] == "forbidden"
    record = await create_record(client, admin_token, PRIVATE, {"title": "for signed-in eyes"})
    assert data(await owned.next()) == {"action": "create", "record": record}  # its set and credential stand
    await attacker.nothing()
    # the owner still manages its client, by a token or by an API key of its own
    own_key = await make_key(client, user_token, ["read"])
    assert (await owned.subscribe([f"{PRIVATE}/*"], headers=api_key(own_key))).status_code == 204
    assert (await owned.subscribe([], headers=bearer(user_token))).status_code == 204
    await create_record(client, admin_token, PRIVATE, {"title": "after clearing"})
    await owned.nothing()


async def test_a_resume_with_credentials_of_another_principal_is_403_and_the_stream_stays(
        client: Client, admin_token: str, collection_user_token: str, user_token: str, owned: Stream,
        streams: Callable[[], Stream]) -> None:
    first = await create_record(client, admin_token, PRIVATE, {"title": "first"})
    seen = await owned.next()
    assert data(seen)["record"] == first
    for who, headers in (await others(client, admin_token, collection_user_token)).items():
        for query in ({"client_id": owned.client_id}, {}):  # named in the query, or by Last-Event-ID alone
            response = await client.get(REALTIME, params=query, headers={**headers, "Last-Event-ID": seen.id})
            assert response.status == 403, (who, query, await response.text())
            assert (await response.json())["code"] == "forbidden"
    second = await create_record(client, admin_token, PRIVATE, {"title": "second"})
    assert data(await owned.next()) == {"action": "create", "record": second}  # not taken over, not closed
    # the owner resumes with its credentials; anyone holding the id resumes without any (EventSource)
    await owned.close()
    missed = await create_record(client, admin_token, PRIVATE, {"title": "missed"})
    again = streams()
    await again.open(client_id=owned.client_id, last_event_id=seen.id, headers=bearer(user_token))
    assert [data(await again.next())["record"] for _ in range(2)] == [second, missed]
    await again.close()
    browser = streams()
    await browser.open(last_event_id=seen.id)
    assert browser.client_id == owned.client_id
    assert [data(await browser.next())["record"] for _ in range(2)] == [second, missed]


async def test_an_unbound_client_takes_the_first_principal_that_posts_with_credentials(
        client: Client, admin_token: str, user_token: str, private: None, streams: Callable[[], Stream]) -> None:
    stream = streams()
    await stream.open()
    assert (await stream.subscribe([f"{PRIVATE}/*"])).status_code == 204
    assert (await stream.subscribe([f"{PRIVATE}/*"])).status_code == 204  # anonymous again: still unbound
    assert (await stream.subscribe([f"{PRIVATE}/*"], headers=bearer(admin_token))).status_code == 204
    assert (await stream.subscribe([f"{PRIVATE}/*"], headers=bearer(user_token))).status_code == 403
    assert (await stream.subscribe([f"{PRIVATE}/*"])).status_code == 403
    record: dict[str, Any] = await create_record(client, admin_token, PRIVATE, {"title": "admin's"})
    assert data(await stream.next())["record"] == record
