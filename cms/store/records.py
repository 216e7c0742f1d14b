"""Repository of records: one Mongo collection per CMS collection, `records_<collection id>`.

Field values are stored at the top level of the document, next to `_id`, `created` and
`updated`, so filters, sorts and unique indexes work on plain paths. `RecordRepository` is the
writes (inserts, updates, deletes, relation clean-ups, bulk changes) and the schema's upkeep (indexes,
dropped fields, dropped collections) on top of `RecordQueries`, the reads (record_queries.py). The
document conversion and the collection names are in documents.py, the chunking of ids and bulk-error
helpers in bulk.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pymongo
from pymongo import DeleteMany, ReplaceOne, UpdateMany, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, OperationFailure

from cms.errors import ValidationFailed
from cms.models import Record
from cms.store.bulk import DUPLICATE_KEY, InsertFailure, bulk_write_error, chunks, write_failure
from cms.store.documents import (
    PUBLISHED_AT,
    RECORDS_PREFIX,
    UNIQUE_PREFIX,
    record_after_update,
    record_from_document,
    record_to_document,
)
from cms.store.errors import translate_errors
from cms.store.guarded import write_unchanged
from cms.store.record_indexes import IndexSpec, drop_index_if_there, sync_managed
from cms.store.record_queries import RecordQueries
from cms.store.transactions import current_session

TEXT_INDEX = "search_text"
LONG_WRITE_TIMEOUT_S = 600
"""Seconds one write over every record of a collection may take (a dropped field unset, a field renamed):
the embedded server rewrites about 1,500 records a second, fewer on a busy machine."""


class RecordRepository(RecordQueries):
    """Records of every collection: the reads of `RecordQueries` (list queries take a slot of the
    process's scan line, point reads do not) and every write; callers pass the collection id."""

    async def insert(self, collection_id: str, record: Record) -> None:
        """Store a new record. Raises AlreadyExists naming a field whose unique index refused it."""
        async with translate_errors("record"):
            await self._mongo_coll(collection_id).insert_one(record_to_document(record), session=current_session())

    async def insert_many(self, collection_id: str, records: Sequence[Record]) -> list[InsertFailure]:
        """Store new records in one unordered bulk insert: every record that can be stored is.
        Returns the ones that were refused (unique-index conflicts, by index), empty when all went in."""
        return await self._insert_many(collection_id, records, ordered=False)

    async def insert_in_order(self, collection_id: str, records: Sequence[Record]) -> InsertFailure | None:
        """Store new records in one ordered bulk insert (a batch's run of creates, in its transaction):
        in order, stopping at the first record refused (a unique-index conflict), which is returned
        (its index); None when all went in."""
        failures = await self._insert_many(collection_id, records, ordered=True)
        return failures[0] if failures else None

    async def _insert_many(self, collection_id: str, records: Sequence[Record], *,
                           ordered: bool) -> list[InsertFailure]:
        if not records:
            return []
        try:
            async with translate_errors("record"):
                await self._mongo_coll(collection_id).insert_many(
                    [record_to_document(r) for r in records], ordered=ordered, session=current_session()
                )
        except BulkWriteError as exc:
            failures = [write_failure(e) for e in exc.details.get("writeErrors", [])]
            if exc.details.get("writeConcernErrors"):
                raise
            return failures
        return []

    async def update(
        self, collection_id: str, record_id: str, set_values: dict[str, Any], unset: Sequence[str], *,
        expected_updated: datetime | None = None,
    ) -> tuple[Record, Record] | None:
        """Set and unset fields of one record (`set_values` may stamp `updated`); returns the record
        as it was before the change and as it is after it (`record_after_update`, no second read),
        or None if gone (or, with `expected_updated`, when its `updated` is no longer that: it
        changed since it was read). A stamp of `updated` not after the stored one (two writes in one
        millisecond) becomes the stored one plus 1 ms, so each write of a record moves `updated`
        forward, the guard of `guarded.write_unchanged` (read, then `update_one` by `_id` and
        `updated`, retried on a miss). Raises AlreadyExists on a unique-index conflict, WriteConflict
        when other writers kept winning (GUARDED_WRITE_ATTEMPTS)."""
        return await update_guarded(self._mongo_coll(collection_id), set_values, unset, "record",
                                    lambda: self._current(collection_id, record_id, expected_updated))

    async def put(self, collection_id: str, record: Record) -> Record | None:
        """Store `record` whole, replacing the record of its id if there is one (a publish: the
        published copy of a collection with drafts). Returns the record it replaced, or None when
        there was none. Read, then `replace_one` guarded by `_id` and `updated` as read, or, when there
        was none, an upsert that only inserts (`$setOnInsert`: a copy stored meanwhile is left to the
        next try), retried on a miss (GUARDED_WRITE_ATTEMPTS, then WriteConflict). Raises
        AlreadyExists on a unique-index conflict."""
        doc = record_to_document(record)
        mongo_coll = self._mongo_coll(collection_id)

        async def read() -> dict[str, Any] | None:
            return await self.read_document(collection_id, record.id) or {}

        async def write(current: dict[str, Any]) -> bool:
            async with translate_errors("record"):
                if current:
                    return (await mongo_coll.replace_one(_guard(current), doc,
                                                         session=current_session())).matched_count == 1
                inserted = await mongo_coll.update_one(
                    {"_id": record.id}, {"$setOnInsert": {k: v for k, v in doc.items() if k != "_id"}},
                    upsert=True, session=current_session())
            return inserted.upserted_id is not None

        replaced = await write_unchanged(read, write)
        return record_from_document(replaced) if replaced else None

    async def put_all(self, collection_id: str, records: Sequence[Record]) -> None:
        """`put` for many records in one bulk write (a batch of publishes, in the caller's transaction).
        Raises AlreadyExists on a unique-index conflict."""
        if not records:
            return
        requests = [ReplaceOne({"_id": r.id}, record_to_document(r), upsert=True) for r in records]
        try:
            async with translate_errors("record"):
                await self._mongo_coll(collection_id).bulk_write(requests, ordered=True, session=current_session())
        except BulkWriteError as exc:
            raise bulk_write_error(exc) from None

    async def delete(self, collection_id: str, record_id: str, *,
                     expected_updated: datetime | None = None) -> Record | None:
        """Remove one record and return it as it was; None if it did not exist (or, with
        `expected_updated`, changed since it was read). Read, then `delete_one` by `_id` and `updated`
        (`guarded.write_unchanged`). Raises WriteConflict when other writers kept winning."""
        mongo_coll = self._mongo_coll(collection_id)

        async def write(doc: dict[str, Any]) -> bool:
            return (await mongo_coll.delete_one(_guard(doc), session=current_session())).deleted_count == 1

        doc = await write_unchanged(lambda: self._current(collection_id, record_id, expected_updated), write)
        return record_from_document(doc) if doc else None

    async def _current(self, collection_id: str, record_id: str,
                       expected_updated: datetime | None) -> dict[str, Any] | None:
        """The stored document of one record (a point read), or None when it is missing or, with
        `expected_updated`, its `updated` is no longer that: the read of a guarded write."""
        doc = await self.read_document(collection_id, record_id)
        if doc is None or (expected_updated is not None and doc.get("updated") != expected_updated):
            return None
        return doc

    async def remove_references(self, collection_id: str, field_name: str, record_ids: Sequence[str], *,
                                multi: bool, now: datetime, skip_ids: Sequence[str] = ()) -> list[str]:
        """Remove `record_ids` from relation field `field_name` of every record that holds one
        (`$pull` from a list when `multi`, else clear the field), stamping `updated` with `now`;
        records in `skip_ids` are left alone. Returns the ids of the records changed."""
        changed: list[str] = []
        mongo_coll = self._mongo_coll(collection_id)
        for chunk in chunks(record_ids):
            query: dict[str, Any] = {field_name: {"$in": chunk}}
            if skip_ids:
                query["_id"] = {"$nin": list(skip_ids)}
            ids = [d["_id"] async for d in mongo_coll.find(query, projection={"_id": 1}, session=current_session())]
            if not ids:
                continue
            change: dict[str, Any] = (
                {"$pull": {field_name: {"$in": chunk}}, "$set": {"updated": now}} if multi
                else {"$unset": {field_name: ""}, "$set": {"updated": now}}
            )
            for id_chunk in chunks(ids):
                await mongo_coll.update_many({"_id": {"$in": id_chunk}, field_name: {"$in": chunk}}, change,
                                             session=current_session())
            changed.extend(ids)
        return list(dict.fromkeys(changed))

    async def update_many(
        self, collection_id: str, record_ids: Sequence[str], set_values: dict[str, Any], unset: Sequence[str]
    ) -> int:
        """Set and unset the same fields on every record of `record_ids` in one bulk write; returns how
        many records matched. Not atomic across records: a unique-index conflict (AlreadyExists) may
        leave some changed, so callers rule conflicts out first."""
        if not record_ids:
            return 0
        change: dict[str, Any] = {"$set": set_values}
        if unset:
            change["$unset"] = {name: "" for name in unset}
        requests = [UpdateMany({"_id": {"$in": chunk}}, change) for chunk in chunks(record_ids)]
        try:
            async with translate_errors("record"):
                result = await self._mongo_coll(collection_id).bulk_write(requests, ordered=True,
                                                                          session=current_session())
        except BulkWriteError as exc:
            raise bulk_write_error(exc) from None
        return result.matched_count

    async def delete_many(self, collection_id: str, record_ids: Sequence[str]) -> int:
        """Remove the records of `record_ids` in one bulk write; returns how many were removed."""
        if not record_ids:
            return 0
        requests = [DeleteMany({"_id": {"$in": chunk}}) for chunk in chunks(record_ids)]
        async with translate_errors("record"):
            result = await self._mongo_coll(collection_id).bulk_write(requests, ordered=True,
                                                                      session=current_session())
        return result.deleted_count

    async def drop(self, collection_id: str) -> None:
        """Remove every record of the collection and its indexes."""
        await self._mongo_coll(collection_id).drop()

    async def drop_stored(self, name: str) -> None:
        """Drop the records collection called `name` (a name of `database_names` starting with
        RECORDS_PREFIX). Raises ValueError
        for a name that is not a records collection's."""
        if not name.startswith(RECORDS_PREFIX):
            raise ValueError(f"{name!r} is not a records collection")
        await self._db.drop_collection(name)

    async def mark_published(self, collection_id: str, record_ids: Sequence[str],
                             published_at: datetime | None) -> None:
        """Mark the records of `record_ids` as published at `published_at` (a collection turning drafts
        on: its records become published copies), or unmark them (None: turning drafts off); one
        `update_many` per ID_CHUNK ids, so no single command runs long on a large collection."""
        change = {"$unset": {PUBLISHED_AT: ""}} if published_at is None else {"$set": {PUBLISHED_AT: published_at}}
        for chunk in chunks(record_ids):
            await self._mongo_coll(collection_id).update_many({"_id": {"$in": chunk}}, change)

    async def unset_fields(self, collection_id: str, names: Sequence[str]) -> None:
        """Remove fields (dropped from the schema) from every record: one `update_many`, allowed up to
        LONG_WRITE_TIMEOUT_S (over every record of a large collection it outlasts the ordinary time-out)."""
        if names:
            with pymongo.timeout(LONG_WRITE_TIMEOUT_S):
                await self._mongo_coll(collection_id).update_many({}, {"$unset": {n: "" for n in names}})

    async def rename_fields(self, collection_id: str, renames: Mapping[str, str]) -> None:
        """Move each record's value of field `old` to field `new` (`renames`: old -> new), in one
        `update_many` with `$rename` (inside the open transaction, if any), allowed up to
        LONG_WRITE_TIMEOUT_S; `updated` is not touched. Idempotent: a record without `old` is left as
        it is (one holding both gets the value of `old`)."""
        if renames:
            with pymongo.timeout(LONG_WRITE_TIMEOUT_S):
                await self._mongo_coll(collection_id).update_many(
                    {"$or": [{old: {"$exists": True}} for old in renames]}, {"$rename": dict(renames)},
                    session=current_session())

    async def restore_field_values(
        self, collection_id: str, items: Sequence[tuple[str, datetime, dict[str, Any], Sequence[str]]]
    ) -> None:
        """Put field values back as they were read (the write-ahead copy of a rewrite cut short): per
        (record id, updated as read, {name: value}, names of the rewrite), set those values and unset
        the other names, on records still at that `updated` (one changed since keeps what it holds).
        One unordered bulk write."""
        requests = []
        for record_id, updated, values, names in items:
            change: dict[str, Any] = {}
            if values:
                change["$set"] = values
            missing = [name for name in names if name not in values]
            if missing:
                change["$unset"] = {name: "" for name in missing}
            if change:
                requests.append(UpdateOne({"_id": record_id, "updated": updated}, change))
        if requests:
            await self._mongo_coll(collection_id).bulk_write(requests, ordered=False)

    async def sync_indexes(self, collection_id: str, unique_fields: Sequence[str], text_fields: Sequence[str],
                           managed: Sequence[IndexSpec] = (), *, kept_unique: Sequence[str] = ()) -> None:
        """Make the record indexes match the schema: `created` for the default sort, one unique
        index per unique path (`unique_<path>`; a localized field's `title.de`; partial: absent values
        do not collide), where the server supports it one text index over the text fields, and the
        `managed` indexes (automatic and declared ones, `record_indexes.sync_managed`), each built with
        `background` where the server accepts it. The unique indexes of the paths under a name of
        `kept_unique` stay even when not wanted (a localized unique field keeps the index of a locale
        removed from the setting, whose values stay too).

        Raises ValidationFailed when existing records already hold duplicates of a new unique field
        or a new unique managed index."""
        mongo_coll = self._mongo_coll(collection_id)
        await mongo_coll.create_index([("created", 1), ("_id", 1)], name="created_id")
        existing = await mongo_coll.index_information()
        wanted = {f"{UNIQUE_PREFIX}{name}": name for name in unique_fields}
        # New indexes first: when one fails over duplicates, the old rules are all still in force.
        for index_name, field_name in wanted.items():
            if index_name in existing:
                continue
            try:
                await mongo_coll.create_index(
                    field_name,
                    name=index_name,
                    unique=True,
                    partialFilterExpression={field_name: {"$exists": True}},
                )
            except OperationFailure as exc:
                if exc.code == DUPLICATE_KEY:
                    raise ValidationFailed(
                        f"Existing records hold duplicate values of '{field_name}'",
                        errors={field_name: ["Existing records hold duplicate values"]},
                    ) from None
                raise
        kept = tuple(f"{UNIQUE_PREFIX}{name}." for name in kept_unique)
        for index_name in existing:
            if index_name.startswith(UNIQUE_PREFIX) and index_name not in wanted and not index_name.startswith(kept):
                await drop_index_if_there(mongo_coll, index_name)
        await sync_managed(mongo_coll, existing, managed, background=self.capabilities.background_index_builds)
        if self.capabilities.text_index:
            await self._sync_text_index(mongo_coll, existing, text_fields)

    async def _sync_text_index(
        self, mongo_coll: AsyncCollection[dict[str, Any]], existing: Mapping[str, Any], text_fields: Sequence[str]
    ) -> None:
        wanted_keys = sorted(text_fields)
        current = existing.get(TEXT_INDEX)
        current_keys = sorted(current.get("weights", {})) if current else None
        if current_keys == wanted_keys:
            return
        if current is not None:
            await mongo_coll.drop_index(TEXT_INDEX)
        if wanted_keys:
            await mongo_coll.create_index([(name, "text") for name in wanted_keys], name=TEXT_INDEX)

    async def set_field_values(
        self, collection_id: str, updates: Sequence[tuple[str, dict[str, Any], Sequence[str]]]
    ) -> int:
        """Per record, set some fields and unset others, `updated` untouched: `updates` holds
        (record id, {name: value}, [names to unset]); one unordered bulk write of one update per
        record. Returns how many records matched. Raises AlreadyExists on a unique-index conflict
        (the other updates are still applied)."""
        requests = []
        for record_id, set_values, unset in updates:
            change: dict[str, Any] = {}
            if set_values:
                change["$set"] = set_values
            if unset:
                change["$unset"] = {name: "" for name in unset}
            if change:
                requests.append(UpdateOne({"_id": record_id}, change))
        if not requests:
            return 0
        try:
            async with translate_errors("record"):
                result = await self._mongo_coll(collection_id).bulk_write(requests, ordered=False)
        except BulkWriteError as exc:
            raise bulk_write_error(exc) from None
        return result.matched_count


def _guard(doc: dict[str, Any]) -> dict[str, Any]:
    """The filter of a guarded single-record write (`guarded.write_unchanged`): the record's `_id` and
    its `updated` as read, which every write of one record stamps; top-level equalities only, so the
    embedded server writes through its `_id` look-up, not a scan."""
    return {"_id": doc["_id"], "updated": doc.get("updated")}


def _forward(set_values: dict[str, Any], stored: Any) -> dict[str, Any]:
    """`set_values` with its `updated` stamp moved to 1 ms after `stored` (the record's `updated` as
    read) when it is not after it (BSON dates have millisecond precision), else as given."""
    stamp = set_values.get("updated")
    if isinstance(stamp, datetime) and isinstance(stored, datetime) and stamp <= stored:
        return {**set_values, "updated": stored + timedelta(milliseconds=1)}
    return set_values


async def update_guarded(mongo_coll: AsyncCollection[dict[str, Any]], set_values: dict[str, Any],
                         unset: Sequence[str], what: str,
                         read: Callable[[], Awaitable[dict[str, Any] | None]]) -> tuple[Record, Record] | None:
    """`RecordRepository.update`'s write, for any holder of records (an auth collection's users too):
    `read` the record's document (None: missing, or not the one meant), `update_one` it guarded by
    `_id` and `updated` as read (`_forward` moves the stamp past the stored one), retried on a miss
    (`guarded.write_unchanged`). Returns (before, after), or None. Raises AlreadyExists naming `what`
    on a unique-index conflict, WriteConflict when other writers kept winning."""
    written = set_values

    async def write(doc: dict[str, Any]) -> bool:
        nonlocal written
        written = _forward(set_values, doc.get("updated"))
        change: dict[str, Any] = {"$set": written}
        if unset:
            change["$unset"] = {name: "" for name in unset}
        async with translate_errors(what):
            result = await mongo_coll.update_one(_guard(doc), change, session=current_session())
        return result.matched_count == 1

    doc = await write_unchanged(read, write)
    if not doc:
        return None
    before = record_from_document(doc)
    return before, record_after_update(before, written, unset)
