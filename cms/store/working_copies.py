"""Repository of working copies: the editors' state of every record of a collection with drafts, one
Mongo collection per CMS collection, `drafts_<collection id>` (docs/concepts/drafts.md, Storage).

A working copy is stored like a record (`_id`, `created`, `updated` and the field values at the top
level, so the one filter engine's queries, sorts and searches run on it unchanged) plus the draft
keys of documents.py: `_status`, `_published_at`, `_scheduled_at`, `_schedule_error` and `_rev`, the
revision every change of the working state raises (the condition of a publish). The published copies
stay in `records_<collection id>` (records.py), which readers alone query. `WorkingCopyRepository`
is a `RecordRepository` on the other Mongo collection: its reads, relation clean-ups and schema
upkeep (dropped fields, converted values) are the records' own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError

from cms.models import PUBLISHED, DraftState, Record
from cms.store.bulk import DUPLICATE_KEY, chunks
from cms.store.documents import (
    PUBLISHED_AT,
    REVISION,
    SCHEDULE_ERROR,
    SCHEDULED_AT,
    STATUS,
    document_after_update,
    record_from_document,
    working_document,
    working_mongo_name,
)
from cms.store.guarded import write_unchanged
from cms.store.records import RecordRepository
from cms.store.transactions import current_session


class WorkingCopyRepository(RecordRepository):
    """Working copies of every collection with drafts; callers pass the collection id. Every write
    that changes the working state raises its revision; `revision=` makes it conditional on the
    revision read before (None when another writer got there first)."""

    def _mongo_coll(self, collection_id: str) -> AsyncCollection[dict[str, Any]]:
        return self._db[working_mongo_name(collection_id)]

    async def ensure_indexes(self, collection_id: str) -> None:
        """The index of the default sort of `?draft=true` lists (`created`, `_id`), as records have."""
        await self._mongo_coll(collection_id).create_index([("created", 1), ("_id", 1)], name="created_id")

    async def insert_working(self, collection_id: str, record: Record) -> None:
        """Store a new working copy (`documents.working_document`: a draft unless `record.state` says)."""
        await self._mongo_coll(collection_id).insert_one(working_document(record), session=current_session())

    async def insert_missing(self, collection_id: str, records: Sequence[Record]) -> int:
        """Store working copies of `records` (published copies, `state` set) for those that have none
        yet; one unordered insert per chunk, an existing one left as it is. Returns how many were stored."""
        stored = 0
        for chunk in chunks(records):
            try:
                result = await self._mongo_coll(collection_id).insert_many([working_document(r) for r in chunk],
                                                                           ordered=False)
                stored += len(result.inserted_ids)
            except BulkWriteError as exc:
                errors = exc.details.get("writeErrors", [])
                if any(e.get("code") != DUPLICATE_KEY for e in errors) or exc.details.get("writeConcernErrors"):
                    raise
                stored += int(exc.details.get("nInserted", 0))
        return stored

    async def edit(self, collection_id: str, record_id: str, set_values: Mapping[str, Any], unset: Sequence[str],
                   *, status: str, revision: int) -> Record | None:
        """Set and unset field values of one working copy (`set_values` may stamp `updated`), give it
        `status` and raise its revision, if its revision is still `revision`. Returns the working copy
        after, or None (gone, or changed since it was read)."""
        change: dict[str, Any] = {"$set": {**set_values, STATUS: status}, "$inc": {REVISION: 1}}
        if unset:
            change["$unset"] = {name: "" for name in unset}
        return await self._change(collection_id, record_id, revision, change)

    async def edit_many(self, collection_id: str, edits: Sequence[tuple[str, int, str]], set_values: Mapping[str, Any],
                        unset: Sequence[str]) -> int:
        """`edit` for many working copies in one bulk write (a bulk update): `edits` holds (record id,
        revision, status) of each; each changes only if its revision is still the one given. Returns how
        many matched (fewer than `edits`: some were changed or deleted meanwhile)."""
        if not edits:
            return 0
        matched = 0
        for chunk in chunks(list(edits)):
            requests = []
            for record_id, revision, status in chunk:
                change: dict[str, Any] = {"$set": {**set_values, STATUS: status}, "$inc": {REVISION: 1}}
                if unset:
                    change["$unset"] = {name: "" for name in unset}
                requests.append(UpdateOne({"_id": record_id, REVISION: revision}, change))
            result = await self._mongo_coll(collection_id).bulk_write(requests, ordered=False,
                                                                      session=current_session())
            matched += result.matched_count
        return matched

    async def set_state(self, collection_id: str, record_id: str, state: DraftState, *, revision: int,
                        updated: datetime | None = None, scheduled_at: datetime | None = None,
                        end_schedule: bool = False) -> Record | None:
        """Give one working copy the `status` and `published_at` of `state` (and `updated`, if given)
        and raise its revision, if its revision is still `revision` (a publish's claim, an unpublish,
        an undone claim). `scheduled_at`: a scheduled publish's time, which the working copy must
        still show (not cancelled or replaced meanwhile); it is cleared with the claim. `end_schedule`:
        clear whatever scheduled time it shows (a publish now ends a pending schedule). Returns the
        working copy after, or None."""
        values: dict[str, Any] = {STATUS: state.status, PUBLISHED_AT: state.published_at}
        if updated is not None:
            values["updated"] = updated
        if scheduled_at is not None:
            values.update({SCHEDULED_AT: None, SCHEDULE_ERROR: None})
        elif end_schedule:
            values[SCHEDULED_AT] = None
        return await self._change(collection_id, record_id, revision, {"$set": values, "$inc": {REVISION: 1}},
                                  scheduled_at=scheduled_at)

    async def set_states(self, collection_id: str, claims: Sequence[tuple[str, int, datetime | None]],
                         state: DraftState, *, updated: datetime, end_schedules: bool = False) -> int:
        """`set_state` for many working copies in one bulk write (a batch of scheduled publishes, a
        release, in the caller's transaction): `claims` holds (record id, revision, scheduled_at or None)
        of each; `end_schedules`: a claim without scheduled_at clears whatever scheduled time its working
        copy shows (a release published now ends its records' own schedules, as `set_state`'s
        `end_schedule`). Returns how many still matched (fewer than `claims`: the caller's transaction
        must abort)."""
        if not claims:
            return 0
        values: dict[str, Any] = {STATUS: state.status, PUBLISHED_AT: state.published_at, "updated": updated}
        requests = []
        for record_id, revision, scheduled_at in claims:
            query: dict[str, Any] = {"_id": record_id, REVISION: revision}
            change = dict(values)
            if scheduled_at is not None:
                query[SCHEDULED_AT] = scheduled_at
                change.update({SCHEDULED_AT: None, SCHEDULE_ERROR: None})
            elif end_schedules:
                change[SCHEDULED_AT] = None
            requests.append(UpdateOne(query, {"$set": change, "$inc": {REVISION: 1}}))
        result = await self._mongo_coll(collection_id).bulk_write(requests, ordered=True, session=current_session())
        return result.matched_count

    async def _change(self, collection_id: str, record_id: str, revision: int | None, change: dict[str, Any], *,
                      scheduled_at: datetime | None = None) -> Record | None:
        """Apply `change` (`$set`, `$unset`, `$inc`) to one working copy if its revision is still
        `revision` (None: any) and, with `scheduled_at`, it still shows that scheduled time; returns
        the working copy after (replayed in memory: `document_after_update`), or None. Read, then
        `update_one` guarded by what was read (`_guard`, `guarded.write_unchanged`)."""
        mongo_coll = self._mongo_coll(collection_id)

        async def write(doc: dict[str, Any]) -> bool:
            return (await mongo_coll.update_one(_guard(doc), change, session=current_session())).matched_count == 1

        doc = await write_unchanged(lambda: self._wanted(collection_id, record_id, revision, scheduled_at), write)
        if doc is None:
            return None
        return record_from_document(document_after_update(doc, change.get("$set", {}), change.get("$unset", {}),
                                                          change.get("$inc")))

    async def _wanted(self, collection_id: str, record_id: str, revision: int | None,
                      scheduled_at: datetime | None) -> dict[str, Any] | None:
        """The stored working copy, if it is at `revision` (None: any) and shows `scheduled_at` (None:
        any), else None: the read of a guarded write."""
        doc = await self.read_document(collection_id, record_id)
        if doc is None or (revision is not None and doc.get(REVISION) != revision):
            return None
        return None if scheduled_at is not None and doc.get(SCHEDULED_AT) != scheduled_at else doc

    async def end_schedule(self, collection_id: str, record_id: str, scheduled_at: datetime,
                           error: str | None) -> bool:
        """Clear the scheduled time of one working copy (with the `error` of its failed publish, or
        None) if it still shows `scheduled_at`. Returns False when it does not (cancelled, replaced,
        or already served)."""
        result = await self._mongo_coll(collection_id).update_one(
            {"_id": record_id, SCHEDULED_AT: scheduled_at}, {"$set": {SCHEDULED_AT: None, SCHEDULE_ERROR: error}},
            session=current_session())
        return result.modified_count == 1

    async def replace_values(self, collection_id: str, record: Record, *, revision: int) -> Record | None:
        """Replace the field values and the state of one working copy by `record`'s (its revision
        raised), if its revision is still `revision`. Returns the working copy after, or None."""
        doc = working_document(record)
        doc[REVISION] = revision + 1
        mongo_coll = self._mongo_coll(collection_id)

        async def write(current: dict[str, Any]) -> bool:
            return (await mongo_coll.replace_one(_guard(current), doc, session=current_session())).matched_count == 1

        stored = await write_unchanged(lambda: self._wanted(collection_id, record.id, revision, None), write)
        return record_from_document(doc) if stored else None

    async def set_schedule(self, collection_id: str, record_id: str, at: Any, error: str | None) -> Record | None:
        """Set the scheduled time `at` (None: no schedule) and the `error` of the last scheduled
        publish of one working copy, its revision untouched (a schedule is not an edit). Returns the
        working copy after, or None when there is none."""
        return await self._change(collection_id, record_id, None, {"$set": {SCHEDULED_AT: at, SCHEDULE_ERROR: error}})

    async def drop_published(self, collection_id: str) -> int:
        """Remove the working copies with nothing pending (`published`), to be made again from the
        published copies (a collection turning drafts on again). Returns how many."""
        return (await self._mongo_coll(collection_id).delete_many({STATUS: PUBLISHED})).deleted_count


def _guard(doc: dict[str, Any]) -> dict[str, Any]:
    """The filter of a guarded write of one working copy: its `_id` and, as read, its revision (which
    every edit raises), `updated` and schedule (which a schedule changes without an edit); top-level
    equalities only, so the embedded server writes through its `_id` look-up, not a scan."""
    return {"_id": doc["_id"], REVISION: doc.get(REVISION), "updated": doc.get("updated"),
            SCHEDULED_AT: doc.get(SCHEDULED_AT), SCHEDULE_ERROR: doc.get(SCHEDULE_ERROR)}
