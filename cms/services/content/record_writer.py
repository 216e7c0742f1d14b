"""The one write path of records (issue "Seams", item 3; spec: Records; decisions.md: Records, Batch writes).

Every record that is created or changed goes through `RecordWriter`, whoever asks: REST create and
update (`RecordService`), register (`CollectionUsers.create`), CSV import (`RecordCsv`) and the admin
UI's editor (`RecordDraft`, files included). A create takes these steps, in this order:

1. validate `data` against the schema (`new_record`; a failure stores nothing);
2. the caller's create rule, given the record as it would be stored (`create=`);
3. check relations: every relation id names an existing record (`check_relations`);
4. insert: grouped with concurrent creates (`group_commit.InsertGroups`) where that applies, else
   one insert in an event unit (`EventBus.unit`), in a transaction when the collection has an
   active webhook (its outbox entries commit with the record);
5. the deleted-collection guard: a collection deleted between the look-up and the insert (its
   records dropped before the insert recreated them) makes the write NotFound and its documents
   are dropped again (`RecordWriter.guard`);
6. store the records' versions where the collection keeps them (`versions.RecordVersions.record`,
   called from this one place for every create and update: `_committed`), then emit one `create`
   event per stored record (`emit_changed`), only once the guard passed.

Batches (decisions.md: Batch writes) run several writes in one MongoDB transaction by opening
`EventBus.unit(transactions)` around them: the writer's own unit then nests into the caller's
(events are held until the commit), its driver calls join the caller's session
(`store.transactions.current_session`), creates are never grouped (a group's insert would run
outside the transaction) and a failed guard raises NotFound without dropping anything (the
caller's abort undoes the insert). A batch's run of consecutive creates into one collection goes
through `create_all`: the same steps for every record of the run, with one relation look-up per
relation field, one ordered `insert_many`, one guard and one `emit` for the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.errors import AlreadyExists, BadRequest, CmsError, NotFound, ValidationFailed
from cms.models import Collection, Record
from cms.services.access import Access
from cms.services.caching.catalog import Catalog
from cms.services.content.fields import RecordSchemas, value_list
from cms.services.content.file_fields import FileRefs
from cms.services.content.group_commit import InsertGroups, insert_refusal
from cms.services.content.locales import stored_changes, stored_create, write_mode
from cms.services.content.record_events import emit_changed, emit_deleted
from cms.services.content.unique_clash import clash_answer
from cms.services.content.versions import RecordVersions
from cms.services.delivery.events import CREATE, UPDATE, EventBus
from cms.services.origin import current_origin
from cms.store.bulk import InsertFailure
from cms.store.records import RecordRepository
from cms.store.transactions import Transactions, current_session

log = logging.getLogger("cms.records")

UNKNOWN_RELATION = "Unknown record id."
MAX_RULE_ATTEMPTS = 3
"""Tries of a single update or delete whose rule depends on the record: each checks the record
it read, then writes only if the record is unchanged since (its `updated`)."""

Store = Callable[[Record], Awaitable[None]]
"""Stores one new record (default: `RecordRepository.insert`; users: record and credentials)."""
Undo = Callable[[], Awaitable[object]]
"""Removes what a `Store` left besides the collection's records (users: their credentials)."""
CheckRecord = Callable[[], Awaitable[datetime | None]]
"""The rule check of a single update: the record's `updated` the write must still find, or None
when no rule depends on the record."""
CreateRule = Callable[[Any], Access]
"""The create rule of one create, given its `data`: the caller's `Access` once `require()` passed
(raises the rule's outright refusal)."""


class CreateFailed(Exception):
    """Create `index` (from 0) of a run given to `RecordWriter.create_all` failed with `error`, the
    CmsError it would have got alone; the creates before it were stored in the caller's transaction
    (which the caller aborts)."""

    def __init__(self, index: int, error: CmsError) -> None:
        super().__init__(f"create {index} failed: {error.detail}")
        self.index = index
        self.error = error


