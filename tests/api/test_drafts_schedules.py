"""Scheduled publishing (decisions.md, Drafts, versions and scheduled publishing; issue 39, item 2): a
schedule runs at or after its time, once, through the worker job; it can be replaced and cancelled; a
failing one leaves `schedule_error` and an audit entry."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from cms.services.delivery.events import RecordEvent
from cms.wiring import open_services
from tests.api.test_locales import read, use_locales, write
from tests.conftest import bearer, create_collection, create_record, error_of, records_path
from workers.settings import build_worker

FIELDS: list[dict[str, Any]] = [{"name": "title", "type": "text", "validation": {"required": True}}]


@pytest.fixture
async def posts(client, admin_token) -> str:
    await create_collection(client, admin_token, "posts", FIELDS, drafts=True)
    return "posts"


async def schedule(client: Any, token: str, record_id: str, at: Any, status: int = 200) -> Any:
    response = await client.post(records_path("posts", record_id) + "/publish", headers=bearer(token),
                                 json={"at": at.isoformat() if hasattr(at, "isoformat") else at})
    assert response.status == status, await response.text()
    return await response.json()


async def working(client: Any, token: str, record_id: str) -> Any:
    response = await client.get(records_path("posts", record_id) + "?draft=true", headers=bearer(token))
    assert response.status == 200, await response.text()
    return await response.json()


async def test_a_schedule_runs_at_its_time_never_before(client, admin_token, posts, services, clock, seen):
    record_id = (await create_record(client, admin_token, posts, {"title": "later"}))["id"]
    at = clock() + timedelta(minutes=5)
    scheduled = await schedule(client, admin_token, record_id, at)
    assert scheduled["status"] == "draft" and scheduled["scheduled_at"] == at.isoformat(
        timespec="milliseconds").replace("+00:00", "Z")

    clock.advance(minutes=5, milliseconds=-1)
    assert await services.drafts.scheduler.run_due() == 0
    await error_of(await client.get(records_path(posts, record_id)), 404, "not_found")
    clock.advance(milliseconds=1)
    assert await services.drafts.scheduler.run_due() == 1
    shown = await (await client.get(records_path(posts, record_id))).json()
    assert shown["status"] == "published" and shown["scheduled_at"] is None
    assert (await working(client, admin_token, record_id))["scheduled_at"] is None
    assert [(e.event, e.record_id) for e in seen] == [("create", record_id)]
    assert await services.drafts.scheduler.run_due() == 0  # once


async def test_a_schedule_is_replaced_and_cancelled(client, admin_token, posts, services, clock, seen):
    record_id = (await create_record(client, admin_token, posts, {"title": "t"}))["id"]
    await schedule(client, admin_token, record_id, clock() + timedelta(minutes=1))
    replaced = await schedule(client, admin_token, record_id, clock() + timedelta(minutes=2))
    assert replaced["scheduled_at"].startswith((clock() + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M"))
    clock.advance(minutes=1)
    assert await services.drafts.scheduler.run_due() == 0
    assert seen == []

    path = records_path(posts, record_id) + "/schedule"
    response = await client.delete(path, headers=bearer(admin_token))
    assert response.status == 204, await response.text()
    assert (await working(client, admin_token, record_id))["scheduled_at"] is None
    await error_of(await client.delete(path, headers=bearer(admin_token)), 404, "not_found")
    clock.advance(minutes=5)
    assert await services.drafts.scheduler.run_due() == 0
    assert seen == []


@pytest.mark.parametrize("at, field", [
    ("past", "at"), ("now", "at"), ("not a date", "at"), ("far", "at"), (12, "at"),
], ids=["past", "now", "garbage", "too-far", "number"])
async def test_bad_times_are_422(client, admin_token, posts, clock, at, field):
    record_id = (await create_record(client, admin_token, posts, {"title": "t"}))["id"]
    value = {"past": clock() - timedelta(seconds=1), "now": clock(), "far": clock() + timedelta(days=4000)}.get(at, at)
    response = await client.post(records_path(posts, record_id) + "/publish", headers=bearer(admin_token),
                                 json={"at": value.isoformat() if hasattr(value, "isoformat") else value})
    body = await error_of(response, 422, "validation_error")
    assert field in body["errors"], body
    assert (await working(client, admin_token, record_id))["scheduled_at"] is None


async def test_a_schedule_that_does_not_validate_leaves_an_error(client, admin_token, posts, services, clock, seen):
    record_id = (await create_record(client, admin_token, posts, {"title": "t"}))["id"]
    await schedule(client, admin_token, record_id, clock() + timedelta(minutes=1))
    response = await client.patch(records_path(posts, record_id), headers=bearer(admin_token),
                                  json={"data": {"title": None}})  # a draft may lack what a publish needs
    assert response.status == 200, await response.text()
    clock.advance(minutes=1)
    assert await services.drafts.scheduler.run_due() == 1
    shown = await working(client, admin_token, record_id)
    assert shown["status"] == "draft" and shown["scheduled_at"] is None
    assert "title" in shown["schedule_error"]
    await error_of(await client.get(records_path(posts, record_id)), 404, "not_found")
    assert seen == []
    entries = await (await client.get("/api/v1/audit?event_type=record_publish_failed",
                                      headers=bearer(admin_token))).json()
    assert entries["total"] == 1
    assert entries["items"][0]["details"]["record_id"] == record_id
    assert entries["items"][0]["severity"] == "warning"
    # a new schedule clears the error
    again = await schedule(client, admin_token, record_id, clock() + timedelta(minutes=1))
    assert "schedule_error" not in again


async def test_a_deleted_record_drops_its_schedule(client, admin_token, posts, services, clock, seen):
    record_id = (await create_record(client, admin_token, posts, {"title": "t"}))["id"]
    await schedule(client, admin_token, record_id, clock() + timedelta(minutes=1))
    response = await client.delete(records_path(posts, record_id), headers=bearer(admin_token))
    assert response.status == 204
    clock.advance(minutes=1)
    assert await services.drafts.scheduler.run_due() == 0
    assert await services.drafts.copies.schedules.pending() == 0
    assert seen == []


async def test_two_instances_run_each_schedule_once(client, admin_token, posts, services, config, clock, seen):
    """Two app instances (each with its own services: event bus, clients) run the due schedules at the same
    moment: every record is published once, by one of them."""
    ids = [(await create_record(client, admin_token, posts, {"title": f"r{i}"}))["id"] for i in range(40)]
    at = clock() + timedelta(seconds=30)
    for record_id in ids:
        await schedule(client, admin_token, record_id, at)
    other_seen: list[RecordEvent] = []

    async def other_handler(batch: Sequence[RecordEvent]) -> None:
        other_seen.extend(batch)

    async with open_services(config, clock=clock) as other:
        other.events.subscribe(other_handler)
        clock.advance(seconds=30)
        ran = await asyncio.gather(services.drafts.scheduler.run_due(), other.drafts.scheduler.run_due())
    assert sum(ran) == len(ids)
    published = [e.record_id for e in [*seen, *other_seen] if e.event == "create"]
    assert sorted(published) == sorted(ids)
    listed = await (await client.get(records_path(posts) + "?per_page=100")).json()
    assert listed["total"] == len(ids)


async def test_the_worker_publishes_within_two_seconds(client, admin_token, posts, services, config, clock, seen):
    """The worker's job (every second) publishes a due schedule within 2 s of its time."""
    record_id = (await create_record(client, admin_token, posts, {"title": "soon"}))["id"]
    await schedule(client, admin_token, record_id, clock() + timedelta(seconds=1))
    worker = build_worker(config, services=services, handle_signals=False, poll_delay_s=0.05)
    task = asyncio.create_task(worker.async_run())
    try:
        await asyncio.sleep(0.5)  # the worker is up, the schedule is not due yet
        assert seen == []
        clock.advance(seconds=1)
        started = time.monotonic()
        while not seen:
            assert time.monotonic() - started < 2.0, "not published within 2 s of its time"
            await asyncio.sleep(0.02)
    finally:
        worker.handle_sig_wait_for_completion(signal.SIGTERM)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)
        await worker.close()
    assert [(e.event, e.record_id) for e in seen] == [("create", record_id)]


