"""Webhooks end to end (issue 8): CRUD, the outbox, signed deliveries to real receivers
(`aiohttp_server` apps in the test process), retries, the delivery log and the SSRF rule."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook as StandardWebhook

from cms.clock import new_id
from cms.models import Webhook, WebhookDelivery
from cms.security.signing import standard_key, verify
from cms.services.delivery.webhook_outbox import batches_of
from cms.store.webhooks import DeliveryLog, DeliveryOutbox, WebhookRepository
from cms.wiring import open_services
from tests.conftest import bearer, create_collection, create_record, error_of, records_path
from workers.settings import build_worker

WEBHOOKS = "/api/v1/webhooks"
SECRET = "s3cret-key"
POSTS = [{"name": "title", "type": "text"}, {"name": "views", "type": "number"}]


@pytest.fixture
def config(config):
    """Receivers run on loopback: allow private addresses (the SSRF tests build their own), and a
    short delivery time-out so the hanging-receiver test takes a second, not ten."""
    return replace(config, webhook_allow_private=True, webhook_timeout_s=1.0)


@dataclass
class Receiver:
    """A real HTTP receiver: answers with the statuses in `script` (then 200) and records every
    request's headers, raw body and arrival time."""

    url: str = ""
    script: list[int] = field(default_factory=list)
    hang_s: float = 0.0
    requests: list[tuple[dict[str, str], bytes, float]] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body, _ in self.requests]

    def deliveries(self) -> list[dict[str, Any]]:
        """The body of each distinct delivery (by its `webhook-id`), as a receiver that drops repeats
        sees them: deliveries are at least once (docs/concepts/webhooks.md, Guarantees)."""
        seen: dict[str, dict[str, Any]] = {}
        for headers, body, _ in self.requests:
            key = {k.lower(): v for k, v in headers.items()}["webhook-id"]
            seen.setdefault(key, json.loads(body))
        return list(seen.values())


@pytest.fixture
async def receiver(aiohttp_server) -> Receiver:
    state = Receiver()

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        state.requests.append((dict(request.headers), body, time.monotonic()))
        if state.hang_s and len(state.requests) == 1:
            await asyncio.sleep(state.hang_s)
        status = state.script.pop(0) if state.script else 200
        return web.Response(status=status, text=f"answer {status} " + "x" * 3000)

    app = web.Application()
    app.router.add_post("/hook", handle)
    server = await aiohttp_server(app)
    state.url = str(server.make_url("/hook"))
    return state


async def make_webhook(client: Any, token: str, url: str, **extra: Any) -> dict[str, Any]:
    body = {"url": url, "collection_name": "posts", "events": ["create", "update", "delete"], **extra}
    response = await client.post(WEBHOOKS, headers=bearer(token), json=body)
    assert response.status == 201, await response.text()
    return dict(await response.json())


@pytest.fixture
async def posts(client, admin_token):
    return await create_collection(client, admin_token, "posts", POSTS)


# --- CRUD ----------------------------------------------------------------------------------------


async def test_webhook_crud_never_returns_the_secret(client, admin_token, posts, receiver):
    created = await make_webhook(client, admin_token, receiver.url, secret=SECRET, retry_count=5)
    assert set(created) == {"id", "url", "collection_name", "events", "active", "signed", "retry_count",
                            "created", "updated"}
    assert (created["signed"], created["active"], created["retry_count"]) == (True, True, 5)
    path = f"{WEBHOOKS}/{created['id']}"
    assert (await (await client.get(path, headers=bearer(admin_token))).json()) == created
    listed = await (await client.get(WEBHOOKS, headers=bearer(admin_token), params={"collection_name": "posts"})).json()
    assert [w["id"] for w in listed] == [created["id"]]
    other = await (await client.get(WEBHOOKS, headers=bearer(admin_token), params={"collection_name": "x"})).json()
    assert other == []
    patched = await client.patch(path, headers=bearer(admin_token), json={"active": False, "secret": None,
                                                                          "events": ["delete"]})
    body = await patched.json()
    assert (body["active"], body["signed"], body["events"]) == (False, False, ["delete"])
    for text in (await (await client.get(WEBHOOKS, headers=bearer(admin_token))).text(), json.dumps(created)):
        assert SECRET not in text
    assert (await client.delete(path, headers=bearer(admin_token))).status == 204
    await error_of(await client.get(path, headers=bearer(admin_token)), 404, "not_found")


