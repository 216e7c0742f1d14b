"""A record written together with its files: one service operation (issue "Seams", item 3; spec:
Records, Files).

The admin UI's editor sends one multipart form: field values and file inputs, interleaved in form
order. Its handler only parses the form: each file part goes to `RecordDraft.add_file`, which
streams it into GridFS for the record (the one being changed, or the id the new record will get);
the values go to `RecordDraft.save`, which writes the record with the new file ids on its file
fields through the one writer (`RecordService.create_in` / `update`: validation, rules, relations,
deleted-collection guard, events). The draft cleans up after itself: when anything fails, or the
draft is left without `save`, every file it stored is deleted, so a refused save leaves neither
file nor record behind.

The rules are checked before the first byte is stored: a create needs the create rule not to
refuse outright (and a collection that is not of type auth), a change needs the view and update
rules to permit the caller on the stored record (as `POST /api/v1/files` does). A create or update
rule that reads `@request.data` cannot be decided before the values are known: it is checked with
them (`check_values`) as soon as they come, which a multipart form's `data` part sent first makes
before any file; files that come first are stored, and deleted again when the save's full check refuses.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from cms.clock import new_id
from cms.errors import ValidationFailed
from cms.models import Collection, Principal, Record
from cms.services import access as actions
from cms.services.access import check, reads_request_data
from cms.services.content.fields import is_multi, value_list
from cms.services.content.file_fields import vouched
from cms.services.content.file_parts import FormPart
from cms.services.content.files import FileService
from cms.services.content.locales import ALL, localization

if TYPE_CHECKING:
    from cms.services.content.records import RecordService


class RecordDraft:
    """One create (`record_id` None) or change of record `record_id` in the collection
    `collection_name` that carries files; use it as `async with records.draft(...) as draft:`.
    Entering it looks up the collection and checks the rules (raises NotFound, BadRequest for an
    auth collection, Unauthorized / Forbidden); leaving it without a successful `save` deletes the
    files it stored."""

    def __init__(self, records: RecordService, files: FileService, principal: Principal | None,
                 collection_name: str, record_id: str | None, locale: str | None = None) -> None:
        """`locale`: the locale the values of localized fields are for (None: the default locale)."""
        self._locale = locale
        self._records = records
        self._files = files
        self._principal = principal
        self._collection_name = collection_name
        self._creating = record_id is None
        self.record_id = record_id or new_id()
        """The record's id: the one changed, or the one the new record will get."""
        self._collection: Collection | None = None
        self._epoch: str | None = None
        self._stored: dict[str, list[str]] = {}
        self._replacing: set[str] = set()
        self._expected: datetime | None = None
        self._saved = False
        self._values_pending = False

    async def __aenter__(self) -> RecordDraft:
        principal, name = self._principal, self._collection_name
        if self._creating:
            self._collection, self._epoch = await self._records.writable_for_new_records(name)
            self._values_pending = reads_request_data(self._collection, actions.CREATE)
            if not self._values_pending:
                check(principal, self._collection, actions.CREATE).require()
        else:
            self._collection, _ = await self._records.writable_record(principal, name, self.record_id)
            self._values_pending = reads_request_data(self._collection, actions.UPDATE)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if not self._saved:
            await self._discard()

    @property
    def collection(self) -> Collection:
        """The collection written to (once entered)."""
        if self._collection is None:
            raise RuntimeError("RecordDraft used outside `async with`")
        return self._collection

    async def check_values(self, data: Any) -> None:
        """The create rule's outright refusal, or the update rule on the stored record, with the submitted
        `data` known, when entering could not decide it (the rule reads `@request.data`): raises NotFound,
        Unauthorized / Forbidden. Nothing otherwise."""
        if not self._values_pending or not isinstance(data, dict):
            return
        self._values_pending = False
        if self._creating:
            check(self._principal, self.collection, actions.CREATE, data).require()
        else:
            await self._records.writable_record(self._principal, self.collection.name, self.record_id, data)

    async def add_file(self, field_name: str, part: FormPart, *, append: bool = False) -> None:
        """Stream the file `part` into GridFS for the file field `field_name` of this record, to
        replace the field's files (`append` False: the form part `<field>`) or to be added after
        them (`append`: `<field>+`). Raises ValidationFailed (not a file field of the collection;
        a type or size the field refuses), PayloadTooLarge (past `max_upload_mb`); nothing of the
        file stays then."""
        spec = self.collection.field(field_name)
        if spec is None or spec.type != "file":
            raise ValidationFailed("Not a file field", errors={field_name: ["Not a file field of this collection."]})
        if spec.localized and self._locale == ALL:
            raise ValidationFailed("Files of a localized field go to one locale", errors={field_name: [ONE_LOCALE]})
        stored = await self._files.store(self.collection, self.record_id, spec, part)
        self._stored.setdefault(field_name, []).append(stored.id)
        if not append:
            self._replacing.add(field_name)

    async def save(self, data: dict[str, Any]) -> Record:
        """Write the record: `data` (field values, as `RecordService.create` / `update` take them;
        `<field>-`: a list of file ids to take out of a file field) with the new files: a file
        field's value is its ids in `data` (else none when it has `<field>` files, else its stored
        ids), then the new files, less the ids to take out (`file_values`). Raises
        ValidationFailed (a single-file field given several files, a bad `<field>-`) and what
        `create` / `update` raise; the files are deleted then. Cancelled while the write is under
        way, it waits for the write's outcome first: a record that was stored keeps its files
        (only a write that failed discards them)."""
        values = await self.file_values(data)
        write = asyncio.ensure_future(self._write(values))
        try:
            record = await asyncio.shield(write)
        except asyncio.CancelledError:
            # The write goes on without us (group commit stores a cancelled waiter's record): its
            # outcome, not the cancellation, decides whether the files stay.
            try:
                await write
            except Exception:
                await self._discard()
            else:
                self._saved = True
            raise
        except Exception:
            await self._discard()
            raise
        self._saved = True
        return record

    async def file_values(self, data: dict[str, Any]) -> dict[str, Any]:
        """`data` with the file fields this draft changes set (`save`), and the `<field>-` keys
        consumed. Raises ValidationFailed naming the field."""
        values = dict(data)
        removals: dict[str, list[str]] = {}
        for spec in self.collection.fields:
            if spec.type == "file" and f"{spec.name}-" in values:
                if spec.localized and self._locale == ALL:
                    raise ValidationFailed("Files of a localized field go to one locale",
                                           errors={f"{spec.name}-": [ONE_LOCALE]})
                removals[spec.name] = _id_list(spec.name, values.pop(f"{spec.name}-"))
        changed = [spec for spec in self.collection.fields
                   if spec.type == "file" and (spec.name in self._stored or spec.name in removals)]
        stored: dict[str, Any] = {}
        if not self._creating and any(s.name not in data and s.name not in self._replacing for s in changed):
            # as stored (with drafts: the working copy), localized fields as objects: a locale's files are
            # its own, never its fallback's
            _, record = await self._records.writable_record(self._principal, self.collection.name, self.record_id, data)
            stored, self._expected = record.data, record.updated  # the write must find it unchanged
        code = localization(self.collection, self._locale).write_locale
        for spec in changed:
            name = spec.name
            if name in data:
                base = value_list(data[name])
            elif name in self._replacing or self._creating:
                base = []
            else:
                held = stored.get(name)
                base = value_list(held.get(code or "") if spec.localized and isinstance(held, dict) else held)
            taken_out = set(removals.get(name, ()))
            ids = [i for i in [*base, *self._stored.get(name, [])] if i not in taken_out]
            if is_multi(spec):
                values[name] = ids or None  # past max_select: the schema refuses it
            elif len(ids) > 1:
                raise ValidationFailed("Too many files", errors={name: ["This field holds one file (max_select 1)."]})
            else:
                values[name] = ids[0] if ids else None
        return values

    async def _write(self, values: dict[str, Any]) -> Record:
        mine = {file_id: (self.record_id, name) for name, ids in self._stored.items() for file_id in ids}
        with vouched(mine):  # the writer's file check need not look up the files stored just now
            if self._creating:
                return await self._records.create_in(self._principal, self.collection, self._epoch, values,
                                                     record_id=self.record_id, locale=self._locale)
            return await self._records.update(self._principal, self.collection.name, self.record_id, values,
                                              locale=self._locale, expected_updated=self._expected)

    async def _discard(self) -> None:
        file_ids = [file_id for ids in self._stored.values() for file_id in ids]
        self._stored.clear()
        if file_ids:
            await self._files.discard(file_ids)


ONE_LOCALE = ("A localized file field takes files for one locale: send them with ?locale=<code>, or name files "
              "uploaded with POST /api/v1/files in the locales' values.")
"""Why file parts (and `<field>-`) of a localized field are refused under `?locale=*`."""
MAX_REMOVED_IDS = 1000
"""Ids one `<field>-` may list."""


def _id_list(name: str, value: Any) -> list[str]:
    """The ids of a `<field>-` value (an id or a list of ids). Raises ValidationFailed."""
    ids = value if isinstance(value, list) else [value]
    if len(ids) > MAX_REMOVED_IDS or not all(isinstance(i, str) and 0 < len(i) <= 64 for i in ids):
        raise ValidationFailed("Invalid file ids to remove",
                               errors={f"{name}-": [f"A list of at most {MAX_REMOVED_IDS} file ids."]})
    return ids
