"""Backups (decisions.md, Backups): create, list, restore and delete whole-database archives.

A backup is one `backup-YYYYmmdd-HHMMSS.tar.gz` (UTC time of its creation) in the backup
directory (`BACKUP_DIR`, default `<data-dir>/backups`). Inside is mongodump's layout, readable by
`mongorestore` once unpacked: `<db>/<collection>.bson` (the documents, concatenated BSON) and
`<db>/<collection>.metadata.json` (options and indexes) for every collection of the database,
GridFS collections (`fs.files`, `fs.chunks`) included. Redis (queue, rate limits) is not part of
a backup.

- Create writes the archive under a hidden temporary name in the same directory and links it to
  its final name only when complete and synced, so a crash never leaves a half backup listed.
  Documents stream from MongoDB as raw BSON; each collection is spooled to an unnamed temporary
  file (a tar member's size goes in its header) and then compressed into the archive.
- Restore reads the archive twice: first it verifies all of it (gzip and tar readable, regular
  files only under one `<db>/` root, no absolute or `..` paths, every BSON document decodes, every
  metadata JSON parses) and refuses a bad archive with 400 before anything changes; then it streams
  the documents, 1,000 at a time, into staging collections that replace the live ones at the end
  (`DumpRepository.restore`). The database then holds exactly the backup's collections.
- Blocking file work (tar, gzip, spooling) runs in worker threads; MongoDB is reached with the
  async driver. Memory stays bounded: at most two batches of documents are held at once.
- Creates and restores of one process run one at a time (an asyncio lock); nothing stops two
  replicas that share a backup directory from restoring at once.
"""

from __future__ import annotations

import asyncio
import builtins
import io
import itertools
import logging
import os
import re
import secrets
import tarfile
import tempfile
import zlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from contextlib import aclosing, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TypeVar

from cms.clock import Clock, utcnow
from cms.errors import AlreadyExists, BadRequest, NotFound
from cms.models import Principal
from cms.services import access
from cms.services.delivery.events import AuditEvent, EventBus
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

log = logging.getLogger("cms.backups")

T = TypeVar("T")

BACKUP_NAME = re.compile(r"backup-(\d{8}-\d{6})\.tar\.gz")
NAME_TIME_FORMAT = "%Y%m%d-%H%M%S"
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
RestoreHook = Callable[[], Awaitable[bool | None]]
"""Run during a restore's switch; returns False (or raises) when it could not do its work."""
RESTORE_HOOK_TIMEOUT_S = 5.0
"""Longest one restore hook may take, in seconds (it runs inside the switch)."""


@dataclass(frozen=True)
class Backup:
    """A backup archive: `filename` (`backup-YYYYmmdd-HHMMSS.tar.gz`), `size` in bytes and
    `created`, the aware UTC time in its name (whole seconds)."""

    filename: str
    size: int
    created: datetime


@dataclass(frozen=True)
class RestoreResult:
    """What a restore replaced the database with: `collections` and `documents` counts."""

    filename: str
    collections: int
    documents: int

    @property
    def message(self) -> str:
        """One sentence for the API's `{message}` and the CLI."""
        return (f"Backup {self.filename} restored: {self.collections} collections, "
                f"{self.documents} documents")


@dataclass(frozen=True)
class ArchiveContents:
    """A verified archive: its `root` folder (the database it was made from), every collection
    by name, and how many documents it holds in all."""

    root: str
    collections: dict[str, CollectionDump]
    documents: int


