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

import orjson

from cms.clock import Clock, new_id, utcnow
from cms.errors import BadRequest, CmsError, Forbidden, NotFound, ValidationFailed
from cms.filters.grammar import parse_filter
from cms.filters.mongo import (
    search_query,
    text_search_query,
    to_mongo_query,
    to_mongo_sort,
)
from cms.filters.sort import parse_sort
from cms.models import Collection, Page, Principal, Record
from cms.services import access as actions
from cms.services.access import Access, check
from cms.services.caching.read_cache import CachedBody, ReadCache, entry_key, etag_of, stamp_epoch
from cms.services.caching.single_flight import SingleFlight
from cms.services.content.collections import CollectionService
from cms.services.content.csv_io import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS, ImportResult
from cms.services.content.fields import CollectionFields, RecordSchemas, text_field_names, to_json_value, value_list
from cms.services.content.group_commit import InsertGroups
from cms.services.content.record_csv import UNKNOWN_RELATION, CsvExport, RecordCsv
from cms.services.content.relations import RelationRelease
from cms.services.delivery.events import CREATE, DELETE, UPDATE, EventBus, RecordEvent
from cms.services.operations.settings import RecordLimits, SettingsService
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
Prepared = tuple[str, Callable[[], Awaitable[bytes]], bool]
"""A read prepared on a collection definition: its cache key, how to compute its body, whether
every caller gets that body (shared)."""
Messages = list[str]
FieldNames = list[str]

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


MAX_RULE_ATTEMPTS = 3
"""Tries of a single update or delete whose rule depends on the record: each checks the record
it read, then writes only if the record is unchanged since (its `updated`)."""


def _refused_ids(refused: Sequence[str], verb: str) -> Forbidden:
    """Bulk changes are all or nothing: 403 with `errors: {<id>: [reason]}` for the records the
    caller may view but not change."""
    return Forbidden(
        f"You may not {verb} {len(refused)} of these records; nothing was changed",
        errors={record_id: [f"You may not {verb} this record."] for record_id in refused},
    )


