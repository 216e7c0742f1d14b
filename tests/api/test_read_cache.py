"""The response cache of record reads (issue 12, items 1-4 and 7): versions in Redis, ETags and 304,
Cache-Control, single-flight, skip_total, and no stale read across two app instances."""

from __future__ import annotations

import asyncio
import io
from dataclasses import replace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.app import create_app
from cms.services.caching.read_cache import ReadCache, canonical, entry_key
from cms.services.caching.single_flight import SingleFlight
from cms.store.client import open_client
from cms.wiring import open_services
from tests.conftest import ADMIN_PASSWORD, bearer, create_collection, create_record, login, records_path
from tests.fixtures import CommandLog, bump_catalog_epoch

POSTS = [{"name": "title", "type": "text"}, {"name": "owner", "type": "text"}, {"name": "views", "type": "number"}]


class Queries:
    """The record queries the driver sent for one collection (the `mongo_commands` log): list
    `finds` (scans), point `gets` (a `find` of one `_id`), `lookups` (a `find` of `_id $in`: a page
    of a result set) and `counts` (a metadata count or a counting aggregate)."""

    def __init__(self, log: CommandLog, collection_id: str) -> None:
        self.log = log
        self.collection_id = collection_id

    @property
    def finds(self) -> int:
        return sum("_id" not in c.filter for c in self.log.named("find", self.collection_id))

    @property
    def gets(self) -> int:
        return sum(isinstance(c.filter.get("_id"), str) for c in self.log.named("find", self.collection_id))

    @property
    def lookups(self) -> int:
        return sum(isinstance(c.filter.get("_id"), dict) for c in self.log.named("find", self.collection_id))

    @property
    def counts(self) -> int:
        return len(self.log.named("count", self.collection_id) + self.log.named("aggregate", self.collection_id))


async def queries_of(services: Any, log: CommandLog, collection_name: str) -> Queries:
    """Queries of `collection_name` from now on."""
    collection = await services.catalog.by_name(collection_name)
    log.commands.clear()
    return Queries(log, collection.id)


@pytest.fixture
async def posts(client, admin_token):
    await create_collection(client, admin_token, "posts", POSTS)
    return [await create_record(client, admin_token, "posts", {"title": f"t{n}", "views": n}) for n in range(3)]


async def test_a_repeated_read_is_served_from_the_cache_and_a_write_refreshes_it(client, services, admin_token, posts,
                                                                                  mongo_commands):
    queries = await queries_of(services, mongo_commands, "posts")
    first = await client.get(records_path("posts"), params={"sort": "-views"})
    assert first.status == 200
    assert first.headers["Cache-Control"] == "public, max-age=0, must-revalidate"
    body = await first.json()
    assert [r["title"] for r in body["items"]] == ["t2", "t1", "t0"] and body["total"] == 3
    again = await client.get(records_path("posts"), params={"sort": "-views"})
    assert await again.json() == body and again.headers["ETag"] == first.headers["ETag"]
    assert queries.finds == 1
    one = records_path("posts", posts[0]["id"])
    assert (await client.get(one)).status == 200 and (await client.get(one)).status == 200
    assert queries.gets == 1
    # a write through the API bumps the version before its response: the next read is fresh
    created = await create_record(client, admin_token, "posts", {"title": "t9", "views": 9})
    fresh = await (await client.get(records_path("posts"), params={"sort": "-views"})).json()
    assert fresh["items"][0]["id"] == created["id"] and fresh["total"] == 4
    patched = await client.patch(one, headers=bearer(admin_token), json={"data": {"title": "changed"}})
    assert patched.status == 200
    assert (await (await client.get(one)).json())["title"] == "changed"
    assert queries.finds == 2 and queries.gets >= 2


async def test_etag_and_304(client, admin_token, posts):
    first = await client.get(records_path("posts"))
    etag = first.headers["ETag"]
    unchanged = await client.get(records_path("posts"), headers={"If-None-Match": etag})
    assert unchanged.status == 304 and unchanged.headers["ETag"] == etag and await unchanged.read() == b""
    one = await client.get(records_path("posts", posts[1]["id"]))
    assert (await client.get(records_path("posts", posts[1]["id"]),
                             headers={"If-None-Match": one.headers["ETag"]})).status == 304
    await create_record(client, admin_token, "posts", {"title": "new"})
    changed = await client.get(records_path("posts"), headers={"If-None-Match": etag})
    assert changed.status == 200 and changed.headers["ETag"] != etag
    # another query has another ETag
    assert (await client.get(records_path("posts"), params={"page": 2})).headers["ETag"] != changed.headers["ETag"]


