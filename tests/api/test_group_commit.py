"""Group commit of creates (issue "Fast reads", item 5): concurrent creates into one collection are
stored by shared `insert_many` calls, and each request still gets its own answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from cms import redis_keys as keys
from cms.clock import new_id
from cms.config import Config
from cms.runtime.children import ChildServer
from cms.services.caching.counters import counter_text
from cms.services.delivery.events import CREATE, RecordEvent
from cms.store.client import Database
from cms.store.documents import collection_id_of, records_mongo_name
from cms.wiring import Services
from tests.conftest import bearer, create_collection, create_record, error_of, records_path
from tests.fixtures import Command, CommandLog, bump_catalog_epoch, catalog_epoch, wait_until
from workers.maintenance import sweep_orphaned_records


class HeldGroup:
    """A real subscriber of the event bus that holds the first group of `create` events of one
    collection until `release()`. A group's events are emitted after its insert and before its
    waiters are answered, and a collection's groups emit in the order of their inserts: while it is
    held, the next create arriving is inserted alone and then waits for it, and the creates arriving
    after that have looked their collection up and wait, unsent, in the group after
    (`RecordService.creates_waiting`)."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.held = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, batch: Sequence[RecordEvent]) -> None:
        if self.held.is_set() or not any(e.event == CREATE and e.collection == self.collection for e in batch):
            return
        self.held.set()
        await self.gate.wait()

    def release(self) -> None:
        """Let the held group finish (its waiters are answered, the next group is sent)."""
        self.gate.set()


@asynccontextmanager
async def held_group(services: Services, collection: str) -> AsyncIterator[HeldGroup]:
    """Subscribe a HeldGroup for `collection`; released and unsubscribed on exit."""
    hold = HeldGroup(collection)
    services.events.subscribe(hold)
    try:
        yield hold
    finally:
        hold.release()
        services.events.unsubscribe(hold)


async def test_concurrent_creates_share_inserts_and_each_gets_its_answer(
        client: Any, admin_token: str, services: Services, mongo_commands: CommandLog) -> None:
    collection = await create_collection(client, admin_token, "grouped", [
        {"name": "slug", "type": "text", "validation": {"unique": True}}, {"name": "n", "type": "number"}])

    async def create(slug: str, n: int) -> tuple[int, Any]:
        response = await client.post(records_path("grouped"), headers=bearer(admin_token),
                                     json={"data": {"slug": slug, "n": n}})
        return response.status, await response.json()

    # 60 creates; slugs 0..39 once each, and 20 of them a second time. The first one's events are
    # held; the next create is inserted alone and waits behind them, the 58 others wait unsent in
    # the group after: three inserts.
    wanted = [(f"s{i}", i) for i in range(40)] + [(f"s{i}", 100 + i) for i in range(0, 40, 2)]
    async with held_group(services, "grouped") as hold:
        first = asyncio.create_task(create(*wanted[0]))
        await wait_until(hold.held.is_set, "the first create's group is held")
        rest = [asyncio.create_task(create(slug, n)) for slug, n in wanted[1:]]
        await wait_until(lambda: services.records.creates_waiting() == 58, "58 creates wait in a group")
        hold.release()
        answers = [await first, *await asyncio.gather(*rest)]

    created = [body for status, body in answers if status == 201]
    refused = [body for status, body in answers if status != 201]
    assert len(created) == 40
    assert sorted(b["slug"] for b in created) == sorted(f"s{i}" for i in range(40))
    assert len(refused) == 20
    assert all(b["code"] == "already_exists" and "slug" in b["errors"] for b in refused), refused
    assert mongo_commands.insert_sizes(collection["id"]) == [1, 1, 58]  # grouped: three inserts for 60 creates

    response = await client.get(records_path("grouped") + "?per_page=100", headers=bearer(admin_token))
    page = await response.json()
    assert page["total"] == 40
    assert {r["id"] for r in page["items"]} == {b["id"] for b in created}


