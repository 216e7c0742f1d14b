"""Slow queries (issue 38, item 3; docs/concepts/indexes.md#slow-queries): list queries of records (pages,
result sets, counts, expand's related records) that take longer than SLOW_QUERY_MS.

- `SlowQueryWatch` is the records store's `QueryWatch`: told of each slow query by its shape (field
  names and operators, never values: cms.store.query_shapes), it logs the shape once per collection and
  shape per LOG_WINDOW_S in this process, counts it in the metrics (`Signals.slow_query`: by collection
  name and shape) and adds it to the board every replica shares (`SlowQueryBoard`, in Redis). That
  work runs in a task of its own per slow query, at most MAX_PENDING_NOTES at once (more are dropped
  and counted): the query's caller never waits for it, and Redis or a failure there never fails a read.
- `SlowQueryService` is what admins do with the board (API and admin UI): list it, each entry with the
  index that would serve its shape (`index_advice.suggest_index`), create that index (through
  `CollectionService.update`, so every rule of declared indexes applies), or dismiss an entry.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace

from cms.clock import Clock, utcnow
from cms.errors import BadRequest, NotFound
from cms.models import Collection, Principal, QueryShape, SlowQuery
from cms.observability.signals import Signals
from cms.services.access import require_admin
from cms.services.caching.catalog import Catalog
from cms.services.content.collections import CollectionService
from cms.services.content.index_advice import suggest_index
from cms.services.content.slow_query_board import ENTRY_ID_LENGTH, SlowQueryBoard, entry_id

log = logging.getLogger("cms.slow_queries")

LOG_WINDOW_S = 3600.0
"""A process logs each collection's query shape at most once per this many seconds."""
MAX_LOGGED_SHAPES = 1_000
"""Shapes a process remembers having logged; past it, it forgets those logged longest ago."""
MAX_PENDING_NOTES = 64
"""Slow queries a process records at once; more are dropped (`SlowQueryWatch.dropped`)."""
ENTRY_ID = re.compile(rf"[0-9a-f]{{{ENTRY_ID_LENGTH}}}")
"""What an entry id looks like; any other id is not looked up (404)."""


