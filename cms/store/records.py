"""Repository of records: one Mongo collection per CMS collection, `records_<collection id>`.

Field values are stored at the top level of the document, next to `_id`, `created` and
`updated`, so filters, sorts and unique indexes work on plain paths. The document conversion and
the collection names are in documents.py, the chunking of ids and bulk-error helpers in bulk.py.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from pymongo import DeleteMany, ReturnDocument, UpdateMany, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, OperationFailure

from cms.errors import ValidationFailed
from cms.models import Record
from cms.store.bulk import DUPLICATE_KEY, InsertFailure, bulk_write_error, chunks, write_failure
from cms.store.client import Capabilities, Database
from cms.store.documents import (
    RECORDS_PREFIX,
    UNIQUE_PREFIX,
    record_after_update,
    record_from_document,
    record_to_document,
    records_mongo_name,
)
from cms.store.errors import translate_errors, translate_query_errors
from cms.store.scan_line import ScanLine
from cms.store.transactions import current_session

TEXT_INDEX = "search_text"



class RecordRepository:
    """Records of every collection; callers pass the collection id and a prepared query. List
    queries (`find`, `find_ids`, `find_related`, `count`) take a slot of `scans`, the process's line
    of scans, in the share of their `client` (the key of whom the query is for, None for no client;
    503 when the line or that share is full); point reads do not."""

    def __init__(self, db: Database, capabilities: Capabilities, *, scans: ScanLine | None = None) -> None:
        self._db = db
        self.capabilities = capabilities
        self.scans = scans or ScanLine()

    def _scan_slot(self, client: str | None) -> AbstractAsyncContextManager[None]:
        """One slot of the process's scan line in `client`'s share (`ScanLine.slot`). Raises
        ServiceUnavailable (503, `Retry-After`) when the line or the share is full or the wait would be
        too long."""
        return self.scans.slot(client)

    def _mongo_coll(self, collection_id: str) -> AsyncCollection[dict[str, Any]]:
        return self._db[records_mongo_name(collection_id)]

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

    async def get(self, collection_id: str, record_id: str) -> Record | None:
        """The record, or None."""
        doc = await self._mongo_coll(collection_id).find_one({"_id": record_id}, session=current_session())
        return record_from_document(doc) if doc else None

    async def update(
        self, collection_id: str, record_id: str, set_values: dict[str, Any], unset: Sequence[str], *,
        expected_updated: datetime | None = None,
    ) -> tuple[Record, Record] | None:
        """Set and unset fields of one record (`set_values` may stamp `updated`); returns the record
        as it was before the change and as it is after it (`record_after_update`, no second read),
        or None if gone (or, with `expected_updated`, when its `updated` is no longer that: it
        changed since it was read). Raises AlreadyExists on a unique-index conflict."""
        change: dict[str, Any] = {"$set": set_values}
        if unset:
            change["$unset"] = {name: "" for name in unset}
        async with translate_errors("record"):
            doc = await self._mongo_coll(collection_id).find_one_and_update(
                _one(record_id, expected_updated), change, return_document=ReturnDocument.BEFORE,
                session=current_session(),
            )
        if not doc:
            return None
        before = record_from_document(doc)
        return before, record_after_update(before, set_values, unset)

    async def delete(self, collection_id: str, record_id: str, *,
                     expected_updated: datetime | None = None) -> Record | None:
        """Remove one record and return it as it was; None if it did not exist (or, with
        `expected_updated`, changed since it was read)."""
        doc = await self._mongo_coll(collection_id).find_one_and_delete(_one(record_id, expected_updated),
                                                                        session=current_session())
        return record_from_document(doc) if doc else None

    async def find_by_ids(self, collection_id: str, record_ids: Sequence[str]) -> list[Record]:
        """The records among `record_ids` that exist (one find per ID_CHUNK ids, any order)."""
        mongo_coll = self._mongo_coll(collection_id)
        found: list[Record] = []
        for chunk in chunks(record_ids):
            cursor = mongo_coll.find({"_id": {"$in": chunk}}, session=current_session())
            found.extend([record_from_document(d) async for d in cursor])
        return found

    async def existing_ids(self, collection_id: str, record_ids: Sequence[str]) -> set[str]:
        """Which of `record_ids` exist (one find per ID_CHUNK ids)."""
        mongo_coll = self._mongo_coll(collection_id)
        found: set[str] = set()
        for chunk in chunks(record_ids):
            found.update([d["_id"] async for d in mongo_coll.find({"_id": {"$in": chunk}}, projection={"_id": 1},
                                                                   session=current_session())])
        return found

    async def find_holders(self, collection_id: str, field_name: str, record_ids: Sequence[str]) -> list[Record]:
        """The records whose relation field `field_name` names any of `record_ids` (a one-value
        field equal to one, or a list holding one), with `_id` and that field only in `data`."""
        mongo_coll = self._mongo_coll(collection_id)
        found: list[Record] = []
        for chunk in chunks(record_ids):
            cursor = mongo_coll.find({field_name: {"$in": chunk}}, session=current_session(),
                                     projection={field_name: 1, "created": 1, "updated": 1})
            found.extend([record_from_document(d) async for d in cursor])
        return list({r.id: r for r in found}.values())

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

    async def count_holders(self, collection_id: str, field_name: str, value: Any, exclude_ids: Sequence[str]) -> int:
        """How many records other than `exclude_ids` hold `value` in `field_name` (for a list value:
        any of its items, as a unique index on a list field compares items)."""
        return await self._mongo_coll(collection_id).count_documents(
            {field_name: _holding(value), "_id": {"$nin": list(exclude_ids)}}
        )

    async def value_holders(self, collection_id: str, field_name: str, value: Any, *, limit: int) -> list[Record]:
        """At most `limit` records holding `value` in `field_name` (a list value: any of its items),
        outside any transaction (a duplicate key aborts the one it happened in): the committed records
        a unique clash on that value clashed with."""
        cursor = self._mongo_coll(collection_id).find({field_name: _holding(value)}, limit=limit)
        return [record_from_document(d) async for d in cursor]

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

    async def stream(
        self, collection_id: str, query: dict[str, Any], sort: list[tuple[str, int]], *, batch_size: int
    ) -> AsyncGenerator[Record, None]:
        """Every record matching `query` in `sort` order, fetched from the server `batch_size` documents
        at a time, so memory stays flat however many match."""
        cursor = self._mongo_coll(collection_id).find(query, sort=sort or None).batch_size(batch_size)
        try:
            async with translate_query_errors():
                async for doc in cursor:
                    yield record_from_document(doc)
        finally:
            await cursor.close()

    async def find(
        self, collection_id: str, query: dict[str, Any], sort: list[tuple[str, int]], skip: int, limit: int, *,
        client: str | None = None,
    ) -> list[Record]:
        """Records matching `query` in `sort` order, `skip` then at most `limit` of them, in `client`'s
        share of the scan line. Raises InvalidFilter when the server refuses the query (see
        `translate_query_errors`) and ServiceUnavailable (the line is full)."""
        async with self._scan_slot(client), translate_query_errors():
            cursor = self._mongo_coll(collection_id).find(query, sort=sort or None, skip=skip, limit=limit)
            return [record_from_document(d) async for d in cursor]

    async def find_ids(self, collection_id: str, query: dict[str, Any], sort: list[tuple[str, int]],
                       limit: int, *, client: str | None = None) -> list[Any]:
        """The `_id`s of the records matching `query` in `sort` order, at most `limit` (> 0): one scan
        that sends back only the ids, in one batch (a cursor's later batches cost the embedded server a
        second pass). The server sorts before it projects, so no sort key travels. In `client`'s share
        of the scan line. Raises InvalidFilter when the server refuses the query and ServiceUnavailable
        (the line is full)."""
        async with self._scan_slot(client), translate_query_errors():
            cursor = self._mongo_coll(collection_id).find(query, projection={"_id": 1}, sort=sort or None,
                                                          limit=limit, batch_size=limit)
            return [d["_id"] async for d in cursor]

    async def find_related(self, collection_id: str, query: dict[str, Any], sort: list[tuple[str, int]],
                           limit: int, *, client: str | None = None) -> list[Record]:
        """Records matching `query` (the related records of a page, by `_id` or relation field `$in`)
        in `sort` order, at most `limit` (0: all), in the current transaction if any (a batch sees
        what it wrote), in `client`'s share of the scan line. Raises InvalidFilter when the server
        refuses the query and ServiceUnavailable (the line is full)."""
        async with self._scan_slot(client), translate_query_errors():
            cursor = self._mongo_coll(collection_id).find(query, sort=sort or None, limit=limit,
                                                          session=current_session())
            return [record_from_document(d) async for d in cursor]

    async def count(self, collection_id: str, query: dict[str, Any], *, client: str | None = None) -> int:
        """How many records match `query`; for the whole collection (`{}`) the server's count from
        its collection metadata (`estimated_document_count`: no scan on MongoDB; issue "Fast
        reads", item 4). In `client`'s share of the scan line. Raises InvalidFilter when the server
        refuses the query and ServiceUnavailable (the line is full)."""
        async with self._scan_slot(client), translate_query_errors():
            if not query:
                return await self._mongo_coll(collection_id).estimated_document_count()
            return await self._mongo_coll(collection_id).count_documents(query)

    async def estimated_count(self, collection_id: str, *, timeout_ms: int) -> int | None:
        """The server's cheap count of the collection's records (`estimated_document_count`: from
        the collection's metadata on MongoDB, no query is run), bounded by `timeout_ms` and taking no
        scan slot; None when the server does not answer it (no such command, or past the time-out)."""
        try:
            return await self._mongo_coll(collection_id).estimated_document_count(maxTimeMS=timeout_ms)
        except OperationFailure:
            return None

    async def drop(self, collection_id: str) -> None:
        """Remove every record of the collection and its indexes."""
        await self._mongo_coll(collection_id).drop()

    async def database_names(self) -> set[str]:
        """The name of every MongoDB collection of the database (records collections are those
        starting with RECORDS_PREFIX)."""
        return set(await self._db.list_collection_names())

    async def drop_stored(self, name: str) -> None:
        """Drop the records collection called `name` (a name of `database_names` starting with
        RECORDS_PREFIX). Raises ValueError
        for a name that is not a records collection's."""
        if not name.startswith(RECORDS_PREFIX):
            raise ValueError(f"{name!r} is not a records collection")
        await self._db.drop_collection(name)

    async def unset_fields(self, collection_id: str, names: Sequence[str]) -> None:
        """Remove fields (dropped from the schema) from every record."""
        if names:
            await self._mongo_coll(collection_id).update_many({}, {"$unset": {n: "" for n in names}})

    async def sync_indexes(self, collection_id: str, unique_fields: Sequence[str], text_fields: Sequence[str]) -> None:
        """Make the record indexes match the schema: `created` for the default sort, one unique
        index per unique field (partial: absent values do not collide), and, where the server
        supports it, one text index over the text fields.

        Raises ValidationFailed when existing records already hold duplicates of a new unique field."""
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
        for index_name in existing:
            if index_name.startswith(UNIQUE_PREFIX) and index_name not in wanted:
                await mongo_coll.drop_index(index_name)
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

    async def stream_field_values(
        self, collection_id: str, names: Sequence[str], *, batch_size: int
    ) -> AsyncGenerator[list[tuple[str, dict[str, Any]]], None]:
        """The records holding any of the fields `names`, in `created` order, as lists of at most
        `batch_size` (record id, {name: value} of the fields present); one cursor, so memory stays
        flat. Updating these fields between batches is safe: the cursor walks the `created_id`
        index, whose keys do not change."""
        query = {"$or": [{name: {"$exists": True}} for name in names]}
        cursor = self._mongo_coll(collection_id).find(
            query, projection={name: 1 for name in names}, sort=[("created", 1), ("_id", 1)]
        ).batch_size(batch_size)
        batch: list[tuple[str, dict[str, Any]]] = []
        try:
            async for doc in cursor:
                record_id = doc.pop("_id")
                batch.append((record_id, doc))
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
            if batch:
                yield batch
        finally:
            await cursor.close()

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

    def hold_scans(self) -> AbstractAsyncContextManager[None]:
        """Take every free list-query slot for the block (`ScanLine.hold`), so the `find` and `count`
        calls that start meanwhile wait in line (bounded, then ServiceUnavailable) until it ends: for
        maintenance that needs the database to itself for a moment, and for tests that hold queries
        (issue "Fast reads", items 3 and 6)."""
        return self.scans.hold()


def _one(record_id: str, expected_updated: datetime | None) -> dict[str, Any]:
    """The filter of a single-record write: by `_id`, and by `updated` when the writer checked the
    record as it was then (plain equality, so the `_id` index still serves it)."""
    return {"_id": record_id} if expected_updated is None else {"_id": record_id, "updated": expected_updated}


def _holding(value: Any) -> Any:
    """The match of a field holding `value`: for a list, any of its items (as a unique index on a
    list field compares items)."""
    return {"$in": value} if isinstance(value, list) else value
