"""Releases (decisions.md, Drafts, versions and scheduled publishing: Releases; issue 39, item 3): admins
group records of collections with drafts and publish them together, all or nothing, now or at a time
(the record schedules' machinery); bad items are named `items.N`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from cms.app import create_app
from cms.config import Config
from cms.errors import AlreadyExists
from cms.services.content.releases import MAX_RELEASE_ITEMS
from cms.services.delivery.events import RecordEvent
from cms.wiring import Services, open_services
from tests.conftest import MovableClock, bearer, create_collection, create_record, error_of, records_path

FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True}},
    {"name": "slug", "type": "text", "validation": {"unique": True}},
]
RELEASES = "/api/v1/releases"


@pytest.fixture
async def posts(client, admin_token) -> str:
    await create_collection(client, admin_token, "posts", FIELDS, drafts=True)
    return "posts"


async def call(client: Any, method: str, path: str, token: str | None, status: int, body: Any = None) -> Any:
    response = await client.request(method, path, headers=bearer(token) if token else None, json=body)
    assert response.status == status, await response.text()
    return None if status == 204 else await response.json()


async def drafts(client: Any, token: str, count: int, **data: Any) -> list[str]:
    return [(await create_record(client, token, "posts", {"title": f"post {i}", **data}))["id"] for i in range(count)]


def items(record_ids: list[str], collection: str = "posts") -> list[dict[str, str]]:
    return [{"collection": collection, "record_id": r} for r in record_ids]


def in_minutes(clock: Any, minutes: int) -> dict[str, str]:
    return {"at": (clock() + timedelta(minutes=minutes)).isoformat()}


async def published_total(client: Any) -> int:
    return int((await call(client, "GET", records_path("posts"), None, 200))["total"])


async def test_a_release_is_created_read_listed_changed_and_deleted(client, admin_token, posts, clock):
    ids = await drafts(client, admin_token, 2)
    created = await call(client, "POST", RELEASES, admin_token, 201, {"name": "Spring", "items": items(ids)})
    assert created["name"] == "Spring" and created["status"] == "pending"
    assert [i["record_id"] for i in created["items"]] == ids and created["items"][0]["collection"] == "posts"
    assert created["scheduled_at"] is None and created["published_at"] is None
    assert created["error"] is None and created["errors"] == {}
    path = f"{RELEASES}/{created['id']}"
    assert await call(client, "GET", path, admin_token, 200) == created

    changed = await call(client, "PATCH", path, admin_token, 200, {"name": "Summer", "items": items(ids[:1])})
    assert changed["name"] == "Summer" and [i["record_id"] for i in changed["items"]] == ids[:1]
    renamed = await call(client, "PATCH", path, admin_token, 200, {"name": "Autumn"})
    assert renamed["items"] == changed["items"]

    others = []
    for i in range(2):
        clock.advance(seconds=1)
        others.append((await call(client, "POST", RELEASES, admin_token, 201, {"name": f"r{i}", "items": []}))["id"])
    first = await call(client, "GET", RELEASES + "?per_page=2", admin_token, 200)
    assert first["total"] == 3 and first["page"] == 1 and first["per_page"] == 2
    assert [r["id"] for r in first["items"]] == others[::-1]  # newest first
    second = await call(client, "GET", RELEASES + "?per_page=2&page=2", admin_token, 200)
    assert [r["id"] for r in second["items"]] == [created["id"]]
    await error_of(await client.get(RELEASES + "?per_page=0", headers=bearer(admin_token)), 422, "validation_error")

    await call(client, "DELETE", path, admin_token, 204)
    await error_of(await client.get(path, headers=bearer(admin_token)), 404, "not_found")
    await error_of(await client.delete(path, headers=bearer(admin_token)), 404, "not_found")
    await error_of(await client.patch(path, headers=bearer(admin_token), json={"name": "x"}), 404, "not_found")


async def test_only_admins_use_releases(client, admin_token, user_token, posts):
    release = await call(client, "POST", RELEASES, admin_token, 201, {"name": "r", "items": []})
    path = f"{RELEASES}/{release['id']}"
    for method, where, body in [("POST", RELEASES, {"name": "r", "items": []}), ("GET", RELEASES, None),
                                ("GET", path, None), ("PATCH", path, {"name": "x"}), ("DELETE", path, None),
                                ("POST", path + "/publish", None), ("DELETE", path + "/schedule", None)]:
        await error_of(await client.request(method, where, json=body), 401, "unauthorized")
        await error_of(await client.request(method, where, json=body, headers=bearer(user_token)), 403, "forbidden")
    assert (await call(client, "GET", path, admin_token, 200))["name"] == "r"


async def test_bad_items_are_named_by_index(client, admin_token, posts):
    await create_collection(client, admin_token, "pages", [{"name": "title", "type": "text"}])
    page = await create_record(client, admin_token, "pages", {"title": "p"})
    ids = await drafts(client, admin_token, 1)
    body = {"name": "bad", "items": [*items(ids), {"collection": "pages", "record_id": page["id"]},
                                     {"collection": "posts", "record_id": "missing"},
                                     {"collection": "nowhere", "record_id": ids[0]}, *items(ids)]}
    failed = await error_of(await client.post(RELEASES, headers=bearer(admin_token), json=body), 422,
                            "validation_error")
    assert set(failed["errors"]) == {"items.1", "items.2", "items.3", "items.4"}, failed
    assert "drafts" in failed["errors"]["items.1"][0] and "items.0" in failed["errors"]["items.4"][0]
    assert (await call(client, "GET", RELEASES, admin_token, 200))["total"] == 0

    for wrong in [{"name": "", "items": []}, {"name": "x" * 201, "items": []}, {"items": []},
                  {"name": "n", "items": [{"collection": "posts"}]}, {"name": "n", "items": "posts"}]:
        await error_of(await client.post(RELEASES, headers=bearer(admin_token), json=wrong), 422, "validation_error")


async def test_a_release_holds_at_most_1000_items(client, admin_token, posts):
    ids = [f"r{i}" for i in range(MAX_RELEASE_ITEMS + 1)]
    too_many = await error_of(await client.post(RELEASES, headers=bearer(admin_token),
                                                json={"name": "big", "items": items(ids)}), 422, "validation_error")
    assert "items" in too_many["errors"]
    at_most = await error_of(await client.post(RELEASES, headers=bearer(admin_token),
                                               json={"name": "big", "items": items(ids[:-1])}), 422, "validation_error")
    assert "items" not in at_most["errors"] and len(at_most["errors"]) == MAX_RELEASE_ITEMS  # each: not found


async def test_publish_is_all_or_nothing(client, admin_token, posts, seen):
    old = (await drafts(client, admin_token, 1))[0]
    await call(client, "POST", records_path("posts", old) + "/publish", admin_token, 200)
    await call(client, "PATCH", records_path("posts", old), admin_token, 200, {"data": {"title": "changed"}})
    seen.clear()
    ids = [old, *await drafts(client, admin_token, 2)]
    invalid = (await create_record(client, admin_token, "posts", {"slug": "no-title"}))["id"]
    release = await call(client, "POST", RELEASES, admin_token, 201, {"name": "r", "items": items([*ids, invalid])})
    path = f"{RELEASES}/{release['id']}"

    failed = await error_of(await client.post(path + "/publish", headers=bearer(admin_token)), 422, "validation_error")
    assert list(failed["errors"]) == ["items.3"] and "title" in failed["errors"]["items.3"][0]
    assert seen == [] and await published_total(client) == 1
    assert (await call(client, "GET", records_path("posts", old), None, 200))["title"] == "post 0"
    shown = await call(client, "GET", path, admin_token, 200)
    assert shown["status"] == "failed" and shown["errors"] == failed["errors"] and shown["error"]

    await call(client, "PATCH", records_path("posts", invalid), admin_token, 200, {"data": {"title": "fixed"}})
    published = await call(client, "POST", path + "/publish", admin_token, 200)
    assert published["status"] == "published" and published["published_at"] and published["errors"] == {}
    assert sorted((e.event, e.record_id) for e in seen) == sorted(
        [("update", old)] + [("create", r) for r in [*ids[1:], invalid]])  # each once
    assert await published_total(client) == 4
    assert (await call(client, "GET", records_path("posts", old), None, 200))["title"] == "changed"
    await error_of(await client.post(path + "/publish", headers=bearer(admin_token)), 409, "conflict")
    await error_of(await client.patch(path, headers=bearer(admin_token), json={"name": "x"}), 409, "conflict")


def record_events(into: list[Any]) -> Any:
    """A subscriber adding the record events it gets to `into`."""
    async def handler(batch: Sequence[RecordEvent]) -> None:
        into.extend(batch)
    return handler


@pytest.fixture
async def standalone(aiohttp_client: Any, config: Config, clock: MovableClock, services: Services
                     ) -> AsyncIterator[tuple[Any, Services]]:
    """An app on the test's database that runs as on a server without transactions, and its services."""
    async with open_services(replace(config), clock=clock, use_transactions=False) as opened:
        assert opened.records.repository.capabilities.transactions is False
        yield await aiohttp_client(create_app(config, services=opened)), opened


