"""Backups (decisions.md, Backups): create, list, restore, delete and download whole-database archives.

A backup is one `backup-YYYYmmdd-HHMMSS.tar.gz` (UTC time of its creation) in the backup
directory (`BACKUP_DIR`, default `<data-dir>/backups`), in mongodump's layout; `backup_archives.py`
writes, verifies and reads the archives. Redis (queue, rate limits) is not part of a backup.

- Create writes the archive under a hidden temporary name in the same directory and links it to
  its final name only when complete and synced, so a crash never leaves a half backup listed.
- Restore reads the archive twice: first it verifies all of it and refuses a bad archive with 400
  before anything changes; then it streams the documents, 1,000 at a time, into staging
  collections that replace the live ones at the end (`DumpRepository.restore`), running the
  `on_restored` hooks during that switch. The database then holds exactly the backup's collections.
- Creates and restores run one at a time across every replica: each holds a lock in Redis
  (`SharedLock`, key `keys.backup_lock(db)`) while it runs. One asked for while another runs is
  refused with 400 `bad_request` ("A restore is running; ..."); without Redis, with 503. The work
  runs in a task of its own, so a caller that disconnects mid-restore does not cut the switch short
  nor release the lock before the switch is done.
- A backup that the disk cannot hold (full, quota, file size limit) fails with 503
  `service_unavailable` and leaves nothing listed (`write_archive`).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cms.clock import Clock, utcnow
from cms.errors import AlreadyExists, BadRequest, NotFound
from cms.models import Principal
from cms.services import access
from cms.services.delivery.events import AuditEvent, EventBus
from cms.services.operations.backup_archives import Progress, load_batches, verify_archive, write_archive
from cms.services.operations.shared_lock import SharedLock
from cms.store.backups import DumpRepository

log = logging.getLogger("cms.backups")

BACKUP_NAME = re.compile(r"backup-(\d{8}-\d{6})\.tar\.gz")
NAME_TIME_FORMAT = "%Y%m%d-%H%M%S"

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

    def __init__(self, store: DumpRepository, events: EventBus, backup_dir: Path, lock: SharedLock, *,
                 clock: Clock = utcnow, on_restored: Sequence[RestoreHook] = ()) -> None:
        self._store = store
        self._events = events
        self._dir = backup_dir
        self._lock = lock
        self._clock = clock
        self._on_restored = list(on_restored)

    @property
    def backup_dir(self) -> Path:
        """Where the archives are."""
        return self._dir

    async def create(self, principal: Principal | None, *, progress: Progress | None = None) -> Backup:
        """Write a backup of every collection and return it once it is complete.

        Its name is the clock's current second; if that name exists already (two backups in one
        second), raises AlreadyExists (400) and writes nothing. Raises Forbidden for a non-admin,
        BadRequest while another backup or restore runs (on any replica), ServiceUnavailable when
        Redis does not answer or the disk cannot hold the archive (nothing is left then). Driver
        errors propagate; the temporary file is removed then."""
        access.require_admin_or_operator(principal)
        return await self._lock.run("backup", lambda: self._create(principal, progress))

    async def _create(self, principal: Principal | None, progress: Progress | None) -> Backup:
        created = self._clock().astimezone(UTC).replace(microsecond=0)
        filename = f"backup-{created.strftime(NAME_TIME_FORMAT)}.tar.gz"
        final = self._dir / filename
        await asyncio.to_thread(self._dir.mkdir, mode=0o700, parents=True, exist_ok=True)
        if await asyncio.to_thread(final.exists):
            raise AlreadyExists(f"Backup {filename} already exists; try again in a second")
        size, collections = await write_archive(self._store, final, created, progress)
        backup = Backup(filename=filename, size=size, created=created)
        log.info("backup %s written: %d collections, %d bytes", filename, collections, size)
        await self._events.emit([AuditEvent(
            "backup_created", user_id=_user_id(principal),
            details={"filename": filename, "size": size, "collections": collections})])
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
        BadRequest while another backup or restore runs (on any replica), ServiceUnavailable when
        Redis does not answer, Forbidden for a non-admin. Driver errors propagate (the data is left
        as it was unless the final switch of collections was under way). A caller cancelled meanwhile
        stops waiting; the restore goes on to its end (and is audited)."""
        access.require_admin_or_operator(principal)
        path = self._path(filename)
        return await self._lock.run("restore", lambda: self._restore(principal, path, progress))

    async def _restore(self, principal: Principal | None, path: Path, progress: Progress | None) -> RestoreResult:
        filename = path.name
        try:
            archive = await asyncio.to_thread(path.open, "rb")
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"Backup {filename} not found") from None
        try:
            contents = await asyncio.to_thread(verify_archive, archive, progress)
            async with aclosing(load_batches(archive, contents, progress)) as batches:
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

    async def wait_idle(self) -> None:
        """Wait for this process's backup or restore under way to end (at shutdown)."""
        await self._lock.wait_idle()

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
