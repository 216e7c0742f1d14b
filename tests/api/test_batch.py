"""Batch writes (decisions.md: Batch writes): `POST /api/v1/batch` runs up to `batch_max_requests`
record writes in one transaction, in order, all or nothing, each answered as it would be alone;
events after the commit; rules per collection; each request counts against the rate limit; a server
without transactions refuses every batch (forced here through `open_services(use_transactions=False)`).

The embedded SecantusDB the suite runs on supports multi-document transactions (`detect_capabilities`
finds them), so the atomicity tests run against it; they skip where the server has none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from cms.app import create_app
from cms.config import Config
from cms.services.delivery.events import RecordEvent
from cms.store.client import Database
from cms.store.documents import records_mongo_name
from cms.wiring import Services, open_services
from tests.api.test_api_keys import api_key, make_key
from tests.api.test_webhooks import Receiver, make_webhook, receiver  # noqa: F401 - the receiver fixture
from tests.conftest import (
    Client,
    MovableClock,
    bearer,
    create_collection,
    create_record,
    error_of,
    records_path,
)
from tests.fixtures import CommandLog

BATCH = "/api/v1/batch"
FIELDS = [{"name": "title", "type": "text", "validation": {"required": True, "max": 20}},
          {"name": "slug", "type": "text", "validation": {"unique": True}}]


def post(collection: str, data: Any) -> dict[str, Any]:
    return {"method": "POST", "url": records_path(collection), "body": {"data": data}}


def patch(collection: str, record_id: str, data: Any) -> dict[str, Any]:
    return {"method": "PATCH", "url": records_path(collection, record_id), "body": {"data": data}}


def delete(collection: str, record_id: str) -> dict[str, Any]:
    return {"method": "DELETE", "url": records_path(collection, record_id)}


async def titles(client: Client, token: str, collection: str = "posts") -> list[str]:
    """The titles of the collection's records, in alphabetical order."""
    response = await client.get(records_path(collection) + "?sort=title&per_page=100", headers=bearer(token))
    assert response.status == 200, await response.text()
    return [r["title"] for r in (await response.json())["items"]]


async def failed_batch(client: Client, requests: Sequence[Any], headers: dict[str, str] | None = None
                       ) -> dict[str, Any]:
    """POST the batch, assert 400 `bad_request` with `failed`, return `failed`."""
    body = await error_of(await client.post(BATCH, json={"requests": list(requests)}, headers=headers or {}),
                          400, "bad_request")
    assert set(body["failed"]) == {"index", "status", "body"}, body
    return dict(body["failed"])


@pytest.fixture
def config(config: Config) -> Config:
    """Webhook receivers run on loopback: allow private addresses."""
    return replace(config, webhook_allow_private=True)


@pytest.fixture
async def posts(client: Client, admin_token: str) -> list[dict[str, Any]]:
    await create_collection(client, admin_token, "posts", FIELDS)
    return [await create_record(client, admin_token, "posts", {"title": t, "slug": t}) for t in ("one", "two")]


@pytest.fixture
def transactions(services: Services) -> None:
    if not services.records.repository.capabilities.transactions:
        pytest.skip("the server has no multi-document transactions: atomicity cannot be tested here")


# --- success: in order, each answered as alone --------------------------------------------------


async def test_each_request_is_answered_as_alone_in_order(client: Client, admin_token: str, posts: Any,
                                                          transactions: None) -> None:
    one, two = posts
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [
        post("posts", {"title": "three"}), patch("posts", one["id"], {"title": "ONE"}), delete("posts", two["id"])]})
    assert response.status == 200, await response.text()
    created, changed, deleted = await response.json()
    assert created["status"] == 201 and created["body"]["title"] == "three"
    alone = await client.get(records_path("posts", created["body"]["id"]), headers=bearer(admin_token))
    assert created["body"] == await alone.json()
    assert changed == {"status": 200, "body": await (await client.get(records_path("posts", one["id"]))).json()}
    assert changed["body"]["title"] == "ONE"
    assert deleted == {"status": 204, "body": None}
    assert await titles(client, admin_token) == ["ONE", "three"]


