"""Result sets and the bounded cold path (issue 31, items 1 and 2): every page of a list query is a
slice of the ids of its whole result, scanned once and kept beside the read cache's answers; after
every kind of write, a rule change, a restore, a change to an expanded record and across two app
instances, every page and `total` equal a fresh query to the database. Cold scans wait in a bounded
line and are refused with 503 and `Retry-After` past it."""

from __future__ import annotations

import asyncio
import io
import uuid
from typing import Any

import pytest
from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.app import create_app
from cms.config import Config
from cms.services.caching.result_sets import HEADER_BYTES, ResultSetCache, pack
from cms.services.content import record_pages
from cms.wiring import Services, open_services
from tests.api.test_backups import create_backup, restore
from tests.api.test_read_cache import POSTS, Queries, queries_of
from tests.conftest import bearer, create_collection, create_record, records_path
from tests.fixtures import CommandLog, wait_until

PER_PAGE = 3
QUERIES: list[dict[str, str]] = [
    {"sort": "-views"},
    {"sort": "title", "filter": "views >= 4"},
    {},  # the whole collection, default sort
]


async def walk(client: Any, params: dict[str, str], headers: dict[str, str] | None = None) -> tuple[list[str], int]:
    """Every page of a list query through the API, PER_PAGE at a time: the ids in order and the total
    (the same on every page), one page past the end included."""
    ids: list[str] = []
    totals: set[int] = set()
    page = 1
    while True:
        response = await client.get(records_path("posts"), headers=headers,
                                    params={**params, "page": page, "per_page": PER_PAGE})
        assert response.status == 200, await response.text()
        body = await response.json()
        totals.add(body["total"])
        ids += [r["id"] for r in body["items"]]
        if len(body["items"]) < PER_PAGE:
            break
        page += 1
    assert len(totals) == 1, totals
    return ids, totals.pop()


async def fresh(services: Services, params: dict[str, str]) -> tuple[list[str], int]:
    """The same query asked of the database directly (`RecordReads.list`: skip, limit and a count; no
    cache), as an anonymous caller."""
    ids: list[str] = []
    page, total = 1, 0
    while True:
        listed = await services.records.list("posts", page=page, per_page=PER_PAGE, sort=params.get("sort"),
                                             filter_expr=params.get("filter"))
        ids += [r.id for r in listed.items]
        total = listed.total
        if len(listed.items) < PER_PAGE:
            return ids, total
        page += 1


async def assert_exact(client: Any, services: Services, queries: Queries | None = None) -> None:
    """Every page and total of every query of QUERIES equals a fresh query; walking the pages of a
    query scanned the collection at most once (when `queries` is given)."""
    for params in QUERIES:
        if queries is not None:
            queries.log.commands.clear()
        walked = await walk(client, params)
        if queries is not None:
            assert queries.finds <= 1 and queries.counts == 0, (params, queries.finds, queries.counts)
        assert walked == await fresh(services, params), params


@pytest.fixture
async def posts(client: Any, admin_token: str) -> list[dict[str, Any]]:
    await create_collection(client, admin_token, "posts", POSTS, list_rule="")
    return [await create_record(client, admin_token, "posts", {"title": f"t{n:02}", "views": n}) for n in range(10)]


async def test_every_page_is_a_slice_of_one_scan_and_writes_keep_it_exact(
        client: Any, services: Services, admin_token: str, posts: list[dict[str, Any]],
        mongo_commands: CommandLog) -> None:
    queries = await queries_of(services, mongo_commands, "posts")
    await assert_exact(client, services, queries)
    # the second walk is served from the cache: no scan, no look-up
    queries.log.commands.clear()
    await walk(client, {"sort": "-views"})
    assert (queries.finds, queries.lookups, queries.counts) == (0, 0, 0)
    headers = bearer(admin_token)
    ids = [p["id"] for p in posts]

    async def ok(response: Any, status: int = 200) -> None:
        assert response.status == status, await response.text()

    await create_record(client, admin_token, "posts", {"title": "t99", "views": 99})
    await assert_exact(client, services, queries)
    await ok(await client.patch(records_path("posts", ids[0]), headers=headers, json={"data": {"views": 50}}))
    await assert_exact(client, services, queries)
    await ok(await client.delete(records_path("posts", ids[1]), headers=headers), 204)
    await assert_exact(client, services, queries)
    await ok(await client.post(f"{records_path('posts')}/bulk-update", headers=headers,
                               json={"record_ids": ids[2:5], "data": {"views": 1}}))
    await assert_exact(client, services, queries)
    await ok(await client.post(f"{records_path('posts')}/bulk-delete", headers=headers,
                               json={"record_ids": ids[5:7]}))
    await assert_exact(client, services, queries)
    await ok(await client.post(f"{records_path('posts')}/import/csv", headers=headers,
                               data={"file": io.BytesIO(b"title,views\ncsv1,7\ncsv2,8\n")}))
    await assert_exact(client, services, queries)
    if services.records.repository.capabilities.transactions:
        await ok(await client.post("/api/v1/batch", headers=headers, json={"requests": [
            {"method": "POST", "url": records_path("posts"), "body": {"data": {"title": "b1", "views": 5}}},
            {"method": "PATCH", "url": records_path("posts", ids[7]), "body": {"data": {"title": "a0"}}},
            {"method": "DELETE", "url": records_path("posts", ids[8])},
        ]}))
        await assert_exact(client, services, queries)