def _ids_error(message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid record_ids: {message}", errors={"record_ids": [message]})


def _bulk_refused(action: str, failures: dict[str, list[str]], total: int) -> ValidationFailed:
    """422 for a bulk request that would fail for some records: `errors` maps each record id to why."""
    return ValidationFailed(
        f"{len(failures)} of {total} records cannot be {action}; nothing was changed", errors=failures
    )


class RecordService:
    """Records of user collections. Who may list, view, create, change and delete them is decided
    by the collection's access rules (`access.check`) on every path: single, bulk and CSV."""

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
        cache: ReadCache | None = None,
        group_commit: bool = False,
    ) -> None:
        self._cache = cache
        self._groups = InsertGroups(records, after=self._after_group) if group_commit else None
        self._flights = SingleFlight()
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

    async def list_body(
        self,
        collection_name: str,
        *,
        page: int = 1,
        per_page: int = DEFAULT_PER_PAGE,
        sort: str | None = None,
        filter_expr: str | None = None,
        search: str | None = None,
        skip_total: bool = False,
        principal: Principal | None = None,
    ) -> CachedBody:
        """`list` as the API sends it: the JSON body `{items, total, page, per_page}` (`total` -1 with
        `skip_total`), served from the read cache when an entry computed under the same stamp, query
        and access decision exists, else computed once for all identical concurrent reads
        (`SingleFlight`) and stored. Raises what `list` raises."""
        per_page = min(per_page, MAX_PER_PAGE)

        def prepare(collection: Collection) -> Prepared:
            query = self.query(collection, filter_expr=filter_expr, search=search,
                               access=check(principal, collection, actions.LIST))
            order = self._order(collection, sort)
            key = entry_key(collection.name, "list", collection.id, query, order, page, per_page, skip_total)

            async def compute() -> bytes:
                items, total = await self._page(collection, query, order, page, per_page, skip_total)
                return orjson.dumps({"items": [record_json(r) for r in items], "total": total,
                                     "page": page, "per_page": per_page})

            return key, compute, collection.rules.list_rule == ""

        return await self._read_through(collection_name, prepare)

    async def get_body(self, collection_name: str, record_id: str, *, principal: Principal | None = None) -> CachedBody:
        """`get` as the API sends it: the record's JSON, through the read cache like `list_body`
        (a hidden or missing record is never cached). Raises what `get` raises."""

        def prepare(collection: Collection) -> Prepared:
            view = check(principal, collection, actions.VIEW)
            view.require()
            key = entry_key(collection.name, "get", collection.id, record_id, view.decision)

            async def compute() -> bytes:
                return orjson.dumps(record_json(await self._visible(view, record_id)))

            return key, compute, collection.rules.view_rule == ""

        return await self._read_through(collection_name, prepare)

    async def _read_through(self, collection_name: str, prepare: Callable[[Collection], Prepared]) -> CachedBody:
        """The body of a read of `collection_name`: `prepare(collection)` gives its cache key, how
        to compute it and whether it is shared. From the cache if current, else computed (shared by
        identical concurrent reads of the same stamp) and stored.

        The collection's definition comes from the definition cache unchecked; the read cache's
        one `MGET` returns the catalog epoch, and only when that differs from the definition's is
        the definition loaded again (and the lookup repeated): a warm read is one Redis round trip."""
        if self._cache is None:
            key, compute, shared = prepare(await self._collections.get_by_name(collection_name))
            body = await compute()
            return CachedBody(body, etag_of(key, None, body), shared)
        collection, assumed_epoch = await self._collections.cached_by_name(collection_name)
        try:
            key, compute, shared = prepare(collection)
        except CmsError:  # refuse only on a current definition (a rule or field may have just changed)
            collection, assumed_epoch = await self._collections.current_by_name(collection_name)
            key, compute, shared = prepare(collection)
        stamp, cached = await self._cache.lookup(collection.name, key)
        if stamp is None or stamp_epoch(stamp) != assumed_epoch:
            # the definition may be older than the epoch (or Redis cannot tell): load it again
            if stamp is None:
                collection = await self._collections.get_by_name(collection_name)
            else:
                epoch = stamp_epoch(stamp)
                collection = await self._collections.reload_by_name(collection_name, epoch)
            key, compute, shared = prepare(collection)
            if stamp is not None:
                stamp, cached = await self._cache.lookup(collection.name, key)
                if stamp is not None and stamp_epoch(stamp) != epoch:  # changed again: serve, keep nothing
                    stamp, cached = None, None
        if cached is not None and stamp is not None:
            return CachedBody(cached, etag_of(key, stamp, cached), shared)
        if stamp is None:  # no stamp, no sharing: a read must not join one that began before a write
            body = await compute()
            return CachedBody(body, etag_of(key, None, body), shared)
        cache, current = self._cache, stamp

        async def compute_and_store() -> bytes:
            computed = await compute()
            await cache.store(key, current, computed)
            return computed

        body = await self._flights.run(f"{key}@{current}", compute_and_store)
        return CachedBody(body, etag_of(key, current, body), shared)

    async def _page(self, collection: Collection, query: dict[str, Any], order: SortOrder, page: int,
                    per_page: int, skip_total: bool) -> tuple[list[Record], int]:
        """One page of `query` and its total (-1 with `skip_total`; no query when MATCH_NOTHING)."""
        if query == MATCH_NOTHING:
            return [], 0
        if skip_total:
            return await self._records.find(collection.id, query, order, (page - 1) * per_page, per_page), -1
        items, total = await asyncio.gather(
            self._records.find(collection.id, query, order, (page - 1) * per_page, per_page),
            self._records.count(collection.id, query),
        )
        return items, total

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
        """One page of the records of the collection that the list rule lets `principal` (None: no
        credentials) see, and the total for the same query.

        `page` >= 1, `per_page` 1..100 (larger values are clamped). `sort` is `a,-b`; `filter_expr`
        follows decisions.md's grammar; `search` requires every word in some text, editor, email or
        url field. Raises NotFound (collection), InvalidFilter (syntax, unknown field, bad value),
        Unauthorized / Forbidden (the list rule refuses outright)."""
        collection, query, order = await self._list_query(collection_name, sort, filter_expr, search, principal)
        per_page = min(per_page, MAX_PER_PAGE)
        items, total = await self._page(collection, query, order, page, per_page, False)
        return Page(items=items, total=total, page=page, per_page=per_page)

    async def _list_query(self, collection_name: str, sort: str | None, filter_expr: str | None,
                          search: str | None, principal: Principal | None
                          ) -> tuple[Collection, dict[str, Any], SortOrder]:
        """The collection, the query (filter, search and list rule) and the order of a list."""
        collection = await self._collections.get_by_name(collection_name)
        query = self.query(collection, filter_expr=filter_expr, search=search,
                           access=check(principal, collection, actions.LIST))
        return collection, query, self._order(collection, sort)

    def query(self, collection: Collection, *, filter_expr: str | None, search: str | None,
              access: Access) -> dict[str, Any]:
        """The MongoDB query for a filter and a search over `collection` (both optional), limited to
        the records the list rule (`access`) permits. Raises InvalidFilter, or `access.refusal()`
        when the list rule refuses outright."""
        access.require()
        parts: list[dict[str, Any]] = []
        if access.query is not None:
            parts.append(access.query)
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
        """The sort of a list or export: `sort` (default `created`), then `id` in the direction of
        the first key, so the order is total and `created` / `-created` are the `created_id` index
        walked forward or backward (no in-memory sort, on MongoDB as on the embedded server).
        Raises InvalidFilter (unknown field)."""
        order = to_mongo_sort(parse_sort(sort), CollectionFields(collection)) if sort else list(DEFAULT_SORT)
        if not any(path == "_id" for path, _ in order):
            order.append(("_id", order[0][1]))
        return order

    async def get(self, collection_name: str, record_id: str, *, principal: Principal | None = None) -> Record:
        """One record that the view rule lets `principal` (None: no credentials) see. Raises
        NotFound (collection; record, or a record the rule hides), Unauthorized (no credentials,
        and the rule refuses or depends on the record) or Forbidden (refused outright)."""
        collection = await self._collections.get_by_name(collection_name)
        return await self._visible(check(principal, collection, actions.VIEW), record_id)

    async def _visible(self, view: Access, record_id: str) -> Record:
        """The record, if the view rule `view` lets its principal see it (one `_id` look-up).
        Raises `view.refusal()` (refused outright) or `view.hidden()` (missing or hidden)."""
        return await permitted_record(self._records, view, None, record_id)

    # --- one record ---------------------------------------------------------------------------

    async def create(self, principal: Principal | None, collection_name: str, data: Any) -> Record:
        """Validate `data` against the schema and store a new record, if the create rule lets
        `principal` (None: no credentials) create it (fields in the rule read the record as it
        would be stored, `@request.data` reads `data`); emits `create`.
        Raises NotFound, BadRequest (an auth collection: users are made by register),
        Unauthorized / Forbidden (the rule refuses), ValidationFailed (422) or AlreadyExists (a
        unique field)."""
        collection, epoch = await self._writable_for_new_records(collection_name)
        create = check(principal, collection, actions.CREATE, data if isinstance(data, dict) else None)
        create.require()
        values = self._schemas.load(collection, data, partial=False)
        values = {k: v for k, v in values.items() if v is not None}
        now = self._clock()
        record = Record(id=new_id(), created=now, updated=now, data=values)
        if not create.allows(record):
            raise create.refusal()
        await self._check_relations(collection, values)
        transactional = await self._transactional(collection)
        if self._groups is not None and not transactional:
            # grouped with concurrent creates into this collection; `_after_group` checks the
            # collection still exists and emits the group's events before this returns
            await self._groups.insert(collection, record, epoch)
            return record
        async with self._events.unit(self._transactions if transactional else None):
            await self._records.insert(collection.id, record)
            await self._emit_changed(CREATE, collection, [record])
        await self._check_still_there(collection, epoch)
        return record

    async def update(self, principal: Principal | None, collection_name: str, record_id: str, data: Any) -> Record:
        """Change the fields given in `data` (null clears an optional field), if the view rule lets
        `principal` (None: no credentials) see the record and the update rule lets it change it
        (fields in the rule read the stored record, `@request.data` reads `data`); emits `update`.
        Raises NotFound (also for a record the caller may not see), Unauthorized / Forbidden (the
        rule refuses), ValidationFailed, AlreadyExists, or BadRequest (the record kept changing
        under a rule that depends on it)."""
        collection = await self._collections.get_by_name(collection_name)
        view = check(principal, collection, actions.VIEW)
        update = check(principal, collection, actions.UPDATE, data if isinstance(data, dict) else None)
        update.require()
        set_values, unset = self._changes(collection, data)
        expected = await self._checked(view, update, record_id)
        await self._check_relations(collection, set_values)
        for attempt in range(MAX_RULE_ATTEMPTS):
            if attempt:
                expected = await self._checked(view, update, record_id)
            set_values["updated"] = self._clock()
            async with await self._unit(collection):
                record = await self._records.update(collection.id, record_id, set_values, unset,
                                                    expected_updated=expected)
                if record is not None:
                    await self._emit_changed(UPDATE, collection, [record])
                    return record
            if expected is None:
                raise NotFound("Record not found")
        raise BadRequest("The record kept changing while your change was checked; retry")

    async def delete(self, principal: Principal | None, collection_name: str, record_id: str) -> None:
        """Delete one record, if the view rule lets `principal` (None: no credentials) see it and
        the delete rule lets it delete it, and release the relations that point to it
        (`relations.py`); emits `delete` with `{id}` (and the events of the records the release
        changes or deletes). Raises NotFound (also for a record the caller may not see),
        Unauthorized / Forbidden (the rule refuses), BadRequest (a required relation field still
        needs it, or the record kept changing under a rule that depends on it)."""
        collection = await self._collections.get_by_name(collection_name)
        view, delete = check(principal, collection, actions.VIEW), check(principal, collection, actions.DELETE)
        delete.require()
        for _ in range(MAX_RULE_ATTEMPTS):
            expected = await self._checked(view, delete, record_id)
            plan = await self._relations.plan_release(collection, [record_id])
            async with await self._unit(collection):
                gone = await self._records.delete(collection.id, record_id, expected_updated=expected)
                if gone is not None:
                    await self._emit_deleted(collection, [record_id], [gone])
                    await self._relations.release(plan)
                    return
            if expected is None:
                raise NotFound("Record not found")
        raise BadRequest("The record kept changing while your change was checked; retry")

    async def _checked(self, view: Access, change: Access, record_id: str) -> datetime | None:
        """Check a single update or delete against the record as stored now. Returns None when
        neither rule depends on the record (no look-up is made), else the record's `updated`, which
        the write must still find. Raises `view.refusal()` / `view.hidden()` (the caller may not
        see it, or it is missing) or `change.refusal()` (it may see it, not change it)."""
        record = await checked_record(self._records, view, change, record_id)
        return None if record is None else record.updated

    def _changes(self, collection: Collection, data: Any) -> tuple[dict[str, Any], FieldNames]:
        """Validate partial `data`: (values to set, names to clear). Raises ValidationFailed."""
        values = self._schemas.load(collection, data, partial=True)
        return {k: v for k, v in values.items() if v is not None}, [k for k, v in values.items() if v is None]

    # --- bulk ---------------------------------------------------------------------------------

    async def bulk_update(
        self, principal: Principal | None, collection_name: str, record_ids: Sequence[str], data: Any
    ) -> int:
        """Apply the same partial `data` to every record of `record_ids` (1..1,000 distinct ids), all
        or nothing, in one bulk write; emits one `update` per record. Returns how many were updated.

        `data` is validated once; then each record is checked: it must exist, and a unique field may
        be set on one record only, to a value no other record holds. The view and update rules are
        checked first (`_permitted`): any id they refuse (hidden, refused, or missing when a rule
        depends on the record) makes the request 403 naming it in `errors`. Raises NotFound (collection),
        Unauthorized / Forbidden (a rule refuses), ValidationFailed (422; `errors.record_ids` for a
        bad id list, `errors.<field>` for bad `data`, `errors.<record id>` for the records that
        would fail; nothing changes) or AlreadyExists (a concurrent write took a unique value
        first)."""
        collection = await self._collections.get_by_name(collection_name)
        ids = check_record_ids(record_ids, (await self._limits()).bulk_max_ids)
        view = check(principal, collection, actions.VIEW)
        update = check(principal, collection, actions.UPDATE, data if isinstance(data, dict) else None)
        set_values, unset = self._changes(collection, data)
        found = await self._permitted(view, update, ids, "change")
        await self._check_relations(collection, set_values)
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

    async def _permitted(self, view: Access, change: Access, record_ids: Sequence[str], verb: str) -> dict[str, Record]:
        """The records of `record_ids` that exist, by id, once the view rule `view` shows and the
        rule `change` permits every one of them. When either rule depends on the record, an id that
        is missing counts as refused like a hidden one, so the answer never tells them apart.
        Raises `refusal()` when either rule refuses outright, and Forbidden (`_refused_ids`)
        naming every refused id."""
        view.require()
        change.require()
        found = {r.id: r for r in await self._records.find_by_ids(view.collection.id, record_ids)}
        if view.everything and change.everything:
            return found
        refused = [i for i in record_ids
                   if i not in found or not view.allows(found[i]) or not change.allows(found[i])]
        if refused:
            raise _refused_ids(refused, verb)
        return found

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

    async def bulk_delete(self, principal: Principal | None, collection_name: str, record_ids: Sequence[str]) -> int:
        """Delete every record of `record_ids` (1..1,000 distinct ids), all or nothing, in one bulk
        write; emits one `delete` per record. Returns how many were deleted.

        Raises NotFound (collection), ValidationFailed (422; `errors.record_ids` for a bad id list,
        `errors.<record id>` for unknown ids when no rule depends on the record; nothing is deleted
        then), Unauthorized / Forbidden (403: a rule refuses outright, or refuses some ids, named in
        `errors` as `_permitted` decides; nothing is deleted). A record deleted by another
        request between the check and the delete is not counted, but still gets a `delete` event
        (subscribers see at least one)."""
        collection = await self._collections.get_by_name(collection_name)
        ids = check_record_ids(record_ids, (await self._limits()).bulk_max_ids)
        view, delete = check(principal, collection, actions.VIEW), check(principal, collection, actions.DELETE)
        existing = await self._permitted(view, delete, ids, "delete")
        missing = {i: ["Record not found."] for i in ids if i not in existing}
        if missing:
            raise _bulk_refused("deleted", missing, len(ids))
        plan = await self._relations.plan_release(collection, ids)
        async with await self._unit(collection):
            deleted = await self._records.delete_many(collection.id, ids)
            await self._emit_deleted(collection, ids, list(existing.values()))
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
        consumed, so memory stays flat however many records match. Only the records the list rule
        shows `principal` are exported.
        Raises NotFound (collection), InvalidFilter, or Forbidden (the list rule refuses outright)."""
        collection = await self._collections.get_by_name(collection_name)
        query = self.query(collection, filter_expr=filter_expr, search=search,
                           access=check(principal, collection, actions.LIST))
        return await self._csv.export(collection, query, self._order(collection, sort))

    async def import_csv(self, principal: Principal, collection_name: str, content: bytes) -> ImportResult:
        """Create records from CSV `content` (UTF-8, BOM optional, a header row naming fields); every
        stored record emits `create`. See `RecordCsv.import_csv` for the checks and the result. The
        create rule is checked per row (`@request.data` reads the row's values as JSON); refused
        rows are failed rows with `errors._rule`.
        Raises NotFound (collection), BadRequest (an auth collection), Forbidden (the create rule
        refuses outright), PayloadTooLarge (over 10 MiB) or ValidationFailed (the file as a whole
        is refused; nothing is stored)."""
        collection, epoch = await self._writable_for_new_records(collection_name)
        limits = await self._limits()
        if collection.rules.create_rule is None:  # admins only: refuse the file as a whole
            check(principal, collection, actions.CREATE).require()

        def permitted(record: Record) -> bool:
            return check(principal, collection, actions.CREATE, record_json(record)).allows(record)

        result = await self._csv.import_csv(collection, content, max_bytes=limits.import_max_bytes,
                                            max_rows=limits.import_max_rows, permitted=permitted)
        if result.imported:
            await self._check_still_there(collection, epoch)
        return result

    async def _writable_for_new_records(self, collection_name: str) -> tuple[Collection, str | None]:
        """The collection, if records may be created in it through the records API (not an auth
        collection, whose records are users with an email and credentials, made by register), and
        the catalog epoch it was looked up under (`CollectionService.current_by_name`)."""
        collection, epoch = await self._collections.current_by_name(collection_name)
        if collection.type == "auth":
            raise BadRequest(
                f"Users of the auth collection '{collection.name}' are created with "
                f"POST /api/v1/collections/{collection.name}/auth/register"
            )
        return collection, epoch

    # --- events: the one path every change takes ----------------------------------------------

    async def _emit_changed(self, kind: str, collection: Collection, records: Sequence[Record]) -> None:
        await emit_changed(self._events, kind, collection, records, self._clock())

    async def _emit_deleted(self, collection: Collection, record_ids: Sequence[str],
                            records: Sequence[Record] = ()) -> None:
        await emit_deleted(self._events, collection, record_ids, self._clock(), records)

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
        webhook outbox entries when `_transactional`, else the outbox entries are written right
        after the change; either way before the write is acknowledged."""
        return self._events.unit(self._transactions if await self._transactional(collection) else None)

    async def _transactional(self, collection: Collection) -> bool:
        """Whether writes to `collection` run in a transaction: the server supports them and the
        collection has an active webhook."""
        return (self._transactions is not None and self._transactions.enabled
                and self._needs_transaction is not None and await self._needs_transaction(collection.id))

    async def _after_group(self, collection: Collection, stored: Sequence[Record], epoch: str | None) -> None:
        """After a group of creates is inserted (`InsertGroups`; `epoch`: the catalog epoch every
        create of the group looked the collection up under, if one): undo it if the collection was
        deleted meanwhile (NotFound), else emit the `create` events of the records it stored."""
        await drop_if_deleted(self._collections, self._records, collection, epoch)
        await self._emit_changed(CREATE, collection, stored)

    async def drain(self) -> None:
        """Wait for grouped creates already sent (shutdown, tests)."""
        if self._groups is not None:
            await self._groups.drain()

    async def _check_still_there(self, collection: Collection, epoch: str | None) -> None:
        """After an insert into `collection`, looked up under the catalog epoch `epoch`: if the
        collection was deleted meanwhile (its records dropped before the insert landed, which
        recreated them), drop what this write left and raise NotFound, so no write to a deleted
        collection succeeds and none of its documents survive."""
        await drop_if_deleted(self._collections, self._records, collection, epoch)

    # --- what is in flight (monitoring and tests) ------------------------------------------------

    @property
    def repository(self) -> RecordRepository:
        """The record store this service writes to and reads from (shared with the collection
        service and the user systems): for maintenance code, and for tests that check what was
        stored."""
        return self._records

    def creates_waiting(self) -> int:
        """How many creates wait in a group for their collection's insert in flight to return
        (`InsertGroups.waiting`; 0 without group commit). Issue "Fast reads", item 5: a test holds
        one group's insert and watches the next one fill."""
        return self._groups.waiting() if self._groups is not None else 0

    def reads_waiting(self) -> int:
        """How many record reads are inside a shared computation now (`SingleFlight.waiting`: the
        caller running each one plus those that joined it). Issue "Fast reads", item 3."""
        return self._flights.waiting()


async def emit_changed(events: EventBus, kind: str, collection: Collection, records: Sequence[Record],
                       now: datetime) -> None:
    """The one way record events are made: one `create` or `update` event per record, carrying the
    full record as the API shows it (`record_json`), stamped `now`. Used by every service that
    writes records (records, bulk, CSV import, auth-collection users)."""
    await events.emit([RecordEvent(kind, collection.name, r.id, record_json(r), now, record=r) for r in records])


async def emit_deleted(events: EventBus, collection: Collection, record_ids: Sequence[str],
                       now: datetime, records: Sequence[Record] = ()) -> None:
    """One `delete` event per record id, carrying `{id}`, stamped `now`; `records` are the deleted
    records the writer read (they ride along as `RecordEvent.record`, for access rules)."""
    known = {r.id: r for r in records}
    await events.emit([RecordEvent(DELETE, collection.name, rid, {"id": rid}, now, record=known.get(rid))
                       for rid in record_ids])


async def drop_if_deleted(collections: CollectionService, records: RecordRepository, collection: Collection,
                          epoch: str | None = None) -> None:
    """Raise NotFound, after dropping the collection's records, when `collection` no longer exists:
    the check every insert makes after it lands (a delete may have dropped the records between
    the writer's look-up and its insert). `epoch`: the catalog epoch the writer looked the
    collection up under, if known; while Redis still holds it, the check costs one Redis read and
    no database look-up (`CollectionService.exists_since`)."""
    if await collections.exists_since(collection.id, epoch):
        return
    await records.drop(collection.id)
    log.info("write to collection %s (%s) undone: the collection was deleted", collection.name, collection.id)
    raise NotFound(f"Collection '{collection.name}' not found")


async def checked_record(records: RecordRepository, view: Access, change: Access | None,
                         record_id: str) -> Record | None:
    """`permitted_record`, skipped when neither rule depends on the record (both permit every
    record): returns None then, without a look-up. Raises what `permitted_record` raises."""
    if view.everything and (change is None or change.everything):
        return None
    return await permitted_record(records, view, change, record_id)


async def permitted_record(records: RecordRepository, view: Access, change: Access | None,
                           record_id: str) -> Record:
    """The one check of a single record's rules, for records and files: the record (one `_id`
    look-up), once the view rule `view` shows it and `change` (the update or delete rule, if any)
    permits it. Raises `refusal()` of a rule that refuses outright, `view.hidden()` (missing or
    hidden) or `change.refusal()` (shown, but not to be changed)."""
    view.require()
    if change is not None:
        change.require()
    record = await records.get(view.collection.id, record_id)
    if record is None or not view.allows(record):
        raise view.hidden()
    if change is not None and not change.allows(record):
        raise change.refusal()
    return record


async def check_relations(records: RecordRepository, collection: Collection, values: dict[str, Any]) -> None:
    """Every relation id in `values` must name an existing record of its target collection.
    Raises ValidationFailed naming the field otherwise (one `_id` look-up per relation field)."""
    for spec in collection.fields:
        if spec.type != "relation" or spec.name not in values or spec.collection_id is None:
            continue
        wanted = set(value_list(values[spec.name]))
        found = await records.existing_ids(spec.collection_id, sorted(wanted))
        if len(found) != len(wanted):
            raise ValidationFailed("Relation points to a missing record", errors={spec.name: [UNKNOWN_RELATION]})


def _changed_record(record: Record, set_values: dict[str, Any], unset: Sequence[str], updated: Any) -> Record:
    """`record` as it is after setting `set_values` and clearing `unset`, at time `updated`."""
    data = {k: v for k, v in record.data.items() if k not in unset}
    data.update(set_values)
    return Record(id=record.id, created=record.created, updated=updated, data=data)