async def test_every_kind_of_write_makes_cached_reads_fresh(client, services, admin_token, posts, config):
    async def titles() -> list[str]:
        page = await (await client.get(records_path("posts"), params={"sort": "views"})).json()
        return [r["title"] for r in page["items"]]

    assert await titles() == ["t0", "t1", "t2"]
    ids = [p["id"] for p in posts]
    response = await client.post(f"{records_path('posts')}/bulk-update", headers=bearer(admin_token),
                                 json={"record_ids": ids[:2], "data": {"title": "bulk"}})
    assert response.status == 200
    assert await titles() == ["bulk", "bulk", "t2"]
    response = await client.post(f"{records_path('posts')}/bulk-delete", headers=bearer(admin_token),
                                 json={"record_ids": ids[:1]})
    assert response.status == 200
    assert await titles() == ["bulk", "t2"]
    response = await client.post(f"{records_path('posts')}/import/csv", headers=bearer(admin_token),
                                 data={"file": io.BytesIO(b"title,views\ncsv,99\n")})
    assert response.status == 200 and (await response.json())["imported"] == 1
    assert await titles() == ["bulk", "t2", "csv"]
    assert (await client.delete(records_path("posts", ids[2]), headers=bearer(admin_token))).status == 204
    assert await titles() == ["bulk", "csv"]
    # a schema change (dropping `title`) changes every cached page of the collection
    collection = (await (await client.get("/api/v1/collections")).json())[0]
    response = await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                                  json={"schema": [f for f in POSTS if f["name"] != "title"]})
    assert response.status == 200, await response.text()
    page = await (await client.get(records_path("posts"), params={"sort": "views"})).json()
    assert all("title" not in r for r in page["items"])
    # a restore bumps the epoch (`on_restored`): every cached read gets a new ETag
    before = (await client.get(records_path("posts"))).headers["ETag"]
    await bump_catalog_epoch(config)
    assert (await client.get(records_path("posts"))).headers["ETag"] != before


async def test_auth_collection_user_changes_refresh_cached_lists(client, admin_token):
    await create_collection(client, admin_token, "members", [{"name": "nickname", "type": "text"}], type="auth")
    listed = await (await client.get(records_path("members"), headers=bearer(admin_token))).json()
    assert listed["total"] == 0
    register = await client.post("/api/v1/collections/members/auth/register",
                                 json={"email": "m@example.com", "password": "member-password-1", "nickname": "m"})
    assert register.status == 201
    listed = await (await client.get(records_path("members"), headers=bearer(admin_token))).json()
    assert listed["total"] == 1


async def test_a_page_computed_for_one_caller_is_never_served_to_another(client, admin_token):
    await create_collection(client, admin_token, "customers", [], type="auth")
    auth = {}
    for name in ("ann", "bob"):
        prefix = "/api/v1/collections/customers/auth"
        response = await client.post(f"{prefix}/register", json={"email": f"{name}@x.io", "password": "pass-word-123"})
        login = await client.post(f"{prefix}/login", json={"email": f"{name}@x.io", "password": "pass-word-123"})
        auth[name] = ((await response.json())["user"]["id"], bearer((await login.json())["token"]["access_token"]))
    await create_collection(client, admin_token, "notes", POSTS, list_rule="owner = @request.auth.id",
                            view_rule="owner = @request.auth.id")
    for name, (user_id, _) in auth.items():
        await create_record(client, admin_token, "notes", {"title": name, "owner": user_id})
    for _ in range(2):  # the second round is served from the cache
        for name, (_, headers) in auth.items():
            response = await client.get(records_path("notes"), headers=headers)
            page = await response.json()
            assert [r["title"] for r in page["items"]] == [name] and page["total"] == 1
            assert response.headers["Cache-Control"].startswith("private")
            assert "Authorization" in response.headers["Vary"]
    assert (await (await client.get(records_path("notes"))).json())["total"] == 0
    assert (await (await client.get(records_path("notes"), headers=bearer(admin_token))).json())["total"] == 2