class _CollectionGone(Exception):
    """Raised inside a write's unit when the guard fails, so the unit drops its events (and its
    transaction aborts) before the write is undone."""


class RecordWriter:
    """Creates and changes records of one database, in the order of the module docstring.

    One writer serves a process (cms/builders.py builds it): `RecordService`, `RecordCsv`, the admin
    UI's drafts and every auth collection's `CollectionUsers` take it. `group_commit`: REST creates
    into one collection share inserts (`InsertGroups`). `transactions`: writes to a collection whose
    record events the bus's outbox wants (an active webhook, `EventBus.outbox_wants`) run in a
    transaction with their outbox entries. `versions`: where every committed create and update stores
    its record's version (`_committed`) and every delete forgets them (None: no versions)."""

    def __init__(
        self,
        catalog: Catalog,
        records: RecordRepository,
        events: EventBus,
        *,
        clock: Clock = utcnow,
        transactions: Transactions | None = None,
        group_commit: bool = False,
        versions: RecordVersions | None = None,
        file_refs: FileRefs | None = None,
    ) -> None:
        self._catalog = catalog
        self._records = records
        self._schemas = RecordSchemas()  # the process's one cache of record schemas
        self._events = events
        self.clock = clock
        """The clock that stamps every write (`created`, `updated`, the events' time)."""
        self._transactions = transactions
        self._versions = versions
        self._grouped_writers: dict[str, str | None] = {}
        """Record id -> writer id of each grouped create until its group stores its version (a group
        spans requests; each version names its own create's caller)."""
        self._file_refs = file_refs
        self.groups = InsertGroups(records, after=self._after_group) if group_commit else None
        """The insert groups of REST creates, or None (shutdown drains them, tests watch them)."""

    # --- the steps --------------------------------------------------------------------------------

    def new_record(self, collection: Collection, data: Any, *, fixed: Mapping[str, Any] | None = None,
                   record_id: str | None = None, locale: str | None = None, working: bool = False) -> Record:
        """Step 1: the record `data` (an object of schema field values) would store, stamped now,
        with `fixed` values (an auth collection's `email`, `verified`) first; empty optional fields
        are left out; localized fields' values are `locale`'s (None: the default locale; `*`: objects;
        decisions.md, Localized fields). `record_id`: the id to give it (default: a new one). `working`:
        a working copy (types and lengths only, `required` not checked). Raises ValidationFailed (422,
        `errors: {field: [message]}`) or BadRequest (a locale not configured)."""
        mode, write_locale = write_mode(collection, locale)
        loaded = self._schemas.load(collection, data, partial=working, mode=mode, working=working)
        values = stored_create(collection.localized_fields, loaded, write_locale)
        now = self.clock()
        return Record(id=record_id or new_id(), created=now, updated=now, data={**(fixed or {}), **values})

    def changes(self, collection: Collection, data: Any, locale: str | None = None, *,
                working: bool = False) -> tuple[dict[str, Any], list[str]]:
        """Step 1 of an update: partial `data` validated, as (values to set, names to clear); a
        localized field's value under `locale` (None: the default locale) sets or clears only
        `field.<locale>`, with `*` its object replaces the stored one; `working`: of a working copy
        (any field may be cleared). Raises ValidationFailed or BadRequest (a locale not configured)."""
        mode, write_locale = write_mode(collection, locale)
        return stored_changes(collection.localized_fields, self._schemas.load(
            collection, data, partial=True, mode=mode, working=working), write_locale)

    async def check_relations(self, collection: Collection, values: Mapping[str, Any],
                              record_id: str | None = None) -> None:
        """Step 3: every relation id in `values` names an existing record of its target collection,
        and every file id a file of record `record_id` (None: of no record) and that field
        (`FileRefs`). Raises ValidationFailed naming the field (one `_id` look-up per relation field)."""
        failures = await self.relation_failures(collection, [values], [record_id])
        if failures:
            files = {spec.name for spec in collection.fields if spec.type == "file"}
            detail = "A file field names a file of another record or field" if set(failures[0]) <= files \
                else "Relation points to a missing record"
            raise ValidationFailed(detail, errors=failures[0])

    async def relation_failures(self, collection: Collection, rows: Sequence[Mapping[str, Any]],
                                record_ids: Sequence[str | None] | None = None) -> dict[int, dict[str, list[str]]]:
        """Step 3 for many records at once (CSV import): row index -> `{field: [UNKNOWN_RELATION]}`
        for the rows naming a missing record; one look-up per relation field for all rows; file
        fields as `FileRefs.failures` (`record_ids`: the rows' records)."""
        errors: dict[int, dict[str, list[str]]] = {}
        if self._file_refs is not None:
            errors.update(await self._file_refs.failures(collection, rows, record_ids))
        for spec in collection.fields:
            if spec.type != "relation" or spec.collection_id is None:
                continue
            wanted = {i for row in rows for i in value_list(row.get(spec.name))}
            if not wanted:
                continue
            missing = wanted - await self._records.existing_ids(spec.collection_id, sorted(wanted))
            for index, row in enumerate(rows):
                if missing.intersection(value_list(row.get(spec.name))):
                    errors.setdefault(index, {})[spec.name] = [UNKNOWN_RELATION]
        return errors

    async def guard(self, collection: Collection, epoch: str | None) -> None:
        """Step 5 after an insert into `collection`, looked up under the catalog epoch `epoch` (None:
        unknown): raise NotFound, after dropping the collection's records, when it was deleted
        meanwhile. Inside a caller's transaction nothing is dropped (its abort undoes the insert)."""
        if await self._catalog.exists(collection.id, since_epoch=epoch):
            return
        await self._undo(collection, None)

    async def emit_created(self, collection: Collection, records: Sequence[Record]) -> None:
        """Step 6: the records' versions, then one `create` event per record (`_committed`)."""
        await self._committed(CREATE, collection, records)

    async def emit_updated(self, collection: Collection, records: Sequence[Record],
                           previous: Sequence[Record] = ()) -> None:
        """The changed records' versions, then one `update` event per record (`_committed`; bulk
        updates, relation releases, user changes); `previous`: the records as they were before the
        change, matched by id (`emit_changed`)."""
        await self._committed(UPDATE, collection, records, previous)

    async def _committed(self, kind: str, collection: Collection, records: Sequence[Record],
                         previous: Sequence[Record] = (), writers: Mapping[str, str | None] | None = None) -> None:
        """Where every create and update is committed, inside its write's event unit: the records'
        versions (`RecordVersions.record`, written by the request's caller, or per record id by
        `writers`), then their events."""
        if self._versions is not None:
            await self._versions.record(collection, records, by=current_origin().user_id, previous=previous,
                                        created=kind == CREATE, writers=writers)
        await emit_changed(self._events, kind, collection, records, self.clock(), previous)

    async def emit_deleted(self, collection: Collection, record_ids: Sequence[str],
                           records: Sequence[Record] = (), *, forget: bool = True) -> None:
        """Forget the deleted records' versions (not with `forget` False: an unpublish, whose record
        stays), then one `delete` event per deleted record id (`emit_deleted`)."""
        if forget and self._versions is not None:
            await self._versions.forget(collection, record_ids)
        await emit_deleted(self._events, collection, record_ids, self.clock(), records)

    # --- whole writes -----------------------------------------------------------------------------

    async def create(self, collection: Collection, data: Any, *, epoch: str | None = None,
                     create: Access | None = None, fixed: Mapping[str, Any] | None = None,
                     record_id: str | None = None, store: Store | None = None, undo: Undo | None = None,
                     locale: str | None = None) -> Record:
        """Create one record of `collection` (looked up under the catalog epoch `epoch`) from `data`,
        taking every step of the module docstring; returns it once its event is emitted.

        `create`: the create rule to check on the record as it would be stored. `fixed`,
        `record_id`, `locale`: as `new_record`. `store` / `undo`: how to store it and what to remove besides
        its records if the guard fails (default: a plain insert, grouped when group commit is on).
        Raises ValidationFailed (schema, relations), the rule's refusal (Unauthorized /
        Forbidden), AlreadyExists (a unique field) or NotFound (the collection was deleted
        meanwhile; nothing of the write stays)."""
        record = self.new_record(collection, data, fixed=fixed, record_id=record_id, locale=locale)
        if create is not None:
            create.permit(record)
        await self.check_relations(collection, record.data, record.id)
        try:
            await self._insert(collection, record, epoch, store, undo)
        except AlreadyExists as exc:
            raise await clash_answer(self._records, collection, record, create, exc) from None
        return record

    async def _insert(self, collection: Collection, record: Record, epoch: str | None, store: Store | None,
                      undo: Undo | None) -> None:
        """Steps 4 to 6 of `create`."""
        transactional = await self._transactional(collection)
        if store is None and self.groups is not None and not transactional and current_session() is None:
            # grouped with concurrent creates; `_after_group` guards and emits before this returns
            if collection.versions:
                self._grouped_writers[record.id] = current_origin().user_id
            try:
                await self.groups.insert(collection, record, epoch)
            except asyncio.CancelledError:
                raise  # the group still stores the record: `_after_group` takes its writer
            except BaseException:
                self._grouped_writers.pop(record.id, None)
                raise
            return
        try:
            async with self._unit(transactional):
                await (store(record) if store is not None else self._records.insert(collection.id, record))
                if not await self._catalog.exists(collection.id, since_epoch=epoch):
                    raise _CollectionGone
                await self.emit_created(collection, [record])
        except _CollectionGone:
            await self._undo(collection, undo)

    async def create_all(self, collection: Collection, datas: Sequence[Any], rule: CreateRule, *,
                         epoch: str | None = None, locales: Sequence[str | None] = ()) -> list[Record]:
        """Create one record of `collection` (looked up under the catalog epoch `epoch`) per item of
        `datas`, in order, inside the caller's transaction (a batch, decisions.md: Batch writes;
        raises RuntimeError outside one): each as `create` would (`rule(data)` first), but with one
        relation look-up per relation field, one ordered insert, one guard and one `emit` for all.
        Returns the records. Raises CreateFailed(index, error) for the first create that fails,
        with the error it would have got alone: its rule, schema or relations, a unique field
        (AlreadyExists, also against an earlier create of the run) or NotFound (the collection was
        deleted meanwhile: the first create's error). `locales`: each create's `?locale=` (none: the
        default locale for every one)."""
        if current_session() is None:
            raise RuntimeError("create_all runs inside a caller's transaction")
        records, failed = self._drafts(collection, datas, rule, locales)
        relation_errors = await self.relation_failures(collection, [record.data for record in records],
                                                       [record.id for record in records])
        if relation_errors:
            first = min(relation_errors)
            records = records[:first]
            failed = CreateFailed(first, ValidationFailed("Relation points to a missing record",
                                                          errors=relation_errors[first]))
        refused = await self._records.insert_in_order(collection.id, records)
        if refused is not None:
            error = insert_refusal(refused)
            if not isinstance(error, CmsError):
                raise error
            clashed = records[refused.index]
            answer = await clash_answer(self._records, collection, clashed, rule(datas[refused.index]), error)
            raise CreateFailed(refused.index, answer)
        if records and not await self._catalog.exists(collection.id, since_epoch=epoch):
            raise CreateFailed(0, NotFound(f"Collection '{collection.name}' not found"))
        if failed is not None:
            raise failed
        await self.emit_created(collection, records)
        return records

    def _drafts(self, collection: Collection, datas: Sequence[Any], rule: CreateRule, locales: Sequence[str | None]
                ) -> tuple[list[Record], CreateFailed | None]:
        """Steps 1 and 2 of `create_all`, in order: the records of `datas` up to the first that its
        rule or the schema refuses, and that refusal (None when every one passed)."""
        records: list[Record] = []
        for index, data in enumerate(datas):
            try:
                create = rule(data)
                record = self.new_record(collection, data, locale=locales[index] if locales else None)
                create.permit(record)
            except CmsError as exc:
                return records, CreateFailed(index, exc)
            records.append(record)
        return records, None

    async def insert_many(self, collection: Collection, records: Sequence[Record]) -> list[InsertFailure]:
        """Step 4 for a batch of validated records (CSV import): one unordered `insert_many`;
        returns the records the database refused (unique clashes), by index. The caller then runs
        `guard` and `emit_created` for the stored ones. Driver errors propagate."""
        return await self._records.insert_many(collection.id, records)

    async def update(self, collection: Collection, record_id: str, data: Any, *, checked: CheckRecord,
                     rule: Access | None = None, locale: str | None = None) -> Record:
        """Change the fields of `data` (null clears one) on record `record_id`: validate, run the
        rule check `checked`, check relations, then write if the record is unchanged since the
        check (up to MAX_RULE_ATTEMPTS tries) and emit `update`. `rule`: the caller's update rule,
        for the answer to a unique clash (`unique_clash.clash_answer`); `locale`: as `changes`. Raises
        ValidationFailed, what `checked` raises, NotFound, AlreadyExists (or the rule's refusal) or
        BadRequest (it kept changing, or a locale not configured)."""
        try:
            return await self._update(collection, record_id, data, checked, locale)
        except AlreadyExists as exc:
            values, _ = self.changes(collection, data, locale)
            now = self.clock()
            clashed = Record(id=record_id, created=now, updated=now, data=values)
            raise await clash_answer(self._records, collection, clashed, rule, exc) from None

    async def _update(self, collection: Collection, record_id: str, data: Any, checked: CheckRecord,
                      locale: str | None) -> Record:
        set_values, unset = self.changes(collection, data, locale)
        expected = await checked()
        await self.check_relations(collection, set_values, record_id)
        for attempt in range(MAX_RULE_ATTEMPTS):
            if attempt:
                expected = await checked()
            set_values["updated"] = self.clock()
            async with await self.unit(collection):
                change = await self._records.update(collection.id, record_id, set_values, unset,
                                                    expected_updated=expected)
                if change is not None:
                    before, record = change
                    await self.emit_updated(collection, [record], [before])
                    return record
            if expected is None:
                raise NotFound("Record not found")
        raise BadRequest("The record kept changing while your change was checked; retry")

    async def unit(self, collection: Collection) -> AbstractAsyncContextManager[None]:
        """The event unit of one write to `collection` (`EventBus.unit`): in a transaction with its
        webhook outbox entries when the collection needs one, else the outbox entries are written
        right after the change; either way before the write is acknowledged."""
        return self._unit(await self._transactional(collection))

    def _unit(self, transactional: bool) -> AbstractAsyncContextManager[None]:
        return self._events.unit(self._transactions if transactional else None)

    async def _transactional(self, collection: Collection) -> bool:
        """Whether writes to `collection` run in a transaction: the server supports them and the
        bus's outbox wants the collection's record events (an active webhook)."""
        return (self._transactions is not None and self._transactions.enabled
                and await self._events.outbox_wants(collection.id))

    async def _undo(self, collection: Collection, undo: Undo | None) -> None:
        """Raise NotFound for a write into a deleted collection, after removing what it left
        (outside a caller's transaction, whose abort removes it instead)."""
        if current_session() is None:
            await self._records.drop(collection.id)
            if undo is not None:
                await undo()
            log.info("write to collection %s (%s) undone: the collection was deleted", collection.name, collection.id)
        raise NotFound(f"Collection '{collection.name}' not found")

    async def _after_group(self, collection: Collection, stored: Sequence[Record], epoch: str | None) -> None:
        """After a group of creates is inserted (`InsertGroups`; `epoch`: the catalog epoch every
        create of the group looked the collection up under, if one): the guard, then the `create`
        events of the records it stored."""
        await self.guard(collection, epoch)
        writers = {record.id: self._grouped_writers.pop(record.id, None) for record in stored}
        await self._committed(CREATE, collection, stored, writers=writers)

