"""Repository of record versions (decisions.md, Drafts, versions and scheduled publishing): the Mongo
collection `record_versions`, shared by every CMS collection.

One document per version: `{_id: "<collection id>/<record id>/<version>", collection_id, record_id,
version, created, by, data}`, `data` holding the field values as a record's document holds them (dates
as dates). The unique index `collection_record_version` on (collection_id, record_id, version
descending) serves every query of a record's versions: its newest number, a page newest first, the
count, trimming and a record's delete, on MongoDB and on the embedded server alike (which serves
equalities on an index's leading fields but reads the whole collection for an `_id` range). The `_id`
makes one version a point read.

Numbering (`append`): a version is stored under the number after its record's newest, by an insert that
the unique `_id` refuses when another writer took that number first; the refused ones read the newest
again and retry. So numbers count up from 1 without a gap or a repeat however many replicas write one
record at once (a create's first version is tried as 1 without a read, except inside a transaction).
Inside a transaction (a batch, a publish, a collection with an active webhook) a refused insert aborts
the transaction, so it is answered as a conflict instead (400, retry). Trimming deletes, per record, the
versions numbered at most the new number minus the number kept: concurrent trims delete only older
versions, so they cannot race.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import DeleteMany
from pymongo.errors import BulkWriteError

from cms.errors import BadRequest
from cms.models import RecordVersion
from cms.store.bulk import DUPLICATE_KEY, chunks
from cms.store.client import Database
from cms.store.errors import translate_errors
from cms.store.transactions import current_session

VERSIONS_COLLECTION = "record_versions"
VERSION_INDEX = "collection_record_version"
MAX_NUMBERING_ATTEMPTS = 64
"""Tries of one version's number: each try at least one of the writers racing on a record stores its
version, so this many writers may write one record at the same moment."""
NEWEST_READS = 16
"""Newest-number reads one `append` runs at once (a bulk update of many records)."""
CONFLICT = "The record was changed by another request while its version was stored; retry"


@dataclass(frozen=True)
class NewVersion:
    """A version to store: of record `record_id` of collection `collection_id`, written at `created` by
    `by` (a user id, None for the system), holding `data`; `first`: the record was just created, so its
    number is tried as 1 without reading its newest."""

    collection_id: str
    record_id: str
    created: datetime
    by: str | None
    data: dict[str, Any]
    first: bool = False


class RecordVersionRepository:
    """Versions of the records of every collection; see the module docstring."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db[VERSIONS_COLLECTION]

    async def ensure_indexes(self) -> None:
        """Create the unique (collection_id, record_id, version) index (idempotent)."""
        await self._mongo_coll.create_index([("collection_id", 1), ("record_id", 1), ("version", -1)],
                                            name=VERSION_INDEX, unique=True)

    async def append(self, versions: Sequence[NewVersion], *, keep: int) -> list[int]:
        """Store each of `versions` as the next version of its record (a record named twice gets two
        numbers, in order), then delete each record's versions older than its newest `keep`; returns
        the numbers given, in order. Joins the transaction open in this task, if one is. Raises
        BadRequest (400, retry) when another writer took a number inside a transaction, or when a record
        kept changing for MAX_NUMBERING_ATTEMPTS tries."""
        numbers: list[int] = [0] * len(versions)
        seen: dict[tuple[str, str], int] = {}
        waves: list[list[int]] = []  # wave k: the k-th version of each record named
        for index, version in enumerate(versions):
            key = (version.collection_id, version.record_id)
            occurrence = seen.get(key, 0)
            seen[key] = occurrence + 1
            if occurrence == len(waves):
                waves.append([])
            waves[occurrence].append(index)
        for occurrence, wave in enumerate(waves):
            await self._number_and_insert(versions, wave, numbers, guess_first=occurrence == 0)
        newest: dict[tuple[str, str], int] = {}
        for index, version in enumerate(versions):
            newest[(version.collection_id, version.record_id)] = numbers[index]
        await self._trim(newest, keep)
        return numbers

    async def _number_and_insert(self, versions: Sequence[NewVersion], wave: list[int], numbers: list[int], *,
                                 guess_first: bool) -> None:
        """Number and insert the versions at the indexes `wave` (one per record) into `numbers`,
        retrying the ones whose number another writer took."""
        pending = list(wave)
        # the first try gives a just-created record number 1 unread; not inside a transaction, where a
        # wrong guess cannot be retried (a publish after an unpublish "creates" a record with versions)
        trust_first = guess_first and current_session() is None
        for _ in range(MAX_NUMBERING_ATTEMPTS):
            read = [i for i in pending if not (trust_first and versions[i].first)]
            for i in pending:
                numbers[i] = 1
            for i, newest in zip(read, await self._newest_of([versions[i] for i in read]), strict=True):
                numbers[i] = newest + 1
            refused = await self._insert([_document(versions[i], numbers[i]) for i in pending])
            pending = [pending[position] for position in refused]
            if not pending:
                return
            trust_first = False
        raise BadRequest(CONFLICT)

    async def _newest_of(self, versions: Sequence[NewVersion]) -> list[int]:
        """Each version's record's newest number (0: none yet), in order. The reads run NEWEST_READS at
        a time; inside a transaction one after the other (its session serves one operation at a time)."""
        if current_session() is not None:
            return [await self.newest(v.collection_id, v.record_id) for v in versions]
        gate = asyncio.Semaphore(NEWEST_READS)

        async def read(version: NewVersion) -> int:
            async with gate:
                return await self.newest(version.collection_id, version.record_id)

        return list(await asyncio.gather(*(read(v) for v in versions)))

    async def _insert(self, documents: list[dict[str, Any]]) -> list[int]:
        """Insert `documents` (unordered); returns the positions refused because their number was
        taken. Raises BadRequest inside a transaction (its insert cannot be retried there)."""
        session = current_session()
        try:
            async with translate_errors("version"):
                await self._mongo_coll.insert_many(documents, ordered=False, session=session)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if exc.details.get("writeConcernErrors") or any(e.get("code") != DUPLICATE_KEY for e in errors):
                raise
            if session is not None:
                raise BadRequest(CONFLICT) from None
            return sorted(int(e["index"]) for e in errors)
        return []

    async def newest(self, collection_id: str, record_id: str) -> int:
        """The newest version number of the record (0 when it has none)."""
        doc = await self._mongo_coll.find_one({"collection_id": collection_id, "record_id": record_id},
                                              projection={"version": 1}, sort=[("version", -1)],
                                              session=current_session())
        return int(doc["version"]) if doc else 0

    async def _trim(self, newest: dict[tuple[str, str], int], keep: int) -> None:
        """Delete, per (collection id, record id), the versions numbered at most newest - `keep`."""
        requests = [DeleteMany({"collection_id": cid, "record_id": rid, "version": {"$lte": number - keep}})
                    for (cid, rid), number in newest.items() if number > keep]
        for chunk in chunks(requests):
            await self._mongo_coll.bulk_write(chunk, ordered=False, session=current_session())

    async def page(self, collection_id: str, record_id: str, *, skip: int, limit: int) -> list[RecordVersion]:
        """`limit` versions of the record, newest first, after skipping `skip`."""
        cursor = self._mongo_coll.find({"collection_id": collection_id, "record_id": record_id},
                                       sort=[("version", -1)], skip=skip, limit=limit)
        return [_version(doc) async for doc in cursor]

    async def count(self, collection_id: str, record_id: str) -> int:
        """How many versions of the record are kept."""
        return await self._mongo_coll.count_documents({"collection_id": collection_id, "record_id": record_id})

    async def get(self, collection_id: str, record_id: str, version: int) -> RecordVersion | None:
        """Version `version` of the record, or None (never stored, trimmed or deleted)."""
        doc = await self._mongo_coll.find_one({"_id": _version_id(collection_id, record_id, version)})
        return _version(doc) if doc else None

    async def delete_records(self, collection_id: str, record_ids: Sequence[str]) -> None:
        """Delete every version of the records `record_ids` of the collection (one bulk write), joining
        the transaction open in this task, if one is."""
        requests = [DeleteMany({"collection_id": collection_id, "record_id": {"$in": chunk}})
                    for chunk in chunks(record_ids)]
        if requests:
            await self._mongo_coll.bulk_write(requests, ordered=False, session=current_session())

    async def delete_collection(self, collection_id: str) -> int:
        """Delete every version of the collection's records; returns how many."""
        return (await self._mongo_coll.delete_many({"collection_id": collection_id})).deleted_count


def _version_id(collection_id: str, record_id: str, version: int) -> str:
    return f"{collection_id}/{record_id}/{version}"


def _document(version: NewVersion, number: int) -> dict[str, Any]:
    return {"_id": _version_id(version.collection_id, version.record_id, number),
            "collection_id": version.collection_id, "record_id": version.record_id, "version": number,
            "created": version.created, "by": version.by, "data": version.data}


def _version(doc: dict[str, Any]) -> RecordVersion:
    return RecordVersion(collection_id=str(doc["collection_id"]), record_id=str(doc["record_id"]),
                         version=int(doc["version"]), created=doc["created"], by=doc.get("by"),
                         data=dict(doc.get("data") or {}))
