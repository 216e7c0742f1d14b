"""Slow queries (issue 38, item 3): list queries over SLOW_QUERY_MS are logged once per shape, counted
in /metrics by collection and shape, and listed for admins (every replica's) with the index that would
serve them, which an admin can create from the entry. SLOW_QUERY_MS is 0 here: every list query is slow."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import pytest

from cms.app import create_app
from cms.config import Config
from cms.models import QueryShape
from cms.store.documents import records_mongo_name
from cms.wiring import Services, open_services
from tests.conftest import Client, bearer, create_collection, create_record, error_of, records_path
from tests.fixtures import wait_until
from tests.observability.metrics_text import label_values, value

SLOW = "/api/v1/slow-queries"
MARK = 4242
"""A value no shape, log line or label may show."""


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, slow_query_ms=0)


async def listed(client: Client, token: str, services: Services) -> list[dict[str, Any]]:
    """The slow query list, once this process has recorded every slow query it saw."""
    await services.slow_query_watch.idle()
    response = await client.get(SLOW, headers=bearer(token))
    assert response.status == 200, await response.text()
    body: list[dict[str, Any]] = await response.json()
    return body


def of(entries: list[dict[str, Any]], collection: str, shape: str) -> dict[str, Any]:
    found = [e for e in entries if e["collection"] == collection and e["shape"] == shape]
    assert len(found) == 1, (collection, shape, [(e["collection"], e["shape"]) for e in entries])
    return found[0]


async def seed_packages(client: Client, admin_token: str) -> dict[str, Any]:
    packages = await create_collection(client, admin_token, "packages", [
        {"name": "views", "type": "number"}, {"name": "status", "type": "select", "values": ["draft", "live"]}])
    for views in range(0, 100, 10):
        await create_record(client, admin_token, "packages", {"views": views, "status": "live"})
    return packages


async def test_a_slow_query_is_listed_by_shape_with_its_suggestion_and_counted_in_the_metrics(
        client: Client, admin_token: str, services: Services, caplog: pytest.LogCaptureFixture) -> None:
    packages = await seed_packages(client, admin_token)
    caplog.set_level(logging.WARNING, logger="cms.slow_queries")
    for bound in (MARK, 50):
        response = await client.get(records_path("packages"), params={"filter": f"views>={bound}"})
        assert response.status == 200, await response.text()
    entries = await listed(client, admin_token, services)
    entry = of(entries, "packages", "{views: $gte} sort created")
    assert entry["collection_id"] == packages["id"]
    assert entry["count"] == 2  # one scan per distinct filter (the result set of each)
    assert entry["max_ms"] >= entry["last_ms"] > 0
    assert entry["suggested_index"] == {"fields": ["views"], "unique": False}  # the embedded server sorts in memory
    assert str(MARK) not in str(entries)
    logged = [r.getMessage() for r in caplog.records if "{views: $gte} sort created" in r.getMessage()]
    assert len(logged) == 1, logged  # once per shape, whatever the values
    assert "packages" in logged[0] and "['views']" in logged[0] and str(MARK) not in logged[0]

    scrape = await (await client.get("/metrics", headers=bearer(admin_token))).text()
    assert value(scrape, "cms_slow_queries_total", collection="packages", shape="{views: $gte} sort created") == 2
    assert value(scrape, "cms_slow_query_duration_seconds_count", collection="packages") >= 2
    assert not any(str(MARK) in shape for shape in label_values(scrape, "shape"))


async def test_create_index_adds_the_suggestion_clears_the_entry_and_explain_then_uses_it(
        client: Client, admin_token: str, services: Services) -> None:
    packages = await seed_packages(client, admin_token)
    await client.get(records_path("packages"), params={"filter": "status = 'live'", "sort": "-views"})
    entry = of(await listed(client, admin_token, services), "packages", "{status: $eq} sort -views")
    assert entry["suggested_index"] == {"fields": ["status"], "unique": False}

    response = await client.post(f"{SLOW}/{entry['id']}/index", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    assert (await response.json())["indexes"] == [{"fields": ["status"], "unique": False}]
    stored = await (await client.get(f"/api/v1/collections/{packages['id']}")).json()
    assert stored["indexes"] == [{"fields": ["status"], "unique": False}]
    assert entry["id"] not in [e["id"] for e in await listed(client, admin_token, services)]
    body = await (await client.get(records_path("packages"), headers=bearer(admin_token), params={
        "filter": "status = 'live'", "sort": "-views", "explain": "true"})).json()
    assert body["explain"]["index"] == "idx_status_1" and body["explain"]["collection_scan"] is False
    # the same shape slow again: listed, with nothing left to suggest
    entry = of(await listed(client, admin_token, services), "packages", "{status: $eq} sort -views")
    assert entry["suggested_index"] is None
    response = await client.post(f"{SLOW}/{entry['id']}/index", headers=bearer(admin_token))
    await error_of(response, 400, "bad_request")


async def test_a_suggestion_past_the_index_limit_is_422_and_changes_nothing(
        client: Client, admin_token: str, services: Services) -> None:
    fields = [{"name": f"f{i}", "type": "number"} for i in range(17)]
    await create_collection(client, admin_token, "wide", fields,
                            indexes=[{"fields": [f"f{i}"]} for i in range(16)])
    await client.get(records_path("wide"), params={"filter": "f16 = 1"})
    entry = of(await listed(client, admin_token, services), "wide", "{f16: $eq} sort created")
    assert entry["suggested_index"] == {"fields": ["f16"], "unique": False}
    response = await client.post(f"{SLOW}/{entry['id']}/index", headers=bearer(admin_token))
    body = await error_of(response, 422, "validation_error")
    assert "indexes" in body["errors"]
    assert entry["id"] in [e["id"] for e in await listed(client, admin_token, services)]


async def test_a_back_relation_is_listed_and_its_relation_index_already_serves_it(
        client: Client, admin_token: str, services: Services) -> None:
    posts = await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    await create_collection(client, admin_token, "comments", [
        {"name": "body", "type": "text"}, {"name": "post", "type": "relation", "collection_id": posts["id"]}])
    post = await create_record(client, admin_token, "posts", {"title": "p"})
    await create_record(client, admin_token, "comments", {"body": "c", "post": post["id"]})
    response = await client.get(records_path("posts", post["id"]), params={"expand": "comments_via_post"})
    assert response.status == 200, await response.text()
    entries = await listed(client, admin_token, services)
    entry = of(entries, "comments", "{post: $in} sort -created")
    assert entry["suggested_index"] is None  # auto_relation_post


async def test_every_replica_reports_to_one_list(client: Client, admin_token: str, services: Services,
                                                 config: Config) -> None:
    await seed_packages(client, admin_token)
    async with open_services(config) as other:
        await other.records.list("packages", filter_expr="views < 30")
        await other.slow_query_watch.idle()
    await client.get(records_path("packages"), params={"filter": "views < 60"})
    entries = await listed(client, admin_token, services)
    assert of(entries, "packages", "{views: $lt} sort created")["count"] == 2  # the other's page, this one's scan
    assert of(entries, "packages", "{views: $lt}")["count"] == 1  # the other's count (no read cache there)


async def test_entries_are_for_admins_only_and_can_be_dismissed(client: Client, admin_token: str, user_token: str,
                                                                services: Services) -> None:
    await seed_packages(client, admin_token)
    await client.get(records_path("packages"), params={"filter": "views > 1"})
    entry = of(await listed(client, admin_token, services), "packages", "{views: $gt} sort created")
    for method, path in (("GET", SLOW), ("POST", f"{SLOW}/{entry['id']}/index"), ("DELETE", f"{SLOW}/{entry['id']}")):
        await error_of(await client.request(method, path), 401, "unauthorized")
        await error_of(await client.request(method, path, headers=bearer(user_token)), 403, "forbidden")
    for bad in ("0" * 24, "not-an-id", "A" * 24, "0" * 2000):
        await error_of(await client.delete(f"{SLOW}/{bad}", headers=bearer(admin_token)), 404, "not_found")
        await error_of(await client.post(f"{SLOW}/{bad}/index", headers=bearer(admin_token)), 404, "not_found")
    response = await client.delete(f"{SLOW}/{entry['id']}", headers=bearer(admin_token))
    assert response.status == 204
    assert entry["id"] not in [e["id"] for e in await listed(client, admin_token, services)]


class Recorded:
    """A watch of its own: a threshold and what it was told (a real object on the store's seam)."""

    def __init__(self, threshold_ms: float) -> None:
        self.threshold_ms = threshold_ms
        self.seen: list[tuple[str, QueryShape, float]] = []

    def slow(self, collection_id: str, shape: QueryShape, duration_ms: float) -> None:
        self.seen.append((collection_id, shape, duration_ms))


async def test_queries_faster_than_the_threshold_are_not_reported(client: Client, admin_token: str,
                                                                  services: Services) -> None:
    packages = await seed_packages(client, admin_token)
    repository = services.records.repository
    fast, every = Recorded(60_000.0), Recorded(0.0)
    for watch in (fast, every):
        repository.watch = watch
        await services.records.list("packages", filter_expr=f"views >= {MARK}")
    assert fast.seen == []
    assert sorted((c, s.text) for c, s, _ in every.seen) == [  # `list` pages by the database: a find, a count
        (packages["id"], "{views: $gte}"), (packages["id"], "{views: $gte} sort created")]
    assert all(duration_ms > 0 for _, _, duration_ms in every.seen)


async def test_the_index_sync_restores_a_dropped_automatic_index_and_drops_stale_ones(
        aiohttp_client: Any, client: Client, admin_token: str, services: Services, config: Config,
        mongo_db: Any) -> None:
    posts = await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    comments = await create_collection(client, admin_token, "comments", [
        {"name": "post", "type": "relation", "collection_id": posts["id"]}])
    records = mongo_db[records_mongo_name(comments["id"])]
    await records.drop_index("auto_relation_post")
    await records.create_index([("post", 1), ("created", 1)], name="idx_stale_1")
    report = await services.index_sync.run()
    assert report is not None and report.synced == 2 and report.failed == 0
    names = set(await records.index_information())
    assert "auto_relation_post" in names and "idx_stale_1" not in names

    # at start-up: a process's app syncs in the background
    await records.drop_index("auto_relation_post")
    async with open_services(config) as restarted:
        await aiohttp_client(create_app(config, services=restarted))

        async def restored() -> bool:
            return "auto_relation_post" in await records.index_information()

        await wait_until(restored, "the index sync at start-up restores the index")


async def test_one_replica_syncs_at_a_time(client: Client, admin_token: str, services: Services,
                                           config: Config, caplog: pytest.LogCaptureFixture) -> None:
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    caplog.set_level(logging.INFO, logger="cms.indexes")
    async with open_services(config) as other:
        reports = await asyncio.gather(services.index_sync.run(), other.index_sync.run())
    assert sorted(r is None for r in reports) == [False, True], reports
    assert any("another replica is syncing" in r.getMessage() for r in caplog.records)