@pytest.mark.parametrize("change, field_name", [
    ({"url": "ftp://example.com/x"}, "url"),
    ({"url": "not a url"}, "url"),
    ({"collection_name": "nope"}, "collection_name"),
    ({"events": []}, "events"),
    ({"events": ["create", "explode"]}, "events"),
    ({"retry_count": 11}, "retry_count"),
    ({"retry_count": -1}, "retry_count"),
    ({"retry_count": "3"}, "retry_count"),
], ids=["ftp", "garbage", "collection", "no-events", "bad-event", "retry-11", "retry-negative", "retry-text"])
async def test_bad_webhooks_are_422(client, admin_token, posts, receiver, change, field_name):
    body = {"url": receiver.url, "collection_name": "posts", "events": ["create"], **change}
    error = await error_of(await client.post(WEBHOOKS, headers=bearer(admin_token), json=body),
                           422, "validation_error")
    assert any(key.split(".")[0] == field_name for key in error["errors"]), error
    assert await (await client.get(WEBHOOKS, headers=bearer(admin_token))).json() == []


async def test_who_may_manage_webhooks(client, admin_token, user_token, posts, receiver):
    await error_of(await client.get(WEBHOOKS), 401, "unauthorized")
    mine = await make_webhook(client, user_token, receiver.url)  # role `user` is an admin-table user
    theirs = await make_webhook(client, admin_token, receiver.url)
    listed = await (await client.get(WEBHOOKS, headers=bearer(user_token))).json()
    assert [w["id"] for w in listed] == [mine["id"]]
    await error_of(await client.get(f"{WEBHOOKS}/{theirs['id']}", headers=bearer(user_token)), 404, "not_found")
    every = await (await client.get(WEBHOOKS, headers=bearer(admin_token))).json()
    assert {w["id"] for w in every} == {mine["id"], theirs["id"]}
    await create_collection(client, admin_token, "members", [], type="auth")
    register = await client.post("/api/v1/collections/members/auth/register",
                                 json={"email": "m@example.com", "password": "member-password-1"})
    assert register.status == 201
    login = await client.post("/api/v1/collections/members/auth/login",
                              json={"email": "m@example.com", "password": "member-password-1"})
    member = bearer((await login.json())["token"]["access_token"])
    await error_of(await client.get(WEBHOOKS, headers=member), 403, "forbidden")


async def test_deleting_a_collection_deletes_its_webhooks(client, admin_token, posts, receiver):
    created = await make_webhook(client, admin_token, receiver.url)
    assert (await client.delete(f"/api/v1/collections/{posts['id']}", headers=bearer(admin_token))).status == 204
    await error_of(await client.get(f"{WEBHOOKS}/{created['id']}", headers=bearer(admin_token)), 404, "not_found")


# --- deliveries ----------------------------------------------------------------------------------


