"""Backup archives (decisions.md, Backups): writing, verifying and reading the `.tar.gz` files
`BackupService` keeps.

Inside an archive is mongodump's layout, readable by `mongorestore` once unpacked:
`<db>/<collection>.bson` (the documents, concatenated BSON) and `<db>/<collection>.metadata.json`
(options and indexes) for every collection of the database, GridFS collections (`fs.files`,
`fs.chunks`) included.

- Writing (`write_archive`) goes to a hidden temporary name in the same directory, linked to its
  final name only when complete and synced, so a crash never leaves a half backup listed.
  Documents stream from MongoDB as raw BSON; each collection is spooled to an unnamed temporary
  file (a tar member's size goes in its header) and then compressed into the archive.
- Verifying (`verify_archive`) reads all of an archive: gzip and tar readable, regular files only
  under one `<db>/` root, no absolute or `..` paths, every BSON document decodes, every metadata
  JSON parses; a bad archive is refused with BadRequest.
- Loading (`load_batches`) reads a verified archive again and yields its documents 1,000 at a time.
- Blocking file work (tar, gzip, spooling) runs in worker threads; MongoDB is reached with the
  async driver. Memory stays bounded: at most two batches of documents are held at once.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import os
import re
import secrets
import tarfile
import tempfile
import zlib
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TypeVar

from cms.errors import AlreadyExists, BadRequest, ServiceUnavailable
from cms.store.backups import (
    MAX_METADATA_BYTES,
    CollectionDump,
    DumpRepository,
    check_document,
    iter_documents,
    metadata_json,
    parse_metadata,
    valid_collection_name,
)

T = TypeVar("T")

log = logging.getLogger("cms.backups")

DATABASE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
BATCH_DOCUMENTS = 1000
"""Documents per insert during a restore."""
BATCH_BYTES = 16 * 1024 * 1024
"""A restore batch is cut earlier when its documents reach this many bytes (large files)."""
MAX_COLLECTIONS = 10_000
"""Collections an archive may hold."""
COMPRESS_LEVEL = 6
COPY_BUFFER_BYTES = 1024 * 1024
PROGRESS_EVERY = 1000
METADATA_SUFFIX = ".metadata.json"
BSON_SUFFIX = ".bson"

Progress = Callable[[str, int, int], None]
"""`progress(stage, done, total)`: stage "dump" and "load" count documents, "verify" counts
compressed archive bytes read; `total` is 0 when unknown (and an estimate for "dump"). Called
from the event loop or from a worker thread."""


@dataclass(frozen=True)
class ArchiveContents:
    """A verified archive: its `root` folder (the database it was made from), every collection
    by name, and how many documents it holds in all."""

    root: str
    collections: dict[str, CollectionDump]
    documents: int


async def write_archive(store: DumpRepository, final: Path, created: datetime,
                        progress: Progress | None = None) -> tuple[int, int]:
    """Write every collection of `store`'s database to the archive `final` (members dated
    `created`) and return its size in bytes and how many collections it holds. The archive is
    written under a hidden temporary name in `final`'s directory and linked to `final` once complete
    and synced. Raises AlreadyExists if `final` appeared meanwhile, ServiceUnavailable when the disk
    cannot take the archive (full, over a quota or file size limit, not writable); driver errors
    propagate. The temporary file is removed on any failure, so nothing half written is listed."""
    dumps = await store.collections()
    total = sum([await store.estimated_count(dump.name) for dump in dumps]) if progress else 0
    root = store.database_name
    try:
        writer = await asyncio.to_thread(_ArchiveWriter, final.parent, final.name, created)
    except OSError as exc:
        raise _unwritable(final, exc) from None
    try:
        done = 0
        for dump in dumps:
            path = f"{root}/{dump.name}"
            await asyncio.to_thread(writer.add_bytes, path + METADATA_SUFFIX, metadata_json(dump))
            await asyncio.to_thread(writer.start_spool)
            async for chunk, count in store.documents(dump.name):
                await asyncio.to_thread(writer.spool, chunk)
                done += count
                if progress:
                    progress("dump", done, max(total, done))
            await asyncio.to_thread(writer.add_spool, path + BSON_SUFFIX)
        size = await asyncio.to_thread(writer.publish, final)
    except BaseException as exc:
        await asyncio.shield(asyncio.to_thread(writer.discard))
        if isinstance(exc, OSError):
            raise _unwritable(final, exc) from None
        raise
    return size, len(dumps)


def _unwritable(final: Path, exc: OSError) -> ServiceUnavailable:
    """The error of a disk that could not take the archive `final` (logged without a traceback: the
    cause is the machine's, not the code's); the message names the cause, not the path."""
    log.warning("backup %s not written: %r", final.name, exc)
    reason = exc.strerror or type(exc).__name__
    return ServiceUnavailable(f"The backup could not be written to the backup directory ({reason}); "
                              "nothing was kept")


async def load_batches(archive: IO[bytes], contents: ArchiveContents,
                       progress: Progress | None = None) -> AsyncGenerator[tuple[str, list[bytes]], None]:
    """The documents of the verified archive `archive` (`contents`, from `verify_archive`) in
    batches as `read_batches` yields them, each read in a worker thread while the caller stores the
    one before; reports stage "load". Raises BadRequest if the archive changed since it was
    verified."""
    done = 0
    async for name, documents in _in_thread(read_batches(archive)):
        done += len(documents)
        if progress:
            progress("load", done, contents.documents)
        yield name, documents


# --- reading archives (blocking: run in a worker thread) ---------------------------------------


def _member_path(member: tarfile.TarInfo) -> tuple[str, str, str]:
    """(root, collection, suffix) of an archive member `<root>/<collection><suffix>`. Raises
    BadRequest for anything else: a link, folder or device, an absolute path, `..`, a deeper
    path, an unknown suffix or an invalid collection name."""
    name = member.name
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        raise BadRequest(f"Archive member {name!r} is not a regular file")
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise BadRequest(f"Archive member {name!r} has an absolute or unsafe path")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise BadRequest(f"Archive member {name!r} has an unsafe path")
    if len(parts) != 2 or not DATABASE_NAME.fullmatch(parts[0]):
        raise BadRequest(f"Archive member {name!r} is not of the form <db>/<file>")
    root, file_name = parts
    for suffix in (METADATA_SUFFIX, BSON_SUFFIX):
        collection = file_name.removesuffix(suffix)
        if file_name.endswith(suffix) and valid_collection_name(collection):
            return root, collection, suffix
    raise BadRequest(f"Archive member {name!r} is not a <collection>.bson or <collection>.metadata.json")


def verify_archive(archive: IO[bytes], progress: Progress | None = None) -> ArchiveContents:
    """Read a whole backup archive from its start and check it (see the module docstring);
    returns its contents. Every collection needs both its `.bson` and its `.metadata.json`.
    Raises BadRequest naming the first problem. Blocking."""
    archive.seek(0)
    total = os.fstat(archive.fileno()).st_size
    root: str | None = None
    seen: set[tuple[str, str]] = set()
    dumps: dict[str, CollectionDump] = {}
    documents = 0
    try:
        with tarfile.open(fileobj=archive, mode="r:gz") as tar:
            for member in tar:
                member_root, collection, suffix = _member_path(member)
                if root is not None and member_root != root:
                    raise BadRequest("The archive holds more than one database folder")
                root = member_root
                if (collection, suffix) in seen:
                    raise BadRequest(f"Archive member {member.name!r} appears twice")
                seen.add((collection, suffix))
                if len(seen) > 2 * MAX_COLLECTIONS:
                    raise BadRequest(f"The archive holds more than {MAX_COLLECTIONS} collections")
                stream = tar.extractfile(member)
                assert stream is not None  # a regular file
                if suffix == METADATA_SUFFIX:  # parse_metadata refuses more than MAX_METADATA_BYTES
                    dumps[collection] = parse_metadata(stream.read(MAX_METADATA_BYTES + 1), collection)
                    continue
                for raw in iter_documents(stream, member.name):
                    check_document(raw, member.name)
                    documents += 1
                    if progress and documents % PROGRESS_EVERY == 0:
                        progress("verify", archive.tell(), total)
            assert tar.fileobj is not None
            while tar.fileobj.read(COPY_BUFFER_BYTES):  # to the gzip trailer: checks CRC and length
                pass
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise BadRequest(f"The archive is corrupt or truncated: {exc}") from None
    if root is None:
        raise BadRequest("The archive holds no collections")
    unpaired = {name for name, suffix in seen if suffix == BSON_SUFFIX} ^ set(dumps)
    if unpaired:
        raise BadRequest(f"Collection {min(unpaired)!r} lacks its .bson or .metadata.json")
    if progress:
        progress("verify", total, total)
    return ArchiveContents(root=root, collections=dumps, documents=documents)


def read_batches(archive: IO[bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """The documents of a verified archive in batches: (collection, up to BATCH_DOCUMENTS raw
    documents of at most about BATCH_BYTES). Raises BadRequest if the archive changed since it was
    verified. Blocking; bounded memory."""
    archive.seek(0)
    try:
        with tarfile.open(fileobj=archive, mode="r:gz") as tar:
            for member in tar:
                _, collection, suffix = _member_path(member)
                stream = tar.extractfile(member)
                if suffix != BSON_SUFFIX or stream is None:
                    continue
                batch: list[bytes] = []
                size = 0
                for raw in iter_documents(stream, member.name):
                    batch.append(raw)
                    size += len(raw)
                    if len(batch) >= BATCH_DOCUMENTS or size >= BATCH_BYTES:
                        yield collection, batch
                        batch, size = [], 0
                if batch:
                    yield collection, batch
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise BadRequest(f"The archive is corrupt or truncated: {exc}") from None


async def _in_thread(iterator: Iterator[T]) -> AsyncGenerator[T, None]:
    """The items of a blocking iterator, each read in a worker thread; the next item is read
    while the caller handles the current one (at most two in memory). Closing this generator
    waits for a read under way, then closes `iterator` (in a thread)."""
    pending = asyncio.ensure_future(asyncio.to_thread(_take_one, iterator))
    try:
        while True:
            items = await pending
            if not items:
                return
            pending = asyncio.ensure_future(asyncio.to_thread(_take_one, iterator))
            yield items[0]
    finally:
        if not pending.done():
            with suppress(BaseException):
                await asyncio.shield(pending)
        close = getattr(iterator, "close", None)
        if close is not None and pending.done():  # a generator cannot be closed while it runs
            await asyncio.to_thread(close)


def _take_one(iterator: Iterator[T]) -> list[T]:
    return list(itertools.islice(iterator, 1))


# --- writing archives (blocking: run in a worker thread) ---------------------------------------


class _ArchiveWriter:
    """A tar.gz being written to a hidden temporary file (mode 0600) next to its final name."""

    def __init__(self, directory: Path, filename: str, created: datetime) -> None:
        self.tmp_path = directory / f".{filename}.{secrets.token_hex(4)}.tmp"
        fd = os.open(self.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "wb")
        self._tar = tarfile.open(  # noqa: SIM115 - open across calls; publish() or discard() closes it
            fileobj=self._file, mode="w:gz", compresslevel=COMPRESS_LEVEL, format=tarfile.PAX_FORMAT)
        self._mtime = created.timestamp()
        self._spool: IO[bytes] | None = None

    def _add(self, name: str, stream: IO[bytes], size: int) -> None:
        info = tarfile.TarInfo(name)
        info.size = size
        info.mtime = self._mtime
        info.mode = 0o600
        self._tar.addfile(info, stream)

    def add_bytes(self, name: str, data: bytes) -> None:
        """Add a member holding `data`."""
        self._add(name, io.BytesIO(data), len(data))

    def start_spool(self) -> None:
        """Begin collecting a member of unknown size in an unnamed temporary file."""
        self._spool = tempfile.TemporaryFile(dir=self.tmp_path.parent)  # noqa: SIM115 - add_spool() closes it

    def spool(self, chunk: bytes) -> None:
        """Append to the member being collected."""
        assert self._spool is not None
        self._spool.write(chunk)

    def add_spool(self, name: str) -> None:
        """Add the collected bytes as member `name` and drop the spool."""
        assert self._spool is not None
        spool, self._spool = self._spool, None
        with spool:
            size = spool.tell()
            spool.seek(0)
            self._add(name, spool, size)

    def publish(self, final: Path) -> int:
        """Finish the archive, sync it and give it its final name; returns its size in bytes.
        Raises AlreadyExists (and removes the temporary file) if the final name was taken."""
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        try:
            try:
                os.link(self.tmp_path, final)  # fails if `final` exists, unlike rename
            except FileExistsError:
                raise AlreadyExists(f"Backup {final.name} already exists; try again in a second") from None
            except OSError:  # a file system without hard links
                if final.exists():
                    raise AlreadyExists(f"Backup {final.name} already exists; try again in a second") from None
                os.replace(self.tmp_path, final)
        finally:
            self.tmp_path.unlink(missing_ok=True)
        directory = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return final.stat().st_size

    def discard(self) -> None:
        """Abandon the archive: close everything and remove the temporary file."""
        for closable in (self._spool, self._tar, self._file):
            if closable is not None:
                with suppress(Exception):
                    closable.close()
        self.tmp_path.unlink(missing_ok=True)
