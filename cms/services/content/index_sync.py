"""The start-up sync of record indexes (issue 38; docs/concepts/indexes.md#at-start-up): every stored
collection's automatic, declared, unique and text indexes are made to match its definition, so a
collection stored before a kind of index existed, or one whose index was dropped by hand or lost in a
restore, gets it back, and indexes of fields or rules gone meanwhile are dropped.

- One replica does it per start of a deployment: the sync holds a lock shared by every replica (the
  queue's Redis, `SharedLock`); a replica starting while another holds it skips the sync and says so.
  A replica started later (scaling up, a restart) syncs again: every step is a no-op when nothing is
  missing (one `listIndexes` per collection).
- It runs in the background (`start`): the web app serves meanwhile; each collection's outcome is
  logged (`cms.indexes`), and a collection that fails (records holding duplicates of a unique index
  that was lost) is logged and skipped, never stopping the others.
- `run()` is the same, awaited: the public seam for tests and scripts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from cms.errors import BadRequest, ServiceUnavailable
from cms.services.content.collections import CollectionService
from cms.services.operations.shared_lock import SharedLock

log = logging.getLogger("cms.indexes")

STOP_GRACE_S = 5.0
"""Seconds a stopping process waits for the background sync to end after its current collection."""


@dataclass(frozen=True)
class IndexSyncReport:
    """What one sync did: `synced` collections, `failed` ones (logged), `duration_s` in seconds."""

    synced: int
    failed: int
    duration_s: float


class IndexSync:
    """The start-up sync over `collections` (their definitions and `resync_indexes`), one replica at a
    time under `lock` (module docstring)."""

    def __init__(self, collections: CollectionService, lock: SharedLock) -> None:
        self._collections = collections
        self._lock = lock
        self._task: asyncio.Task[IndexSyncReport | None] | None = None
        self._stopping = False

    async def run(self) -> IndexSyncReport | None:
        """Sync every collection's record indexes holding the lock, and report; None when another
        replica holds it or Redis does not answer (logged: the sync is skipped, not retried)."""
        try:
            return await self._lock.run("index sync", self._sync_all, shield=False)
        except BadRequest:
            log.info("index sync: another replica is syncing the record indexes; skipped here")
        except ServiceUnavailable:
            log.warning("index sync: Redis does not answer (the sync's lock is there); skipped")
        return None

    async def _sync_all(self) -> IndexSyncReport:
        started = time.monotonic()
        collections = await self._collections.list()
        log.info("index sync: checking the record indexes of %d collections", len(collections))
        synced = failed = 0
        for number, collection in enumerate(collections, 1):
            if self._stopping:
                log.info("index sync: stopped after %d of %d collections (shutting down)", number - 1,
                         len(collections))
                break
            one_started = time.monotonic()
            try:
                if await self._collections.resync_indexes(collection.id):
                    synced += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                failed += 1
                log.exception("index sync: the record indexes of %s (%s) could not be synced", collection.name,
                              collection.id)
                continue
            log.info("index sync: %s (%d of %d) in %.2f s", collection.name, number, len(collections),
                     time.monotonic() - one_started)
        report = IndexSyncReport(synced=synced, failed=failed, duration_s=time.monotonic() - started)
        log.info("index sync: done, %d collections synced, %d failed, in %.1f s", report.synced, report.failed,
                 report.duration_s)
        return report

    def start(self) -> None:
        """Run the sync in the background (the web app's start-up); once per process."""
        if self._task is None:
            self._task = asyncio.create_task(self._background(), name="index-sync")

    async def finished(self) -> IndexSyncReport | None:
        """Wait for the background sync `start` began and return its report (None: none was started,
        another replica held the lock, or it failed)."""
        if self._task is None:
            return None
        return await asyncio.shield(self._task)

    async def _background(self) -> IndexSyncReport | None:
        try:
            return await self.run()
        except Exception:
            log.exception("index sync: failed; the record indexes are synced at the next start")
            return None

    async def stop(self) -> None:
        """Let a background sync end after the collection it is syncing, and wait for it (shutdown);
        one still running STOP_GRACE_S seconds later (a database that does not answer) is cancelled,
        which releases the lock (what it did stands; the next start does the rest)."""
        self._stopping = True
        if self._task is None:
            return
        done, _ = await asyncio.wait({self._task}, timeout=STOP_GRACE_S)
        if not done:
            self._task.cancel()
            log.warning("index sync: cancelled at shutdown after %.0f s", STOP_GRACE_S)
        await asyncio.gather(self._task, return_exceptions=True)