@pytest.mark.parametrize("transactions", [True, False], ids=["transactions", "no-transactions"])
async def test_a_fault_during_the_writes_publishes_nothing(client, admin_token, posts, services, seen, standalone,
                                                           transactions):
    """An item failing after earlier items were written (a unique value taken between the checks and the
    writes, produced here through the publish hook seam) leaves every item as it was, with transactions
    (the transaction aborts) and without (the items written are put back)."""
    old = (await drafts(client, admin_token, 1))[0]
    await call(client, "POST", records_path("posts", old) + "/publish", admin_token, 200)
    await call(client, "PATCH", records_path("posts", old), admin_token, 200, {"data": {"title": "changed"}})
    seen.clear()
    ids = [old, *await drafts(client, admin_token, 3)]
    release = await call(client, "POST", RELEASES, admin_token, 201, {"name": "r", "items": items(ids)})
    app, opened = (client, services) if transactions else standalone

    async def clash(collection: Any, record: Any, by: str | None) -> None:
        if record.id == ids[2]:
            raise AlreadyExists("A record with this slug already exists", errors={"slug": ["Value must be unique"]})

    opened.drafts.publisher.add_hook(clash)
    if not transactions:
        opened.events.subscribe(record_events(seen))
    path = f"{RELEASES}/{release['id']}/publish"
    failed = await error_of(await app.post(path, headers=bearer(admin_token)), 422, "validation_error")
    assert list(failed["errors"]) == ["items.2"] and "slug" in failed["errors"]["items.2"][0]
    assert seen == [] and await published_total(client) == 1
    assert (await call(client, "GET", records_path("posts", old), None, 200))["title"] == "post 0"
    statuses = [(await call(client, "GET", records_path("posts", r) + "?draft=true", admin_token, 200))["status"]
                for r in ids]
    assert statuses == ["changed", "draft", "draft", "draft"]
    assert (await call(client, "GET", f"{RELEASES}/{release['id']}", admin_token, 200))["status"] == "failed"