async def test_a_later_request_sees_an_earlier_write(client: Client, admin_token: str, posts: Any,
                                                     transactions: None) -> None:
    one, _ = posts
    # the unique slug "one" is free for the create only because the delete before it ran
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [
        delete("posts", one["id"]), post("posts", {"title": "again", "slug": "one"})]})
    assert response.status == 200, await response.text()
    assert await titles(client, admin_token) == ["again", "two"]
    # the other way round the create meets the stored "two"
    failed = await failed_batch(client, [post("posts", {"title": "x", "slug": "two"}), delete("posts", posts[1]["id"])],
                                bearer(admin_token))
    assert failed["index"] == 0 and failed["body"]["code"] == "already_exists"
    # a change made by an earlier request is what a later rule check reads: the record is gone
    two = posts[1]["id"]
    failed = await failed_batch(client, [delete("posts", two), patch("posts", two, {"title": "z"})],
                                bearer(admin_token))
    assert failed["index"] == 1 and failed["status"] == 404
    assert await titles(client, admin_token) == ["again", "two"]


# --- failure: nothing changes, the first failure with its own answer ------------------------------


@pytest.mark.parametrize("bad", ["missing record", "invalid data", "body not an object", "no body"])
async def test_a_failing_request_changes_nothing_and_is_answered_as_alone(
        client: Client, admin_token: str, posts: Any, transactions: None, seen: list[RecordEvent], bad: str) -> None:
    one, two = posts
    request = {"missing record": patch("posts", "nosuch", {"title": "x"}),
               "invalid data": post("posts", {"title": "x" * 21, "nope": 1}),
               "body not an object": {"method": "POST", "url": records_path("posts"), "body": [1]},
               "no body": {"method": "PATCH", "url": records_path("posts", one["id"])}}[bad]
    seen.clear()
    failed = await failed_batch(client, [post("posts", {"title": "three"}), patch("posts", one["id"], {"title": "ONE"}),
                                         request, delete("posts", two["id"]), {"method": "GET", "url": "/"}],
                                bearer(admin_token))
    alone = await client.request(request["method"], request["url"], headers=bearer(admin_token),
                                 json=request.get("body"))
    assert alone.status >= 400
    assert failed == {"index": 2, "status": alone.status, "body": await alone.json()}
    assert await titles(client, admin_token) == ["one", "two"]  # the create, change and delete were undone
    assert seen == []  # and no event went out


@pytest.mark.parametrize("request_, status", [
    ({"method": "GET", "url": "/api/v1/collections/posts/records"}, 400),
    ({"method": "PUT", "url": "/api/v1/collections/posts/records/x", "body": {"data": {}}}, 400),
    ({"method": "POST", "url": "/api/v1/collections", "body": {"data": {}}}, 400),
    ({"method": "POST", "url": "/api/v1/collections/posts/records/x", "body": {"data": {}}}, 400),
    ({"method": "DELETE", "url": "/api/v1/collections/posts/records"}, 400),
    ({"method": "POST", "url": "/api/v1/collections/posts/records/bulk-delete", "body": {"record_ids": ["x"]}}, 400),
    ({"method": "POST", "url": "http://elsewhere.test/api/v1/collections/posts/records", "body": {"data": {}}}, 400),
    ({"method": "POST", "url": "/api/v1/collections/posts/records?filter=x", "body": {"data": {}}}, 400),
    ({"method": "POST", "url": "/api/v1/collections/posts/records", "body": {"data": {}}, "extra": 1}, 400),
    ({"method": "POST"}, 400),
    ("POST /api/v1/collections/posts/records", 400),
    ({"method": "DELETE", "url": "/api/v1/collections/posts/records/" + "x" * 8200}, 414),
], ids=["GET", "PUT", "not records", "POST with id", "DELETE without id", "bulk", "other host", "other parameter",
        "unknown key", "no url", "not an object", "url too long"])
async def test_requests_a_batch_may_not_hold(client: Client, admin_token: str, posts: Any, transactions: None,
                                             request_: Any, status: int) -> None:
    failed = await failed_batch(client, [post("posts", {"title": "three"}), request_], bearer(admin_token))
    assert failed["index"] == 1 and failed["status"] == status
    assert failed["body"]["code"] == ("validation_error" if status == 400 else "uri_too_long")
    assert set(failed["body"]) <= {"detail", "code", "errors"} and failed["body"]["detail"]
    assert await titles(client, admin_token) == ["one", "two"]


async def test_expand_and_fields_shape_each_answer_as_alone(client: Client, admin_token: str, posts: Any,
                                                           transactions: None) -> None:
    request = post("posts", {"title": "three"})
    request["url"] += "?fields=id,title"
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [request]})
    assert response.status == 200, await response.text()
    body = (await response.json())[0]["body"]
    assert set(body) == {"id", "title"} and body["title"] == "three"
    request["url"] += "&expand=author"  # posts has no `author`: the 400 the request gets alone
    failed = await failed_batch(client, [request], bearer(admin_token))
    assert (failed["index"], failed["status"], failed["body"]["code"]) == (0, 400, "invalid_filter")
    assert "expand" in failed["body"]["detail"] and "'author'" in failed["body"]["detail"]
    assert await titles(client, admin_token) == ["one", "three", "two"]  # the failed batch created nothing