async def test_signed_deliveries_carry_every_header_and_verify(client, admin_token, posts, receiver, run_jobs):
    await make_webhook(client, admin_token, receiver.url, secret=SECRET)
    record = await create_record(client, admin_token, "posts", {"title": "hello", "views": 1})
    await run_jobs()
    assert len(receiver.requests) == 1
    headers, body, _ = receiver.requests[0]
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("cms-webhooks/")
    assert headers["X-Webhook-Event"] == "create"
    assert headers["webhook-id"] == headers["X-Webhook-Delivery"]
    assert verify(SECRET, body, headers["X-Webhook-Signature"])
    assert not verify("wrong", body, headers["X-Webhook-Signature"])
    # the official Standard Webhooks library verifies our headers
    payload = StandardWebhook(standard_key(SECRET)).verify(body, {
        "webhook-id": headers["webhook-id"], "webhook-timestamp": headers["webhook-timestamp"],
        "webhook-signature": headers["webhook-signature"]})
    assert payload["record_id"] == record["id"]
    assert json.loads(body) == {"event": "create", "collection": "posts", "record_id": record["id"],
                                "data": record, "timestamp": payload["timestamp"]}
    # X-Webhook-Delivery names the log entry of the first attempt
    log = await (await client.get(f"{WEBHOOKS}/deliveries/recent", headers=bearer(admin_token))).json()
    assert [e["id"] for e in log["items"]] == [headers["X-Webhook-Delivery"]]
    assert log["items"][0]["success"] is True and log["items"][0]["attempt"] == 1
    assert len(log["items"][0]["response_body"]) == 2048


async def test_unsigned_deliveries_have_no_signature(client, admin_token, posts, receiver, run_jobs):
    await make_webhook(client, admin_token, receiver.url)
    await create_record(client, admin_token, "posts", {"title": "x"})
    await run_jobs()
    headers, _, _ = receiver.requests[0]
    assert "X-Webhook-Signature" not in headers and "webhook-signature" not in headers


async def test_body_per_event_kind_and_filtering(client, admin_token, posts, receiver, run_jobs):
    await create_collection(client, admin_token, "other", POSTS)
    await make_webhook(client, admin_token, receiver.url, events=["update", "delete"])
    record = await create_record(client, admin_token, "posts", {"title": "a"})
    await create_record(client, admin_token, "other", {"title": "elsewhere"})
    patched = await client.patch(records_path("posts", record["id"]), headers=bearer(admin_token),
                                 json={"data": {"views": 2}})
    assert patched.status == 200
    assert (await client.delete(records_path("posts", record["id"]), headers=bearer(admin_token))).status == 204
    await run_jobs()
    bodies = sorted(receiver.bodies(), key=lambda b: b["event"])
    assert [b["event"] for b in bodies] == ["delete", "update"]
    assert bodies[0]["data"] == {"id": record["id"]}
    assert bodies[1]["data"] == await patched.json()


async def test_an_inactive_webhook_gets_nothing_and_is_not_replayed(client, admin_token, posts, receiver, run_jobs):
    hook = await make_webhook(client, admin_token, receiver.url)
    path = f"{WEBHOOKS}/{hook['id']}"
    await client.patch(path, headers=bearer(admin_token), json={"active": False})
    await create_record(client, admin_token, "posts", {"title": "while off"})
    await client.patch(path, headers=bearer(admin_token), json={"active": True})
    await run_jobs()
    assert receiver.requests == []
    await create_record(client, admin_token, "posts", {"title": "back on"})
    await run_jobs()
    assert [b["data"]["title"] for b in receiver.bodies()] == ["back on"]


async def test_500_500_200_is_three_attempts_with_backoff(client, admin_token, posts, receiver, run_jobs):
    receiver.script = [500, 500, 200]
    hook = await make_webhook(client, admin_token, receiver.url)
    await create_record(client, admin_token, "posts", {"title": "retry me"})
    await run_jobs()
    times = [arrived for _, _, arrived in receiver.requests]
    assert len(times) == 3
    assert 0.9 <= times[1] - times[0] < 3 and 1.9 <= times[2] - times[1] < 5
    assert len({h["X-Webhook-Delivery"] for h, _, _ in receiver.requests}) == 1
    log = await (await client.get(f"{WEBHOOKS}/{hook['id']}/deliveries", headers=bearer(admin_token))).json()
    assert log["total"] == 3
    assert [(e["attempt"], e["status_code"], e["success"]) for e in log["items"]] == [
        (3, 200, True), (2, 500, False), (1, 500, False)]
    assert all(e["duration_ms"] >= 0 and e["error"] is None for e in log["items"])