async def test_a_lone_create_is_sent_at_once_and_read_back(client: Any, admin_token: str,
                                                           mongo_commands: CommandLog) -> None:
    collection = await create_collection(client, admin_token, "lone", [{"name": "title", "type": "text"}])
    response = await client.post(records_path("lone"), headers=bearer(admin_token), json={"data": {"title": "one"}})
    assert response.status == 201
    record = await response.json()
    assert mongo_commands.insert_sizes(collection["id"]) == [1]
    response = await client.get(records_path("lone", record["id"]), headers=bearer(admin_token))
    assert (await response.json())["title"] == "one"


async def test_creates_racing_a_collection_delete_leave_nothing(
        client: Any, admin_token: str, services: Services) -> None:
    """Creates that looked the collection up before its delete and insert, or emit, after it (held
    between the two) are refused with 404 and their records dropped; a create answered before the delete
    is gone with the collection; one after it is 404 at once. No record of it stays stored."""
    collection = await create_collection(client, admin_token, "doomed", [{"name": "title", "type": "text"}])

    async def create(i: int) -> Any:
        return await client.post(records_path("doomed"), headers=bearer(admin_token), json={"data": {"title": f"t{i}"}})

    async with held_group(services, "doomed") as hold:
        first = asyncio.create_task(create(0))
        await wait_until(hold.held.is_set, "the first create's group is held")
        racing = [asyncio.create_task(create(i)) for i in range(1, 30)]
        # one of them is inserted and waits behind the held group, the 28 others are not inserted
        await wait_until(lambda: services.records.creates_waiting() == 28, "28 creates looked up, not inserted")
        response = await client.delete(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token))
        assert response.status == 204
        hold.release()
        answered = await first
        refused = await asyncio.gather(*racing)
    assert answered.status == 201, await answered.text()
    for response in refused:
        await error_of(response, 404, "not_found")
    await error_of(await create(30), 404, "not_found")
    await services.records.drain()
    record_id = (await answered.json())["id"]
    await error_of(await client.get(records_path("doomed", record_id), headers=bearer(admin_token)), 404, "not_found")
    assert records_mongo_name(collection["id"]) not in await services.records.repository.database_names()


async def test_a_group_emits_its_stored_records_events_in_one_batch_before_answering(
        client: Any, admin_token: str, services: Services, mongo_commands: CommandLog) -> None:
    collection = await create_collection(client, admin_token, "batched", [
        {"name": "slug", "type": "text", "validation": {"unique": True}}])
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
    sizes = mongo_commands.insert_sizes(collection["id"])
    assert len(batches) <= len(sizes) < 40, (batches, sizes)  # a batch per insert (none if all clashed)
    assert max(len(batch) for batch in batches) > 1
    order = {record_id: i for i, record_id in enumerate(emitted)}
    for status, body, emitted_then in answers:
        if status == 201:
            assert order[body["id"]] < emitted_then  # its event came before its answer


async def test_the_next_group_is_inserted_while_the_previous_one_emits(
        client: Any, admin_token: str, services: Services, mongo_commands: CommandLog) -> None:
    """Issue 37: a group's guard and events (Redis round trips, slow while the process fans events
    out) do not hold the next group's insert; the groups' events still come in the order of their
    inserts, and each create is answered only after its own event."""
    collection = await create_collection(client, admin_token, "piped", [{"name": "title", "type": "text"}])
    emitted: list[str] = []

    async def handler(batch: Sequence[RecordEvent]) -> None:
        emitted.extend(event.record_id for event in batch if event.event == CREATE)

    async def create(title: str) -> Any:
        response = await client.post(records_path("piped"), headers=bearer(admin_token),
                                     json={"data": {"title": title}})
        assert response.status == 201, await response.text()
        return await response.json()

    services.events.subscribe(handler)  # before the hold: it sees each group's events as they are emitted
    try:
        async with held_group(services, "piped") as hold:
            first = asyncio.create_task(create("one"))
            await wait_until(hold.held.is_set, "the first create's events are held")
            second = asyncio.create_task(create("two"))
            await wait_until(lambda: mongo_commands.insert_sizes(collection["id"]) == [1, 1],
                             "the second create is inserted while the first group's events are held")
            await asyncio.sleep(0.2)
            assert not second.done()  # its events wait for the first group's
            assert len(emitted) == 1
            hold.release()
            one, two = await first, await second
    finally:
        services.events.unsubscribe(handler)
    assert emitted == [one["id"], two["id"]]


