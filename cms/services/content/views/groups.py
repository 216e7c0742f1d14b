"""The groups of a view collection, current at every read (decisions.md, Aggregation and view
collections), without reading the whole source after each write.

Each process keeps, per view (at most MIRRORS_KEPT, least recently used out), a mirror of the source:
what each matching record contributes to its group (`Contribution`: its key and the values the
aggregates read, not the record), and the groups they make (`Groups`), as of a version of the source
(the read cache's version counter, which every record write bumps). A read brings the stamp it read
(`<epoch>.<view version>.<source version>`, the source's version joined by `ReadThrough.read`):

- the mirror is as of that version: its rows are answered at once (also when the mirror is newer, the
  read having begun before a write the mirror holds, as long as the log shows the counter only grew);
- it is older: the source's change log (`ChangeLog.changed_since`) names the records changed since,
  which are read again by id (one `_id $in` look-up, no scan) and put in their groups or taken out;
- otherwise (no mirror yet, the log cannot say, another epoch or definition, a mirror older than
  MIRROR_MAX_AGE_S, the backstop for a bump Redis lost): the source's matching records are read once
  (only the fields the groups need), at most MIRROR_MAX_RECORDS of them; a larger source is grouped
  by the database instead (`mongo.group_pipeline`, at most MAX_VIEW_GROUPS groups) at each version.

Every replica keeps its own mirrors and reads the same log, so a write answered by one replica is in
the next read on any other. Without a stamp (Redis not answering) the groups are computed and not kept.
Concurrent reads of one view share its refresh (one lock per view).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from cms.errors import InvalidFilter
from cms.models import Collection
from cms.services.access import record_document
from cms.services.access.aggregation import AggregateQuery, Contribution, Groups, contribution
from cms.services.caching.change_log import ChangeLog
from cms.services.content.fields import to_json_value
from cms.services.content.views.definition import ViewShape
from cms.store.records import RecordRepository

MIRROR_MAX_RECORDS = 100_000
"""Most source records one view's mirror holds; a larger source is grouped by the database."""
MIRRORS_KEPT = 8
"""Views whose mirror one process keeps (least recently read out first)."""
MIRROR_MAX_AGE_S = 300.0
"""A mirror is rebuilt from the source at least this often (seconds; the read cache's entry TTL)."""
MAX_VIEW_GROUPS = 10_000
"""Most groups (records) one view may have; a read past it is 400 (narrow the view's filter or keys)."""
VIEW_MAX_TIME_MS = 10_000
"""The database's time limit for grouping a source too large to mirror (503 past it)."""
BUILD_YIELD_EVERY = 2_000
"""Records put in their groups between two yields to the event loop while a mirror is built."""

Row = Mapping[str, Any]
"""A view's record as a stored document: `_id` (`row_id` of its key), the key fields, the aggregates."""


def row_id(key: Mapping[str, Any]) -> str:
    """A view record's `id`: the first 24 hex digits of the SHA-256 of its key (names and JSON values,
    in key order), the same on every replica and at every read."""
    text = orjson.dumps([[name, to_json_value(value)] for name, value in key.items()])
    return hashlib.sha256(text).hexdigest()[:24]


def source_version(stamp: str | None) -> int | None:
    """The source's version in a view read's stamp (`<epoch>.<view>.<source>`), None when unknown."""
    if stamp is None:
        return None
    parts = stamp.split(".")
    return int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else None


@dataclass
class _Mirror:
    identity: tuple[Any, ...]
    version: int | None
    built_s: float
    parts: dict[str, Contribution] | None = None  # None: the source is too large to mirror
    groups: Groups | None = None
    rows: list[Row] | None = None  # the rows as of `version`, once computed
    too_large: bool = False


@dataclass
class _Locks:
    held: dict[str, asyncio.Lock] = field(default_factory=dict)

    def of(self, view_id: str) -> asyncio.Lock:
        lock = self.held.get(view_id)
        if lock is None:
            lock = self.held[view_id] = asyncio.Lock()
        return lock