@pytest.mark.parametrize("script, retry_count, attempts", [
    ([404], 3, 1), ([302], 3, 1), ([500], 0, 1), ([503, 503], 1, 2),
], ids=["404-permanent", "redirect-not-followed", "retry-count-0", "retry-count-1"])
async def test_permanent_failures_and_retry_count(client, admin_token, posts, receiver, run_jobs,
                                                  script, retry_count, attempts):
    receiver.script = list(script)
    hook = await make_webhook(client, admin_token, receiver.url, retry_count=retry_count)
    await create_record(client, admin_token, "posts", {"title": "x"})
    await run_jobs()
    assert len(receiver.requests) == attempts
    log = await (await client.get(f"{WEBHOOKS}/{hook['id']}/deliveries", headers=bearer(admin_token))).json()
    assert log["total"] == attempts and not any(e["success"] for e in log["items"])


async def test_a_receiver_that_hangs_past_the_timeout_is_retried(client, admin_token, posts, receiver, run_jobs):
    receiver.hang_s = 3.0  # the time-out is 1 s here (10 s by default)
    hook = await make_webhook(client, admin_token, receiver.url, retry_count=1)
    await create_record(client, admin_token, "posts", {"title": "slow"})
    await run_jobs()
    log = await (await client.get(f"{WEBHOOKS}/{hook['id']}/deliveries", headers=bearer(admin_token))).json()
    assert [(e["attempt"], e["success"]) for e in log["items"]] == [(2, True), (1, False)]
    assert "timed out" in log["items"][1]["error"]


async def test_bulk_update_and_csv_import_deliver_one_per_record(client, admin_token, posts, receiver, run_jobs):
    await make_webhook(client, admin_token, receiver.url)
    form = aiohttp.FormData()
    form.add_field("file", "title\n" + "".join(f"row {n}\n" for n in range(20)), filename="p.csv",
                   content_type="text/csv")
    imported = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token), data=form)
    assert (await imported.json())["imported"] == 20
    ids = [r["id"] for r in (await (await client.get(records_path("posts"), params={"per_page": 100})).json())["items"]]
    ids += [(await create_record(client, admin_token, "posts", {"title": f"more {n}"}))["id"] for n in range(30)]
    bulk = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                             json={"record_ids": ids, "data": {"views": 7}})
    assert (await bulk.json()) == {"updated": 50}
    await run_jobs()
    events = [(b["event"], b["record_id"]) for b in receiver.deliveries()]  # a repeat of a delivery is one
    assert sorted(e for e, _ in events).count("update") == 50
    assert sorted(e for e, _ in events).count("create") == 50
    assert len(set(events)) == len(events) == 100


async def test_a_delivery_written_before_a_crash_still_arrives(services, client, admin_token, posts, receiver,
                                                               run_jobs, clock, mongo_db):
    """The web process died after writing the outbox entry and before handing it to the queue: the
    relay (at worker start) hands it on."""
    hook = await make_webhook(client, admin_token, receiver.url)
    delivery = WebhookDelivery(id=new_id(), webhook_id=hook["id"], event="create", collection="posts",
                               record_id="r1", body='{"event":"create","record_id":"r1"}', created=clock())
    [batch] = batches_of([delivery], clock())
    outbox = DeliveryOutbox(mongo_db)  # the outbox's own repository, on the test's client
    await outbox.insert([batch])
    assert (await client.get("/api/v1/stats", headers=bearer(admin_token))).status == 200
    stats = await (await client.get("/api/v1/stats", headers=bearer(admin_token))).json()
    assert stats["webhooks"]["outbox_backlog"] == 1
    clock.advance(seconds=5)
    await run_jobs()
    assert [h["X-Webhook-Delivery"] for h, _, _ in receiver.requests] == [delivery.id]
    done = await outbox.get(batch.id)
    assert done is not None and done.status == "done"
    assert await services.webhook_outbox.backlog() == 0