class SlowQueryWatch:
    """This process's watch of slow list queries (module docstring): `threshold_ms` (SLOW_QUERY_MS),
    `index_sorts` (the server's `Capabilities.index_sorts`, for the suggestion in the log line), `now`
    the wall clock in epoch seconds and `monotonic` the log window's clock (tests move them)."""

    def __init__(self, board: SlowQueryBoard, catalog: Catalog, signals: Signals, *, threshold_ms: float,
                 index_sorts: bool, now: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._board = board
        self._catalog = catalog
        self._signals = signals
        self._threshold_ms = float(threshold_ms)
        self._index_sorts = index_sorts
        self._now = now
        self._monotonic = monotonic
        self._logged: dict[str, float] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self._failing = False
        self.dropped = 0
        """Slow queries not recorded because MAX_PENDING_NOTES were being recorded."""

    @property
    def threshold_ms(self) -> float:
        """Queries that take longer than this many milliseconds are slow (SLOW_QUERY_MS)."""
        return self._threshold_ms

    def slow(self, collection_id: str, shape: QueryShape, duration_ms: float) -> None:
        """Record one slow query in a task of its own (module docstring); never raises."""
        if len(self._pending) >= MAX_PENDING_NOTES:
            self.dropped += 1
            return
        try:
            task = asyncio.get_running_loop().create_task(self._record(collection_id, shape, duration_ms))
        except RuntimeError:  # no running loop: nothing to record on
            return
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _record(self, collection_id: str, shape: QueryShape, duration_ms: float) -> None:
        try:
            collection = await self._catalog.find_by_id(collection_id)
            if collection is None:  # deleted meanwhile
                return
            self._signals.slow_query(collection.name, shape.text, duration_ms / 1000)
            self._log_once(collection, shape, duration_ms)
            await self._board.note(collection_id, shape, duration_ms, self._now())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - Redis or MongoDB away: this slow query goes unrecorded
            if not self._failing:
                log.warning("slow queries: could not record one (%r); more are dropped until it works again", exc)
            self._failing = True
            return
        if self._failing:
            log.info("slow queries: recorded again")
        self._failing = False

    def _log_once(self, collection: Collection, shape: QueryShape, duration_ms: float) -> None:
        key = entry_id(collection.id, shape)
        now = self._monotonic()
        last = self._logged.get(key)
        if last is not None and now - last < LOG_WINDOW_S:
            return
        if len(self._logged) >= MAX_LOGGED_SHAPES:
            oldest = sorted(self._logged, key=self._logged.__getitem__)[:MAX_LOGGED_SHAPES // 2]
            for old in oldest:
                del self._logged[old]
        self._logged[key] = now
        suggestion = suggest_index(collection, shape, index_sorts=self._index_sorts)
        log.warning("slow query on %s: %s took %.0f ms (over SLOW_QUERY_MS=%g; logged once an hour per shape); "
                    "suggested index: %s", collection.name, shape.text, duration_ms, self._threshold_ms,
                    list(suggestion.fields) if suggestion else "none (an index serves it, or none can)")

    async def idle(self) -> None:
        """Wait until every slow query this process is recording is recorded (tests, shutdown)."""
        while self._pending:
            await asyncio.wait(set(self._pending))

    async def close(self) -> None:
        """Stop recording: cancel what is still being recorded (at shutdown, before the clients close)."""
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)


class SlowQueryService:
    """The admins' view of the slow query board (module docstring). `index_sorts` is the server's
    `Capabilities.index_sorts`."""

    def __init__(self, board: SlowQueryBoard, catalog: Catalog, collections: CollectionService, *,
                 index_sorts: bool, clock: Clock = utcnow) -> None:
        self._board = board
        self._catalog = catalog
        self._collections = collections
        self._index_sorts = index_sorts
        self._clock = clock

    async def list(self, principal: Principal | None) -> list[SlowQuery]:
        """Every slow query shape every replica reported (at most MAX_SLOW_QUERIES, seen within
        SLOW_QUERY_RETENTION_S), the most recently seen first, each with its collection's name and the
        index that would serve it (None: an index already does, or none can). Entries of deleted
        collections are dropped. Admins only: raises Unauthorized / Forbidden."""
        require_admin(principal)
        listed: list[SlowQuery] = []
        for entry in await self._board.entries(self._clock().timestamp()):
            collection = await self._catalog.find_by_id(entry.collection_id)
            if collection is None:
                await self._board.remove(entry.id)
                continue
            listed.append(self._shown(entry, collection))
        return sorted(listed, key=lambda e: (e.last_seen, e.id), reverse=True)

    async def get(self, principal: Principal | None, slow_query_id: str) -> SlowQuery:
        """One entry as `list` shows it. Admins only. Raises Unauthorized / Forbidden, NotFound."""
        require_admin(principal)
        entry, collection = await self._entry(slow_query_id)
        return self._shown(entry, collection)

    async def create_index(self, principal: Principal | None, slow_query_id: str) -> Collection:
        """Add the entry's suggested index to its collection's declared `indexes` (as
        `PATCH /collections/{id}` with the list plus it would), then drop the entry; returns the changed
        collection. Admins only. Raises Unauthorized / Forbidden, NotFound (no such entry, or its
        collection is gone), BadRequest (no index to suggest: one already serves the shape, or none can)
        and what `CollectionService.update` raises (422 past MAX_INDEXES, ...; then nothing changes)."""
        require_admin(principal)
        entry, collection = await self._entry(slow_query_id)
        suggestion = suggest_index(collection, entry.shape, index_sorts=self._index_sorts)
        if suggestion is None:
            raise BadRequest("No index to create: an index already serves this query, or none can")
        declared = [{"fields": list(d.fields), "unique": d.unique} for d in (*collection.indexes, suggestion)]
        changed = await self._collections.update(principal, collection.id, indexes=declared)
        await self._board.remove(entry.id)
        log.info("slow queries: index %s created on %s for %s", list(suggestion.fields), changed.name,
                 entry.shape.text)
        return changed

    async def dismiss(self, principal: Principal | None, slow_query_id: str) -> None:
        """Drop one entry from the board (it comes back if the query is slow again). Admins only.
        Raises Unauthorized / Forbidden, NotFound."""
        require_admin(principal)
        if not ENTRY_ID.fullmatch(slow_query_id) or not await self._board.remove(slow_query_id):
            raise NotFound("No such slow query")

    async def _entry(self, slow_query_id: str) -> tuple[SlowQuery, Collection]:
        entry = await self._board.get(slow_query_id) if ENTRY_ID.fullmatch(slow_query_id) else None
        if entry is None:
            raise NotFound("No such slow query")
        collection = await self._catalog.find_by_id(entry.collection_id)
        if collection is None:
            await self._board.remove(entry.id)
            raise NotFound("The collection of this slow query no longer exists")
        return entry, collection

    def _shown(self, entry: SlowQuery, collection: Collection) -> SlowQuery:
        return replace(entry, collection=collection.name,
                       suggested_index=suggest_index(collection, entry.shape, index_sorts=self._index_sorts))
