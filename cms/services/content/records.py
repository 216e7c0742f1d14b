"""Records: create, update, delete, bulk update and delete, CSV export and import within a
collection (spec: Records; decisions.md: Records, Limits); the reads are `RecordReads`
(record_reads.py), which `RecordService` extends.

Every create and update, one at a time or by CSV import, goes through the one writer
(`record_writer.RecordWriter`: validate, check relations, insert, deleted-collection guard, emit);
register and the admin UI's editor use the same writer. Every change emits one RecordEvent per
changed record after the write succeeded; failed writes emit nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from cms.errors import BadRequest, NotFound
from cms.models import Collection, Principal, Record
from cms.services import access as actions
from cms.services.access import Access, check, reads_request_data, require_writable
from cms.services.caching.catalog import Catalog
from cms.services.caching.read_cache import ReadCache
from cms.services.caching.result_sets import ResultSetCache
from cms.services.content.bulk_checks import (
    MAX_BULK_IDS,
    bulk_refused,
    check_record_ids,
    permit_all,
)
from cms.services.content.csv_io import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS, ImportResult
from cms.services.content.draft_bulk import DraftBulk
from cms.services.content.drafts import WorkingCopies
from cms.services.content.file_parts import FormPart
from cms.services.content.files import FileService
from cms.services.content.locales import unique_writes
from cms.services.content.record_checks import checked_record, permitted_record, row_permission
from cms.services.content.record_csv import CsvExport, RecordCsv
from cms.services.content.record_events import emit_changed, emit_deleted
from cms.services.content.record_forms import save_form
from cms.services.content.record_reads import DEFAULT_PER_PAGE, MAX_PER_PAGE, RecordReads
from cms.services.content.record_uploads import RecordDraft
from cms.services.content.record_writer import MAX_RULE_ATTEMPTS, RecordWriter
from cms.services.content.relations import RelationRelease
from cms.services.operations.settings import RecordLimits, SettingsService
from cms.store.documents import record_after_update
from cms.store.records import RecordRepository

__all__ = [  # the names other modules import from here
    "DEFAULT_PER_PAGE", "MAX_BULK_IDS", "MAX_PER_PAGE", "RecordService", "check_record_ids", "checked_record",
    "emit_changed", "emit_deleted", "permitted_record",
]

class RecordService(RecordReads):
    """Records of user collections. Who may list, view, create, change and delete them is decided
    by the collection's access rules (`access.check`) on every path: single, bulk and CSV.
    `files`: the file service, for creates and changes that carry files (`draft`)."""

    def __init__(self, catalog: Catalog, records: RecordRepository, writer: RecordWriter, *,
                 settings: SettingsService | None = None, cache: ReadCache | None = None,
                 result_sets: ResultSetCache | None = None, files: FileService | None = None,
                 working_copies: WorkingCopies | None = None) -> None:
        """`writer`: the process's one record writer (cms/wiring.py), which every write goes through;
        `cache` and `result_sets`: the read cache and the result sets beside it (`RecordReads`);
        `working_copies`: the writes of collections with drafts (drafts.py)."""
        super().__init__(catalog, records, cache=cache, result_sets=result_sets)
        self._copies = working_copies
        self._writer = writer
        self._groups = writer.groups
        self._settings = settings
        self._files = files
        self._csv = RecordCsv(records, writer, clock=writer.clock)
        self._relations = RelationRelease(catalog, records, writer)

    # --- one record ---------------------------------------------------------------------------

    async def create(self, principal: Principal | None, collection_name: str, data: Any, *,
                     locale: str | None = None) -> Record:
        """Validate `data` against the schema and store a new record, if the create rule lets
        `principal` (None: no credentials) create it (fields in the rule read the record as it
        would be stored, `@request.data` reads `data`); emits `create`. Localized fields' values are
        `locale`'s (None: the default locale; `*`: objects; decisions.md, Localized fields).
        Raises NotFound (also when the collection is deleted during the write), BadRequest (an
        auth collection: users are made by register; a locale not configured), Unauthorized /
        Forbidden (the rule refuses), ValidationFailed (422) or AlreadyExists (a unique field)."""
        collection, epoch = await self.writable_for_new_records(collection_name)
        return await self.create_in(principal, collection, epoch, data, locale=locale)

    async def create_in(self, principal: Principal | None, collection: Collection, epoch: str | None, data: Any,
                        *, record_id: str | None = None, locale: str | None = None) -> Record:
        """`create` in a collection already looked up (`writable_for_new_records`) under the catalog
        epoch `epoch`; `record_id`: the new record's id (default: a new one). Raises as `create`."""
        create = check(principal, collection, actions.CREATE, data if isinstance(data, dict) else None)
        create.require()
        if collection.drafts:
            return await self._drafted().create(collection, data, epoch=epoch, create=create, record_id=record_id,
                                                locale=locale)
        return await self._writer.create(collection, data, epoch=epoch, create=create, record_id=record_id,
                                         locale=locale)

    async def update(self, principal: Principal | None, collection_name: str, record_id: str, data: Any, *,
                     locale: str | None = None, expected_updated: datetime | None = None) -> Record:
        """Change the fields given in `data` (null clears an optional field), if the view rule lets
        `principal` (None: no credentials) see the record and the update rule lets it change it
        (fields in the rule read the stored record, `@request.data` reads `data`); emits `update`.
        A localized field's value changes only `locale`'s (None: the default locale), or with `*` its
        object is replaced. Raises NotFound (also for a record the caller may not see), Unauthorized /
        Forbidden (the rule refuses), ValidationFailed, AlreadyExists, or BadRequest (the record kept
        changing under a rule that depends on it; a locale not configured). `<file field>-` keys (ids
        to take out of a file field) go through a draft (record_uploads.py), as in a multipart write.
        `expected_updated`: write only if the record's `updated` is still this (a draft that computed
        a file field from the stored value); else BadRequest, as for a record that kept changing."""
        collection = await self._catalog.by_name(collection_name)
        if self._files is not None and isinstance(data, dict) and any(
                f"{spec.name}-" in data for spec in collection.fields if spec.type == "file"):
            async with self.draft(principal, collection_name, record_id, locale=locale) as draft:
                return await draft.save(data)
        if collection.drafts:  # the working copy: no event
            return await self._drafted().update(principal, collection, record_id, data, locale=locale)
        view = check(principal, collection, actions.VIEW)
        update = check(principal, collection, actions.UPDATE, data if isinstance(data, dict) else None)
        update.require()

        async def checked() -> datetime | None:
            found = await self._checked(view, update, record_id)
            return found if expected_updated is None else expected_updated

        return await self._writer.update(collection, record_id, data, checked=checked, rule=update, locale=locale)

    def draft(self, principal: Principal | None, collection_name: str, record_id: str | None = None, *,
              locale: str | None = None) -> RecordDraft:
        """A create (`record_id` None) or a change of record `record_id` that carries files: add
        the files (`RecordDraft.add_file`), then `save` the values (localized ones `locale`'s), inside
        `async with`; a failure anywhere leaves no file and no record behind. See record_uploads.py.
        Raises RuntimeError when the service was built without `files`."""
        if self._files is None:
            raise RuntimeError("RecordService was built without a file service")
        return RecordDraft(self, self._files, principal, collection_name, record_id, locale)

    async def save_form(self, principal: Principal | None, collection_name: str, record_id: str | None,
                        parts: AsyncIterator[FormPart], *, locale: str | None = None) -> Record:
        """A create (`record_id` None) or change sent as multipart/form-data: values (localized ones
        `locale`'s) and files in one request, all or nothing (record_forms.py, which says what it raises)."""
        return await save_form(self, principal, collection_name, record_id, parts, locale=locale)

    async def delete(self, principal: Principal | None, collection_name: str, record_id: str) -> None:
        """Delete one record, if the view rule lets `principal` (None: no credentials) see it and
        the delete rule lets it delete it, and release the relations that point to it
        (`relations.py`); emits `delete` with `{id}` (and the events of the records the release
        changes or deletes). Raises NotFound (also for a record the caller may not see),
        Unauthorized / Forbidden (the rule refuses), BadRequest (a required relation field still
        needs it, or the record kept changing under a rule that depends on it)."""
        collection = await self._catalog.by_name(collection_name)
        view, delete = check(principal, collection, actions.VIEW), check(principal, collection, actions.DELETE)
        delete.require()
        if collection.drafts:  # both copies; an event only for a published one
            return await self._drafted().delete(view, delete, record_id, self._relations)
        for _ in range(MAX_RULE_ATTEMPTS):
            expected = await self._checked(view, delete, record_id)
            plan = await self._relations.plan_release(collection, [record_id])
            async with await self._writer.unit(collection):
                gone = await self._records.delete(collection.id, record_id, expected_updated=expected)
                if gone is not None:
                    await self._writer.emit_deleted(collection, [record_id], [gone])
                    await self._relations.release(plan)
                    return
            if expected is None:
                raise NotFound("Record not found")
        raise BadRequest("The record kept changing while your change was checked; retry")


    def _drafted(self) -> WorkingCopies:
        """The writes of collections with drafts. Raises RuntimeError when built without them."""
        if self._copies is None:
            raise RuntimeError("RecordService was built without working copies")
        return self._copies

    async def _checked(self, view: Access, change: Access, record_id: str) -> datetime | None:
        """Check a single update or delete against the record as stored now. Returns None when
        neither rule depends on the record (no look-up is made), else the record's `updated`, which
        the write must still find. Raises `view.refusal()` / `view.hidden()` (the caller may not
        see it, or it is missing) or `change.refusal()` (it may see it, not change it)."""
        record = await checked_record(self._records, view, change, record_id)
        return None if record is None else record.updated


    # --- bulk ---------------------------------------------------------------------------------

    async def bulk_update(
        self, principal: Principal | None, collection_name: str, record_ids: Sequence[str], data: Any, *,
        locale: str | None = None,
    ) -> int:
        """Apply the same partial `data` to every record of `record_ids` (1..1,000 distinct ids), all
        or nothing, in one bulk write; emits one `update` per record (with the record as read before
        the write as its `previous`). Returns how many were updated. With drafts: the working copies,
        no event (`DraftBulk.update`).

        `data` is validated once; then each record is checked: it must exist, and a unique field may
        be set on one record only, to a value no other record holds. The view and update rules are
        checked first (`_permitted`): any id they refuse (hidden, refused, or missing when a rule
        depends on the record) makes the request 403 naming it in `errors`. Raises NotFound (collection),
        Unauthorized / Forbidden (a rule refuses), ValidationFailed (422; `errors.record_ids` for a
        bad id list, `errors.<field>` for bad `data`, `errors.<record id>` for the records that
        would fail; nothing changes) or AlreadyExists (a concurrent write took a unique value
        first)."""
        collection = await self._catalog.by_name(collection_name)
        require_writable(collection)
        ids = check_record_ids(record_ids, (await self._limits()).bulk_max_ids)
        if collection.drafts:  # the working copies, no event (draft_bulk.py)
            return await DraftBulk(self._drafted(), self._relations).update(principal, collection, ids, data,
                                                                            locale=locale)
        view = check(principal, collection, actions.VIEW)
        update = check(principal, collection, actions.UPDATE, data if isinstance(data, dict) else None)
        set_values, unset = self._writer.changes(collection, data, locale)  # localized: as `update`
        found = await self._permitted(view, update, ids, "change")
        await self._writer.check_relations(collection, set_values)
        failures: dict[str, list[str]] = {i: ["Record not found."] for i in ids if i not in found}
        for record_id, messages in (await self._unique_conflicts(collection, set_values, list(found))).items():
            failures.setdefault(record_id, []).extend(messages)
        if failures:
            raise bulk_refused("updated", failures, len(ids))
        change = {**set_values, "updated": self._writer.clock()}
        async with await self._writer.unit(collection):
            matched = await self._records.update_many(collection.id, ids, change, unset)
            if matched == len(ids):
                changed = [record_after_update(found[i], change, unset) for i in ids]
            else:  # some were deleted meanwhile: report the ones still there
                changed = await self._records.find_by_ids(collection.id, ids)
            await self._writer.emit_updated(collection, changed, [found[i] for i in ids])
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
        return permit_all(view, change, record_ids, found, verb)

    async def _unique_conflicts(
        self, collection: Collection, set_values: dict[str, Any], record_ids: Sequence[str]
    ) -> dict[str, list[str]]:
        """Record id -> messages, for unique fields the change would duplicate: the same value on
        several records, or a value another record holds."""
        failures: dict[str, list[str]] = {}
        for path, value in unique_writes(collection, set_values) if record_ids else []:
            if len(record_ids) > 1:
                message = f"{path}: Value must be unique; it cannot be set on {len(record_ids)} records at once."
                for record_id in record_ids:
                    failures.setdefault(record_id, []).append(message)
            elif await self._records.count_holders(collection.id, path, value, record_ids):
                failures.setdefault(record_ids[0], []).append(f"{path}: Value must be unique; another record holds it.")
        return failures

    async def bulk_delete(self, principal: Principal | None, collection_name: str, record_ids: Sequence[str]) -> int:
        """Delete every record of `record_ids` (1..1,000 distinct ids), all or nothing, in one bulk
        write; emits one `delete` per record (with drafts: both copies, `DraftBulk.delete`). Returns
        how many were deleted.

        Raises NotFound (collection), ValidationFailed (422; `errors.record_ids` for a bad id list,
        `errors.<record id>` for unknown ids when no rule depends on the record; nothing is deleted
        then), Unauthorized / Forbidden (403: a rule refuses outright, or refuses some ids, named in
        `errors` as `_permitted` decides; nothing is deleted). A record deleted by another
        request between the check and the delete is not counted, but still gets a `delete` event
        (subscribers see at least one)."""
        collection = await self._catalog.by_name(collection_name)
        require_writable(collection)
        ids = check_record_ids(record_ids, (await self._limits()).bulk_max_ids)
        if collection.drafts:  # both copies; events for the published ones (draft_bulk.py)
            return await DraftBulk(self._drafted(), self._relations).delete(principal, collection, ids)
        view, delete = check(principal, collection, actions.VIEW), check(principal, collection, actions.DELETE)
        existing = await self._permitted(view, delete, ids, "delete")
        missing = {i: ["Record not found."] for i in ids if i not in existing}
        if missing:
            raise bulk_refused("deleted", missing, len(ids))
        plan = await self._relations.plan_release(collection, ids)
        async with await self._writer.unit(collection):
            deleted = await self._records.delete_many(collection.id, ids)
            await self._writer.emit_deleted(collection, ids, list(existing.values()))
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
        locale: str | None = None,
    ) -> CsvExport:
        """The records matching `filter_expr` and `search`, in `sort` order (default `created`), as
        CSV: header `id,created,updated,<schema fields in order>`, cells as in `csv_io`. The query is
        checked here, before any byte is sent; the rows are read in batches while `chunks` is
        consumed, so memory stays flat however many records match. Only the records the list rule
        shows `principal` are exported; localized fields as `locale` answers them (`*`: a column per
        locale, `title:de`). Raises NotFound (collection), InvalidFilter, Forbidden (the list rule
        refuses outright) or BadRequest (a locale not configured, or a view)."""
        collection = await self._catalog.by_name(collection_name)
        if collection.view is not None:
            raise BadRequest(f"'{collection.name}' is a view: list its records (they are its groups, not stored)")
        access = check(principal, collection, actions.LIST, locale=locale)
        query = self.query(collection, filter_expr=filter_expr, search=search, access=access)
        shown = replace(collection, fields=tuple(f for f in collection.fields if f.name not in access.fields.unknown))
        codes = access.localization.codes if access.localization.objects else ()
        return await self._csv.export(shown, query, self._order(access, sort), access.redact, codes,
                                      access.localization.language)

    async def import_csv(self, principal: Principal, collection_name: str, content: bytes) -> ImportResult:
        """Create records from CSV `content` (UTF-8, BOM optional, a header row naming fields); every
        stored record emits `create` (with drafts: each row a `draft`, no event). See
        `RecordCsv.import_csv` for the checks and the result. The create rule is checked per row
        (`@request.data` reads the row's values as JSON); refused rows are failed rows with
        `errors._rule`; a row naming a field whose `write_rule` refuses it refuses the whole file.
        Raises NotFound (collection, also when it is deleted during the import), BadRequest (an
        auth collection), Forbidden (the create rule refuses outright; a field's write_rule, naming
        it), PayloadTooLarge (over 10 MiB) or ValidationFailed (the file is refused: nothing stored)."""
        collection, epoch = await self.writable_for_new_records(collection_name)
        limits = await self._limits()
        if collection.rules.create_rule is None:  # admins only: refuse the file as a whole
            check(principal, collection, actions.CREATE).require()

        return await self._csv.import_csv(collection, content, epoch=epoch, max_bytes=limits.import_max_bytes,
                                          max_rows=limits.import_max_rows,
                                          permitted=row_permission(principal, collection),
                                          drafts=self._drafted().working if collection.drafts else None)

    async def writable_record(self, principal: Principal | None, collection_name: str, record_id: str,
                              data: dict[str, Any] | None = None) -> tuple[Collection, Record]:
        """The collection `collection_name` and record `record_id` as stored (with drafts: its working
        copy; localized fields as objects), if its view rule lets `principal` see the record and its
        update rule lets it change it (`@request.data` reading `data`; with `data` None an update rule
        that reads it is left to the write: `reads_request_data`). Raises NotFound (collection, or a
        record the caller may not see) or Unauthorized / Forbidden (the rule refuses)."""
        collection = await self._catalog.by_name(collection_name)
        view = check(principal, collection, actions.VIEW)
        pending = data is None and reads_request_data(collection, actions.UPDATE)
        update = view if pending else check(principal, collection, actions.UPDATE, data)
        if collection.drafts:
            return collection, await self._drafted().editable(view, update, record_id)
        return collection, await permitted_record(self._records, view, update, record_id)

    async def writable_for_new_records(self, collection_name: str) -> tuple[Collection, str | None]:
        """The collection, if records may be created in it through the records API (not an auth
        collection, whose records are users with an email and credentials, made by register), and
        the catalog epoch it was looked up under (`Catalog.by_name_and_epoch`). Raises NotFound,
        MethodNotAllowed (a view: read-only) or BadRequest (an auth collection)."""
        collection, epoch = await self._catalog.by_name_and_epoch(collection_name)
        require_writable(collection)
        if collection.type == "auth":
            raise BadRequest(
                f"Users of the auth collection '{collection.name}' are created with "
                f"POST /api/v1/collections/{collection.name}/auth/register"
            )
        return collection, epoch

    # --- limits ---------------------------------------------------------------------------------

    async def import_max_bytes(self) -> int:
        """The largest CSV upload accepted, in bytes (setting `csv_import_max_mb`)."""
        return (await self._limits()).import_max_bytes

    async def _limits(self) -> RecordLimits:
        if self._settings is None:
            return RecordLimits(MAX_BULK_IDS, MAX_IMPORT_ROWS, MAX_IMPORT_BYTES)
        return await self._settings.record_limits()

    async def drain(self) -> None:
        """Wait for grouped creates already sent (shutdown, tests)."""
        if self._groups is not None:
            await self._groups.drain()

    # --- what is in flight (monitoring and tests) ------------------------------------------------

    def creates_waiting(self) -> int:
        """How many creates wait in a group for their collection's insert in flight to return
        (`InsertGroups.waiting`; 0 without group commit). Issue "Fast reads", item 5: a test holds
        one group's insert and watches the next one fill."""
        return self._groups.waiting() if self._groups is not None else 0