async def test_two_workers_and_two_relays_deliver_each_delivery_once(services, config, client, admin_token, posts,
                                                                     receiver, clock, mongo_db):
    hook = await make_webhook(client, admin_token, receiver.url)
    deliveries = [WebhookDelivery(id=new_id(), webhook_id=hook["id"], event="create", collection="posts",
                                  record_id=f"r{n}", body="{}", created=clock()) for n in range(20)]
    await DeliveryOutbox(mongo_db).insert(batches_of(deliveries, clock()))
    clock.advance(seconds=5)
    await asyncio.gather(services.webhook_outbox.relay(), services.webhook_outbox.relay())
    async with open_services(config, clock=clock) as second:
        workers = [build_worker(config, services=s, burst=True, handle_signals=False, poll_delay_s=0.01)
                   for s in (services, second)]
        try:
            await asyncio.gather(*(w.main() for w in workers))
        finally:
            for worker in workers:
                await worker.close()
    delivered = [h["X-Webhook-Delivery"] for h, _, _ in receiver.requests]
    assert sorted(delivered) == sorted(d.id for d in deliveries)


# --- SSRF ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x", "http://localhost/x", "http://[::1]/x",
                                 "http://169.254.169.254/latest", "http://10.0.0.1/", "http://0.0.0.0/"],
                         ids=["loopback", "localhost", "ipv6-loopback", "metadata", "private", "unspecified"])
async def test_production_mode_refuses_private_addresses(aiohttp_client, config, admin_token, services, url):
    from cms.app import create_app

    strict = replace(config, webhook_allow_private=False)
    async with open_services(strict) as production:
        client = await aiohttp_client(create_app(strict, services=production))
        token = (await (await client.post("/api/v1/auth/login", json={
            "email": "admin@example.com", "password": "admin-password-1"})).json())["token"]["access_token"]
        await create_collection(client, token, "posts", POSTS)
        response = await client.post(WEBHOOKS, headers=bearer(token),
                                     json={"url": url, "collection_name": "posts", "events": ["create"]})
        error = await error_of(response, 422, "validation_error")
        assert "url" in error["errors"]


async def test_delivery_time_refusal_when_dns_points_inward(config, admin_token, services, client, posts,
                                                            receiver, clock, mongo_db):
    """A webhook saved while its name was public, now resolving to loopback: refused at delivery, not
    retried, logged."""
    strict = replace(config, webhook_allow_private=False)
    async with open_services(strict, clock=clock) as production:
        for url in (receiver.url, receiver.url.replace("127.0.0.1", "localhost")):
            webhook = Webhook(id=new_id(), url=url, collection_name="posts", collection_id=posts["id"],
                              events=("create",), active=True, retry_count=3, created=clock(), updated=clock())
            await WebhookRepository(mongo_db).insert(webhook)  # saved when its name was public
            delivery = WebhookDelivery(id=new_id(), webhook_id=webhook.id, event="create", collection="posts",
                                       record_id="r", body="{}", created=clock())
            [batch] = batches_of([delivery], clock())
            await DeliveryOutbox(mongo_db).insert([batch])
            outcome = await production.webhook_outbox.deliver_batch(batch.id)
            assert (outcome.sent, outcome.failed, outcome.retrying) == (1, 1, 0)
            items, _ = await DeliveryLog(mongo_db).page(webhook_ids=[webhook.id], skip=0, limit=10)
            assert items[0].error is not None and items[0].error.startswith("refused")
    assert receiver.requests == []


# --- the outbox is written with the change ----------------------------------------------------------