# --- the check after an insert (records.drop_if_deleted) and its backstop --------------------------


def watch_drops(mongo_commands: CommandLog, sync_db: Any, sync_cache: Any, config: Config,
                seen: list[tuple[str, bool]]) -> None:
    """Record, just before each drop of a records collection is sent, the catalog epoch and whether
    its collection is still defined (read with blocking clients of their own: `CommandLog.before`)."""

    def look(command: Command) -> None:
        seen.append((counter_text(sync_cache.get(keys.catalog_epoch(config.mongodb_db))),
                     sync_db["collections"].find_one({"_id": collection_id_of(command.collection)}) is not None))

    mongo_commands.before(lambda c: c.name == "drop" and collection_id_of(c.collection) is not None, look,
                          times=None)


def id_lookups(mongo_commands: CommandLog) -> int:
    """The `_id` look-ups of collection definitions sent so far."""
    return len(mongo_commands.finds("collections", "_id"))


async def test_creates_check_their_collection_through_the_epoch_not_the_database(
        client: Any, admin_token: str, services: Services, mongo_commands: CommandLog, config: Config) -> None:
    collection = await create_collection(client, admin_token, "checked", [{"name": "title", "type": "text"}])
    await create_record(client, admin_token, "checked", {"title": "warm"})  # the definition is cached
    mongo_commands.commands.clear()
    answers = await asyncio.gather(*(client.post(records_path("checked"), headers=bearer(admin_token),
                                                 json={"data": {"title": f"t{i}"}}) for i in range(20)))
    assert [a.status for a in answers] == [201] * 20
    assert id_lookups(mongo_commands) == 0  # the epoch held: no `_id` look-up after any insert

    catalog = services.catalog
    found, epoch = await catalog.by_name_and_epoch("checked")
    assert epoch is not None and found.id == collection["id"]
    assert await catalog.exists(found.id, since_epoch=epoch) and id_lookups(mongo_commands) == 0
    await bump_catalog_epoch(config)  # any catalog change: the check asks the database
    assert await catalog.exists(found.id, since_epoch=epoch) and id_lookups(mongo_commands) == 1
    assert await catalog.exists(found.id, since_epoch=None) and id_lookups(mongo_commands) == 2  # epoch unknown
    assert not await catalog.exists(new_id(), since_epoch=None) and id_lookups(mongo_commands) == 3
    assert await catalog.exists(found.id) and id_lookups(mongo_commands) == 4  # the sweep's check: never cached


async def test_a_delete_moves_the_epoch_between_the_definition_and_the_records(
        client: Any, admin_token: str, services: Services, mongo_commands: CommandLog, sync_db: Any,
        sync_cache: Any, config: Config) -> None:
    collection = await create_collection(client, admin_token, "ordered", [{"name": "title", "type": "text"}])
    await create_record(client, admin_token, "ordered", {"title": "kept until the drop"})
    _, epoch = await services.catalog.by_name_and_epoch("ordered")
    seen: list[tuple[str, bool]] = []
    watch_drops(mongo_commands, sync_db, sync_cache, config, seen)
    response = await client.delete(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token))
    assert response.status == 204
    [(epoch_at_drop, defined_at_drop)] = seen
    assert defined_at_drop is False and epoch_at_drop not in (None, epoch)
    assert not await services.catalog.exists(collection["id"], since_epoch=epoch)


