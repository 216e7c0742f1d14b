"""Group commit of creates (issue "Fast reads", item 5): concurrent creates into one collection are
stored by shared `insert_many` calls, and each request still gets its own answer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from cms.models import Record
from cms.services.events import CREATE, RecordEvent
from cms.store.records import InsertFailure, RecordRepository, records_mongo_name
from cms.wiring import Services
from tests.conftest import bearer, create_collection, records_path


class CountingRepository(RecordRepository):
    """The real repository, counting `insert_many` calls and their sizes."""

    sizes: list[int]

    async def insert_many(self, collection_id: str, records: Sequence[Record]) -> list[InsertFailure]:
        self.sizes.append(len(records))
        return await super().insert_many(collection_id, records)


def count_inserts(services: Services) -> list[int]:
    """Swap the class of the service's repository for CountingRepository; return its sizes list."""
    groups = services.records._groups  # noqa: SLF001 - the seam under test
    assert groups is not None
    repository = groups._records  # noqa: SLF001
    repository.__class__ = CountingRepository
    sizes: list[int] = []
    repository.sizes = sizes  # type: ignore[attr-defined]
    return sizes


async def test_concurrent_creates_share_inserts_and_each_gets_its_answer(
        client: Any, admin_token: str, services: Services) -> None:
    await create_collection(client, admin_token, "grouped", [
        {"name": "slug", "type": "text", "validation": {"unique": True}}, {"name": "n", "type": "number"}])
    sizes = count_inserts(services)

    async def create(slug: str, n: int) -> tuple[int, Any]:
        response = await client.post(records_path("grouped"), headers=bearer(admin_token),
                                     json={"data": {"slug": slug, "n": n}})
        return response.status, await response.json()

    # 60 creates at once; slugs 0..39 once each, and 20 of them a second time
    wanted = [(f"s{i}", i) for i in range(40)] + [(f"s{i}", 100 + i) for i in range(0, 40, 2)]
    answers = await asyncio.gather(*(create(slug, n) for slug, n in wanted))

    created = [body for status, body in answers if status == 201]
    refused = [body for status, body in answers if status != 201]
    assert len(created) == 40
    assert sorted(b["slug"] for b in created) == sorted(f"s{i}" for i in range(40))
    assert len(refused) == 20
    assert all(b["code"] == "already_exists" and "slug" in b["errors"] for b in refused), refused
    assert sum(sizes) == 60
    assert len(sizes) < 60, sizes  # grouped: fewer inserts than creates

    response = await client.get(records_path("grouped") + "?per_page=100", headers=bearer(admin_token))
    page = await response.json()
    assert page["total"] == 40
    assert {r["id"] for r in page["items"]} == {b["id"] for b in created}


async def test_a_lone_create_is_sent_at_once_and_read_back(client: Any, admin_token: str, services: Services) -> None:
    await create_collection(client, admin_token, "lone", [{"name": "title", "type": "text"}])
    sizes = count_inserts(services)
    response = await client.post(records_path("lone"), headers=bearer(admin_token), json={"data": {"title": "one"}})
    assert response.status == 201
    record = await response.json()
    assert sizes == [1]
    response = await client.get(records_path("lone", record["id"]), headers=bearer(admin_token))
    assert (await response.json())["title"] == "one"


async def test_creates_racing_a_collection_delete_leave_nothing(
        client: Any, admin_token: str, services: Services) -> None:
    collection = await create_collection(client, admin_token, "doomed", [{"name": "title", "type": "text"}])

    async def create(i: int) -> int:
        response = await client.post(records_path("doomed"), headers=bearer(admin_token),
                                     json={"data": {"title": f"t{i}"}})
        return int(response.status)

    creates = asyncio.gather(*(create(i) for i in range(30)))
    response = await client.delete(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token))
    assert response.status == 204
    statuses = await creates
    assert set(statuses) <= {201, 404}, statuses
    await services.records.drain()
    db = services.records._records._db  # noqa: SLF001 - check the store itself
    assert await db[records_mongo_name(collection["id"])].count_documents({}) == 0


async def test_a_group_emits_its_stored_records_events_in_one_batch_before_answering(
        client: Any, admin_token: str, services: Services) -> None:
    await create_collection(client, admin_token, "batched", [
        {"name": "slug", "type": "text", "validation": {"unique": True}}])
    sizes = count_inserts(services)
    batches: list[list[str]] = []

    async def handler(batch: Sequence[RecordEvent]) -> None:
        batches.append([event.record_id for event in batch if event.event == CREATE])

    services.events.subscribe(handler)
    try:
        async def create(slug: str) -> tuple[int, Any, int]:
            response = await client.post(records_path("batched"), headers=bearer(admin_token),
                                         json={"data": {"slug": slug}})
            emitted = sum(len(b) for b in batches)  # events dispatched when this answer arrived
            return response.status, await response.json(), emitted

        answers = await asyncio.gather(*(create(f"b{i % 30}") for i in range(40)))  # 10 clash
    finally:
        services.events.unsubscribe(handler)

    created = {body["id"] for status, body, _ in answers if status == 201}
    assert len(created) == 30
    emitted = [record_id for batch in batches for record_id in batch]
    assert sorted(emitted) == sorted(created)  # one event per stored record, none for a refused one
    assert len(batches) <= len(sizes) < 40, (batches, sizes)  # a batch per insert (none if all clashed)
    assert max(len(batch) for batch in batches) > 1
    order = {record_id: i for i, record_id in enumerate(emitted)}
    for status, body, emitted_then in answers:
        if status == 201:
            assert order[body["id"]] < emitted_then  # its event came before its answer
