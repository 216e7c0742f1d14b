"""Repository of scheduled publishes (Mongo collection `schedules`): the truth of every pending
scheduled publish (decisions.md, Drafts, versions and scheduled publishing; docs/concepts/drafts.md,
Scheduling).

One document per scheduled record, `_id` `<collection id>:<record id>`: `{collection_id, record_id,
at, due, lease_id, attempts, by, origin, locale}` (`locale`: the one locale a publish of localized values
publishes, or null for everything). `due` is when it may next be claimed: `at` when it is written, then
the end of each claim's lease, so one index on `due` finds what is due and what a worker that died
left behind, and nothing is ever claimed before its `at`. A claim (`claim_many`) takes what is still
due with one `update_many` under a new `lease_id` (atomic per schedule: two workers never hold the
same schedule at once); finishing deletes the document only
while the claim's `lease_id` is still on it, so a schedule replaced or taken over meanwhile is left
alone. No write here joins a transaction: a claim never waits for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cms.clock import new_id
from cms.store.bulk import chunks
from cms.store.client import Database


@dataclass(frozen=True)
class Schedule:
    """A pending scheduled publish of record `record_id` of collection `collection_id` at `at`;
    `lease_id` names the claim holding it (a new one per claim), `attempts` counts the claims, `by` is
    who scheduled it (a user id, or None), `origin` the request that did (`RequestOrigin.to_json()`:
    the audit entry of a failed publish carries it) and `locale` the locale code whose values of
    localized fields it publishes (None: the whole working copy; decisions.md, Localized fields)."""

    collection_id: str
    record_id: str
    at: datetime
    lease_id: str
    attempts: int = 0
    by: str | None = None
    origin: dict[str, Any] | None = None
    locale: str | None = None


def schedule_id(collection_id: str, record_id: str) -> str:
    """The `_id` of a record's schedule."""
    return f"{collection_id}:{record_id}"


def _from_document(doc: dict[str, Any]) -> Schedule:
    return Schedule(collection_id=doc["collection_id"], record_id=doc["record_id"], at=doc["at"],
                    lease_id=doc["lease_id"], attempts=int(doc.get("attempts", 0)), by=doc.get("by"),
                    origin=doc.get("origin"), locale=doc.get("locale"))


class ScheduleRepository:
    """Pending scheduled publishes (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["schedules"]

    async def ensure_indexes(self) -> None:
        """The due index, and the one that finds a collection's schedules when it is deleted."""
        await self._mongo_coll.create_index([("due", 1)], name="due")
        await self._mongo_coll.create_index([("lease_id", 1)], name="lease_id")
        await self._mongo_coll.create_index([("collection_id", 1)], name="collection_id")

    async def put(self, collection_id: str, record_id: str, at: datetime, by: str | None,
                  origin: dict[str, Any] | None = None, *, locale: str | None = None) -> Schedule:
        """Schedule the record's publish at `at` (of `locale`'s values only, when given), replacing its
        pending schedule if any (a claim of the old one can no longer finish). Returns the schedule."""
        schedule = Schedule(collection_id, record_id, at, new_id(), 0, by, origin, locale)
        await self._mongo_coll.replace_one(
            {"_id": schedule_id(collection_id, record_id)},
            {"collection_id": collection_id, "record_id": record_id, "at": at, "due": at, "lease_id": schedule.lease_id,
             "attempts": 0, "by": by, "origin": origin, "locale": locale}, upsert=True)
        return schedule

    async def cancel(self, collection_id: str, record_id: str, at: datetime | None = None) -> bool:
        """Drop the record's pending schedule (with `at`: only if it is still the one for that time, not
        one that replaced it). Returns False when there was none."""
        query: dict[str, Any] = {"_id": schedule_id(collection_id, record_id)}
        if at is not None:
            query["at"] = at
        result = await self._mongo_coll.delete_one(query)
        return result.deleted_count == 1

    async def cancel_many(self, collection_id: str, record_ids: Sequence[str]) -> int:
        """Drop the pending schedules of the records of `record_ids` (a bulk delete). Returns how many."""
        dropped = 0
        for chunk in chunks([schedule_id(collection_id, record_id) for record_id in record_ids]):
            dropped += (await self._mongo_coll.delete_many({"_id": {"$in": chunk}})).deleted_count
        return dropped

    async def cancel_collection(self, collection_id: str) -> int:
        """Drop every pending schedule of a collection (deleted, or its drafts turned off). Returns how many."""
        return (await self._mongo_coll.delete_many({"collection_id": collection_id})).deleted_count

    async def claim_many(self, now: datetime, lease_s: float, limit: int) -> list[Schedule]:
        """Take the schedules that have been due longest, about `limit` of them, under one new
        `lease_id`, for `lease_s` seconds per `limit` taken: those due at or before the due time of the
        `limit`-th (all of them when fewer are due; every schedule due at that same time too, so
        schedules due together are taken together). Index range reads only, never a long `$in`: the
        cut-off, how many it takes, one `update_many` that takes those still due (atomic per schedule:
        two workers never take the same one), then the ones taken. An empty list when nothing is due."""
        edge = await self._mongo_coll.find_one({"due": {"$lte": now}}, projection={"due": 1}, sort=[("due", 1)],
                                               skip=limit - 1)
        cutoff = now if edge is None else edge["due"]
        count = await self._mongo_coll.count_documents({"due": {"$lte": cutoff}})
        if not count:
            return []
        lease_id = new_id()
        lease_end = now + timedelta(seconds=lease_s * -(-count // limit))
        await self._mongo_coll.update_many({"due": {"$lte": cutoff}},
                                           {"$set": {"due": lease_end, "lease_id": lease_id}, "$inc": {"attempts": 1}})
        return [_from_document(d) async for d in self._mongo_coll.find({"lease_id": lease_id})]

    async def finish_many(self, schedules: Sequence[Schedule]) -> int:
        """`finish` for many schedules (one `delete_many` per claim). Returns how many were dropped."""
        dropped = 0
        by_lease: dict[str, list[str]] = {}
        for schedule in schedules:
            by_lease.setdefault(schedule.lease_id, []).append(schedule_id(schedule.collection_id, schedule.record_id))
        for lease_id, ids in by_lease.items():
            for chunk in chunks(ids):
                result = await self._mongo_coll.delete_many({"lease_id": lease_id, "_id": {"$in": chunk}})
                dropped += result.deleted_count
        return dropped

    async def finish(self, schedule: Schedule) -> bool:
        """Drop `schedule` if its claim still holds it (its `lease_id` is on it). Returns False when it
        was replaced, cancelled or taken over meanwhile."""
        result = await self._mongo_coll.delete_one(
            {"_id": schedule_id(schedule.collection_id, schedule.record_id), "lease_id": schedule.lease_id})
        return result.deleted_count == 1

    async def release(self, schedule: Schedule, due: datetime) -> None:
        """Offer a schedule its claim could not finish (it lost a race) to the claims from `due` on
        (never before its `at`), if the claim still holds it."""
        await self._mongo_coll.update_one(
            {"_id": schedule_id(schedule.collection_id, schedule.record_id), "lease_id": schedule.lease_id},
            {"$set": {"due": max(due, schedule.at)}})

    async def pending(self) -> int:
        """How many schedules are pending (monitoring, tests)."""
        return await self._mongo_coll.count_documents({})
