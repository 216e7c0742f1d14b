"""Records: CRUD, list (page, filter, sort, search), bulk update and delete, CSV export and import
within a collection (spec: Records; decisions.md: Records, Limits).

Every change, one at a time, in bulk or by CSV import (record_csv.py, handed `_emit_changed`),
emits one RecordEvent per changed record after the write succeeded, through `_emit_changed` /
`_emit_deleted`: the only two places that talk to the EventBus, the seam webhooks and
realtime subscribe to. Failed writes emit nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from functools import partial
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.errors import BadRequest, Forbidden, NotFound, ValidationFailed
from cms.filters.grammar import parse_filter
from cms.filters.mongo import (
    ResolvedField,
    search_query,
    text_search_query,
    to_mongo_query,
    to_mongo_sort,
)
from cms.filters.sort import parse_sort
from cms.models import Collection, Page, Principal, Record
from cms.services.access import record_scope
from cms.services.collections import CollectionService
from cms.services.csv_io import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS, ImportResult
from cms.services.events import CREATE, DELETE, UPDATE, EventBus, RecordEvent
from cms.services.fields import RecordSchemas, text_field_names, to_json_value, value_list
from cms.services.record_csv import UNKNOWN_RELATION, CsvExport, RecordCsv
from cms.services.relations import RelationRelease
from cms.services.settings import RecordLimits, SettingsService
from cms.store.records import RecordRepository
from cms.store.transactions import Transactions

log = logging.getLogger("cms.records")

MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 30
DEFAULT_SORT: list[tuple[str, int]] = [("created", 1)]
MAX_BULK_IDS = 1_000
MATCH_NOTHING: dict[str, Any] = {"_id": {"$in": []}}
"""The query of a list the caller may see nothing of (answered without a database round trip)."""

# Aliases for annotations inside RecordService, whose `list` method shadows the builtin there.
SortOrder = list[tuple[str, int]]
Messages = list[str]
FieldNames = list[str]

SYSTEM_RESOLUTIONS = {
    "id": ResolvedField(path="_id", type="id"),
    "created": ResolvedField(path="created", type="datetime"),
    "updated": ResolvedField(path="updated", type="datetime"),
}


class CollectionFields:
    """FieldResolver over a collection: system fields plus schema fields, nothing else."""

    def __init__(self, collection: Collection) -> None:
        self._fields = {f.name: ResolvedField(path=f.name, type=f.type) for f in collection.fields}

    def resolve(self, name: str) -> ResolvedField | None:
        """The stored path and type of field `name`, or None when the collection has no such field."""
        return SYSTEM_RESOLUTIONS.get(name) or self._fields.get(name)


def record_json(record: Record) -> dict[str, Any]:
    """The API shape of a record: `{id, created, updated, ...fields}` with JSON-safe values."""
    body: dict[str, Any] = {"id": record.id, "created": to_json_value(record.created),
                            "updated": to_json_value(record.updated)}
    for key, value in record.data.items():
        body[key] = [to_json_value(v) for v in value] if isinstance(value, list) else to_json_value(value)
    return body


def check_record_ids(record_ids: Sequence[str], max_ids: int = MAX_BULK_IDS) -> list[str]:
    """The ids of a bulk request: 1..`max_ids` (the `bulk_max_ids` setting), each listed once.
    Raises ValidationFailed (422, `errors: {"record_ids": [...]}`) for an empty list, too many ids
    or a repeated id."""
    ids = list(record_ids)
    if not ids:
        raise _ids_error("At least one id is required.")
    if len(ids) > max_ids:
        raise _ids_error(f"At most {max_ids:,} ids per request; {len(ids):,} given.")
    repeated = [i for i, n in Counter(ids).items() if n > 1]
    if repeated:
        shown = ", ".join(repeated[:20]) + (", ..." if len(repeated) > 20 else "")
        raise _ids_error(f"Each id may be listed once; repeated: {shown}.")
    return ids


def _check_scope(principal: Principal, collection: Collection, record_ids: Sequence[str]) -> None:
    """Bulk changes are all or nothing: raise Forbidden (403, `errors: {<id>: [reason]}`) when any
    of `record_ids` is outside what `principal` may change."""
    refused = record_scope(principal, collection).refused(record_ids)
    if refused:
        raise Forbidden(
            f"You may not change {len(refused)} of these records; nothing was changed",
            errors={record_id: ["You may not change this record."] for record_id in refused},
        )


def _ids_error(message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid record_ids: {message}", errors={"record_ids": [message]})


def _bulk_refused(action: str, failures: dict[str, list[str]], total: int) -> ValidationFailed:
    """422 for a bulk request that would fail for some records: `errors` maps each record id to why."""
    return ValidationFailed(
        f"{len(failures)} of {total} records cannot be {action}; nothing was changed", errors=failures
    )


class RecordService:
    """Records of user collections. Reads are public; writes need a principal (API guard)."""

    def __init__(
        self,
        collections: CollectionService,
        records: RecordRepository,
        schemas: RecordSchemas,
        events: EventBus,
        *,
        clock: Clock = utcnow,
        transactions: Transactions | None = None,
        needs_transaction: Callable[[str], Awaitable[bool]] | None = None,
        settings: SettingsService | None = None,
    ) -> None:
        self._settings = settings
        self._collections = collections
        self._records = records
        self._schemas = schemas
        self._events = events
        self._clock = clock
        self._transactions = transactions
        self._needs_transaction = needs_transaction
        self._csv = RecordCsv(records, partial(self._emit_changed, CREATE), clock=clock)
        self._relations = RelationRelease(collections, records, partial(self._emit_changed, UPDATE),
                                          self._emit_deleted, clock=clock)

    # --- reading ------------------------------------------------------------------------------

    async def list(
        self,
        collection_name: str,
        *,
        page: int = 1,
        per_page: int = DEFAULT_PER_PAGE,
        sort: str | None = None,
        filter_expr: str | None = None,
        search: str | None = None,
        principal: Principal | None = None,
    ) -> Page[Record]:
        """One page of the records of the collection that `principal` (None: no credentials) may
        see (`access.record_scope`), and the total for the same query.

        `page` >= 1, `per_page` 1..100 (larger values are clamped). `sort` is `a,-b`; `filter_expr`
        follows decisions.md's grammar; `search` requires every word in some text, editor, email or
        url field. Raises NotFound (collection) or InvalidFilter (syntax, unknown field, bad value)."""
        collection = await self._collections.get_by_name(collection_name)
        per_page = min(per_page, MAX_PER_PAGE)
        query = self.query(collection, filter_expr=filter_expr, search=search, principal=principal)
        order = self._order(collection, sort)
        if query == MATCH_NOTHING:
            return Page(items=[], total=0, page=page, per_page=per_page)
        items, total = await asyncio.gather(
            self._records.find(collection.id, query, order, (page - 1) * per_page, per_page),
            self._records.count(collection.id, query),
        )
        return Page(items=items, total=total, page=page, per_page=per_page)

    def query(self, collection: Collection, *, filter_expr: str | None, search: str | None,
              principal: Principal | None = None) -> dict[str, Any]:
        """The MongoDB query for a filter and a search over `collection` (both optional), limited to
        the records `principal` may see (MATCH_NOTHING when that is none). Raises InvalidFilter."""
        parts: list[dict[str, Any]] = []
        scope = record_scope(principal, collection)
        if scope.ids is not None:
            parts.append({"_id": {"$in": sorted(scope.ids)}} if scope.ids else MATCH_NOTHING)
        if filter_expr and filter_expr.strip():
            parts.append(to_mongo_query(parse_filter(filter_expr), CollectionFields(collection)))
        if search and search.strip():
            fields = text_field_names(collection)
            if self._records.capabilities.text_index and fields:
                parts.append(text_search_query(search))
            else:
                parts.append(search_query(search, fields))
        if MATCH_NOTHING in parts:  # the filter and search above are still checked for errors
            return MATCH_NOTHING
        parts = [p for p in parts if p]
        if not parts:
            return {}
        return parts[0] if len(parts) == 1 else {"$and": parts}

    def _order(self, collection: Collection, sort: str | None) -> SortOrder:
        """The sort of a list or export: `sort` (default `created`), then `id` so the order is total.
        Raises InvalidFilter (unknown field)."""
        order = to_mongo_sort(parse_sort(sort), CollectionFields(collection)) if sort else list(DEFAULT_SORT)
        if not any(path == "_id" for path, _ in order):
            order.append(("_id", 1))
        return order

    async def get(self, collection_name: str, record_id: str, *, principal: Principal | None = None) -> Record:
        """One record that `principal` (None: no credentials) may see. Raises NotFound (collection,
        record, or a record the caller may not see)."""
        collection = await self._collections.get_by_name(collection_name)
        if not record_scope(principal, collection).allows(record_id):
            raise NotFound("Record not found")
        return await self._get(collection, record_id)

    async def _get(self, collection: Collection, record_id: str) -> Record:
        record = await self._records.get(collection.id, record_id)
        if record is None:
            raise NotFound("Record not found")
        return record

    # --- one record ---------------------------------------------------------------------------

    async def create(self, principal: Principal, collection_name: str, data: Any) -> Record:
        """Validate `data` against the schema and store a new record; emits `create`.
        Raises NotFound, BadRequest (an auth collection: users are made by register),
        ValidationFailed (422) or AlreadyExists (a unique field)."""
        collection = await self._writable_for_new_records(collection_name)
        values = self._schemas.load(collection, data, partial=False)
        values = {k: v for k, v in values.items() if v is not None}
        await self._check_relations(collection, values)
        now = self._clock()
        record = Record(id=new_id(), created=now, updated=now, data=values)
        async with await self._unit(collection):
            await self._records.insert(collection.id, record)
            await self._emit_changed(CREATE, collection, [record])
        await self._check_still_there(collection)
        return record

    async def update(self, principal: Principal, collection_name: str, record_id: str, data: Any) -> Record:
        """Change the fields given in `data` (null clears an optional field); emits `update`.
        Raises NotFound (also for a record the caller may not see), ValidationFailed or AlreadyExists."""
        collection = await self._collections.get_by_name(collection_name)
        if not record_scope(principal, collection).allows(record_id):
            raise NotFound("Record not found")
        set_values, unset = self._changes(collection, data)
        await self._check_relations(collection, set_values)
        set_values["updated"] = self._clock()
        async with await self._unit(collection):
            record = await self._records.update(collection.id, record_id, set_values, unset)
            if record is None:
                raise NotFound("Record not found")
            await self._emit_changed(UPDATE, collection, [record])
        return record

    async def delete(self, principal: Principal, collection_name: str, record_id: str) -> None:
        """Delete one record and release the relations that point to it (`relations.py`); emits
        `delete` with `{id}` (and the events of the records the release changes or deletes).
        Raises NotFound (also for a record the caller may not see) or BadRequest (a required
        relation field still needs it)."""
        collection = await self._collections.get_by_name(collection_name)
        if not record_scope(principal, collection).allows(record_id):
            raise NotFound("Record not found")
        plan = await self._relations.plan_release(collection, [record_id])
        async with await self._unit(collection):
            if not await self._records.delete(collection.id, record_id):
                raise NotFound("Record not found")
            await self._emit_deleted(collection, [record_id])
            await self._relations.release(plan)

    def _changes(self, collection: Collection, data: Any) -> tuple[dict[str, Any], FieldNames]:
        """Validate partial `data`: (values to set, names to clear). Raises ValidationFailed."""
        values = self._schemas.load(collection, data, partial=True)
        return {k: v for k, v in values.items() if v is not None}, [k for k, v in values.items() if v is None]

    # --- bulk ---------------------------------------------------------------------------------

    async def bulk_update(
        self, principal: Principal, collection_name: str, record_ids: Sequence[str], data: Any
    ) -> int:
        """Apply the same partial `data` to every record of `record_ids` (1..1,000 distinct ids), all
        or nothing, in one bulk write; emits one `update` per record. Returns how many were updated.

        `data` is validated once; then each record is checked: it must exist, and a unique field may
        be set on one record only, to a value no other record holds. Raises NotFound (collection),
        ValidationFailed (422; `errors.record_ids` for a bad id list, `errors.<field>` for bad `data`,
        `errors.<record id>` for the records that would fail; nothing changes) or AlreadyExists (a
        concurrent write took a unique value first)."""
        collection = await self._collections.get_by_name(collection_name)
        ids = check_record_ids(record_ids, (await self._limits()).bulk_max_ids)
        _check_scope(principal, collection, ids)
        set_values, unset = self._changes(collection, data)
        await self._check_relations(collection, set_values)
        found = {r.id: r for r in await self._records.find_by_ids(collection.id, ids)}
        failures: dict[str, list[str]] = {i: ["Record not found."] for i in ids if i not in found}
        for record_id, messages in (await self._unique_conflicts(collection, set_values, list(found))).items():
            failures.setdefault(record_id, []).extend(messages)
        if failures:
            raise _bulk_refused("updated", failures, len(ids))
        now = self._clock()
        async with await self._unit(collection):
            matched = await self._records.update_many(collection.id, ids, {**set_values, "updated": now}, unset)
            if matched == len(ids):
                changed = [_changed_record(found[i], set_values, unset, now) for i in ids]
            else:  # some were deleted meanwhile: report the ones still there
                changed = await self._records.find_by_ids(collection.id, ids)
            await self._emit_changed(UPDATE, collection, changed)
        return matched

    async def _unique_conflicts(
        self, collection: Collection, set_values: dict[str, Any], record_ids: Sequence[str]
    ) -> dict[str, Messages]:
        """Record id -> messages, for unique fields the change would duplicate: the same value on
        several records, or a value another record holds."""
        failures: dict[str, list[str]] = {}
        for spec in collection.fields:
            if not spec.validation.unique or spec.name not in set_values or not record_ids:
                continue
            if len(record_ids) > 1:
                message = f"{spec.name}: Value must be unique; it cannot be set on {len(record_ids)} records at once."
                for record_id in record_ids:
                    failures.setdefault(record_id, []).append(message)
            elif await self._records.count_holders(collection.id, spec.name, set_values[spec.name], record_ids):
                failures.setdefault(record_ids[0], []).append(
                    f"{spec.name}: Value must be unique; another record holds it.")
        return failures

    async def bulk_delete(self, principal: Principal, collection_name: str, record_ids: Sequence[str]) -> int:
        """Delete every record of `record_ids` (1..1,000 distinct ids), all or nothing, in one bulk
        write; emits one `delete` per record. Returns how many were deleted.

        Raises NotFound (collection) or ValidationFailed (422; `errors.record_ids` for a bad id list,
        `errors.<record id>` for unknown ids; nothing is deleted then). A record deleted by another
        request between the check and the delete is not counted, but still gets a `delete` event
        (subscribers see at least one)."""
        collection = await self._collections.get_by_name(collection_name)
        ids = check_record_ids(record_ids, (await self._limits()).bulk_max_ids)
        _check_scope(principal, collection, ids)
        existing = await self._records.existing_ids(collection.id, ids)
        missing = {i: ["Record not found."] for i in ids if i not in existing}
        if missing:
            raise _bulk_refused("deleted", missing, len(ids))
        plan = await self._relations.plan_release(collection, ids)
        async with await self._unit(collection):
            deleted = await self._records.delete_many(collection.id, ids)
            await self._emit_deleted(collection, ids)
            await self._relations.release(plan)
        return deleted

    # --- CSV (the flows live in record_csv.py) -------------------------------------------------

    async def export_csv(
        self,
        principal: Principal,
        collection_name: str,
        *,
        sort: str | None = None,
        filter_expr: str | None = None,
        search: str | None = None,
    ) -> CsvExport:
        """The records matching `filter_expr` and `search`, in `sort` order (default `created`), as
        CSV: header `id,created,updated,<schema fields in order>`, cells as in `csv_io`. The query is
        checked here, before any byte is sent; the rows are read in batches while `chunks` is
        consumed, so memory stays flat however many records match.
        Raises NotFound (collection) or InvalidFilter."""
        collection = await self._collections.get_by_name(collection_name)
        query = self.query(collection, filter_expr=filter_expr, search=search, principal=principal)
        return await self._csv.export(collection, query, self._order(collection, sort))

    async def import_csv(self, principal: Principal, collection_name: str, content: bytes) -> ImportResult:
        """Create records from CSV `content` (UTF-8, BOM optional, a header row naming fields); every
        stored record emits `create`. See `RecordCsv.import_csv` for the checks and the result.
        Raises NotFound (collection), BadRequest (an auth collection), PayloadTooLarge (over 10 MiB)
        or ValidationFailed (the file as a whole is refused; nothing is stored)."""
        collection = await self._writable_for_new_records(collection_name)
        limits = await self._limits()
        result = await self._csv.import_csv(collection, content, max_bytes=limits.import_max_bytes,
                                            max_rows=limits.import_max_rows)
        if result.imported:
            await self._check_still_there(collection)
        return result

    async def _writable_for_new_records(self, collection_name: str) -> Collection:
        """The collection, if records may be created in it through the records API: not an auth
        collection, whose records are users with an email and credentials (made by register)."""
        collection = await self._collections.get_by_name(collection_name)
        if collection.type == "auth":
            raise BadRequest(
                f"Users of the auth collection '{collection.name}' are created with "
                f"POST /api/v1/collections/{collection.name}/auth/register"
            )
        return collection

    # --- events: the one path every change takes ----------------------------------------------

    async def _emit_changed(self, kind: str, collection: Collection, records: Sequence[Record]) -> None:
        await emit_changed(self._events, kind, collection, records, self._clock())

    async def _emit_deleted(self, collection: Collection, record_ids: Sequence[str]) -> None:
        await emit_deleted(self._events, collection, record_ids, self._clock())

    async def _check_relations(self, collection: Collection, values: dict[str, Any]) -> None:
        await check_relations(self._records, collection, values)

    async def import_max_bytes(self) -> int:
        """The largest CSV upload accepted, in bytes (setting `csv_import_max_mb`)."""
        return (await self._limits()).import_max_bytes

    async def _limits(self) -> RecordLimits:
        if self._settings is None:
            return RecordLimits(MAX_BULK_IDS, MAX_IMPORT_ROWS, MAX_IMPORT_BYTES)
        return await self._settings.record_limits()

    async def _unit(self, collection: Collection) -> AbstractAsyncContextManager[None]:
        """The event unit of one write to `collection` (`EventBus.unit`): in a transaction with its
        webhook outbox entries when the server supports transactions and the collection has an
        active webhook, else the outbox entries are written right after the change; either way
        before the write is acknowledged."""
        transactional = (self._transactions is not None and self._transactions.enabled
                         and self._needs_transaction is not None and await self._needs_transaction(collection.id))
        return self._events.unit(self._transactions if transactional else None)

    async def _check_still_there(self, collection: Collection) -> None:
        """After an insert: if the collection was deleted meanwhile (its records dropped before
        the insert landed, which recreated them), drop what this write left and raise NotFound,
        so no write to a deleted collection succeeds and none of its documents survive."""
        await drop_if_deleted(self._collections, self._records, collection)


async def emit_changed(events: EventBus, kind: str, collection: Collection, records: Sequence[Record],
                       now: datetime) -> None:
    """The one way record events are made: one `create` or `update` event per record, carrying the
    full record as the API shows it (`record_json`), stamped `now`. Used by every service that
    writes records (records, bulk, CSV import, auth-collection users)."""
    await events.emit([RecordEvent(kind, collection.name, r.id, record_json(r), now) for r in records])


async def emit_deleted(events: EventBus, collection: Collection, record_ids: Sequence[str],
                       now: datetime) -> None:
    """One `delete` event per record id, carrying `{id}`, stamped `now`."""
    await events.emit([RecordEvent(DELETE, collection.name, rid, {"id": rid}, now) for rid in record_ids])


async def drop_if_deleted(collections: CollectionService, records: RecordRepository, collection: Collection) -> None:
    """Raise NotFound, after dropping the collection's records, when `collection` no longer exists:
    the check every insert makes after it lands (a delete may have dropped the records between
    the writer's look-up and its insert). One `_id` look-up when the collection exists."""
    if await collections.exists(collection.id):
        return
    await records.drop(collection.id)
    log.info("write to collection %s (%s) undone: the collection was deleted", collection.name, collection.id)
    raise NotFound(f"Collection '{collection.name}' not found")


async def check_relations(records: RecordRepository, collection: Collection, values: dict[str, Any]) -> None:
    """Every relation id in `values` must name an existing record of its target collection.
    Raises ValidationFailed naming the field otherwise (one count query per relation field)."""
    for spec in collection.fields:
        if spec.type != "relation" or spec.name not in values or spec.collection_id is None:
            continue
        wanted = set(value_list(values[spec.name]))
        found = await records.count(spec.collection_id, {"_id": {"$in": sorted(wanted)}})
        if found != len(wanted):
            raise ValidationFailed("Relation points to a missing record", errors={spec.name: [UNKNOWN_RELATION]})


def _changed_record(record: Record, set_values: dict[str, Any], unset: Sequence[str], updated: Any) -> Record:
    """`record` as it is after setting `set_values` and clearing `unset`, at time `updated`."""
    data = {k: v for k, v in record.data.items() if k not in unset}
    data.update(set_values)
    return Record(id=record.id, created=record.created, updated=updated, data=data)
