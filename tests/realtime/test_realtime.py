"""Realtime (decisions.md, Realtime; issue 27): the stream, subscriptions, rules and filters decided
in memory (leave and enter), expand and fields, credentials that stop events, resume, bounds."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest

from cms.wiring import Services
from tests.api.test_api_keys import api_key, make_key
from tests.conftest import (
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    USER_PASSWORD,
    Client,
    MovableClock,
    bearer,
    create_collection,
    create_record,
    login,
    records_path,
)
from tests.realtime.sse import Stream, data

FIELDS = [{"name": "title", "type": "text"}, {"name": "published", "type": "bool"},
          {"name": "owner", "type": "text"}]


@pytest.fixture
async def posts(client: Client, admin_token: str) -> dict[str, Any]:
    return await create_collection(client, admin_token, "posts", FIELDS)


async def test_a_subscriber_receives_the_events_of_its_topic_in_order_with_increasing_ids(
        client: Client, admin_token: str, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    stream = streams()
    connect = await stream.open()
    assert connect.id and stream.client_id
    answer = await stream.subscribe(["posts/*"])
    assert answer.status_code == 204, answer.text
    first = await create_record(client, admin_token, "posts", {"title": "one"})
    second = await create_record(client, admin_token, "posts", {"title": "two"})
    created = [await stream.next(), await stream.next()]
    assert [e.event for e in created] == ["posts/*", "posts/*"]
    assert [data(e) for e in created] == [{"action": "create", "record": first},
                                         {"action": "create", "record": second}]
    ids = [connect.id, created[0].id, created[1].id]
    assert all(i.startswith(stream.client_id + ":") for i in ids)  # the client rides in every id
    positions = [tuple(int(p) for p in i.rpartition(":")[2].split("-")) for i in ids]
    assert positions == sorted(positions) and len(set(positions)) == 3
    response = await client.delete(records_path("posts", first["id"]), headers=bearer(admin_token))
    assert response.status == 204
    deleted = await stream.next()
    assert data(deleted) == {"action": "delete", "record": first}


async def test_an_update_that_leaves_or_enters_the_filter_is_a_delete_or_a_create(
        client: Client, admin_token: str, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    stream = streams()
    await stream.open()
    assert (await stream.subscribe(["posts/*?filter=published=true"])).status_code == 204
    record = await create_record(client, admin_token, "posts", {"title": "draft", "published": False})
    await stream.nothing()

    async def patch(values: dict[str, Any]) -> dict[str, Any]:
        response = await client.patch(records_path("posts", record["id"]), json={"data": values},
                                      headers=bearer(admin_token))
        assert response.status == 200
        body: dict[str, Any] = await response.json()
        return body

    shown = await patch({"published": True})
    assert data(await stream.next()) == {"action": "create", "record": shown}
    renamed = await patch({"title": "final"})
    assert data(await stream.next()) == {"action": "update", "record": renamed}
    await patch({"published": False})
    assert data(await stream.next()) == {"action": "delete", "record": renamed}
    await patch({"title": "hidden again"})
    await stream.nothing()


async def test_the_list_rule_decides_per_subscriber_and_the_view_rule_for_one_record(
        client: Client, admin_token: str, user_token: str, collection_user_token: str,
        streams: Callable[[], Stream], services: Services) -> None:
    await create_collection(client, admin_token, "notes", FIELDS, list_rule="published = true",
                            view_rule="published = true")
    anonymous, user = streams(), streams()
    await anonymous.open()
    await user.open()
    assert (await anonymous.subscribe(["notes/*"])).status_code == 204
    secret = await create_record(client, admin_token, "notes", {"title": "secret", "published": False})
    public = await create_record(client, admin_token, "notes", {"title": "public", "published": True})
    assert (await user.subscribe([f"notes/{secret['id']}", f"notes/{public['id']}"],
                                 headers=bearer(user_token))).status_code == 204
    assert data(await anonymous.next()) == {"action": "create", "record": public}
    await anonymous.nothing()
    response = await client.patch(records_path("notes", public["id"]), json={"data": {"title": "seen"}},
                                  headers=bearer(admin_token))
    changed = await response.json()
    one = await user.next()
    assert one.event == f"notes/{public['id']}"
    assert data(one) == {"action": "update", "record": changed}
    assert data(await anonymous.next()) == {"action": "update", "record": changed}
    response = await client.patch(records_path("notes", secret["id"]), json={"data": {"title": "still"}},
                                  headers=bearer(admin_token))
    await user.nothing()


async def test_expand_and_fields_shape_the_records_of_a_topic(
        client: Client, admin_token: str, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    await create_collection(client, admin_token, "comments", [
        {"name": "body", "type": "text"},
        {"name": "post", "type": "relation", "collection_id": posts["id"], "max_select": 1}])
    post = await create_record(client, admin_token, "posts", {"title": "hello"})
    stream = streams()
    await stream.open()
    answer = await stream.subscribe(["comments/*?expand=post&fields=id,body,expand.post.title"])
    assert answer.status_code == 204, answer.text
    comment = await create_record(client, admin_token, "comments", {"body": "hi", "post": post["id"]})
    assert data(await stream.next()) == {"action": "create", "record": {
        "id": comment["id"], "body": "hi", "expand": {"post": {"title": "hello"}}}}


async def test_bad_subscriptions_are_refused_naming_them_and_an_unknown_client_is_404(
        client: Client, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    stream = streams()
    await stream.open()
    answer = await stream.subscribe(["posts/*", "nope/*", "posts/*?filter=(", "posts", "x" * 2501,
                                     "posts/*?expand=title"])
    assert answer.status_code == 422, answer.text
    failures = answer.json()["errors"]
    assert sorted(failures) == [f"subscriptions.{i}" for i in range(1, 6)]
    assert "unknown collection" in failures["subscriptions.1"][0]
    answer = await stream.subscribe(["posts/*"] * 1001)
    assert answer.status_code == 422
    assert answer.json()["code"] == "validation_error"
    answer = await stream.subscribe(["posts/*"], client_id="not-a-client")
    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"
    assert (await stream.subscribe([])).status_code == 204


async def subscribed(streams: Callable[[], Stream], topics: list[str],
                     headers: dict[str, str] | None = None) -> Stream:
    stream = streams()
    await stream.open()
    answer = await stream.subscribe(topics, headers=headers)
    assert answer.status_code == 204, answer.text
    return stream


async def test_a_logout_a_deleted_api_key_and_an_expired_token_stop_their_clients_events(
        client: Client, admin_token: str, user_token: str, posts: dict[str, Any], streams: Callable[[], Stream],
        clock: MovableClock) -> None:
    key = await make_key(client, admin_token, ["read"])
    by_token = await subscribed(streams, ["posts/*"], bearer(user_token))
    by_key = await subscribed(streams, ["posts/*"], api_key(key))
    other = await login(client, "user@example.com", USER_PASSWORD)
    by_expiring = await subscribed(streams, ["posts/*"], bearer(other["token"]["access_token"]))
    anonymous = await subscribed(streams, ["posts/*"])
    await create_record(client, admin_token, "posts", {"title": "all four"})
    for stream in (by_token, by_key, by_expiring, anonymous):
        assert data(await stream.next())["action"] == "create"

    assert (await client.post("/api/v1/auth/logout", headers=bearer(user_token))).status == 200
    assert (await client.delete(f"/api/v1/api-keys/{key['id']}", headers=bearer(admin_token))).status == 204
    await create_record(client, admin_token, "posts", {"title": "after revocations"})
    assert data(await by_expiring.next())["record"]["title"] == "after revocations"
    assert data(await anonymous.next())["record"]["title"] == "after revocations"
    await by_token.nothing()
    await by_key.nothing()

    clock.advance(days=400)  # past any access token's expiry
    await create_record(client, await fresh_admin_token(client), "posts", {"title": "after expiry"})
    assert data(await anonymous.next())["record"]["title"] == "after expiry"
    await by_expiring.nothing()
    # a fresh token re-POSTed brings the events back
    admin = await subscribed(streams, ["posts/*"], bearer(await fresh_admin_token(client)))
    await create_record(client, await fresh_admin_token(client), "posts", {"title": "fresh"})
    assert data(await admin.next())["record"]["title"] == "fresh"


async def fresh_admin_token(client: Client) -> str:
    return str((await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"])


async def test_a_resume_replays_the_missed_events_in_order_then_goes_live(
        client: Client, admin_token: str, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    stream = await subscribed(streams, ["posts/*"])
    await create_record(client, admin_token, "posts", {"title": "seen"})
    seen = await stream.next()
    await stream.close()
    missed = [await create_record(client, admin_token, "posts", {"title": f"missed {i}"}) for i in range(3)]
    again = streams()
    connect = await again.open(client_id=stream.client_id, last_event_id=seen.id)
    assert again.client_id == stream.client_id
    assert connect.id == seen.id  # the position the client asked for, until the replay moves it
    replayed = [data(await again.next()) for _ in missed]
    assert replayed == [{"action": "create", "record": r} for r in missed]
    live = await create_record(client, admin_token, "posts", {"title": "live"})
    assert data(await again.next()) == {"action": "create", "record": live}
    await again.nothing()


async def test_a_browser_that_sends_back_only_last_event_id_resumes_its_client(
        client: Client, admin_token: str, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    stream = await subscribed(streams, ["posts/*"])
    await create_record(client, admin_token, "posts", {"title": "seen"})
    seen = await stream.next()
    await stream.close()
    missed = await create_record(client, admin_token, "posts", {"title": "missed"})
    again = streams()  # EventSource reconnects to the URL it was opened with: no client_id there
    await again.open(last_event_id=seen.id)
    assert again.client_id == stream.client_id
    assert data(await again.next()) == {"action": "create", "record": missed}


async def test_a_resume_takes_the_client_over_and_closes_its_older_stream(
        client: Client, admin_token: str, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    older = await subscribed(streams, ["posts/*"])
    newer = streams()
    await newer.open(client_id=older.client_id, last_event_id=older.last_id)
    assert await older.ended()
    record = await create_record(client, admin_token, "posts", {"title": "once"})
    assert data(await newer.next()) == {"action": "create", "record": record}
    await newer.nothing()


async def test_an_unknown_client_or_a_position_out_of_the_window_gets_resync(
        client: Client, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    stranger = streams()
    await stranger.open(client_id="forgotten-client", last_event_id="1-0")
    assert stranger.client_id != "forgotten-client"
    assert (await stranger.next()).event == "resync"
    known = await subscribed(streams, ["posts/*"])
    await known.close()
    back = streams()
    await back.open(client_id=known.client_id, last_event_id="1-0")  # older than the stream's history
    assert back.client_id == known.client_id
    assert (await back.next()).event == "resync"
    without = streams()
    await without.open(client_id=known.client_id)  # no Last-Event-ID: nothing to replay from
    assert (await without.next()).event == "resync"


async def test_a_slow_client_is_closed_without_holding_up_the_others(
        client: Client, admin_token: str, posts: dict[str, Any], streams: Callable[[], Stream]) -> None:
    ids = [r["id"] for r in [await create_record(client, admin_token, "posts", {"title": f"r{i}"})
                             for i in range(100)]]
    fast = await subscribed(streams, ["posts/*"])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # no 32 MiB of autotuned room to hide in
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (client.host, client.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"GET /api/v1/realtime HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    head = await reader.readuntil(b"data: ")
    client_id = json.loads((await reader.readline()).decode())["client_id"]
    assert b"200" in head.split(b"\r\n")[0]
    slow = streams()
    assert (await slow.subscribe(["posts/*"], client_id=client_id)).status_code == 204
    big = "x" * 8_000
    for round_ in range(24):  # 2,400 events of 8 KB: past the queue once the 4 MiB of socket buffers are full
        response = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                                     json={"record_ids": ids, "data": {"title": f"{round_}{big}"}})
        assert response.status == 200, await response.text()
    received = 0
    while received < 2_400:
        assert data(await fast.next())["action"] == "update"
        received += 1
    # the slow client's stream ends after what was already on its way
    async with asyncio.timeout(20):
        while await reader.read(1 << 20):
            pass
    writer.close()


async def test_past_the_connection_limit_a_stream_is_refused_with_503(
        client: Client, services: Services, streams: Callable[[], Stream]) -> None:
    await services.settings.set("realtime_max_connections", 1)
    await streams().open()
    response = await client.get("/api/v1/realtime")
    assert response.status == 503
    assert (await response.json())["code"] == "service_unavailable"