async def test_the_change_and_its_outbox_entries_commit_together(services, config, client, admin_token, posts,
                                                                 receiver):
    """On a server with transactions, a record write whose outbox entry cannot be written is not
    stored either (here the outbox refuses the entry through a unique index made for the test)."""
    if not services.records.repository.capabilities.transactions:
        pytest.skip("the server has no multi-document transactions")
    from cms.store.client import open_client

    await make_webhook(client, admin_token, receiver.url, events=["create"])
    mongo = open_client(config.mongodb_url)
    try:
        outbox = mongo[config.mongodb_db]["webhook_outbox"]
        await outbox.create_index("attempt", unique=True, name="test_block")
        await outbox.insert_one({"_id": "blocker", "attempt": 1, "status": "done"})
        response = await client.post(records_path("posts"), headers=bearer(admin_token),
                                     json={"data": {"title": "all or nothing"}})
        assert response.status >= 500
        assert (await (await client.get(records_path("posts"))).json())["total"] == 0
        await outbox.drop_index("test_block")
    finally:
        await mongo.close()
    ok = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": {"title": "now"}})
    assert ok.status == 201


async def test_register_writes_its_outbox_entry_with_the_user_like_a_rest_create(services, config, client,
                                                                                admin_token, receiver, run_jobs):
    """Register goes through the one record writer, as a REST create does: into an auth collection
    with an active webhook, the user and its outbox entry commit together (an entry the outbox
    cannot write leaves no user behind, not even credentials), and the delivery then arrives with
    the record as register stored it, exactly as a create's does."""
    if not services.records.repository.capabilities.transactions:
        pytest.skip("the server has no multi-document transactions")
    from cms.store.client import open_client

    members = "/api/v1/collections/members/auth"
    account = {"email": "m@example.com", "password": "member-password-1"}
    await create_collection(client, admin_token, "members", [{"name": "nickname", "type": "text"}], type="auth")
    await make_webhook(client, admin_token, receiver.url, collection_name="members", events=["create"])
    mongo = open_client(config.mongodb_url)
    try:
        outbox = mongo[config.mongodb_db]["webhook_outbox"]
        await outbox.create_index("attempt", unique=True, name="test_block")
        await outbox.insert_one({"_id": "blocker", "attempt": 1, "status": "done"})
        refused = await client.post(f"{members}/register", json={**account, "nickname": "first"})
        assert refused.status >= 500
        assert (await (await client.get(records_path("members"), headers=bearer(admin_token))).json())["total"] == 0
        assert await mongo[config.mongodb_db]["auth_credentials"].count_documents({}) == 0
        await outbox.drop_index("test_block")
    finally:
        await mongo.close()
    registered = await client.post(f"{members}/register", json={**account, "nickname": "second"})
    assert registered.status == 201, await registered.text()
    user = (await registered.json())["user"]
    await run_jobs()
    [body] = receiver.bodies()
    assert body == {"event": "create", "collection": "members", "record_id": user["id"], "data": user,
                    "timestamp": body["timestamp"]}


async def test_without_webhooks_writes_take_no_transaction(services, client, admin_token, posts, seen):
    """Record events still reach subscribers after the write when no webhook wants them."""
    record = await create_record(client, admin_token, "posts", {"title": "plain"})
    assert [(e.event, e.record_id) for e in seen] == [("create", record["id"])]
    assert await services.webhook_outbox.wants(posts["id"]) is False


@pytest.mark.parametrize("query", ["skip=35136006418180637458432", "skip=-1", "limit=0", "limit=201"],
                         ids=["skip-past-int64", "negative-skip", "zero-limit", "limit-over-200"])
async def test_delivery_log_paging_is_bounded(client, admin_token, query):
    # skip past int64 was a 500 (found by the contract check): MongoDB cannot skip that far
    response = await client.get(f"{WEBHOOKS}/deliveries/recent?{query}", headers=bearer(admin_token))
    await error_of(response, 422, "validation_error")