class ViewGroups:
    """The rows of view collections, kept per process (see the module docstring) from `records` and
    the read cache's change log `changes` (None: no log, every new version reads the source)."""

    def __init__(self, records: RecordRepository, changes: ChangeLog | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._records = records
        self._changes = changes
        self._clock = clock
        self._mirrors: OrderedDict[str, _Mirror] = OrderedDict()
        self._locks = _Locks()

    async def rows(self, view: Collection, source: Collection, shape: ViewShape, stamp: str | None, *,
                   client: str | None = None) -> list[Row]:
        """The records of `view` (over `source`, resolved as `shape`) as of `stamp` (the read cache's
        stamp of the read, None: unknown), unordered. Source reads take `client`'s share of the scan
        line. Raises InvalidFilter (more than MAX_VIEW_GROUPS groups) and ServiceUnavailable (the scan
        line is full, or the database's time limit passed)."""
        version = source_version(stamp)
        identity = (view.id, view.version, source.id, source.version, stamp.partition(".")[0] if stamp else None)
        async with self._locks.of(view.id):
            mirror = self._mirrors.get(view.id)
            fresh = (mirror is not None and mirror.identity == identity and version is not None
                     and self._clock() - mirror.built_s < MIRROR_MAX_AGE_S)
            if mirror is not None and fresh and mirror.version is not None:
                self._mirrors.move_to_end(view.id)
                if mirror.version == version and mirror.rows is not None:
                    return mirror.rows
                if (version is not None and version < mirror.version and self._changes is not None
                        and await self._changes.changed_since(source.name, version, mirror.version) is not None):
                    # a read that began before a write the mirror already holds: newer rows serve it
                    # (the log proves the counter only grew since: no restart in between)
                    return self._rows(mirror, shape)
                if mirror.parts is not None and self._changes is not None and version is not None:
                    changed = await self._changes.changed_since(source.name, mirror.version, version)
                    if changed is not None:
                        await self._apply(mirror, source, shape, changed)
                        mirror.version, mirror.rows = version, None
                        return self._rows(mirror, shape)
            too_large = mirror is not None and fresh and mirror.too_large
            mirror = await self._build(identity, version, source, shape, too_large, client)
            if version is not None:
                self._keep(view.id, mirror)
            return self._rows(mirror, shape)

    def forget(self) -> None:
        """Drop every mirror (tests; memory)."""
        self._mirrors.clear()

    async def _build(self, identity: tuple[Any, ...], version: int | None, source: Collection, shape: ViewShape,
                     too_large: bool, client: str | None) -> _Mirror:
        """A mirror as of `version` from the source (read after `version` was: writes logged after it are
        applied again at the next read, which is harmless)."""
        mirror = _Mirror(identity, version, self._clock())
        query = shape.condition.query
        if not too_large:
            paths = sorted(({k.path for k in shape.grouping.keys}
                            | {m.path for m in shape.grouping.measures if m.path is not None}) - {"_id"})
            found = await self._records.find_fields(source.id, query, paths, MIRROR_MAX_RECORDS + 1, client=client)
            if len(found) <= MIRROR_MAX_RECORDS:
                mirror.parts, mirror.groups = {}, Groups(shape.grouping)
                for n, record in enumerate(found, start=1):
                    part = contribution(shape.grouping, record_document(record))
                    mirror.parts[record.id] = part
                    mirror.groups.add(part)
                    if n % BUILD_YIELD_EVERY == 0:
                        await asyncio.sleep(0)
                return mirror
        mirror.too_large = True
        grouping = shape.grouping
        aggregate = AggregateQuery(query, grouping, grouping.order(None))
        found_rows, total = await self._records.aggregate(source.id, aggregate.pipeline(0, MAX_VIEW_GROUPS + 1),
                                                          max_time_ms=VIEW_MAX_TIME_MS, client=client)
        rows = [grouping.row(d) for d in found_rows] or ([] if grouping.keys else [grouping.empty_row()])
        mirror.rows = self._documents(rows, total)
        return mirror

    async def _apply(self, mirror: _Mirror, source: Collection, shape: ViewShape, changed: set[str]) -> None:
        """Read the records of `changed` again (by id) and move their contributions."""
        assert mirror.parts is not None and mirror.groups is not None
        if not changed:
            return
        found = {r.id: r for r in await self._records.find_by_ids(source.id, sorted(changed))}
        for record_id in changed:
            old = mirror.parts.pop(record_id, None)
            if old is not None:
                mirror.groups.remove(old)
            record = found.get(record_id)
            if record is None:
                continue
            document = record_document(record)
            if shape.condition.matches(document):
                part = contribution(shape.grouping, document)
                mirror.parts[record_id] = part
                mirror.groups.add(part)
        if len(mirror.parts) > MIRROR_MAX_RECORDS:  # grown past the bound: the next read groups in the database
            mirror.identity = ()

    def _rows(self, mirror: _Mirror, shape: ViewShape) -> list[Row]:
        if mirror.rows is None:
            assert mirror.groups is not None
            rows = mirror.groups.rows()
            mirror.rows = self._documents(rows, len(rows))
        return mirror.rows

    @staticmethod
    def _documents(rows: Sequence[Mapping[str, Any]], total: int) -> list[Row]:
        if total > MAX_VIEW_GROUPS:
            raise InvalidFilter(f"This view has more than {MAX_VIEW_GROUPS:,} records (groups); narrow its filter "
                                "or group_by")
        return [{"_id": row_id(row["key"]), **row["key"], **{k: v for k, v in row.items() if k != "key"}}
                for row in rows]

    def _keep(self, view_id: str, mirror: _Mirror) -> None:
        self._mirrors[view_id] = mirror
        self._mirrors.move_to_end(view_id)
        while len(self._mirrors) > MIRRORS_KEPT:
            self._mirrors.popitem(last=False)
