"""File downloads (spec: Files; decisions.md, Files in records, thumbnails and file tokens): who may
read a file, its thumbnails, and file tokens.

Reading a file follows the view rule of its record (and its field's view rule); a file of a
`protected` field also needs a file token of the caller (`file_tokens.py`). A file whose record the
caller may not see is answered exactly as a missing file, 404 "File not found".

A thumbnail's download touches no database when warm: the file's description is kept in memory (a
file never changes: it is stored whole, then only deleted), its bytes too (`thumbnails.py`), and that
it still exists is read from the read cache: an entry stamped with its collection's version, which
every deletion of a file bumps (a record write or delete, `DELETE /api/v1/files/{id}`, and the
file service's clean-up once it has deleted files; a collection's deletion bumps the epoch). So a
warm thumbnail costs one Redis round trip, as a warm record read does; with the read cache off,
one look-up of the file in GridFS.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from typing import Protocol

from cms.errors import BadRequest, Forbidden, NotFound, Unauthorized
from cms.models import Collection, FieldSpec, Principal, StoredFile
from cms.services.access import UPDATE, VIEW, check, draft_access
from cms.services.caching.catalog import Catalog
from cms.services.caching.read_cache import ReadCache, entry_key
from cms.services.content import imaging
from cms.services.content.drafts import WorkingCopies
from cms.services.content.fields import value_list
from cms.services.content.file_fields import allowed_thumbs, parse_thumb
from cms.services.content.file_intake import MAX_IMAGE_BYTES
from cms.services.content.file_parts import file_etag, file_not_found, media_type, served_inline
from cms.services.content.file_tokens import FileTokens, same_principal
from cms.services.content.record_checks import checked_record
from cms.services.content.thumbnails import Thumbnails
from cms.store.files import FileRepository
from cms.store.records import RecordRepository

FILES_KEPT = 10_000
"""File descriptions one process keeps in memory (thumbnail downloads)."""
PRESENT = b"1"
"""The read-cache entry saying a file exists under the entry's stamp."""


class ByteSource(Protocol):
    """Where a download's bytes come from: a GridFS file or a thumbnail in memory."""

    def chunks(self, start: int, end: int) -> AsyncGenerator[bytes, None]:
        """The bytes `start` (inclusive) to `end` (exclusive)."""
        ...