async def test_skip_total(client, services, posts, mongo_commands):
    counts = await queries_of(services, mongo_commands, "posts")
    page = await (await client.get(records_path("posts"), params={"skip_total": "true", "per_page": 2})).json()
    assert (len(page["items"]), page["total"]) == (2, -1) and counts.counts == 0
    page = await (await client.get(records_path("posts"), params={"skip_total": "false"})).json()
    # the total is the length of the query's result set, scanned once for both answers: no count
    assert page["total"] == 3 and counts.counts == 0 and counts.finds == 1
    assert (await client.get(records_path("posts"), params={"skip_total": "maybe"})).status == 422


async def test_the_setting_switches_the_cache_off(client, services, admin_token, posts, mongo_commands):
    response = await client.post("/api/v1/settings", headers=bearer(admin_token),
                                 json={"key": "read_cache_enabled", "value": False})
    assert response.status == 200, await response.text()
    finds = await queries_of(services, mongo_commands, "posts")
    for _ in range(3):
        assert (await client.get(records_path("posts"))).status == 200
    assert finds.finds == 3


async def test_reads_go_on_when_redis_is_unreachable() -> None:
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    try:
        cache = ReadCache(dead, prefix="cms:rc:test")
        assert await cache.lookup("posts", "k") == (None, None)
        await cache.store("k", "0.0", b"{}")
        await cache.bump(["posts"])
        await cache.bump_all()
    finally:
        await dead.aclose()


class GatedWork:
    """Work for SingleFlight that counts its runs, waits for `gate`, and returns its run number."""

    def __init__(self) -> None:
        self.runs = 0
        self.gate = asyncio.Event()

    async def __call__(self) -> int:
        self.runs += 1
        run = self.runs
        await self.gate.wait()
        return run


async def test_single_flight_runs_identical_work_once() -> None:
    flights, work = SingleFlight(), GatedWork()
    waiting = [asyncio.create_task(flights.run("k", work)) for _ in range(10)]
    await asyncio.sleep(0)
    work.gate.set()
    assert await asyncio.gather(*waiting) == [1] * 10 and work.runs == 1

    async def broken() -> int:
        await asyncio.sleep(0)
        raise ValueError("boom")

    failing = [asyncio.create_task(flights.run("k", broken)) for _ in range(3)]
    results = await asyncio.gather(*failing, return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in results)
    assert await flights.run("k", work) == 2 and work.runs == 2


async def test_single_flight_survives_the_cancellation_of_the_caller_running_it() -> None:
    flights, work = SingleFlight(), GatedWork()
    leader = asyncio.create_task(flights.run("k", work))
    await asyncio.sleep(0)
    joiners = [asyncio.create_task(flights.run("k", work)) for _ in range(5)]
    await asyncio.sleep(0)
    leader.cancel()  # its client went away: the others still get an answer, from one new run
    for _ in range(100):  # until one of them has started that run (the others join it at once)
        if work.runs == 2:
            break
        await asyncio.sleep(0)
    work.gate.set()
    assert await asyncio.gather(*joiners) == [2] * 5 and work.runs == 2
    assert leader.cancelled()

    work.gate.clear()
    waiting = [asyncio.create_task(flights.run("k", work)) for _ in range(3)]
    await asyncio.sleep(0)
    waiting[1].cancel()  # a cancelled joiner is cancelled itself, and nobody else is
    work.gate.set()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert results[0] == results[2] == 3 and isinstance(results[1], asyncio.CancelledError)


def test_keys_are_canonical_and_typed() -> None:
    assert canonical({"a": 1}) != canonical({"a": "1"}) != canonical({"a": True})
    assert canonical([("a", 1)]) == canonical([["a", 1]])
    assert entry_key("posts", "list", {"a": 1}) == entry_key("posts", "list", {"a": 1})
    assert entry_key("posts", "list", {"a": 1}) != entry_key("posts", "get", {"a": 1})
    with pytest.raises(TypeError):
        canonical(object())


