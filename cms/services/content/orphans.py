"""The orphan sweep: records collections left without a collection definition (a delete whose
epoch bump Redis did not acknowledge, a create that raced a delete or a restore) are dropped, carefully
(spec: Collections; decisions.md, Backups)."""

from __future__ import annotations

import logging
import time

from cms.services.caching.catalog import Catalog
from cms.store.backups import STAGING_PREFIX, staging_started
from cms.store.collections import CollectionRepository
from cms.store.documents import RECORDS_PREFIX, collection_id_of, records_mongo_name
from cms.store.records import RecordRepository

log = logging.getLogger("cms.collections")

ORPHAN_CONFIRM_S = 300.0
"""Seconds between the first and the last sighting of a records collection without a definition
before `CollectionService.sweep_orphans` drops it (a restore's switch or a rename never looks like
an orphan that long)."""

RESTORE_STAGING_MAX_S = 3600.0
"""Staging collections of a restore started longer ago than this (seconds) are taken for the
leftovers of an interrupted one: they no longer hold `sweep_orphans` back."""


async def sweep_orphans(records: RecordRepository, collections: CollectionRepository, catalog: Catalog,
                        seen: dict[str, float], *, confirm_after_s: float = ORPHAN_CONFIRM_S) -> tuple[str, ...]:
    """Drop the records collections whose collection is no longer defined, and return their
    MongoDB names: the backstop for records a delete could not drop (Redis did not acknowledge
    its epoch bump) and for a create that raced a delete or a restore while Redis lost an
    acknowledged bump (`Catalog.exists`).

    Careful, as a drop cannot be undone: nothing happens while a restore is staging (a
    staging collection of a restore started less than RESTORE_STAGING_MAX_S ago exists; older
    ones, left by an interrupted restore, are reported); a records collection is dropped only
    when this process found it without a definition in sweeps at least `confirm_after_s`
    seconds apart and an `_id` look-up of its collection, just before the drop, finds nothing.
    The stored collections are listed before the definitions are read, and a definition is
    stored before its records collection is made (`create`), so a collection being created is
    never taken for an orphan. Driver errors propagate (the next sweep goes on).
    `seen` maps the names found without a definition to when (time.monotonic(), seconds) this
    process first saw them; it is updated in place."""
    names = await records.database_names()
    staging = [staging_started(name) for name in names if name.startswith(STAGING_PREFIX)]
    if any(started is not None and time.time() - started < RESTORE_STAGING_MAX_S for started in staging):
        log.info("orphan sweep skipped: a restore is in progress")
        return ()
    if staging:
        log.warning("collections named %s... are left from an interrupted restore; the next restore drops "
                    "them (or drop them by hand)", STAGING_PREFIX)
    defined = {records_mongo_name(collection.id) for collection in await collections.list()}
    orphans = {name for name in names if name.startswith(RECORDS_PREFIX)} - defined
    now = time.monotonic()
    sightings = {name: seen.get(name, now) for name in orphans}
    seen.clear()
    seen.update(sightings)
    dropped = []
    for name, since in sorted(seen.items()):
        if now - since < confirm_after_s:
            continue
        collection_id = collection_id_of(name)
        if collection_id is None or await catalog.exists(collection_id):
            del seen[name]  # not ours, or defined after all (renamed mid-read)
            continue
        await records.drop_stored(name)
        del seen[name]
        dropped.append(name)
        log.warning("dropped %s: the records of a collection that no longer exists", name)
    return tuple(dropped)
