"""The writes of a schema apply, driven by its journal (decisions.md, Schema as code; `models.SchemaJournal`),
so that an apply cut short anywhere (a `kill -9`, a server gone) ends as the old schema or the new one,
never a mix, once the next process that takes the schema lock runs `resume`.

The steps, in the order that keeps every failure undoable until the point of no return:

1. APPLYING (undone by `undo` when a step fails, or when the journal is found in this state later): the
   record indexes of every created or changed collection built or dropped (`CollectionService.sync_indexes`:
   a unique index over duplicates fails here), then the renamed fields renamed in the records (`$rename`,
   one `update_many` per collection) and every definition stored or removed (one bulk write; each changed
   collection only if still at the version the plan read), both in one transaction where the server
   supports multi-document transactions (detected at start, `Capabilities.transactions`): a process
   killed meanwhile leaves neither, and no rename still running on the server can outlive the undo. A
   server without transactions gets the renames first (and again in step 2, for the records written
   under the old definitions meanwhile). The catalog epoch is moved right after, so every replica reads
   the new definitions at once.
2. COMMITTED (only goes forward; `resume` completes it): without transactions, the renames again (for
   records written between the renames and the switch), stored values of converting fields rewritten
   (`schema_changes.convert_batch`: converted, or cleared when `allow_data_loss`), a batch at a time, each
   batch's old values copied into the journal before it is written (`RewriteBatch`), and the
   collection's progress (the last record id) after it, so a rewrite cut short puts that batch back
   and resumes after the last finished one; then dropped fields unset, the working copies of
   collections with drafts given the same change (`CollectionService.follow_drafts`), deleted
   collections' records dropped, the record indexes synced again (one replica's start-up index sync
   may have read the old definitions meanwhile); then the collection events (one batch: one epoch
   bump, the subscribers' clean-ups) and the `schema_applied` audit entry; then the journal is removed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cms.clock import Clock
from cms.errors import AlreadyExists, ValidationFailed
from cms.models import DEFAULT_LOCALES, VIEW_TYPE, Collection, Locales, RewriteBatch, SchemaJournal
from cms.services.caching.catalog import Catalog
from cms.services.content.collections import CollectionService
from cms.services.content.schema_changes import FieldChange, changed_names, convert_batch
from cms.services.content.schema_diff import CollectionPlan
from cms.services.content.schema_snapshot import snapshot
from cms.services.delivery.events import CREATE, DELETE, UPDATE, AuditEvent, CollectionEvent, EventBus
from cms.store.collections import CollectionRepository
from cms.store.records import RecordRepository
from cms.store.schema_journal import SchemaJournalRepository
from cms.store.transactions import Transactions

log = logging.getLogger("cms.schema")

APPLYING, COMMITTED = "applying", "committed"
REWRITE_BATCH = 500
"""Records read per batch while rewriting stored values."""
REWRITE_BATCH_BYTES = 4 * 1024 * 1024
"""Most bytes (as JSON, roughly) of old values one write-ahead copy holds; a batch is cut before that."""

Progress = Callable[[str, int, int], None]
"""Told `(stage, done, total)` as an apply goes (the CLI's progress line)."""


def no_progress(stage: str, done: int, total: int) -> None:
    """The progress sink of an apply nobody watches."""


@dataclass(frozen=True)
class RunDeps:
    """What the writes of an apply use: the stores, the collection service (indexes, record drops), the
    catalog (epoch), the transactions, the bus and the clock."""

    collections: CollectionRepository
    records: RecordRepository
    journal: SchemaJournalRepository
    service: CollectionService
    catalog: Catalog
    transactions: Transactions
    events: EventBus
    clock: Clock


def plans_of(journal: SchemaJournal, locales: Locales = DEFAULT_LOCALES) -> list[CollectionPlan]:
    """The collection plans a journal records, by collection id, the definitions carrying `locales` (the
    setting a value that becomes localized is stored under the default locale of)."""
    before = {c.id: replace(c, locales=locales) for c in journal.before}
    after = {c.id: replace(c, locales=locales) for c in journal.after}
    renames: dict[str, dict[str, str]] = {}
    for collection_id, old, new in journal.renames:
        renames.setdefault(collection_id, {})[new] = old
    return [CollectionPlan(before.get(i), after.get(i), renames.get(i, {}))
            for i in sorted(before.keys() | after.keys())]


async def forward(deps: RunDeps, journal: SchemaJournal, progress: Progress = no_progress) -> None:
    """Step 1 (module docstring), then the journal is COMMITTED. On a failure the step is undone
    (`undo`: the journal is removed) and the error raised."""
    try:
        plans = plans_of(journal)
        if not deps.transactions.enabled:
            await _rename(deps, plans)
        built = [plan.after for plan in plans if plan.after is not None]
        for done, collection in enumerate(built):
            progress("indexes", done, len(built))
            try:
                await deps.service.sync_indexes(collection)
            except ValidationFailed as exc:  # a new unique index over duplicates: say which collection
                raise ValidationFailed(f"{collection.name}: {exc.detail}", errors={
                    f"collections.{collection.name}.{key}": value for key, value in (exc.errors or {}).items()
                }) from None
        progress("indexes", len(built), len(built))
        deleted = [plan.before.id for plan in plans if plan.before is not None and plan.after is None]
        expected = {plan.before.id: plan.before.version for plan in plans if plan.before is not None}
        async with deps.transactions.begin():
            if deps.transactions.enabled:
                await _rename(deps, plans)
            await deps.collections.write_all(built, deleted, expected=expected)
        await _switched(deps)
        await deps.journal.set_state(journal.token, COMMITTED)
    except BaseException:
        try:
            await undo(deps, journal)
        except Exception:  # the journal stays: the next process that takes the lock undoes it
            log.exception("schema apply %s could not be undone now; it will be at the next start", journal.token)
        raise


async def _rename(deps: RunDeps, plans: Sequence[CollectionPlan]) -> None:
    """Each plan's renamed fields renamed in the records (old -> new)."""
    for plan in plans:
        if plan.renames:
            await deps.records.rename_fields(plan.collection_id, {old: new for new, old in plan.renames.items()})


async def undo(deps: RunDeps, journal: SchemaJournal) -> None:
    """Put back what step 1 of `journal` did, whatever part of it ran (each part is idempotent): each
    definition the apply stored (found at the apply's version) goes back to what it was, its version
    raised past the apply's; each it removed is stored again; each it created is removed with its
    records; renamed fields get their old names; the record indexes follow the stored definitions. A
    definition changed by someone else meanwhile is left as it is. Then the journal is removed."""
    plans = plans_of(journal)
    now = deps.clock()
    for plan in plans:
        if plan.before is None:
            continue
        restored = replace(plan.before, version=plan.before.version + 2, updated=now)
        if plan.after is not None:
            await deps.collections.replace(restored, expected_version=plan.after.version)
        elif await deps.collections.get(plan.before.id) is None:
            await deps.collections.insert(restored)
    created = [plan.after for plan in plans if plan.before is None and plan.after is not None]
    await deps.collections.write_all([], [c.id for c in created])
    for plan in plans:
        if plan.before is not None and plan.renames:
            await deps.records.rename_fields(plan.collection_id, dict(plan.renames))
        if plan.before is not None:
            await deps.service.restore_indexes(plan.before.id)
    for collection in created:
        await deps.service.drop_records(collection)
    await _switched(deps)
    await deps.journal.end(journal.token)
    log.warning("schema apply %s undone: the schema is as it was before it", journal.token)


async def _switched(deps: RunDeps) -> None:
    """The definitions changed: this process forgets its own, and the catalog epoch moves for every replica."""
    deps.catalog.forget()
    await deps.catalog.move_epoch()


async def finish(deps: RunDeps, journal: SchemaJournal, progress: Progress = no_progress) -> dict[str, Any]:
    """Step 2 of a COMMITTED `journal` (module docstring), from wherever it stopped; returns the instance's
    snapshot afterwards."""
    plans = plans_of(journal, await deps.catalog.locales())
    if not deps.transactions.enabled:  # records written under the old definitions between rename and switch
        await _rename(deps, plans)
    if journal.pending is not None:
        pending = journal.pending
        await deps.records.restore_field_values(pending.collection_id, [
            (record_id, updated, values, pending.names) for record_id, updated, values in pending.records])
    for plan in plans:
        converting = [c for c in plan.field_changes() if c.converts]
        if converting and plan.after is not None and plan.after.type != VIEW_TYPE:  # a view stores no records
            await _rewrite(deps, journal, plan, converting, progress)
    for plan in plans:
        dropped = plan.dropped_fields()
        if dropped and plan.after is not None and plan.after.type != VIEW_TYPE:
            await deps.records.unset_fields(plan.collection_id, dropped)
        converting = [c for c in plan.field_changes() if c.converts]
        await deps.service.follow_drafts(plan.before, plan.after, dropped, converting,
                                         renames={old: new for new, old in plan.renames.items()})
    for plan in plans:
        if plan.before is not None and plan.after is None:
            await deps.service.drop_records(plan.before)
        elif plan.after is not None:  # a start-up index sync racing step 1 read the old definition
            try:
                await deps.service.resync_indexes(plan.after.id)
            except ValidationFailed as exc:  # duplicates written since step 1 built the index
                log.warning("collection %s: its record indexes could not follow the apply: %s", plan.name, exc.detail)
    events = [_event(plan) for plan in plans]
    await deps.events.emit(events)
    made = snapshot(await deps.catalog.all())
    await deps.events.emit([AuditEvent("schema_applied", user_id=journal.user_id,
                                       details={"changes": list(journal.changes), "hash": made["hash"]})])
    await deps.journal.end(journal.token)
    log.info("schema apply %s done: %d changes; hash %s", journal.token, len(journal.changes), made["hash"])
    return made


def _event(plan: CollectionPlan) -> CollectionEvent:
    """The collection event of one collection's part of an apply."""
    if plan.after is None:
        assert plan.before is not None
        return CollectionEvent(DELETE, plan.before)
    return CollectionEvent(CREATE if plan.before is None else UPDATE, plan.after)


async def _rewrite(deps: RunDeps, journal: SchemaJournal, plan: CollectionPlan, changes: Sequence[FieldChange],
                   progress: Progress) -> None:
    """Rewrite the stored values of the converting `changes` of one collection, from after its recorded
    progress, a write-ahead copy of each batch first."""
    collection_id = plan.collection_id
    names = tuple(changed_names(changes))
    clearing = frozenset(names) if journal.clearing else frozenset()
    total = await deps.records.estimated_count(collection_id, timeout_ms=1000) or 0
    done = 0
    async for batch in deps.records.stream_values_after(collection_id, names,
                                                        after_id=journal.progress.get(collection_id, ""),
                                                        batch_size=REWRITE_BATCH):
        for part in _by_size(batch):
            await deps.journal.stage(journal.token, RewriteBatch(collection_id, names, tuple(part)))
            updates, refused = await asyncio.to_thread(
                convert_batch, changes, [(record_id, values) for record_id, _, values in part], clearing)
            if refused:
                log.warning("collection %s: %d values %s", plan.name, len(refused),
                            "cleared: they do not convert" if clearing else "kept: they no longer convert")
            try:
                await deps.records.set_field_values(collection_id, updates)
            except AlreadyExists as exc:  # a value written meanwhile collides; the others are written
                log.warning("collection %s: a converted value collides with another (%s); kept as stored",
                            plan.name, exc.detail)
            await deps.journal.advance(journal.token, collection_id, part[-1][0])
            done += len(part)
            progress(f"rewrite {plan.name}", done, max(total, done))


def _by_size(batch: list[tuple[str, Any, dict[str, Any]]]) -> list[list[tuple[str, Any, dict[str, Any]]]]:
    """`batch` cut into parts whose values take at most REWRITE_BATCH_BYTES as JSON (at least one record each)."""
    parts: list[list[tuple[str, Any, dict[str, Any]]]] = [[]]
    size = 0
    for item in batch:
        item_size = len(json.dumps(item[2], default=str))
        if parts[-1] and size + item_size > REWRITE_BATCH_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(item)
        size += item_size
    return [part for part in parts if part]


def journal_of(token: str, started: Any, plans: Sequence[CollectionPlan], *, clearing: bool,
               changes: Sequence[dict[str, Any]], user_id: str | None) -> SchemaJournal:
    """The journal of a new apply of `plans` (APPLYING)."""
    before: list[Collection] = [p.before for p in plans if p.before is not None]
    after: list[Collection] = [p.after for p in plans if p.after is not None]
    renames = tuple((p.collection_id, old, new) for p in plans for new, old in sorted(p.renames.items()))
    return SchemaJournal(token=token, started=started, state=APPLYING, before=tuple(before), after=tuple(after),
                         renames=renames, clearing=clearing, changes=tuple(changes), user_id=user_id)
