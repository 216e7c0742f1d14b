"""Files attached to records (spec: Files; decisions.md: Identity and tokens, Response shapes, Limits).

A file belongs to one record (`collection` + `record_id`). Writing one (upload, delete) needs what
changing the record needs: its collection's view and update rules (`access.check`,
`records.permitted_record`). Reading follows the view rule of its record. A file whose record the
caller may not see (the view rule refuses the caller or hides the record) is answered exactly as a
missing file, 404 "File not found", so a file id tells nothing to whoever may not see its record.

The bytes are streamed into GridFS as they arrive and hashed (SHA-256) on the way; the upload
stops at the `max_upload_mb` setting, and whatever was written is deleted. Files go away with their
record (single, bulk, a user's record) and with their collection: `on_record_events` and
`on_collection_events` are subscribed to the EventBus in `cms.builders`.

What comes from the client is never trusted as is: the filename loses path parts and control
characters and is cut to 255 characters; the content type must be `type/subtype` (else
`application/octet-stream`); only types in INLINE_TYPES may be shown inline by a browser (the API
adds `nosniff` and a sandboxing CSP to every file response).
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, replace

from cms.clock import Clock, new_id, utcnow
from cms.errors import BadRequest, Forbidden, NotFound, PayloadTooLarge, Unauthorized, ValidationFailed
from cms.models import Collection, Principal, StoredFile
from cms.services.access import UPDATE, VIEW, check
from cms.services.caching.catalog import Catalog
from cms.services.content.record_checks import checked_record, permitted_record
from cms.services.delivery.events import DELETE, CollectionEvent, RecordEvent
from cms.services.operations.settings import SettingsService
from cms.store.files import FileReader, FileRepository, FileUpload
from cms.store.records import RecordRepository

log = logging.getLogger("cms.files")

FILE_FIELD = "file"
TARGET_FIELDS = ("collection", "record_id")
MAX_FIELD_BYTES = 1024
"""Largest `collection` or `record_id` form value, in bytes."""
OTHER_PARTS_BYTES = 64 * 1024
"""Form fields other than `file`, `collection` and `record_id` may total this many bytes (read and dropped)."""
MAX_FILENAME_CHARS = 255
DEFAULT_FILENAME = "file"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
MIB = 2**20

_TOKEN = r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}"
_MEDIA_TYPE = re.compile(rf"({_TOKEN})/({_TOKEN})")
_CHARSET = re.compile(r"""charset\s*=\s*"?([a-z0-9][a-z0-9_.:-]{0,39})"?\s*$""")

INLINE_TYPES = frozenset({
    "image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp",
    "audio/mpeg", "audio/ogg", "audio/wav", "audio/webm", "audio/aac", "audio/flac",
    "video/mp4", "video/webm", "video/ogg",
    "application/pdf", "text/plain",
})
"""Types a browser may render in the page (`Content-Disposition: inline`): none of them runs script.
Everything else, `text/html`, `application/xhtml+xml` and `image/svg+xml` above all, is an attachment."""


@dataclass(frozen=True)
class FormPart:
    """One part of a multipart/form-data body, as the API hands it over: the form field `name`,
    the part's `filename` and `content_type` headers (None when absent) and its body, streamed
    in `chunks` (bytes; the API turns malformed multipart into BadRequest while iterating)."""

    name: str
    filename: str | None
    content_type: str | None
    chunks: AsyncIterator[bytes]


@dataclass(frozen=True)
class FileContent:
    """A file opened for download: `file` describes it, `etag` is its strong ETag (quoted),
    `inline` says whether a browser may show it in the page, and `private` whether it is visible
    to some callers only (the file of an auth-collection user: no shared caches)."""

    file: StoredFile
    etag: str
    inline: bool
    private: bool
    _reader: FileReader

    def chunks(self, start: int, end: int) -> AsyncGenerator[bytes, None]:
        """The bytes `start` (inclusive) to `end` (exclusive), 0 <= start <= end <= size, in pieces
        of at most 255 KiB. Close the iterator (`aclose`) when not reading it to the end."""
        return self._reader.chunks(start, end)


@dataclass
class _Received:
    """A file part written to GridFS but not yet visible: its id, name, type, size (bytes), hash."""

    upload: FileUpload
    file_id: str
    filename: str
    content_type: str
    size: int
    sha256: str


def file_not_found() -> NotFound:
    """The one answer for a file that does not exist or whose record the caller may not see."""
    return NotFound("File not found")


def safe_filename(name: str | None) -> str:
    """The client's filename made safe to store and echo: the last path part (`/` and `\\` both
    separate), NFC-normalized, without control or format characters (bidi overrides included),
    trimmed, at most 255 characters (the extension kept when it is short). `file` when nothing is left."""
    text = unicodedata.normalize("NFC", name or "")
    text = re.split(r"[/\\]", text)[-1]
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Zl", "Zp"))
    text = text.strip()
    if text in ("", ".", ".."):
        return DEFAULT_FILENAME
    if len(text) > MAX_FILENAME_CHARS:
        stem, dot, extension = text.rpartition(".")
        if dot and stem and 0 < len(extension) <= 16:
            text = stem[:MAX_FILENAME_CHARS - len(extension) - 1].rstrip() + "." + extension
        else:
            text = text[:MAX_FILENAME_CHARS].rstrip()
    return text


def clean_content_type(value: str | None) -> str:
    """The part's `Content-Type` as stored and served: lower-case `type/subtype`, plus
    `; charset=...` when the client gave a well-formed one; `application/octet-stream` when the
    value is missing or not of that form."""
    if not value:
        return DEFAULT_CONTENT_TYPE
    media, _, params = value.strip().lower().partition(";")
    match = _MEDIA_TYPE.fullmatch(media.strip())
    if match is None:
        return DEFAULT_CONTENT_TYPE
    cleaned = f"{match.group(1)}/{match.group(2)}"
    charset = _CHARSET.search(params.strip()) if params.strip().startswith("charset") else None
    return f"{cleaned}; charset={charset.group(1)}" if charset else cleaned


def served_inline(content_type: str) -> bool:
    """Whether a file of this (cleaned) type may be shown inline; everything else is an attachment."""
    return content_type.partition(";")[0] in INLINE_TYPES


def file_etag(file: StoredFile) -> str:
    """The strong ETag of a file, quoted: its id and the first 128 bits of its SHA-256."""
    return f'"{file.id}-{file.sha256[:32]}"'


class FileService:
    """Upload, download and delete files of records; clean-up when records and collections go."""

    def __init__(self, files: FileRepository, catalog: Catalog, records: RecordRepository,
                 settings: SettingsService, *, clock: Clock = utcnow) -> None:
        self._files = files
        self._catalog = catalog
        self._records = records
        self._settings = settings
        self._clock = clock

    async def max_upload_bytes(self) -> int:
        """The largest file accepted, in bytes (setting `max_upload_mb`, default 25)."""
        return int((await self._settings.values())["max_upload_mb"]) * MIB

    # --- upload -----------------------------------------------------------------------------------

    async def upload(self, principal: Principal | None, parts: AsyncIterator[FormPart]) -> StoredFile:
        """Store the `file` part of a form that also names `collection` and `record_id`, and return
        it. The file is streamed into GridFS as it is read; when `collection` and `record_id` come
        before `file`, the record is checked before a byte is stored.

        Raises ValidationFailed (422: `errors.file` no file part, `errors.collection` missing or
        unknown, `errors.record_id` missing, no such record, or one the view rule hides),
        Unauthorized / Forbidden (the update rule refuses the caller), PayloadTooLarge (413: the
        file passed `max_upload_mb`, or the other fields 64 KiB; raised as soon as the limit is
        passed, and nothing stays stored) or BadRequest (two files,
        malformed multipart). On any failure nothing is stored."""
        max_bytes = await self.max_upload_bytes()
        values: dict[str, str] = {}
        other_bytes = 0
        collection: Collection | None = None
        received: _Received | None = None
        try:
            async for part in parts:
                if part.name == FILE_FIELD:
                    if received is not None:
                        raise BadRequest(f"Send one file per request (form field '{FILE_FIELD}')")
                    if all(values.get(name) for name in TARGET_FIELDS):
                        collection = await self._target(principal, values)
                    received = await self._receive(part, max_bytes)
                elif part.name in TARGET_FIELDS:
                    if part.name in values:
                        raise BadRequest(f"Form field '{part.name}' is given twice")
                    values[part.name] = await _read_value(part)
                else:
                    other_bytes += await _drain(part, OTHER_PARTS_BYTES - other_bytes)
            if received is None:
                raise ValidationFailed(f"No form field '{FILE_FIELD}' in the upload", errors={
                    FILE_FIELD: [f"Missing: send the file in the multipart form field '{FILE_FIELD}'."]})
            if collection is None:
                collection = await self._target(principal, values)
            file = StoredFile(
                id=received.file_id, filename=received.filename, content_type=received.content_type,
                size=received.size, collection_id=collection.id, collection=collection.name,
                record_id=values["record_id"].strip(), sha256=received.sha256, created=self._clock(),
            )
            await received.upload.finish(file)
        except BaseException:
            if received is not None:
                await received.upload.abort()
            raise
        await self._check_record_still_there(file)
        log.info("file %s (%d bytes) attached to %s/%s", file.id, file.size, file.collection, file.record_id)
        return file

    async def store(self, collection: Collection, record_id: str, part: FormPart) -> StoredFile:
        """Store one file part for record `record_id` of `collection` without checking the record
        (which may not exist yet): the caller, `RecordDraft`, has checked the rules and removes the
        file (`discard`) if the record is not saved. Raises PayloadTooLarge (past `max_upload_mb`;
        nothing stays stored)."""
        received = await self._receive(part, await self.max_upload_bytes())
        file = StoredFile(
            id=received.file_id, filename=received.filename, content_type=received.content_type,
            size=received.size, collection_id=collection.id, collection=collection.name,
            record_id=record_id, sha256=received.sha256, created=self._clock(),
        )
        try:
            await received.upload.finish(file)
        except BaseException:
            await received.upload.abort()
            raise
        return file

    async def discard(self, file_ids: Sequence[str]) -> None:
        """Delete the files `store` wrote for a record that was not saved (no rule check: they are
        the caller's own)."""
        for file_id in file_ids:
            await self._files.delete(file_id)

    async def _receive(self, part: FormPart, max_bytes: int) -> _Received:
        """Stream the file part into GridFS, counting and hashing. Raises PayloadTooLarge as soon as
        it passes `max_bytes` (the chunks written so far are deleted)."""
        file_id = new_id()
        filename = safe_filename(part.filename)
        upload = self._files.open_upload(file_id, filename)
        digest = hashlib.sha256()
        size = 0
        try:
            async for chunk in part.chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise PayloadTooLarge(f"The file is larger than the upload limit of {max_bytes // MIB} MiB")
                digest.update(chunk)
                await upload.write(chunk)
        except BaseException:
            await upload.abort()
            raise
        return _Received(upload, file_id, filename, clean_content_type(part.content_type), size, digest.hexdigest())

    async def _target(self, principal: Principal | None, values: dict[str, str]) -> Collection:
        """The collection of the record named by the form, once checked: the record exists, the
        view rule shows it to `principal` and the update rule lets it change it. Raises
        ValidationFailed (422) naming the field at fault (also for a record the caller may not
        see), Unauthorized / Forbidden (a rule refuses)."""
        name, record_id = (values.get(n, "").strip() for n in TARGET_FIELDS)
        missing = {n: [f"Missing: send the form field '{n}'."]
                   for n, v in zip(TARGET_FIELDS, (name, record_id), strict=True) if not v}
        if missing:
            raise ValidationFailed("The upload must name a collection and a record", errors=missing)
        try:
            collection = await self._catalog.by_name(name)
        except NotFound:
            raise ValidationFailed(f"Collection '{name}' not found",
                                   errors={"collection": [f"No collection named '{name}'."]}) from None
        try:
            await permitted_record(self._records, check(principal, collection, VIEW),
                                   check(principal, collection, UPDATE), record_id)
        except NotFound:
            raise _no_record(collection) from None
        return collection

    async def _check_record_still_there(self, file: StoredFile) -> None:
        """After the file is written: if its record was deleted meanwhile (its clean-up ran before the
        file was visible), delete the file and raise ValidationFailed, so no file outlives its record."""
        if await self._records.existing_ids(file.collection_id, [file.record_id]):
            return
        await self._files.delete(file.id)
        log.info("file %s undone: record %s was deleted during the upload", file.id, file.record_id)
        raise ValidationFailed("Record not found", errors={"record_id": ["The record was deleted."]})

    # --- download and delete ---------------------------------------------------------------------------

    async def open(self, principal: Principal | None, file_id: str) -> FileContent:
        """The file `file_id` opened for download, if the view rule of its record lets `principal`
        (None: no credentials) see the record. Raises NotFound (no such file, or one the caller
        may not see: the same answer, so a download tells nothing of a record the caller may not see)."""
        reader = await self._files.open(file_id)
        if reader is None:
            raise file_not_found()
        collection = await self._checked_collection(principal, reader.file, change=False)
        file = replace(reader.file, collection=collection.name)
        return FileContent(file=file, etag=file_etag(file), inline=served_inline(file.content_type),
                           private=collection.rules.view_rule != "", _reader=reader)

    async def delete(self, principal: Principal | None, file_id: str) -> None:
        """Delete a file; the same right as changing its record (view and update rules). Raises
        NotFound (no such file, or one the caller may not see), Unauthorized / Forbidden (the
        update rule refuses a caller who may see the record)."""
        file = await self._files.get(file_id)
        if file is None:
            raise file_not_found()
        await self._checked_collection(principal, file, change=True)
        if not await self._files.delete(file.id):
            raise file_not_found()
        log.info("file %s of %s deleted", file.id, file.record_id)

    async def _checked_collection(self, principal: Principal | None, file: StoredFile, *, change: bool) -> Collection:
        """The collection of `file`'s record, once the view rule (and with `change`, the update
        rule) permits `principal` on that record. A missing collection, a hidden record and a view
        rule that refuses the caller all raise `file_not_found()`, exactly as a missing file does;
        only then may the update rule's refusal (401/403) be told."""
        collection = await self._catalog.find_by_id(file.collection_id)
        if collection is None:
            raise file_not_found()
        view = check(principal, collection, VIEW)
        try:
            await checked_record(self._records, view, None, file.record_id)
        except (NotFound, Unauthorized, Forbidden):
            # whoever may not see the record learns nothing of its files, not even that they exist
            raise file_not_found() from None
        if view.fields.guards and view.hides_file(await self._records.get(collection.id, file.record_id), file.id):
            raise file_not_found()  # its file field's view rule hides it as the record's rule would
        if change:
            try:
                await checked_record(self._records, view, check(principal, collection, UPDATE), file.record_id)
            except NotFound:  # the record went meanwhile
                raise file_not_found() from None
        return collection

    # --- clean-up (EventBus subscribers) -----------------------------------------------------------

    async def on_record_events(self, events: Sequence[RecordEvent]) -> None:
        """Delete the files of deleted records. Record ids are UUIDs, unique across collections, so
        the id alone names the record even when its collection was renamed meanwhile."""
        record_ids = [e.record_id for e in events if e.event == DELETE]
        if record_ids:
            deleted = await self._files.delete_for_records(record_ids)
            if deleted:
                log.info("%d files of %d deleted records deleted", deleted, len(record_ids))

    async def on_collection_events(self, events: Sequence[CollectionEvent]) -> None:
        """Delete the files of every record of a deleted collection."""
        for event in events:
            if event.event == DELETE:
                deleted = await self._files.delete_for_collection(event.collection.id)
                if deleted:
                    log.info("%d files of collection %s deleted", deleted, event.collection.name)


def _no_record(collection: Collection) -> ValidationFailed:
    return ValidationFailed("Record not found", errors={
        "record_id": [f"No record with this id in '{collection.name}' that you may change."]})


async def _read_value(part: FormPart) -> str:
    """A small text field (`collection`, `record_id`): UTF-8, at most MAX_FIELD_BYTES. Raises
    ValidationFailed naming the field when it is longer or not UTF-8."""
    data = bytearray()
    async for chunk in part.chunks:
        data += chunk
        if len(data) > MAX_FIELD_BYTES:
            raise ValidationFailed(f"Form field '{part.name}' is too long",
                                   errors={part.name: [f"At most {MAX_FIELD_BYTES} bytes."]})
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed(f"Form field '{part.name}' is not UTF-8",
                               errors={part.name: ["Must be UTF-8 text."]}) from None


async def _drain(part: FormPart, allowance: int) -> int:
    """Read and drop a part the upload does not use; returns its size in bytes. Raises
    PayloadTooLarge when it passes `allowance` bytes."""
    size = 0
    async for chunk in part.chunks:
        size += len(chunk)
        if size > allowance:
            raise PayloadTooLarge(f"Form fields other than '{FILE_FIELD}' are too large")
    return size