def backup_time(filename: str) -> datetime | None:
    """The UTC time named by a backup filename, or None when `filename` is not exactly of the
    form `backup-YYYYmmdd-HHMMSS.tar.gz` (with a real date and time)."""
    match = BACKUP_NAME.fullmatch(filename)
    if match is None:
        return None
    try:
        return datetime.strptime(match.group(1), NAME_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


class BackupService:
    """Backups of the service's database in `backup_dir`; every method but `list` is audited.

    `principal` None stands for the operator at the command line (`cms backup ...`); any other
    caller must be an admin (Forbidden otherwise). `on_restored` hooks run during a restore's
    switch, once the backup's collections are live and before the collections not in it are
    dropped, to drop what processes cache from the old data (the catalog epoch among it, which
    `Catalog.exists` needs moved before any records are dropped)."""

    def __init__(self, store: DumpRepository, events: EventBus, backup_dir: Path, *, clock: Clock = utcnow,
                 on_restored: Sequence[RestoreHook] = ()) -> None:
        self._store = store
        self._events = events
        self._dir = backup_dir
        self._clock = clock
        self._on_restored = list(on_restored)
        self._lock = asyncio.Lock()

    @property
    def backup_dir(self) -> Path:
        """Where the archives are."""
        return self._dir

    async def create(self, principal: Principal | None, *, progress: Progress | None = None) -> Backup:
        """Write a backup of every collection and return it once it is complete.

        Its name is the clock's current second; if that name exists already (two backups in one
        second), raises AlreadyExists (400) and writes nothing. Raises Forbidden for a non-admin.
        Driver and disk errors propagate; the temporary file is removed then."""
        access.require_admin_or_operator(principal)
        async with self._lock:
            created = self._clock().astimezone(UTC).replace(microsecond=0)
            filename = f"backup-{created.strftime(NAME_TIME_FORMAT)}.tar.gz"
            final = self._dir / filename
            await asyncio.to_thread(self._dir.mkdir, mode=0o700, parents=True, exist_ok=True)
            if await asyncio.to_thread(final.exists):
                raise AlreadyExists(f"Backup {filename} already exists; try again in a second")
            dumps = await self._store.collections()
            total = sum([await self._store.estimated_count(dump.name) for dump in dumps]) if progress else 0
            root = self._store.database_name
            writer = await asyncio.to_thread(_ArchiveWriter, self._dir, filename, created)
            try:
                done = 0
                for dump in dumps:
                    path = f"{root}/{dump.name}"
                    await asyncio.to_thread(writer.add_bytes, path + METADATA_SUFFIX, metadata_json(dump))
                    await asyncio.to_thread(writer.start_spool)
                    async for chunk, count in self._store.documents(dump.name):
                        await asyncio.to_thread(writer.spool, chunk)
                        done += count
                        if progress:
                            progress("dump", done, max(total, done))
                    await asyncio.to_thread(writer.add_spool, path + BSON_SUFFIX)
                size = await asyncio.to_thread(writer.publish, final)
            except BaseException:
                await asyncio.shield(asyncio.to_thread(writer.discard))
                raise
        backup = Backup(filename=filename, size=size, created=created)
        log.info("backup %s written: %d collections, %d bytes", filename, len(dumps), size)
        await self._events.emit([AuditEvent(
            "backup_created", user_id=_user_id(principal),
            details={"filename": filename, "size": size, "collections": len(dumps)})])
        return backup

    async def list(self, principal: Principal | None) -> builtins.list[Backup]:
        """Every backup in the directory, newest first. Files whose names are not exactly of the
        backup form (temporary files of a backup being written) are left out. Raises Forbidden."""
        access.require_admin_or_operator(principal)
        return await asyncio.to_thread(self._scan)

    def _scan(self) -> builtins.list[Backup]:
        backups = []
        try:
            entries = list(os.scandir(self._dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            created = backup_time(entry.name)
            if created is None or not entry.is_file(follow_symlinks=False):
                continue
            with suppress(FileNotFoundError):  # deleted meanwhile
                backups.append(Backup(filename=entry.name, size=entry.stat().st_size, created=created))
        return sorted(backups, key=lambda backup: backup.created, reverse=True)

    async def restore(self, principal: Principal | None, filename: str, *,
                      progress: Progress | None = None) -> RestoreResult:
        """Replace every collection of the database with the backup's contents; returns once done.

        Raises BadRequest for a filename not of the backup form, NotFound for an unknown one,
        BadRequest when the archive is corrupt, truncated or unsafe (then nothing has changed),
        Forbidden for a non-admin. Driver errors propagate (the data is left as it was unless the
        final switch of collections was under way)."""
        access.require_admin_or_operator(principal)
        path = self._path(filename)
        async with self._lock:
            try:
                archive = await asyncio.to_thread(path.open, "rb")
            except (FileNotFoundError, IsADirectoryError):
                raise NotFound(f"Backup {filename} not found") from None
            try:
                contents = await asyncio.to_thread(verify_archive, archive, progress)
                async with aclosing(self._batches(archive, contents, progress)) as batches:
                    await self._store.restore(contents.collections, batches, switched=self._switched)
            finally:
                await asyncio.to_thread(archive.close)
        result = RestoreResult(filename=filename, collections=len(contents.collections),
                               documents=contents.documents)
        log.warning("%s (from database %s)", result.message, contents.root)
        await self._events.emit([AuditEvent(
            "backup_restored", user_id=_user_id(principal),
            details={"filename": filename, "collections": result.collections, "documents": result.documents})])
        return result

    async def _switched(self) -> bool:
        """Run every `on_restored` hook, each for at most RESTORE_HOOK_TIMEOUT_S; returns whether
        all succeeded (a hook fails by raising, timing out or returning False). A failure is logged,
        not raised: the data is already the backup's, and the switch goes on (`DumpRepository.restore`
        then leaves records collections to the orphan sweep)."""
        succeeded = True
        for hook in self._on_restored:
            try:
                async with asyncio.timeout(RESTORE_HOOK_TIMEOUT_S):
                    if await hook() is False:
                        succeeded = False
            except Exception:
                log.exception("a restore hook failed; caches may serve the old data until they expire")
                succeeded = False
        return succeeded

    async def _batches(self, archive: IO[bytes], contents: ArchiveContents,
                       progress: Progress | None) -> AsyncGenerator[tuple[str, builtins.list[bytes]], None]:
        done = 0
        async for name, documents in _in_thread(read_batches(archive)):
            done += len(documents)
            if progress:
                progress("load", done, contents.documents)
            yield name, documents

    async def delete(self, principal: Principal | None, filename: str) -> None:
        """Delete one backup. Raises BadRequest (not a backup filename), NotFound or Forbidden."""
        access.require_admin_or_operator(principal)
        path = self._path(filename)
        try:
            await asyncio.to_thread(path.unlink)
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"Backup {filename} not found") from None
        await self._events.emit([AuditEvent("backup_deleted", user_id=_user_id(principal),
                                            details={"filename": filename})])

    async def download(self, principal: Principal | None, filename: str) -> tuple[Backup, Path]:
        """The backup `filename` and the path of its archive, for sending it to an admin (audited
        `backup_downloaded`: the archive holds the whole database). Raises BadRequest (not a backup
        filename), NotFound or Forbidden."""
        access.require_admin_or_operator(principal)
        path = self._path(filename)
        created = backup_time(filename)
        try:
            size = (await asyncio.to_thread(path.stat)).st_size
        except FileNotFoundError:
            raise NotFound(f"Backup {filename} not found") from None
        if not path.is_file() or created is None:
            raise NotFound(f"Backup {filename} not found")
        await self._events.emit([AuditEvent("backup_downloaded", user_id=_user_id(principal),
                                            details={"filename": filename})])
        return Backup(filename=filename, size=size, created=created), path

    def _path(self, filename: str) -> Path:
        """The path of a backup; BadRequest unless `filename` is exactly of the backup form (so no
        separators, no `..`)."""
        if backup_time(filename) is None:
            raise BadRequest("Invalid backup filename: expected backup-YYYYmmdd-HHMMSS.tar.gz")
        return self._dir / filename


def _user_id(principal: Principal | None) -> str | None:
    return principal.user_id if principal is not None else None


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