async def test_due_schedules_publish_together_and_fail_alone(client, admin_token, posts, services, clock, seen,
                                                             mongo_commands):
    """Schedules due together are published a batch at a time (one transaction per collection); a working
    copy that does not validate fails alone, the others are published."""
    ids = [(await create_record(client, admin_token, posts, {"title": f"r{i}"}))["id"] for i in range(30)]
    at = clock() + timedelta(minutes=1)
    for record_id in ids:
        await schedule(client, admin_token, record_id, at)
    bad = ids[7]
    response = await client.patch(records_path(posts, bad), headers=bearer(admin_token), json={"data": {"title": None}})
    assert response.status == 200
    clock.advance(minutes=1)
    mongo_commands.commands.clear()
    assert await services.drafts.scheduler.run_due() == len(ids)
    published = sorted(e.record_id for e in seen if e.event == "create")
    assert published == sorted(set(ids) - {bad})
    assert "title" in (await working(client, admin_token, bad))["schedule_error"]
    commits = [c for c in mongo_commands.commands if c.name == "commitTransaction"]
    assert len(commits) < 5, f"{len(commits)} transactions for {len(ids)} due schedules"


async def test_a_scheduled_publish_of_one_locale(client, admin_token, services, clock, seen):
    """decisions.md, Localized fields: `publish?locale=de` with `{"at"}` schedules a German-only publish;
    the other locales and the plain fields keep their published values when it runs."""
    await use_locales(client, admin_token, [{"code": "en"}, {"code": "de", "fallback": "en"}])
    await create_collection(client, admin_token, "pages", [
        {"name": "title", "type": "text", "localized": True, "validation": {"required": True}},
        {"name": "views", "type": "number"}], drafts=True)
    page = await write(client, admin_token, "POST", records_path("pages"), {"title": {"en": "Hello", "de": "Hallo"},
                                                                           "views": 1}, "*", status=201)
    path = records_path("pages", page["id"])
    response = await client.post(path + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    await write(client, admin_token, "PATCH", path, {"title": {"en": "Hello again", "de": "Hallo wieder"},
                                                     "views": 2}, "*")
    at = clock() + timedelta(minutes=5)
    response = await client.post(path + "/publish", headers=bearer(admin_token), params={"locale": "fr"},
                                 json={"at": at.isoformat()})
    await error_of(response, 400, "bad_request")  # an unknown locale: nothing scheduled
    response = await client.post(path + "/publish", headers=bearer(admin_token), params={"locale": "de"},
                                 json={"at": at.isoformat()})
    assert response.status == 200, await response.text()
    assert (await response.json())["scheduled_at"] is not None
    seen.clear()

    clock.advance(minutes=5)
    assert await services.drafts.scheduler.run_due() == 1
    german, _ = await read(client, path, locale="de")
    assert german["title"] == "Hallo wieder" and german["views"] == 1, german
    english, _ = await read(client, path, locale="en")
    assert english["title"] == "Hello" and english["views"] == 1, english
    response = await client.get(path + "?draft=true&locale=*", headers=bearer(admin_token))
    pending = await response.json()
    assert pending["status"] == "changed" and pending["scheduled_at"] is None, pending  # en and views still pending
    assert pending["title"] == {"en": "Hello again", "de": "Hallo wieder"} and pending["views"] == 2, pending
    assert [(e.event, e.record_id) for e in seen] == [("update", page["id"])]
    assert await services.drafts.scheduler.run_due() == 0  # once