async def test_a_scheduled_release_runs_once_at_its_time(client, admin_token, posts, services, clock, seen):
    ids = await drafts(client, admin_token, 2)
    release = await call(client, "POST", RELEASES, admin_token, 201, {"name": "r", "items": items(ids)})
    path = f"{RELEASES}/{release['id']}"
    at = clock() + timedelta(minutes=5)
    scheduled = await call(client, "POST", path + "/publish", admin_token, 200, {"at": at.isoformat()})
    assert scheduled["status"] == "scheduled"
    assert scheduled["scheduled_at"] == at.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    clock.advance(minutes=5, milliseconds=-1)
    assert await services.drafts.scheduler.run_due() == 0
    assert await published_total(client) == 0
    clock.advance(milliseconds=1)
    assert await services.drafts.scheduler.run_due() == 1
    shown = await call(client, "GET", path, admin_token, 200)
    assert shown["status"] == "published" and shown["scheduled_at"] is None and shown["published_at"]
    assert sorted((e.event, e.record_id) for e in seen) == sorted(("create", r) for r in ids)
    assert await published_total(client) == 2
    assert await services.drafts.scheduler.run_due() == 0  # once
    assert await services.drafts.copies.schedules.pending() == 0


async def test_a_release_schedule_is_replaced_and_cancelled(client, admin_token, posts, services, clock, seen):
    ids = await drafts(client, admin_token, 1)
    release = await call(client, "POST", RELEASES, admin_token, 201, {"name": "r", "items": items(ids)})
    path = f"{RELEASES}/{release['id']}"
    for bad in [clock() - timedelta(seconds=1), clock(), clock() + timedelta(days=4000), "soon"]:
        body = {"at": bad if isinstance(bad, str) else bad.isoformat()}
        failed = await error_of(await client.post(path + "/publish", headers=bearer(admin_token), json=body), 422,
                                "validation_error")
        assert "at" in failed["errors"]
    await call(client, "POST", path + "/publish", admin_token, 200, in_minutes(clock, 1))
    await call(client, "POST", path + "/publish", admin_token, 200, in_minutes(clock, 2))
    clock.advance(minutes=1)
    assert await services.drafts.scheduler.run_due() == 0  # replaced
    assert seen == []

    await call(client, "DELETE", path + "/schedule", admin_token, 204)
    shown = await call(client, "GET", path, admin_token, 200)
    assert shown["status"] == "pending" and shown["scheduled_at"] is None
    await error_of(await client.delete(path + "/schedule", headers=bearer(admin_token)), 404, "not_found")
    clock.advance(minutes=5)
    assert await services.drafts.scheduler.run_due() == 0
    assert seen == [] and await published_total(client) == 0


async def test_a_failing_scheduled_release_leaves_an_error(client, admin_token, posts, services, clock, seen):
    ids = await drafts(client, admin_token, 2)
    release = await call(client, "POST", RELEASES, admin_token, 201, {"name": "r", "items": items(ids)})
    path = f"{RELEASES}/{release['id']}"
    await call(client, "POST", path + "/publish", admin_token, 200, in_minutes(clock, 1))
    await call(client, "PATCH", records_path("posts", ids[1]), admin_token, 200, {"data": {"title": None}})
    clock.advance(minutes=1)
    assert await services.drafts.scheduler.run_due() == 1
    shown = await call(client, "GET", path, admin_token, 200)
    assert shown["status"] == "failed" and shown["scheduled_at"] is None
    assert list(shown["errors"]) == ["items.1"] and "title" in shown["errors"]["items.1"][0]
    assert seen == [] and await published_total(client) == 0
    entries = await call(client, "GET", "/api/v1/audit?event_type=release_publish_failed", admin_token, 200)
    assert entries["total"] == 1 and entries["items"][0]["details"]["release_id"] == release["id"]
    assert entries["items"][0]["severity"] == "warning"
    assert await services.drafts.scheduler.run_due() == 0