async def test_a_rule_change_and_a_restore_keep_every_page_exact(
        client: Any, services: Services, admin_token: str, posts: list[dict[str, Any]]) -> None:
    headers = bearer(admin_token)
    collection = await services.catalog.by_name("posts")
    backup = await create_backup(client, admin_token)
    for rule in ("views >= 6", "views < 3 || views = 8", ""):
        response = await client.patch(f"/api/v1/collections/{collection.id}", headers=headers,
                                      json={"list_rule": rule})
        assert response.status == 200, await response.text()
        await assert_exact(client, services)
    await create_record(client, admin_token, "posts", {"title": "after the backup", "views": 4})
    assert (await client.delete(records_path("posts", posts[3]["id"]), headers=headers)).status == 204
    await assert_exact(client, services)
    assert (await restore(client, admin_token, backup["filename"])).status == 200
    await assert_exact(client, services)
    assert (await walk(client, {}))[1] == 10


async def test_a_change_to_an_expanded_record_refreshes_the_page_not_the_result_set(
        client: Any, services: Services, admin_token: str, mongo_commands: CommandLog) -> None:
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}],
                                      list_rule="", view_rule="")
    await create_collection(client, admin_token, "posts", [
        *POSTS, {"name": "author", "type": "relation", "collection_id": authors["id"], "max_select": 1}],
        list_rule="")
    ada = await create_record(client, admin_token, "authors", {"name": "Ada"})
    for n in range(5):
        await create_record(client, admin_token, "posts", {"title": f"p{n}", "views": n, "author": ada["id"]})
    params = {"sort": "views", "expand": "author", "page": "2", "per_page": "2"}

    async def names() -> list[str]:
        body = await (await client.get(records_path("posts"), params=params)).json()
        return [r["expand"]["author"]["name"] for r in body["items"]]

    assert await names() == ["Ada", "Ada"]
    queries = await queries_of(services, mongo_commands, "posts")
    response = await client.patch(records_path("authors", ada["id"]), headers=bearer(admin_token),
                                  json={"data": {"name": "Lovelace"}})
    assert response.status == 200
    assert await names() == ["Lovelace", "Lovelace"]
    assert (queries.finds, queries.lookups) == (0, 1)  # the posts' result set still held: one page look-up


async def test_two_instances_never_serve_pages_older_than_a_write(
        aiohttp_client: Any, config: Config, clock: Any, client: Any, services: Services, admin_token: str,
        posts: list[dict[str, Any]]) -> None:
    async with open_services(config, clock=clock) as other_services:
        other = await aiohttp_client(create_app(config, services=other_services))
        instances = [client, other]
        headers = bearer(admin_token)
        for n in range(6):
            writer, reader = instances[n % 2], instances[(n + 1) % 2]
            before = await walk(reader, {"sort": "-views"})  # the reader's result set is warm
            if n % 2:
                response = await writer.post(records_path("posts"), headers=headers,
                                             json={"data": {"title": f"new{n}", "views": 3}})
                assert response.status == 201
            else:
                response = await writer.patch(records_path("posts", posts[n]["id"]), headers=headers,
                                              json={"data": {"views": 100 + n}})
                assert response.status == 200
            after = await walk(reader, {"sort": "-views"})
            assert after == await fresh(services, {"sort": "-views"}) and after != before
            for params in QUERIES:
                assert await walk(reader, params) == await walk(writer, params) == await fresh(services, params)


async def test_concurrent_misses_of_different_pages_share_one_scan(
        client: Any, services: Services, posts: list[dict[str, Any]], mongo_commands: CommandLog) -> None:
    queries = await queries_of(services, mongo_commands, "posts")

    async def page(n: int) -> list[str]:
        response = await client.get(records_path("posts"), params={"sort": "-views", "page": n, "per_page": 2})
        assert response.status == 200
        return [r["title"] for r in (await response.json())["items"]]

    async with services.records.repository.hold_scans():
        reads = [asyncio.create_task(page(n)) for n in range(1, 6)]
        # five answers (one per page), each inside its own flight, wait in the one flight of the result set
        await wait_until(lambda: services.records.reads_waiting() == 5 + 5, "five pages share one scan")
    titles = await asyncio.gather(*reads)
    assert titles == [[f"t{n:02}", f"t{n - 1:02}"] for n in range(9, 0, -2)]
    assert queries.finds == 1


