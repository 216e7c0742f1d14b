"""Files attached to records (spec: Files; decisions.md: Identity and tokens, Response shapes,
Limits, Files in records, thumbnails and file tokens).

A file belongs to one record (`collection` + `record_id`) and, when uploaded for one, to one of its
file fields (`field`). Writing one (upload, delete) needs what changing the record needs: its
collection's view and update rules (`access.check`, `records.permitted_record`). Reading follows the
view rule of its record; a file of a `protected` field also needs a file token (`file_tokens.py`). A
file whose record the caller may not see is answered exactly as a missing file, 404 "File not
found", so a file id tells nothing to whoever may not see its record.

What an upload goes through (its type from its signature, the field's `max_size` and `mime_types`,
images checked whole) is `file_intake.py`; thumbnails are `thumbnails.py`. Files go away with their
record (single, bulk, a user's record) and with their collection, and a file a record write removes
from a file field (replaced, removed, cleared) once the write is committed: `on_record_events` and
`on_collection_events` are subscribed to the EventBus in `cms.builders`. A dropped working copy (a discarded
draft, a deleted record never published) takes the files only it held (`on_working_copy_dropped`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from cms.clock import Clock, utcnow
from cms.errors import BadRequest, NotFound, ValidationFailed
from cms.models import Collection, FieldSpec, Principal, StoredFile
from cms.services.access import UPDATE, VIEW, check
from cms.services.caching.catalog import Catalog
from cms.services.caching.read_cache import ReadCache
from cms.services.content.drafts import DroppedCopy
from cms.services.content.fields import held_values
from cms.services.content.file_downloads import FileContent, FileDownloads
from cms.services.content.file_fields import file_fields
from cms.services.content.file_intake import FileIntake, Received
from cms.services.content.file_parts import (
    MIB,
    FormPart,
    drain,
    file_not_found,
    read_value,
)
from cms.services.content.file_tokens import FileTokens
from cms.services.content.image_pool import ImagePool
from cms.services.content.record_checks import permitted_record
from cms.services.delivery.events import DELETE, CollectionEvent, RecordEvent
from cms.services.delivery.events import UPDATE as UPDATED
from cms.services.operations.settings import SettingsService
from cms.store.files import FileRepository
from cms.store.records import RecordRepository

log = logging.getLogger("cms.files")

FILE_FIELD = "file"
TARGET_FIELDS = ("collection", "record_id", "field")
"""The small form values of an upload besides its file (`field` is optional)."""
OTHER_PARTS_BYTES = 64 * 1024
"""Form fields other than `file`, `collection`, `record_id` and `field` may total this many bytes (read and dropped)."""


class FileService:
    """Upload, download (thumbnails too) and delete files of records; clean-up when records and
    collections go and when a write takes files out of file fields. `intake` receives uploads,
    `downloads` opens files and thumbnails, `tokens` issues file tokens, `pool` is the image workers
    (`close` shuts them down), `read_cache` is told of every file deleted (the existence of files
    is kept there, `file_downloads.py`)."""

    def __init__(self, files: FileRepository, catalog: Catalog, records: RecordRepository,
                 settings: SettingsService, *, intake: FileIntake, downloads: FileDownloads, tokens: FileTokens,
                 pool: ImagePool, read_cache: ReadCache | None = None, clock: Clock = utcnow) -> None:
        self._files = files
        self._catalog = catalog
        self._records = records
        self._settings = settings
        self._intake = intake
        self.downloads = downloads
        """Downloads: files, thumbnails, file tokens."""
        self.tokens = tokens
        """File tokens: `POST /api/v1/files/token` issues them."""
        self._pool = pool
        self._read_cache = read_cache
        self._clock = clock

    async def max_upload_bytes(self) -> int:
        """The largest file accepted, in bytes (setting `max_upload_mb`, default 25)."""
        return int((await self._settings.values())["max_upload_mb"]) * MIB

    async def close(self) -> None:
        """Shut the image workers down (the services are closing)."""
        await self._pool.close()

    # --- upload -----------------------------------------------------------------------------------

    async def upload(self, principal: Principal | None, parts: AsyncIterator[FormPart]) -> StoredFile:
        """Store the `file` part of a form that also names `collection`, `record_id` and, optionally,
        `field` (a file field of the collection: the file is then of that field, checked against its
        `max_size` and `mime_types`, and may be set as its value), and return it. The file is
        streamed into GridFS as it is read; when the other values come before `file`, the record is
        checked before a byte is stored.

        Raises ValidationFailed (422: `errors.file` no file part, or a refused image;
        `errors.collection` missing or unknown, `errors.record_id` missing, no such record, or one
        the view rule hides; `errors.field` not a file field; `errors.<field>` a type or size the
        field refuses), Unauthorized / Forbidden (the update rule, or the `write_rule` of `field`, refuses
        the caller),
        PayloadTooLarge (413: the file passed `max_upload_mb`, or the other fields 64 KiB; raised
        as soon as the limit is passed) or BadRequest (two files, malformed multipart). On any
        failure nothing is stored."""
        max_bytes = await self.max_upload_bytes()
        values: dict[str, str] = {}
        other_bytes = 0
        target: tuple[Collection, FieldSpec | None] | None = None
        received: Received | None = None
        try:
            async for part in parts:
                if part.name == FILE_FIELD:
                    if received is not None:
                        raise BadRequest(f"Send one file per request (form field '{FILE_FIELD}')")
                    if all(values.get(name) for name in TARGET_FIELDS[:2]):
                        target = await self._target(principal, values)
                    spec = target[1] if target is not None else None
                    received = await self._intake.receive(part, max_bytes=max_bytes, spec=spec,
                                                          key=spec.name if spec is not None else FILE_FIELD)
                elif part.name in TARGET_FIELDS:
                    if part.name in values:
                        raise BadRequest(f"Form field '{part.name}' is given twice")
                    values[part.name] = await read_value(part)
                else:
                    other_bytes += await drain(part, OTHER_PARTS_BYTES - other_bytes, "Form fields other than 'file'")
            if received is None:
                raise ValidationFailed(f"No form field '{FILE_FIELD}' in the upload", errors={
                    FILE_FIELD: [f"Missing: send the file in the multipart form field '{FILE_FIELD}'."]})
            if target is None:
                target = await self._target(principal, values)
                if target[1] is not None:  # the field came after the file: its checks were not run
                    raise ValidationFailed("Name the field before the file", errors={
                        "field": ["Send the form field 'field' before 'file'."]})
            collection, spec = target
            file = self._described(received, collection, values["record_id"].strip(), spec)
            await received.upload.finish(file)
        except BaseException:
            if received is not None:
                await received.upload.abort()
            raise
        await self._check_record_still_there(file)
        log.info("file %s (%d bytes) attached to %s/%s", file.id, file.size, file.collection, file.record_id)
        return file

    async def store(self, collection: Collection, record_id: str, spec: FieldSpec, part: FormPart) -> StoredFile:
        """Store one file part for the file field `spec` of record `record_id` of `collection`
        without checking the record (which may not exist yet): the caller, `RecordDraft`, has
        checked the rules and removes the file (`discard`) if the record is not saved. Raises what
        `FileIntake.receive` raises (422 naming the field, 413); nothing stays stored then."""
        received = await self._intake.receive(part, max_bytes=await self.max_upload_bytes(), spec=spec, key=spec.name)
        file = self._described(received, collection, record_id, spec)
        try:
            await received.upload.finish(file)
        except BaseException:
            await received.upload.abort()
            raise
        return file

    def _described(self, received: Received, collection: Collection, record_id: str,
                   spec: FieldSpec | None) -> StoredFile:
        return StoredFile(
            id=received.file_id, filename=received.filename, content_type=received.content_type,
            size=received.size, collection_id=collection.id, collection=collection.name, record_id=record_id,
            sha256=received.sha256, created=self._clock(), field=spec.name if spec is not None else None,
        )

    async def discard(self, file_ids: Sequence[str]) -> None:
        """Delete the files `store` wrote for a record that was not saved (no rule check: they are
        the caller's own)."""
        for file_id in file_ids:
            await self._files.delete(file_id)

    async def _target(self, principal: Principal | None, values: dict[str, str]) -> tuple[Collection, FieldSpec | None]:
        """The collection of the record named by the form, once checked (the record exists, the
        view rule shows it to `principal`, the update rule lets it change it), and the file field
        `field` names (None when absent). An upload naming a field writes that field: its `write_rule`
        must hold as for a write whose `data` names it (decisions.md, Field rules). Raises ValidationFailed
        (422) naming the value at fault (also for a record the caller may not see), Unauthorized /
        Forbidden (a rule refuses; a field's write_rule: 403 naming the field)."""
        name, record_id = (values.get(n, "").strip() for n in TARGET_FIELDS[:2])
        missing = {n: [f"Missing: send the form field '{n}'."]
                   for n, v in zip(TARGET_FIELDS[:2], (name, record_id), strict=True) if not v}
        if missing:
            raise ValidationFailed("The upload must name a collection and a record", errors=missing)
        try:
            collection = await self._catalog.by_name(name)
        except NotFound:
            raise ValidationFailed(f"Collection '{name}' not found",
                                   errors={"collection": [f"No collection named '{name}'."]}) from None
        field_name = values.get("field", "").strip()
        spec = collection.field(field_name) if field_name else None
        if field_name and (spec is None or spec.type != "file"):
            raise ValidationFailed(f"'{field_name}' is not a file field of '{collection.name}'",
                                   errors={"field": [f"No file field named '{field_name}'."]})
        try:
            await permitted_record(self._records, check(principal, collection, VIEW),  # `field`: its write_rule too
                                   check(principal, collection, UPDATE, {spec.name: None} if spec else None),
                                   record_id)
        except NotFound:
            raise ValidationFailed("Record not found", errors={
                "record_id": [f"No record with this id in '{collection.name}' that you may change."]}) from None
        return collection, spec

    async def _check_record_still_there(self, file: StoredFile) -> None:
        """After the file is written: if its record was deleted meanwhile (its clean-up ran before the
        file was visible), delete the file and raise ValidationFailed, so no file outlives its record."""
        if await self._records.existing_ids(file.collection_id, [file.record_id]):
            return
        await self._files.delete(file.id)
        log.info("file %s undone: record %s was deleted during the upload", file.id, file.record_id)
        raise ValidationFailed("Record not found", errors={"record_id": ["The record was deleted."]})

    # --- download and delete ---------------------------------------------------------------------------

    async def describe(self, file_ids: Sequence[str]) -> dict[str, StoredFile]:
        """The descriptions of the files of `file_ids` that exist, by id, in one look-up, with no rule
        checked: for a caller showing the files of records it has read under its rules (the admin
        UI's previews)."""
        return await self._files.get_many(list(dict.fromkeys(file_ids)))

    async def open(self, principal: Principal | None, file_id: str, *, token: str | None = None,
                   thumb: str | None = None, fmt: str | None = None) -> FileContent:
        """The file `file_id`, or with `thumb` its thumbnail, opened for download (`FileDownloads.open`,
        which says who may read it and what it raises)."""
        return await self.downloads.open(principal, file_id, token=token, thumb=thumb, fmt=fmt)

    async def delete(self, principal: Principal | None, file_id: str) -> None:
        """Delete a file (and its thumbnails); the same right as changing its record (view and
        update rules). Raises NotFound (no such file, or one the caller may not see), Unauthorized /
        Forbidden (the update rule refuses a caller who may see the record)."""
        file = await self._files.get(file_id)
        if file is None:
            raise file_not_found()
        collection = await self.downloads.checked_collection(principal, file, change=True)
        if not await self._files.delete(file.id):
            raise file_not_found()
        await self._bump([collection.name])
        log.info("file %s of %s deleted", file.id, file.record_id)

    # --- clean-up (EventBus subscribers) -----------------------------------------------------------

    async def on_record_events(self, events: Sequence[RecordEvent]) -> None:
        """Delete the files of deleted records (record ids are UUIDs, unique across collections, so
        the id alone names the record even when its collection was renamed meanwhile), and the files
        an update took out of a file field (replaced, removed or cleared: in the record before the
        change, not after it), once the write is committed."""
        record_ids = [e.record_id for e in events if e.event == DELETE]
        touched: set[str] = set()
        if record_ids:
            deleted = await self._files.delete_for_records(record_ids)
            if deleted:
                touched.update(e.collection for e in events if e.event == DELETE)
                log.info("%d files of %d deleted records deleted", deleted, len(record_ids))
        for event in events:
            if event.event == UPDATED and event.previous is not None and event.record is not None:
                if await self._delete_dropped(event):
                    touched.add(event.collection)
        await self._bump(sorted(touched))

    async def _bump(self, collections: Sequence[str]) -> None:
        """Tell the read cache that files of `collections` were deleted (after the deletion: the
        record event's own bump came before it)."""
        if collections and self._read_cache is not None:
            await self._read_cache.bump(collections)

    async def _delete_dropped(self, event: RecordEvent) -> bool:
        """Delete the files `event` (an update) took out of the record's file fields; whether any."""
        assert event.previous is not None and event.record is not None
        try:
            collection: Collection | None = await self._catalog.by_name(event.collection)
        except NotFound:  # deleted meanwhile: its files go with it
            collection = None
        if collection is None:
            return False
        return await self._delete_taken_out(collection, event.record_id, event.previous.data, event.record.data)

    async def _delete_taken_out(self, collection: Collection, record_id: str, before: dict[str, Any],
                                after: dict[str, Any]) -> bool:
        """Delete the files of record `record_id` that its file fields hold in `before` and not in
        `after` (record data: field name to value; a localized field's object: every locale's ids, so a
        file goes only when no locale holds it any more); whether any were. Never another record's file (a
        value stored before ids were checked)."""
        dropped: set[str] = set()
        for spec in file_fields(collection):
            dropped |= set(held_values(spec, before.get(spec.name))) - set(held_values(spec, after.get(spec.name)))
        if not dropped:
            return False
        owners = await self._files.owners(sorted(dropped))
        for file_id, (owner, _) in owners.items():
            if owner == record_id:
                await self._files.delete(file_id)
        log.info("%d files taken out of %s/%s deleted", len(owners), collection.name, record_id)
        return bool(owners)

    async def on_working_copy_dropped(self, collection: Collection, dropped: Sequence[DroppedCopy]) -> None:
        """Working copies were dropped or edited, and committed (decisions.md, Drafts, versions and
        scheduled publishing; `WorkingCopies.on_dropped`): delete the files each held (`data`) that its
        `kept` data (the published copy's, and after an edit the working copy's) does not hold; `kept`
        None (a record never published, deleted): every file of the record, one deletion for all."""
        gone = [d.record_id for d in dropped if d.kept is None]
        deleted = await self._files.delete_for_records(gone) if gone else 0
        if deleted:
            log.info("%d files of %d deleted drafts of %s deleted", deleted, len(gone), collection.name)
        for copy in dropped:
            if copy.kept is not None:
                deleted += int(await self._delete_taken_out(collection, copy.record_id, copy.data, copy.kept))
        if deleted:
            await self._bump([collection.name])

    async def on_collection_events(self, events: Sequence[CollectionEvent]) -> None:
        """Delete the files of every record of a deleted collection."""
        for event in events:
            if event.event == DELETE:
                deleted = await self._files.delete_for_collection(event.collection.id)
                if deleted:
                    log.info("%d files of collection %s deleted", deleted, event.collection.name)