async def test_a_failed_collection_create_moves_the_epoch_and_drops_what_it_made(
        client: Any, admin_token: str, services: Services, monkeypatch: pytest.MonkeyPatch, mongo_db: Database,
        mongo_commands: CommandLog, sync_db: Any, sync_cache: Any, config: Config) -> None:
    records = services.records.repository
    made: list[str] = []

    async def half_made(collection_id: str, *args: Any, **kwargs: Any) -> None:
        made.append(collection_id)
        await mongo_db[records_mongo_name(collection_id)].insert_one({"_id": "left"})
        raise RuntimeError("index build failed")

    seen: list[tuple[str, bool]] = []
    watch_drops(mongo_commands, sync_db, sync_cache, config, seen)
    monkeypatch.setattr(records, "sync_indexes", half_made)
    before = await catalog_epoch(config)
    response = await client.post("/api/v1/collections", headers=bearer(admin_token),
                                 json={"name": "halfway", "type": "base", "schema": [{"name": "t", "type": "text"}]})
    assert response.status == 500
    [(epoch_at_drop, defined_at_drop)] = seen
    assert defined_at_drop is False and epoch_at_drop not in (None, before)
    assert records_mongo_name(made[0]) not in await records.database_names()


async def test_the_sweep_drops_records_collections_without_a_collection(
        client: Any, admin_token: str, services: Services, mongo_db: Database, mongo_commands: CommandLog,
        sync_db: Any) -> None:
    """The backstop for records a delete left behind (see the next test)."""
    live = await create_collection(client, admin_token, "live", [{"name": "title", "type": "text"}])
    record = await create_record(client, admin_token, "live", {"title": "stays"})
    collections = services.collections
    records = services.records.repository
    db = mongo_db
    orphan = records_mongo_name(new_id())
    await db[orphan].insert_one({"_id": "left behind"})
    await db["recordsless"].insert_one({"_id": "not a records collection"})
    await db["records_not-an-id"].insert_one({"_id": "not one of ours"})

    assert await sweep_orphaned_records({"services": services}) == 0  # first sighting: kept a while
    assert orphan in await records.database_names()
    staging = f"_restore.{int(time.time()) - 60}-0123abcd.collections"
    await db[staging].insert_one({"_id": "a restore is staging"})
    assert await collections.sweep_orphans(confirm_after_s=0) == ()  # nothing while a restore runs
    await db.drop_collection(staging)
    leftover = f"_restore.{int(time.time()) - 2 * 3600}-0123abcd.collections"  # an interrupted restore's
    await db[leftover].insert_one({"_id": "left"})
    # a definition the catalog read misses (renamed meanwhile): out of the catalog just before the
    # sweep lists it, back just before the sweep's `_id` look-up
    definition = await db["collections"].find_one({"_id": live["id"]})
    mongo_commands.before(lambda c: c.name == "find" and c.collection == "collections" and not c.filter,
                          lambda _: sync_db["collections"].delete_one({"_id": live["id"]}))
    mongo_commands.before(lambda c: c.name == "find" and c.collection == "collections" and "_id" in c.filter,
                          lambda _: sync_db["collections"].insert_one(definition))
    assert await collections.sweep_orphans(confirm_after_s=0) == (orphan,)  # the `_id` look-up saves live
    assert [b.times for b in mongo_commands.actions] == [0, 0]  # both happened
    stored = await records.database_names()
    assert orphan not in stored and records_mongo_name(live["id"]) in stored
    assert {"recordsless", "records_not-an-id"} <= stored  # only names of the form it makes
    assert (await client.get(records_path("live", record["id"]))).status == 200
    assert await collections.sweep_orphans(confirm_after_s=0) == ()
    assert leftover in await db.list_collection_names()  # the sweep reports it, the next restore drops it
    with pytest.raises(ValueError):
        await records.drop_stored("recordsless")


async def test_a_delete_whose_epoch_bump_fails_leaves_the_records_to_the_sweep(
        client: Any, admin_token: str, services: Services, cache_server: ChildServer) -> None:
    """An unmoved epoch must keep meaning "not dropped yet", so the drop waits for the sweep."""
    collection = await create_collection(client, admin_token, "unbumped", [{"name": "title", "type": "text"}])
    await create_record(client, admin_token, "unbumped", {"title": "left for the sweep"})
    cache_server.stop()  # the cache Redis (epochs) is down; the queue's Redis is not
    response = await client.delete(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token))
    assert response.status == 204
    name = records_mongo_name(collection["id"])
    assert name in await services.records.repository.database_names()
    assert (await client.get(records_path("unbumped"))).status == 404
    assert await services.collections.sweep_orphans(confirm_after_s=0) == (name,)