# --- a run of creates into one collection: one insert ----------------------------------------------


async def test_a_run_of_creates_into_one_collection_is_one_insert(client: Client, admin_token: str,
                                                                  transactions: None, mongo_commands: CommandLog
                                                                  ) -> None:
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    author = await create_record(client, admin_token, "authors", {"name": "a"})
    posts = await create_collection(client, admin_token, "posts", [
        *FIELDS, {"name": "author", "type": "relation", "collection_id": authors["id"]}])
    mongo_commands.commands.clear()
    twelve = [post("posts", {"title": f"t{i}", "slug": f"s{i}", "author": author["id"]}) for i in range(12)]
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": twelve})
    assert response.status == 200, await response.text()
    assert [(a["status"], a["body"]["title"]) for a in await response.json()] == [(201, f"t{i}") for i in range(12)]
    assert mongo_commands.insert_sizes(posts["id"]) == [12]
    assert len(mongo_commands.named("find", authors["id"])) == 1  # the relation checked once for the run
    # a run ends where another collection or another action comes
    mongo_commands.commands.clear()
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [
        post("posts", {"title": "a"}), post("posts", {"title": "b"}), post("authors", {"name": "c"}),
        post("posts", {"title": "d"}), post("posts", {"title": "e"}), post("posts", {"title": "f"}),
        patch("authors", author["id"], {"name": "g"}), post("posts", {"title": "h"})]})
    assert response.status == 200, await response.text()
    assert [a["status"] for a in await response.json()] == [201] * 6 + [200, 201]
    assert mongo_commands.insert_sizes(posts["id"]) == [2, 3, 1]
    assert await titles(client, admin_token) == sorted(["a", "b", "d", "e", "f", "h", *(f"t{i}" for i in range(12))])


@pytest.mark.parametrize("case", ["a stored slug", "the slug of request 2", "an invalid create after a clash"])
async def test_a_run_of_creates_fails_at_its_first_failing_create(
        client: Client, admin_token: str, posts: Any, transactions: None, seen: list[RecordEvent], case: str) -> None:
    requests = [post("posts", {"title": f"t{i}", "slug": f"s{i}"}) for i in range(9)]
    index, alone_data = 6, {"title": "t6", "slug": "one"}  # alone, a duplicate of the stored "one"
    if case == "a stored slug":
        requests[6] = post("posts", alone_data)
    elif case == "the slug of request 2":
        requests[6] = post("posts", {"title": "t6", "slug": "s2"})
    else:
        requests[3], requests[6] = post("posts", alone_data), post("posts", {"title": "x" * 21})
        index = 3
    seen.clear()
    failed = await failed_batch(client, requests, bearer(admin_token))
    alone = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": alone_data})
    assert (alone.status, (await alone.json())["code"]) == (400, "already_exists")
    assert failed == {"index": index, "status": alone.status, "body": await alone.json()}
    assert await titles(client, admin_token) == ["one", "two"]  # none of the run stayed
    assert seen == []


# --- limits -----------------------------------------------------------------------------------------


async def test_the_request_count_is_checked_before_anything_runs(client: Client, admin_token: str, posts: Any,
                                                                 services: Services) -> None:
    too_many = [post("posts", {"title": f"t{i}"}) for i in range(51)]
    body = await error_of(await client.post(BATCH, headers=bearer(admin_token), json={"requests": too_many}),
                          422, "validation_error")
    assert body["errors"] == {"requests": ["At most 50 requests per batch; 51 given."]}
    await services.settings.set("batch_max_requests", 2)
    body = await error_of(await client.post(BATCH, headers=bearer(admin_token), json={"requests": too_many[:3]}),
                          422, "validation_error")
    assert body["errors"] == {"requests": ["At most 2 requests per batch; 3 given."]}
    malformed: list[dict[str, Any]] = [{"requests": []}, {}, {"requests": {"0": {}}},
                                       {"requests": too_many[:1], "more": 1}]
    for empty in malformed:
        body = await error_of(await client.post(BATCH, headers=bearer(admin_token), json=empty),
                              422, "validation_error")
        assert set(body["errors"]) <= {"requests", "more"}, body
    await error_of(await client.post(BATCH, headers=bearer(admin_token), data=b"[1, 2"), 400, "bad_request")
    assert await titles(client, admin_token) == ["one", "two"]
    settings = {s["key"]: s for s in await (await client.get("/api/v1/settings", headers=bearer(admin_token))).json()}
    assert settings["batch_max_requests"]["category"] == "limits"
    for value, status in ((0, 422), (1_001, 422), (1_000, 200)):
        response = await client.post("/api/v1/settings", headers=bearer(admin_token),
                                     json={"key": "batch_max_requests", "value": value})
        assert response.status == status, await response.text()