async def test_a_result_over_the_bound_is_paged_by_the_database(
        client: Any, services: Services, posts: list[dict[str, Any]], mongo_commands: CommandLog,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_pages, "RESULT_SET_MAX_IDS", 4)
    queries = await queries_of(services, mongo_commands, "posts")
    walked = await walk(client, {"sort": "-views"})
    # the first page found it over the bound (one scan of 5 ids) and said so for the next ones: each
    # page is then a find and a count
    pages = 4
    assert queries.finds == 1 + pages and queries.counts == pages
    assert walked == await fresh(services, {"sort": "-views"})
    small = {"sort": "title", "filter": "views >= 7"}  # 3 records: within the bound
    queries.log.commands.clear()
    walked = await walk(client, small)
    assert queries.finds == 1 and queries.counts == 0
    assert walked == await fresh(services, small)


async def test_with_the_cache_off_a_list_is_paged_by_the_database(
        client: Any, services: Services, admin_token: str, posts: list[dict[str, Any]],
        mongo_commands: CommandLog) -> None:
    response = await client.post("/api/v1/settings", headers=bearer(admin_token),
                                 json={"key": "read_cache_enabled", "value": False})
    assert response.status == 200
    queries = await queries_of(services, mongo_commands, "posts")
    for _ in range(2):
        assert await walk(client, {"sort": "-views"}) == await fresh(services, {"sort": "-views"})
    assert queries.lookups == 0 and queries.finds == queries.counts == 2 * (4 + 4)  # fresh() pages too


@pytest.mark.parametrize("ids, kind", [
    ([str(uuid.uuid4()) for _ in range(5)], "u"),
    ([], "u"),
    (["abc", "a-much-longer-id", "ü"], "s"),
    ([str(uuid.uuid4()).upper()], "s"),  # not canonical: kept as text, so it reads back the same
    ([1, 2], None),
    (["a\0b"], None),
    (["x" * 65], None),
], ids=["uuids", "empty", "strings", "upper-uuid", "not-strings", "nul", "too-long"])
async def test_result_sets_read_back_exactly_and_slice(redis: Redis, ids: list[Any], kind: str | None) -> None:
    prefix = f"cms:rc:test-{uuid.uuid4().hex[:8]}"
    cache = ResultSetCache(redis, prefix=prefix, ttl_s=60)
    packed = pack("1.2", ids)
    assert (packed[:HEADER_BYTES].decode().split("|")[1] if packed else None) == kind
    assert await cache.store("posts", "posts:ids:k", "1.2", ids) == (kind is not None)
    if kind is None:
        assert await cache.slice("posts:ids:k", "1.2", 0, 10) is None
        return
    for start, stop in [(0, 10), (1, 3), (4, 9), (20, 30)]:
        got = await cache.slice("posts:ids:k", "1.2", start, stop)
        assert got is not None and (got.ids, got.total) == (ids[start:stop], len(ids))
    assert await cache.slice("posts:ids:k", "1.3", 0, 10) is None  # another stamp: a miss


async def test_result_sets_keep_within_their_bytes_per_collection(redis: Redis) -> None:
    prefix = f"cms:rc:test-{uuid.uuid4().hex[:8]}"
    ids = [str(uuid.uuid4()) for _ in range(10)]  # 64 + 160 bytes packed
    cache = ResultSetCache(redis, prefix=prefix, ttl_s=60, max_bytes=500)
    assert await cache.store("posts", "posts:ids:a", "1.1", ids)
    assert await cache.store("posts", "posts:ids:b", "1.1", ids)
    assert not await cache.store("posts", "posts:ids:c", "1.1", ids)  # 3 x 224 > 500
    assert await cache.store("posts", "posts:ids:a", "1.1", ids)  # replacing one counts it once
    assert await cache.store("notes", "notes:ids:a", "1.1", ids)  # another collection has its own bound
    assert await cache.store("posts", "posts:ids:over", "1.1", None)  # a marker is always kept
    # the first entry of a new stamp deletes those of the old one
    assert await cache.store("posts", "posts:ids:c", "1.2", ids)
    assert await redis.exists(keys.read_cache_entry(prefix, "posts:ids:a")) == 0
    assert await redis.exists(keys.read_cache_entry(prefix, "notes:ids:a")) == 1
    got = await cache.slice("posts:ids:c", "1.2", 0, 2)
    assert got is not None and got.total == 10
