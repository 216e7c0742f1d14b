"""Readers' events follow the published copy (decisions.md, Drafts, versions and scheduled publishing;
issue 39, item 5), counted where readers receive them: a realtime subscriber and a webhook receiver.
A first publish is `create`, a later one `update`, an unpublish or the delete of a published record
`delete`; saving a working copy, discarding it, or deleting a record never published, nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from tests.api.test_webhooks import config, make_webhook, receiver  # noqa: F401
from tests.conftest import bearer, create_collection, create_record, records_path
from tests.realtime.sse import Stream, data


async def test_realtime_and_webhooks_see_published_copies_only(client, admin_token, streams, receiver,  # noqa: F811
                                                               run_jobs, services, clock):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}], drafts=True)
    await make_webhook(client, admin_token, receiver.url)
    make: Callable[[], Stream] = streams
    stream = make()
    await stream.open()
    assert (await stream.subscribe(["posts/*"])).status_code == 204

    async def call(method: str, path: str, status: int, **kwargs: Any) -> Any:
        response = await client.request(method, path, headers=bearer(admin_token), **kwargs)
        assert response.status == status, await response.text()
        return await response.json() if status != 204 else None

    record = await create_record(client, admin_token, "posts", {"title": "one"})
    path = records_path("posts", record["id"])
    await call("PATCH", path, 200, json={"data": {"title": "two"}})
    await stream.nothing()

    first = await call("POST", path + "/publish", 200)
    assert data(await stream.next()) == {"action": "create", "record": first}
    await call("PATCH", path, 200, json={"data": {"title": "three"}})
    await call("DELETE", path + "/draft", 204)
    await call("PATCH", path, 200, json={"data": {"title": "four"}})
    await stream.nothing()
    second = await call("POST", path + "/publish", 200)
    assert data(await stream.next()) == {"action": "update", "record": second}
    await call("POST", path + "/unpublish", 200)
    assert data(await stream.next()) == {"action": "delete", "record": second}
    third = await call("POST", path + "/publish", 200)
    assert data(await stream.next()) == {"action": "create", "record": third}
    await call("POST", path + "/publish", 200, json={"at": (clock() + timedelta(minutes=1)).isoformat()})
    await call("PATCH", path, 200, json={"data": {"title": "five"}})
    clock.advance(minutes=1)
    assert await services.drafts.scheduler.run_due() == 1
    scheduled = data(await stream.next())
    assert scheduled["action"] == "update" and scheduled["record"]["title"] == "five"
    await call("DELETE", path, 204)
    assert data(await stream.next()) == {"action": "delete", "record": scheduled["record"]}

    never = await create_record(client, admin_token, "posts", {"title": "never published"})
    await call("DELETE", records_path("posts", never["id"]), 204)
    await stream.nothing()

    await run_jobs()
    delivered = sorted((body["event"], body["data"].get("title") or "") for body in receiver.deliveries())
    assert delivered == sorted([("create", "two"), ("update", "four"), ("delete", ""), ("create", "four"),
                                ("update", "five"), ("delete", "")])  # deliveries may arrive in any order
    assert all(body["record_id"] == record["id"] for body in receiver.deliveries())


async def test_readers_cached_answers_change_only_with_the_published_copy(client, admin_token, services):
    """The read cache stays exact: a working copy's save leaves readers' cached answers as they are (and
    correct), a publish and an unpublish make the next read see the change."""
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}], drafts=True)
    record = await create_record(client, admin_token, "posts", {"title": "v1"})
    path = records_path("posts", record["id"])
    assert (await client.post(path + "/publish", headers=bearer(admin_token))).status == 200

    async def read() -> tuple[Any, Any]:
        one, page = await client.get(path), await client.get(records_path("posts"))
        return (await one.json()).get("title"), [r["title"] for r in (await page.json())["items"]]

    assert await read() == ("v1", ["v1"])
    assert await read() == ("v1", ["v1"])  # now from the cache
    assert (await client.patch(path, headers=bearer(admin_token), json={"data": {"title": "v2"}})).status == 200
    assert await read() == ("v1", ["v1"])
    assert (await client.post(path + "/publish", headers=bearer(admin_token))).status == 200
    assert await read() == ("v2", ["v2"])
    assert (await client.post(path + "/unpublish", headers=bearer(admin_token))).status == 200
    assert await read() == (None, [])
