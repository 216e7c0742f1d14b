"""Realtime (decisions.md, Realtime; issue 27): the stream, subscriptions, rules and filters decided
in memory (leave and enter), expand and fields, credentials that stop events, resume, bounds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from cms.wiring import Services
from tests.conftest import Client, bearer, create_collection, create_record, records_path
from tests.realtime.sse import Stream, data

FIELDS = [{"name": "title", "type": "text"}, {"name": "published", "type": "bool"},
          {"name": "owner", "type": "text"}]


@pytest.fixture
async def streams(client: Client) -> AsyncIterator[Callable[[], Stream]]:
    opened: list[Stream] = []
    base = str(client.make_url("/"))

    def make() -> Stream:
        stream = Stream(base)
        opened.append(stream)
        return stream

    yield make
    for stream in opened:
        await stream.close()


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
    assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-")))
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
    failures = answer.json()["errors"]["subscriptions"]
    assert sorted(failures) == ["1", "2", "3", "4", "5"]
    assert "unknown collection" in failures["1"][0]
    answer = await stream.subscribe(["posts/*"] * 1001)
    assert answer.status_code == 422
    assert answer.json()["code"] == "validation_error"
    answer = await stream.subscribe(["posts/*"], client_id="not-a-client")
    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"
    assert (await stream.subscribe([])).status_code == 204
