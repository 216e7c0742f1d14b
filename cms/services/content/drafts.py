"""Working copies of the records of collections with drafts: the editors' writes (decisions.md, Drafts,
versions and scheduled publishing; docs/concepts/drafts.md).

A collection with drafts keeps two things per record: its published copy in the records' store (what
readers see: lists, views, expand, search, CSV export, realtime, webhooks, the read cache) and its
working state in the working copies' store (`store.working_copies`): the working copy with `status`,
`published_at`, `scheduled_at`, `schedule_error` and a revision. `WorkingCopies` writes the working
state: a create makes a `draft`, an update changes the working copy (a `published` record becomes
`changed`), checking types and lengths only; neither emits a record event, so readers, their caches
and subscribers see nothing of it. `discard` drops a pending working copy; `delete` removes both copies
(a `delete` event when there was a published one). Once either has dropped a working copy, the hooks of
`on_dropped` run (the files only it held go: `FileService.on_working_copy_dropped`), as after an update
that takes files out of a working copy that the published copy does not hold. Publishing is
publishing.py, scheduling scheduling.py.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any

from cms.errors import BadRequest, NotFound
from cms.models import CHANGED, DRAFT, PUBLISHED, Collection, DraftState, Principal, Record
from cms.services import access as actions
from cms.services.access import Access, check
from cms.services.caching.catalog import Catalog
from cms.services.content.fields import held_values
from cms.services.content.file_fields import file_fields
from cms.services.content.record_writer import RecordWriter
from cms.services.content.relations import RelationRelease
from cms.services.delivery.events import EventBus
from cms.store.records import RecordRepository
from cms.store.schedules import ScheduleRepository
from cms.store.transactions import Transactions, current_session
from cms.store.working_copies import WorkingCopyRepository

log = logging.getLogger("cms.drafts")



@dataclass(frozen=True)
class DroppedCopy:
    """A working copy of record `record_id` dropped or edited, and committed: its data before (`data`)
    and the data whose files stay (`kept`: the published copy's, with an edit's new values too), or None
    for a record never published that was deleted (every file of it goes)."""

    record_id: str
    data: dict[str, Any]
    kept: dict[str, Any] | None


DroppedHook = Callable[[Collection, Sequence[DroppedCopy]], Awaitable[None]]
"""Called with (collection, the working copies dropped) once committed (`WorkingCopies.on_dropped`)."""

MAX_EDIT_ATTEMPTS = 3
"""Tries of a change of the working state that finds it changed since it was read (its revision)."""
MAX_PUBLISH_ATTEMPTS = 6
"""Tries of a publish or unpublish that lost a race (its claim, or its transaction's write conflict); the
loser waits a little before it reads again (`backoff`), so it reads what the winner committed."""


async def backoff(attempt: int) -> None:
    """Wait before try `attempt` + 1 of a publish that lost a race: up to 20 ms times 2**attempt (at
    most 0.5 s), at random, so two losers do not meet again."""
    await asyncio.sleep(random.uniform(0, min(0.02 * 2 ** attempt, 0.5)))


def require_drafts(collection: Collection) -> None:
    """Raise BadRequest (400) unless `collection` has drafts (publish, unpublish, schedules)."""
    if not collection.drafts:
        raise BadRequest(f"Collection '{collection.name}' has no drafts: its records are published as they are "
                         "written")


def kept_changing() -> BadRequest:
    """The answer to a change that kept finding the working state changed under it."""
    return BadRequest("The record kept changing while your change was made; retry")


class WorkingCopies:
    """The working state of records of collections with drafts (see the module docstring), on the
    records' store (`records`: published copies), the working copies' store (`working`) and the
    pending schedules (`schedules`); `writer` validates values and emits record events (one writer,
    record_writer.py)."""

    def __init__(self, catalog: Catalog, records: RecordRepository, working: WorkingCopyRepository,
                 writer: RecordWriter, schedules: ScheduleRepository, *, events: EventBus,
                 transactions: Transactions | None = None) -> None:
        """`events` and `transactions`: the bus and the transactions of `atomic` (None: none)."""
        self.catalog = catalog
        self.records = records
        self.working = working
        self.writer = writer
        self.schedules = schedules
        self._events = events
        self._transactions = transactions
        self._dropped_hooks: list[DroppedHook] = []

    def on_dropped(self, hook: DroppedHook) -> None:
        """Call `hook` after every commit that drops a working copy from now on: a discard (with the
        published copy's data), a delete of a record never published (with None) and an edit that takes
        files out (with what is kept: the working copy's and the published copy's files). A hook that raises
        is logged; the change stays done (files)."""
        self._dropped_hooks.append(hook)

    async def dropped(self, collection: Collection, dropped: Sequence[DroppedCopy]) -> None:
        """Run the `on_dropped` hooks for the working copies `dropped` of `collection` (gone or edited,
        and committed)."""
        for hook in self._dropped_hooks if dropped else ():
            try:
                await hook(collection, dropped)
            except Exception:
                log.exception("clean-up after %d working copies of %s were dropped failed", len(dropped),
                              collection.name)

    @property
    def transactional(self) -> bool:
        """Whether `atomic` opens a transaction (the server has them)."""
        return self._transactions is not None and self._transactions.enabled

    def atomic(self) -> AbstractAsyncContextManager[None]:
        """An event unit in one transaction where the server has them, whatever the outbox wants: a
        publish changes the working state and the published copy together (publishing.py)."""
        return self._events.unit(self._transactions)

    async def current(self, collection: Collection, record_id: str) -> Record | None:
        """The working copy of record `record_id`, or None when the record does not exist (or has none in
        a collection whose drafts are off). A published record without one (written while its
        collection turned drafts on) gets one first."""
        working = await self.working.get(collection.id, record_id)
        if working is not None or not collection.drafts:  # drafts off: no working copy is made any more
            return working
        published = await self.records.get(collection.id, record_id)
        if published is None:
            return None
        state = published.state or DraftState(PUBLISHED, published.updated)
        await self.working.insert_missing(collection.id, [replace(published, state=state)])
        return await self.working.get(collection.id, record_id)

    async def editable(self, view: Access, change: Access | None, record_id: str) -> Record:
        """The working copy of `record_id`, once the view rule `view` shows it and `change` (the update
        or delete rule, if any) permits it, both on the working copy. Raises `refusal()` of a rule that
        refuses outright, `view.hidden()` (missing or hidden) or `change.refusal()`."""
        view.require()
        if change is not None:
            change.require()
        record = await self.current(view.collection, record_id)
        if record is None or not view.allows(record):
            raise view.hidden()
        if change is not None:
            change.permit(record)
        return record

    async def create(self, collection: Collection, data: Any, *, epoch: str | None, create: Access,
                     record_id: str | None = None, locale: str | None = None) -> Record:
        """A new `draft` of `collection` (looked up under the catalog epoch `epoch`) from `data`: types
        and lengths checked (`required`, `unique` and relations wait for the publish), the create rule
        on the record as it would be stored; localized values are `locale`'s (as a create's). No record
        event. Raises ValidationFailed, the rule's refusal, AlreadyExists (`record_id` taken) or NotFound
        (the collection was deleted meanwhile)."""
        record = self.writer.new_record(collection, data, record_id=record_id, locale=locale, working=True)
        create.permit(record)
        record = replace(record, state=DraftState(DRAFT))
        await self.working.insert_working(collection.id, record)
        if not await self.catalog.exists(collection.id, since_epoch=epoch):
            await self.working.drop(collection.id)
            raise NotFound(f"Collection '{collection.name}' not found")
        return record

    async def update(self, principal: Principal | None, collection: Collection, record_id: str, data: Any, *,
                     locale: str | None = None) -> Record:
        """Change the fields of `data` (null clears one) in the working copy of `record_id`, under the
        view and update rules on the working copy: a `published` record becomes `changed`, the
        published copy stays as it is. Types and lengths checked only (localized values are `locale`'s,
        as an update's); no record event; the files it took out go (`files_left`). Raises
        ValidationFailed, NotFound / Unauthorized / Forbidden (the rules), BadRequest (kept changing)."""
        view = check(principal, collection, actions.VIEW)
        update = check(principal, collection, actions.UPDATE, data if isinstance(data, dict) else None)
        update.require()
        set_values, unset = self.writer.changes(collection, data, locale, working=True)
        for _ in range(MAX_EDIT_ATTEMPTS):
            working = await self.editable(view, update, record_id)
            state = working.state or DraftState(DRAFT)
            status = CHANGED if state.status == PUBLISHED else state.status
            changed = await self.working.edit(collection.id, record_id, {**set_values, "updated": self.writer.clock()},
                                              unset, status=status, revision=state.revision)
            if changed is not None:
                await self.files_left(collection, [working], [changed])
                return changed
        raise kept_changing()

    async def files_left(self, collection: Collection, before: Sequence[Record],
                         after: Sequence[Record] | None = None) -> None:
        """After edits of working copies of `collection` (`before`: as they were; `after`: as they are
        now, read here when None): the files each held and no longer holds, unless its published copy
        holds them, go (`on_dropped`). Nothing inside a caller's transaction (a batch may still abort)."""
        specs = file_fields(collection)
        names = [spec.name for spec in specs]
        if not names or not before or not self._dropped_hooks or current_session() is not None:
            return
        if after is None:
            after = await self.working.find_by_ids(collection.id, [r.id for r in before])
        now = {r.id: r.data for r in after}
        changed = [r for r in before if any(r.data.get(n) != now.get(r.id, {}).get(n) for n in names)]
        if not changed:
            return
        shown = {r.id: r.data for r in await self.records.find_by_ids(collection.id, [r.id for r in changed])}

        def kept(record_id: str) -> dict[str, Any]:  # the files of the working copy now and of the published copy
            return {s.name: [*held_values(s, now.get(record_id, {}).get(s.name)),
                             *held_values(s, shown.get(record_id, {}).get(s.name))] for s in specs}

        await self.dropped(collection, [DroppedCopy(r.id, r.data, kept(r.id)) for r in changed])

    async def discard(self, principal: Principal | None, collection_name: str, record_id: str) -> Record:
        """Drop the pending working copy of a `changed` record (update rule): it becomes its published
        copy again (`published`), its schedule kept; also in a collection whose drafts were turned off.
        The files only the working copy held are deleted once that is done (`on_dropped`).
        Raises NotFound (collection; record; none pending: `published`, or a `draft` that has nothing
        else), Unauthorized / Forbidden, BadRequest (kept changing)."""
        collection = await self.catalog.by_name(collection_name)
        view, update = check(principal, collection, actions.VIEW), check(principal, collection, actions.UPDATE)
        for _ in range(MAX_EDIT_ATTEMPTS):
            working = await self.editable(view, update, record_id)
            published = await self.records.get(collection.id, record_id)
            state = working.state or DraftState(DRAFT)
            if state.status != CHANGED or published is None:
                raise NotFound("This record has no working copy beside its published copy")
            kept = replace(published, state=replace(state, status=PUBLISHED))
            restored = await self.working.replace_values(collection.id, kept, revision=state.revision)
            if restored is not None:
                await self.dropped(collection, [DroppedCopy(record_id, working.data, published.data)])
                return restored
        raise kept_changing()

    async def delete(self, view: Access, delete: Access, record_id: str, relations: RelationRelease) -> None:
        """Delete record `record_id` of a collection with drafts, both copies, under the view and delete
        rules on its working copy, releasing the relations that point to it (`relations`); a `delete`
        event only when it had a published copy (its files go with it), else the `on_dropped` hooks take
        them; its schedule goes too. Raises what `editable` raises."""
        collection = view.collection
        working = await self.editable(view, delete, record_id)
        plan = await relations.plan_release(collection, [record_id])
        async with await self.writer.unit(collection):
            await self.working.delete(collection.id, record_id)
            gone = await self.records.delete(collection.id, record_id)
            if gone is not None:
                await self.writer.emit_deleted(collection, [record_id], [gone])
            await relations.release(plan)
        await self.schedules.cancel(collection.id, record_id)
        if gone is None and current_session() is None:  # never published: no `delete` event takes its files
            await self.dropped(collection, [DroppedCopy(record_id, working.data, None)])
