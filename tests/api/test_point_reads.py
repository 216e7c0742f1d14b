"""Point reads by id, batched per collection (issue 38, item 6): concurrent gets of one collection
are read by one `_id $in` query while another read of it is in flight, and each still gets its own
record (or None), as if read alone."""

from __future__ import annotations

import asyncio
from typing import Any

from cms.store.documents import records_mongo_name
from cms.wiring import Services
from tests.api.test_read_cache import POSTS
from tests.conftest import create_collection, create_record, records_path
from tests.fixtures import CommandLog


def id_finds(mongo_commands: CommandLog, collection_id: str) -> list[Any]:
    """The `_id` filters of the finds sent to the collection's records, in order."""
    return [c.filter["_id"] for c in mongo_commands.finds(records_mongo_name(collection_id), "_id")]


async def test_gets_that_arrive_while_one_is_in_flight_are_one_query(
        client: Any, services: Services, admin_token: str, mongo_commands: CommandLog) -> None:
    posts = await create_collection(client, admin_token, "posts", POSTS, list_rule="", view_rule="")
    made = [await create_record(client, admin_token, "posts", {"title": f"t{n}", "views": n}) for n in range(12)]
    repository = services.records.repository
    asked = [made[0]["id"], *(r["id"] for r in made[1:]), "no-such-record", made[5]["id"]]
    mongo_commands.commands.clear()
    # all start in one step of the loop: the first is read alone, the rest wait for it and go together
    records = await asyncio.gather(*(repository.get(posts["id"], record_id) for record_id in asked))
    assert [r.id if r else None for r in records] == [*(r["id"] for r in made), None, made[5]["id"]]
    assert [r.data["title"] if r else None for r in records] == [*(f"t{n}" for n in range(12)), None, "t5"]
    assert records[5] is not records[-1] and records[5] == records[-1]  # one id asked twice: two records
    finds = id_finds(mongo_commands, posts["id"])
    assert finds[0] == made[0]["id"] and sorted(finds[1]["$in"]) == sorted(asked[1:-1])
    assert len(finds) == 2
    assert services.records.repository.points.pending() == 0
    # a lone get is read at once, alone
    mongo_commands.commands.clear()
    alone = await repository.get(posts["id"], made[3]["id"])
    assert alone is not None and alone.data["views"] == 3
    assert id_finds(mongo_commands, posts["id"]) == [made[3]["id"]]


async def test_gets_of_other_collections_are_not_mixed(
        client: Any, services: Services, admin_token: str, mongo_commands: CommandLog) -> None:
    first = await create_collection(client, admin_token, "posts", POSTS, list_rule="", view_rule="")
    second = await create_collection(client, admin_token, "notes", POSTS, list_rule="", view_rule="")
    a = [await create_record(client, admin_token, "posts", {"title": f"a{n}"}) for n in range(3)]
    b = [await create_record(client, admin_token, "notes", {"title": f"b{n}"}) for n in range(3)]
    repository = services.records.repository
    mongo_commands.commands.clear()
    asks = [(first["id"], r["id"]) for r in a] + [(second["id"], r["id"]) for r in b] + [(second["id"], a[0]["id"])]
    got = await asyncio.gather(*(repository.get(cid, rid) for cid, rid in asks))
    assert [r.data["title"] if r else None for r in got] == ["a0", "a1", "a2", "b0", "b1", "b2", None]
    assert len(id_finds(mongo_commands, first["id"])) == 2 and len(id_finds(mongo_commands, second["id"])) == 2


async def test_a_cancelled_get_leaves_the_others_of_its_batch_answered(
        client: Any, services: Services, admin_token: str) -> None:
    posts = await create_collection(client, admin_token, "posts", POSTS, list_rule="", view_rule="")
    made = [await create_record(client, admin_token, "posts", {"title": f"t{n}"}) for n in range(4)]
    repository = services.records.repository
    tasks = [asyncio.create_task(repository.get(posts["id"], r["id"])) for r in made]
    await asyncio.sleep(0)  # each task has run to its first wait: the first reads, three wait behind it
    assert repository.points.pending() == 3
    tasks[2].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[2], asyncio.CancelledError)
    assert [r.data["title"] for r in done if not isinstance(r, BaseException) and r is not None] == ["t0", "t1", "t3"]
    assert repository.points.pending() == 0


async def test_first_touch_gets_through_the_api_answer_each_its_own_record(
        client: Any, admin_token: str, mongo_commands: CommandLog) -> None:
    posts = await create_collection(client, admin_token, "posts", POSTS, list_rule="", view_rule="")
    made = [await create_record(client, admin_token, "posts", {"title": f"t{n}", "views": n}) for n in range(20)]
    mongo_commands.commands.clear()

    async def read(record_id: str) -> tuple[int, Any]:
        response = await client.get(records_path("posts", record_id))
        return response.status, await response.json()

    answers = await asyncio.gather(*(read(r["id"]) for r in made), read("missing0000000"))
    assert answers[:-1] == [(200, r) for r in made]
    assert answers[-1][0] == 404
    finds = id_finds(mongo_commands, posts["id"])
    assert sum(len(f["$in"]) if isinstance(f, dict) else 1 for f in finds) == 21  # each id read once


async def test_reads_of_several_ids_join_the_batch_as_one_caller(
        client: Any, services: Services, admin_token: str, mongo_commands: CommandLog) -> None:
    posts = await create_collection(client, admin_token, "posts", POSTS, list_rule="", view_rule="")
    made = [await create_record(client, admin_token, "posts", {"title": f"t{n}"}) for n in range(6)]
    ids = [r["id"] for r in made]
    repository = services.records.repository
    mongo_commands.commands.clear()
    first, many, overlapping, none = await asyncio.gather(
        repository.get(posts["id"], ids[0]), repository.find_by_ids(posts["id"], [ids[1], ids[2], "missing", ids[1]]),
        repository.find_by_ids(posts["id"], [ids[2], ids[3]]), repository.find_by_ids(posts["id"], []))
    assert first is not None and first.id == ids[0] and none == []
    assert sorted(r.data["title"] for r in many) == ["t1", "t2"]
    assert sorted(r.data["title"] for r in overlapping) == ["t2", "t3"]
    finds = id_finds(mongo_commands, posts["id"])
    assert len(finds) == 2 and sorted(finds[1]["$in"]) == sorted([ids[1], ids[2], "missing", ids[3]])