async def test_each_request_counts_against_the_rate_limit(client: Client, admin_token: str, posts: Any,
                                                          services: Services, transactions: None) -> None:
    await services.settings.set("rate_limit_per_minute", 10)
    await services.rate_limits.reset()
    five = [post("posts", {"title": f"t{i}"}) for i in range(5)]
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": five})
    assert response.status == 200, await response.text()
    assert response.headers["X-RateLimit-Remaining"] == "5"
    six = [post("posts", {"title": f"u{i}"}) for i in range(6)]
    refused = await client.post(BATCH, headers=bearer(admin_token), json={"requests": six})
    await error_of(refused, 429, "rate_limited")
    assert refused.headers["Retry-After"]
    # the refused batch cost one (the request itself), not six, and wrote nothing
    ok = await client.get(records_path("posts") + "?per_page=100", headers=bearer(admin_token))
    assert ok.headers["X-RateLimit-Remaining"] == "3"
    assert (await ok.json())["total"] == 7


# --- rules, callers -----------------------------------------------------------------------------------


async def test_each_request_runs_under_its_collections_rules(client: Client, admin_token: str, user_token: str,
                                                             transactions: None) -> None:
    await create_collection(client, admin_token, "notes", [{"name": "title", "type": "text"}], create_rule="")
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])  # create: signed in
    await create_collection(client, admin_token, "locked", [{"name": "title", "type": "text"}], create_rule=None)
    # anonymous callers may batch where the rules let them write
    response = await client.post(BATCH, json={"requests": [post("notes", {"title": "anon"})]})
    assert response.status == 200, await response.text()
    failed = await failed_batch(client, [post("notes", {"title": "a2"}), post("posts", {"title": "p"})])
    assert failed["index"] == 1 and failed["status"] == 401 and failed["body"]["code"] == "unauthorized"
    failed = await failed_batch(client, [post("notes", {"title": "u"}), post("posts", {"title": "p"}),
                                         post("locked", {"title": "l"})], bearer(user_token))
    assert failed["index"] == 2 and failed["status"] == 403 and failed["body"]["code"] == "forbidden"
    assert await titles(client, admin_token, "notes") == ["anon"]
    assert await titles(client, admin_token, "posts") == []
    response = await client.post(BATCH, headers=bearer(admin_token),
                                 json={"requests": [post("locked", {"title": "l"})]})
    assert response.status == 200, await response.text()


async def test_api_keys_need_the_write_scope(client: Client, admin_token: str, posts: Any, transactions: None) -> None:
    writer, reader = await make_key(client, admin_token, ["write"]), await make_key(client, admin_token, ["read"])
    requests = {"requests": [post("posts", {"title": "by key"})]}
    assert (await client.post(BATCH, headers=api_key(writer), json=requests)).status == 200
    await error_of(await client.post(BATCH, headers=api_key(reader), json=requests), 403, "forbidden")
    await error_of(await client.post(BATCH, headers=bearer("not-a-token"), json=requests), 401, "unauthorized")
    assert await titles(client, admin_token) == ["by key", "one", "two"]


# --- events ---------------------------------------------------------------------------------------------


async def test_events_go_out_after_the_commit_one_per_record(client: Client, admin_token: str, posts: Any,
                                                             services: Services, mongo_db: Database,
                                                             transactions: None) -> None:
    one, two = posts
    stored_records = mongo_db[records_mongo_name((await services.catalog.by_name("posts")).id)]
    events: list[tuple[str, str, bool]] = []

    async def subscriber(batch: Sequence[RecordEvent]) -> None:
        for event in batch:  # what another client reads now: the write is committed, or not there yet
            stored = await stored_records.find_one({"_id": event.record_id})
            events.append((event.event, event.record_id, stored is not None))

    services.events.subscribe(subscriber)
    try:
        response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [
            post("posts", {"title": "a"}), post("posts", {"title": "b"}), patch("posts", one["id"], {"title": "c"}),
            delete("posts", two["id"])]})
        assert response.status == 200, await response.text()
        answers = await response.json()
        a, b = answers[0]["body"]["id"], answers[1]["body"]["id"]
        assert events == [("create", a, True), ("create", b, True), ("update", one["id"], True),
                          ("delete", two["id"], False)]
        events.clear()
        await failed_batch(client, [post("posts", {"title": "d"}), patch("posts", "nosuch", {"title": "e"})],
                           bearer(admin_token))
        assert events == []
    finally:
        services.events.unsubscribe(subscriber)