async def test_no_read_after_a_write_returns_older_data_across_two_instances(
        aiohttp_client, config, services, clock, admin_token, client):
    """Two app instances on one MongoDB and Redis (as two replicas): each round writes through one
    and then reads through the other, with the reader's cache warmed just before the write."""
    await create_collection(client, admin_token, "posts", POSTS)
    record = await create_record(client, admin_token, "posts", {"title": "v0", "views": 0})
    async with open_services(config, clock=clock) as other_services:
        other = await aiohttp_client(create_app(config, services=other_services))
        instances = [client, other]
        headers = bearer(admin_token)
        for n in range(1, 25):
            writer, reader = instances[n % 2], instances[(n + 1) % 2]
            await reader.get(records_path("posts"))  # warm the reader's view of the cache
            await reader.get(records_path("posts", record["id"]))
            response = await writer.patch(records_path("posts", record["id"]), headers=headers,
                                          json={"data": {"title": f"v{n}", "views": n}})
            assert response.status == 200
            if n % 3 == 0:
                assert (await writer.post(records_path("posts"), headers=headers,
                                          json={"data": {"title": f"extra{n}"}})).status == 201
            page = await (await reader.get(records_path("posts"), params={"filter": "views > 0"})).json()
            assert [r["title"] for r in page["items"]] == [f"v{n}"]
            listed = await (await reader.get(records_path("posts"))).json()
            assert listed["total"] == 1 + n // 3
            one = await (await reader.get(records_path("posts", record["id"]))).json()
            assert one["title"] == f"v{n}"


async def test_a_version_lost_by_redis_never_serves_an_entry_stamped_before(client, admin_token, posts, config):
    """A cache Redis with `allkeys-lru` may evict a collection's version while its entries stay:
    the version comes back at a random value, so a page stamped before is not taken for current,
    even after as many writes as were made before it (three creates: counted from zero, the version
    would be back at the old page's value)."""
    version_key = keys.read_cache_version(keys.read_cache_prefix(config.mongodb_db), "posts")
    redis = Redis.from_url(config.redis_url)  # the cache Redis too (no CACHE_REDIS_URL here)
    try:
        page = await (await client.get(records_path("posts"), params={"sort": "views"})).json()
        assert [r["title"] for r in page["items"]] == ["t0", "t1", "t2"]
        before = int(await redis.get(version_key))
        await redis.delete(version_key)  # evicted; the cached page stays
        for n in range(3):
            patched = await client.patch(records_path("posts", posts[0]["id"]), headers=bearer(admin_token),
                                         json={"data": {"title": f"changed {n}"}})
            assert patched.status == 200
        assert int(await redis.get(version_key)) != before
        page = await (await client.get(records_path("posts"), params={"sort": "views"})).json()
        assert [r["title"] for r in page["items"]] == ["changed 2", "t1", "t2"]
    finally:
        await redis.aclose()


def redis_db(url: str, db: int) -> str:
    """`url` (`redis://host:port/N` or the embedded server's `unix://path?db=N`) naming database `db`."""
    if url.startswith("unix://"):
        return f"{url.partition('?')[0]}?db={db}"
    return f"{url.rsplit('/', 1)[0]}/{db}"


async def test_cache_redis_url_keeps_the_cache_and_epochs_apart_from_the_queue(config, clock):
    """With CACHE_REDIS_URL (here database 1 of the suite's Redis), cached bodies and the catalog,
    session and version counters live there; the queue's Redis keeps none of them."""
    split = replace(config, redis_url=redis_db(config.redis_url, 0), cache_redis_url=redis_db(config.redis_url, 1))
    queue, cache = Redis.from_url(split.redis_url), Redis.from_url(split.cache_redis_url)
    try:
        async with open_services(split, clock=clock) as services:
            await services.identity.registration.create_admin("split@example.com", ADMIN_PASSWORD)
            async with TestClient(TestServer(create_app(split, services=services))) as client:
                token = (await login(client, "split@example.com", ADMIN_PASSWORD))["token"]["access_token"]
                await create_collection(client, token, "posts", POSTS, list_rule="")
                await create_record(client, token, "posts", {"title": "t"})
                assert (await client.get(records_path("posts"))).status == 200
                assert (await client.get(records_path("posts"))).status == 200
        prefix = keys.read_cache_prefix(split.mongodb_db)
        in_cache = [key.decode() async for key in cache.scan_iter(f"{prefix}:*")]
        assert any(":e:" in key for key in in_cache) and any(":v:" in key for key in in_cache)
        assert f"{prefix}:epoch" in in_cache
        assert [key async for key in queue.scan_iter(f"{prefix}:*")] == []
        assert await cache.exists(f"cms:sessions:epoch:{split.mongodb_db}")
        assert not await queue.exists(f"cms:sessions:epoch:{split.mongodb_db}")
    finally:
        await queue.aclose()
        await cache.aclose()
        mongo = open_client(config.mongodb_url)
        await mongo.drop_database(config.mongodb_db)
        await mongo.close()