class _InMemory:
    """A thumbnail's bytes, already read."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def chunks(self, start: int, end: int) -> AsyncGenerator[bytes, None]:
        if start < end:
            yield self._data[start:end]


@dataclass(frozen=True)
class FileContent:
    """A file opened for download: `file` describes it (a thumbnail: its type, size and name),
    `etag` is its strong ETag (quoted), `inline` says whether a browser may show it in the page, and
    `private` whether it is visible to some callers only (a view rule that depends on the caller, a
    protected field: no shared caches)."""

    file: StoredFile
    etag: str
    inline: bool
    private: bool
    _source: ByteSource
    data: bytes | None = None
    """The whole content, when it is in memory (a thumbnail)."""

    def chunks(self, start: int, end: int) -> AsyncGenerator[bytes, None]:
        """The bytes `start` (inclusive) to `end` (exclusive), 0 <= start <= end <= size, in pieces
        of at most 255 KiB. Close the iterator (`aclose`) when not reading it to the end."""
        return self._source.chunks(start, end)


class FileDownloads:
    """Opens files and thumbnails for download (module docstring). `read_cache`: where the files'
    existence is kept (None: looked up in GridFS every time)."""

    def __init__(self, files: FileRepository, catalog: Catalog, records: RecordRepository, *,
                 thumbnails: Thumbnails, tokens: FileTokens, read_cache: ReadCache | None = None,
                 drafts: WorkingCopies | None = None) -> None:
        """`drafts`: the working copies of collections with drafts (their files are the editors' until
        published: `_draft_file`)."""
        self._drafts = drafts
        self._files = files
        self._catalog = catalog
        self._records = records
        self._thumbnails = thumbnails
        self._tokens = tokens
        self._read_cache = read_cache
        self._known: OrderedDict[str, StoredFile] = OrderedDict()

    async def open(self, principal: Principal | None, file_id: str, *, token: str | None = None,
                   thumb: str | None = None, fmt: str | None = None) -> FileContent:
        """The file `file_id` (or, with `thumb`, its thumbnail) opened for download, if the view rule
        of its record lets the caller see the record. The caller is `principal` (None: no
        credentials) or, without one, the principal of the file token `token`; a file of a
        `protected` field needs a valid token of the caller besides. `thumb`: a size the file's
        field allows (`file_fields.allowed_thumbs`); `fmt`: `webp`, `avif`, `png` or `jpeg`
        (default: the source's). A file that is not an image Pillow reads (SVG among them) answers
        itself for any thumbnail.

        Raises NotFound (no such file, one the caller may not see, or a protected one without a
        valid token: the same answer) or BadRequest (a size or format that is not allowed, naming
        the allowed ones)."""
        by_token = await self._tokens.principal_of(token) if token else None
        if principal is not None and by_token is not None and not same_principal(principal, by_token):
            by_token = None  # another caller's token proves nothing for this one
        if thumb is not None:
            file = await self._described(file_id)
            reader = None
        else:
            reader = await self._files.open(file_id)
            if reader is None:
                raise file_not_found()
            file = reader.file
        collection = await self.checked_collection(principal or by_token, file, change=False)
        file = replace(file, collection=collection.name)
        spec = collection.field(file.field) if file.field else None
        protected = spec is not None and spec.type == "file" and spec.protected
        if protected and by_token is None:
            raise file_not_found()
        private = collection.rules.view_rule != "" or protected
        if reader is None:
            await self._check_present(collection, file)
            made = await self._thumbnail(file, spec, thumb or "", fmt, private)
            if made is not None:
                return made
            reader = await self._files.open(file_id)
            if reader is None:
                raise file_not_found()
        return FileContent(file=file, etag=file_etag(file), inline=served_inline(file.content_type),
                           private=private, _source=reader)

    async def _draft_file(self, principal: Principal | None, collection: Collection, file: StoredFile) -> bool:
        """In a collection with drafts, readers reach only the files a published copy holds (decisions.md:
        reads see published copies only): False for such a file (the published record's rules decide,
        as anywhere). Any other file of the record (of its working copy, or of none) is reached only by
        whoever may see and change the working copy (`?draft=true`'s right): True for them; raises
        `file_not_found()` for everyone else."""
        published = await self._records.get(collection.id, file.record_id)
        held = published.data.get(file.field or "") if published is not None else None
        values = held.values() if isinstance(held, dict) else [held]  # a localized field: every locale's
        if any(file.id in value_list(value) for value in values):
            return False
        if self._drafts is None:
            raise file_not_found()
        try:
            await self._drafts.editable(draft_access(principal, collection), None, file.record_id)
        except (NotFound, Unauthorized, Forbidden):
            raise file_not_found() from None
        return True

    async def _described(self, file_id: str) -> StoredFile:
        """The description of file `file_id`, from memory or GridFS. Raises NotFound."""
        file = self._known.get(file_id)
        if file is not None:
            return file
        file = await self._files.get(file_id)
        if file is None:
            raise file_not_found()
        self._known[file_id] = file
        if len(self._known) > FILES_KEPT:
            self._known.popitem(last=False)
        return file

    async def _check_present(self, collection: Collection, file: StoredFile) -> None:
        """Raise NotFound unless `file` still exists: a read-cache entry under its collection's
        current stamp says so, else GridFS does (and the entry is stored under the stamp read
        before GridFS was asked, so a deletion after that look-up bumps past it)."""
        key = entry_key(collection.name, "file", file.id)
        stamp, present = (None, None) if self._read_cache is None else await self._read_cache.lookup(collection.name,
                                                                                                     key)
        if present == PRESENT:
            return
        if await self._files.get(file.id) is None:
            self._known.pop(file.id, None)
            raise file_not_found()
        if stamp is not None and self._read_cache is not None:
            await self._read_cache.store(key, stamp, PRESENT)

    async def _thumbnail(self, file: StoredFile, spec: FieldSpec | None, thumb: str, fmt: str | None,
                         private: bool) -> FileContent | None:
        """The thumbnail of `file` as asked, or None to send the file itself (not an image Pillow
        reads, or one it cannot make a thumbnail of). Raises BadRequest (size or format not allowed)."""
        allowed = allowed_thumbs(spec)
        size = parse_thumb(thumb) if thumb in allowed else None
        if size is None:
            raise BadRequest(f"Thumbnail size '{thumb[:40]}' is not allowed for this file; "
                             f"allowed: {', '.join(allowed)}")
        source_type = media_type(file.content_type)
        chosen = fmt or imaging.SOURCE_FORMATS.get(source_type, "png")
        supported = imaging.encodable_formats()
        if chosen not in supported:
            raise BadRequest(f"Thumbnail format '{chosen[:20]}' is not supported; supported: {', '.join(supported)}")
        if source_type not in imaging.RASTER_TYPES or file.size > MAX_IMAGE_BYTES:
            return None
        data = await self._thumbnails.get(file, size, chosen)
        if data is None:
            return None
        stem = file.filename.rpartition(".")[0] or file.filename
        shown = replace(file, filename=f"{stem}_{size.spec}.{'jpg' if chosen == 'jpeg' else chosen}",
                        content_type=imaging.MEDIA_TYPES[chosen], size=len(data))
        return FileContent(file=shown, etag=file_etag(file, f"{size.spec}.{chosen}"), inline=True, private=private,
                           _source=_InMemory(data), data=data)

    async def checked_collection(self, principal: Principal | None, file: StoredFile, *, change: bool) -> Collection:
        """The collection of `file`'s record, once the view rule (and with `change`, the update
        rule) permits `principal` on that record. A missing collection, a hidden record and a view
        rule that refuses the caller all raise `file_not_found()`, exactly as a missing file does;
        only then may the update rule's refusal (401/403) be told."""
        collection = await self._catalog.find_by_id(file.collection_id)
        if collection is None:
            raise file_not_found()
        if collection.drafts and await self._draft_file(principal, collection, file):
            return collection
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