async def test_a_run_of_creates_reaches_subscribers_as_one_batch(client: Client, admin_token: str, posts: Any,
                                                                 services: Services, transactions: None,
                                                                 mongo_commands: CommandLog) -> None:
    """Ten creates: one insert, and their events handed to each subscriber (the read cache's version
    bump, realtime, webhooks) once, as one batch of ten, not ten times (issue 38, item 8)."""
    posts_id = (await services.catalog.by_name("posts")).id
    sizes: list[int] = []

    async def subscriber(batch: Sequence[RecordEvent]) -> None:
        sizes.append(len(batch))

    services.events.subscribe(subscriber)
    try:
        mongo_commands.commands.clear()
        response = await client.post(BATCH, headers=bearer(admin_token),
                                     json={"requests": [post("posts", {"title": f"t{i}"}) for i in range(10)]})
        assert response.status == 200, await response.text()
        assert mongo_commands.insert_sizes(posts_id) == [10]
        assert sizes == [10]
    finally:
        services.events.unsubscribe(subscriber)


async def test_webhooks_get_one_delivery_per_record_of_a_committed_batch(
        client: Client, admin_token: str, posts: Any, run_jobs: Callable[[], Awaitable[None]], transactions: None,
        receiver: Receiver) -> None:  # noqa: F811
    one, two = posts
    await make_webhook(client, admin_token, receiver.url)
    await failed_batch(client, [post("posts", {"title": "lost"}), delete("posts", "nosuch")], bearer(admin_token))
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": [
        post("posts", {"title": "a"}), patch("posts", one["id"], {"title": "b"}), delete("posts", two["id"])]})
    assert response.status == 200, await response.text()
    created = (await response.json())[0]["body"]["id"]
    await run_jobs()
    assert sorted((b["event"], b["record_id"]) for b in receiver.bodies()) == sorted(
        [("create", created), ("update", one["id"]), ("delete", two["id"])])


# --- a server without transactions -----------------------------------------------------------------------


@pytest.fixture
async def standalone(aiohttp_client: Any, config: Config, clock: MovableClock, services: Services
                     ) -> AsyncIterator[Client]:
    """An app on the test's database that runs as on a server without transactions."""
    async with open_services(replace(config), clock=clock, use_transactions=False) as opened:
        assert opened.records.repository.capabilities.transactions is False
        yield await aiohttp_client(create_app(config, services=opened))


async def test_without_transactions_every_batch_is_refused(standalone: Client, client: Client, admin_token: str,
                                                           posts: Any) -> None:
    body = await error_of(await standalone.post(BATCH, headers=bearer(admin_token), json={"requests": [
        post("posts", {"title": "three"})]}), 400, "bad_request")
    assert "replica set" in body["detail"] and "failed" not in body
    assert (await standalone.post(records_path("posts"), headers=bearer(admin_token),
                                  json={"data": {"title": "alone"}})).status == 201  # single writes still work
    assert await titles(client, admin_token) == ["alone", "one", "two"]


# --- the document ---------------------------------------------------------------------------------------


async def test_the_document_shows_the_batch_with_examples(client: Client) -> None:
    document = await (await client.get("/openapi.json")).json()
    operation = document["paths"][BATCH]["post"]
    schemas = document["components"]["schemas"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Batch"}
    requests = schemas["Batch"]["properties"]["requests"]
    assert requests["items"] == {"$ref": "#/components/schemas/BatchRequest"}
    assert [r["method"] for r in requests["example"]] == ["POST", "PATCH", "DELETE"]
    assert schemas["BatchRequest"]["properties"]["method"]["enum"] == ["POST", "PATCH", "DELETE"]
    answers = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert answers == {"type": "array", "items": {"$ref": "#/components/schemas/BatchAnswer"}}
    failure = operation["responses"]["400"]["content"]["application/json"]["schema"]
    assert failure == {"$ref": "#/components/schemas/BatchFailure"}
    assert schemas["BatchFailure"]["properties"]["failed"]["example"]["index"] == 1
