"""Publishing: a working copy becomes the published copy, and back (decisions.md, Drafts, versions and
scheduled publishing; docs/concepts/drafts.md).

A publish checks the working copy as a create would (`required`, types, relation targets, `unique`
against the other published copies), then, in one event unit that is a transaction where the server
has them (`WorkingCopies.atomic`):
1. claims the working state: its status becomes `published` only if its revision is still the one
   read (`WorkingCopyRepository.set_state`), so of two replicas publishing the same record at once
   exactly one changes anything; the other re-reads and answers the record as the winner left it;
2. stores the published copy whole (`RecordRepository.put`): a first publish is a `create` event, a
   later one an `update` event (with the copy it replaced as `previous`), through the record writer's
   one seam (`emit_created` / `emit_updated`: the record's version, then the event that realtime,
   webhooks and the read cache follow);
3. calls `on_published`, where anything else that must happen at a publish hooks in (`add_hook`).
Without transactions a failed step 2 undoes step 1 itself. An unpublish claims the state the same way
(`draft`), deletes the published copy and emits `delete`.

`publish_in` runs the three steps inside a unit the caller opened, and `publish_all_in` runs them for
many records of a collection with a few bulk writes, so a release publishes many records all or nothing
(`publish_many`: bulk writes in one transaction, item by item to name the item that fails); without
transactions, the items written before the one that failed are put back (their published copy and
working state as they were; the unit drops the events).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from cms.errors import AlreadyExists, BadRequest, CmsError, NotFound, ValidationFailed, WriteConflict
from cms.models import CHANGED, DRAFT, PUBLISHED, Collection, DraftState, Principal, Record
from cms.services import access as actions
from cms.services.access import Access, check
from cms.services.content.drafts import MAX_PUBLISH_ATTEMPTS, WorkingCopies, backoff, kept_changing, require_drafts
from cms.services.content.locales import ALL, localization, unique_writes
from cms.services.content.unique_clash import clash_answer
from cms.services.representation import records as represent
from cms.store.transactions import current_session

Undo = Callable[[], Awaitable[None]]
"""A step that puts back one write of a publish made without a transaction (`publish_in`'s `undo`)."""
Inside = Callable[[], Awaitable[None]]
"""What `publish_many` runs after its writes, inside their unit (a release's own change)."""
PublishHook = Callable[[Collection, Record, "str | None"], Awaitable[None]]
"""Called with (collection, the published copy just stored, who published it: a user id or None for the
system) inside the publish's unit (`Publisher.on_published`)."""


class LostRace(Exception):
    """Raised inside a publish's unit when another writer changed the working state since it was read:
    the unit drops its events (and its transaction aborts); the publish reads again."""


class PublishFailed(Exception):
    """Item `index` (from 0) of a `publish_many` failed with `error`, the CmsError it would have got
    alone; nothing of the call was published. `race`: it lost a race with a concurrent write (its
    working state changed meanwhile, or a transaction's write conflict): trying again may succeed."""

    def __init__(self, index: int, error: CmsError, *, race: bool = False) -> None:
        super().__init__(f"item {index} failed: {error.detail}")
        self.index = index
        self.error = error
        self.race = race


def actor(principal: Principal | None) -> str | None:
    """Who a change is by: the acting user's id, or None (the system: a scheduled publish)."""
    return None if principal is None else principal.user_id


class Publisher:
    """Publish and unpublish working copies (see the module docstring) on `copies`' stores."""

    def __init__(self, copies: WorkingCopies) -> None:
        self._copies = copies
        self._hooks: list[PublishHook] = []

    def add_hook(self, hook: PublishHook) -> None:
        """Call `hook` from `on_published` on every publish from now on (versions)."""
        self._hooks.append(hook)

    async def on_published(self, collection: Collection, record: Record, by: str | None) -> None:
        """The seam "a record's published data changed": `record` (its published copy, `record.data`
        the values readers now see) of `collection` was just published by `by` (a user id; None: the
        system). Runs inside the publish's unit, in its transaction where there is one, so a hook's
        writes (a version) commit or abort with the publish; a hook that raises aborts the publish.
        Every publish passes here: single, scheduled and `publish_many` (releases)."""
        for hook in self._hooks:
            await hook(collection, record, by)

    async def publish(self, principal: Principal | None, collection_name: str, record_id: str, *,
                      locale: str | None = None) -> Record:
        """Make the working copy of `record_id` the published copy, under the view and update rules
        on the working copy; answers the working copy, now `published`. A record with nothing
        pending (`published`) is answered as it is, nothing changed (also the loser of a race with
        another publish of the same record). `locale` (decisions.md, Localized fields): publish only
        the working copy's values of that locale of localized fields, everything else keeping its
        published value (the record stays `changed` while other changes are pending); None or `*`:
        everything. Raises NotFound (collection, record or hidden), BadRequest (no drafts; a locale not
        configured; kept changing), Unauthorized / Forbidden, ValidationFailed (what would be published
        does not validate: `required`, types, relations, `unique`; nothing changes)."""
        collection = await self._copies.catalog.by_name(collection_name)
        require_drafts(collection)
        view, update = check(principal, collection, actions.VIEW), check(principal, collection, actions.UPDATE)
        code = None if locale in (None, ALL) else localization(collection, locale).write_locale
        for attempt in range(MAX_PUBLISH_ATTEMPTS):
            working = await self._copies.editable(view, update, record_id)
            if working.state is not None and working.state.status == PUBLISHED:
                return await self._unscheduled(collection, working)
            target = working if code is None else await self.one_locale(collection, working, code)
            if target is None:
                return await self._unscheduled(collection, working)  # nothing of that locale is pending
            await self.check(collection, target, update)
            try:
                async with self._copies.atomic():
                    published = await self.publish_in(collection, working, by=actor(principal), ends_schedule=True,
                                                      data=None if target is working else target.data)
            except (LostRace, WriteConflict):
                await backoff(attempt)
            except AlreadyExists as exc:  # a concurrent write took a unique value first
                raise await self._unique_answer(collection, working, update, exc) from None
            else:
                if working.state is not None and working.state.scheduled_at is not None:
                    await self._copies.schedules.cancel(collection.id, record_id, working.state.scheduled_at)
                return published
        raise kept_changing()

    async def _unscheduled(self, collection: Collection, working: Record) -> Record:
        """`working` with its pending schedule, if any, ended (`scheduled_at` null, the schedule dropped):
        a publish now with nothing to publish ends it too, as one that publishes does."""
        state = working.state
        if state is None or state.scheduled_at is None:
            return working
        await self._copies.working.end_schedule(collection.id, working.id, state.scheduled_at, state.schedule_error)
        await self._copies.schedules.cancel(collection.id, working.id, state.scheduled_at)
        return replace(working, state=replace(state, scheduled_at=None))

    async def one_locale(self, collection: Collection, working: Record, code: str) -> Record | None:
        """What a publish of `working`'s `code` values publishes: the published copy's data (none for a
        record never published) with each localized field's `code` value taken from the working copy
        (removed where the working copy has none). None when that is the published data already."""
        published = await self._copies.records.get(collection.id, working.id)
        before = dict(published.data) if published is not None else {}
        data = dict(before)
        for name in collection.localized_fields:
            values = dict(data.get(name) or {})
            pending = working.data.get(name)
            if isinstance(pending, dict) and pending.get(code) is not None:
                values[code] = pending[code]
            else:
                values.pop(code, None)
            if values:
                data[name] = values
            else:
                data.pop(name, None)
        return None if published is not None and data == before else replace(working, data=data)

    async def check(self, collection: Collection, working: Record, rule: Access | None) -> None:
        """Everything a publish of `working` checks before it writes: the values as a create checks
        them (`required` included), the relation targets among the published copies, and `unique`
        fields against the other published copies. `rule`: the caller's update rule (None: the
        system), which decides whether a unique clash names the field (`unique_clash.clash_answer`).
        Raises ValidationFailed (422, `errors` by field) or the rule's refusal."""
        shown = represent.record_json(replace(working, state=None))
        data = {k: v for k, v in shown.items() if k not in represent.SYSTEM_KEYS}
        writer = self._copies.writer
        record = writer.new_record(collection, data, record_id=working.id, locale=ALL)  # localized: objects
        await writer.check_relations(collection, record.data, working.id)  # file fields: this record's files
        for path, value in unique_writes(collection, record.data):  # a localized field: per locale
            if value is None or value == []:
                continue
            if await self._copies.records.count_holders(collection.id, path, value, [working.id]):
                clash = AlreadyExists(f"A record with this {path} already exists",
                                      errors={path: ["Value must be unique"]})
                raise await self._unique_answer(collection, working, rule, clash)

    async def _unique_answer(self, collection: Collection, working: Record, rule: Access | None,
                             clash: AlreadyExists) -> CmsError:
        """422 naming the field for a caller who may see a record holding the value, else the rule's
        refusal (the one rule of `unique_clash.clash_answer`)."""
        answer = await clash_answer(self._copies.records, collection, working, rule, clash)
        if isinstance(answer, AlreadyExists):
            return ValidationFailed("The working copy does not validate", errors=answer.errors)
        return answer

    async def publish_in(self, collection: Collection, working: Record, *, by: str | None,
                         scheduled_at: datetime | None = None, data: dict[str, Any] | None = None,
                         undo: list[Undo] | None = None, ends_schedule: bool = False) -> Record:
        """The writes of a publish of `working` (checked by `check`), inside a unit the caller opened
        (`WorkingCopies.atomic`); returns the working copy, now `published` (`changed` when `data`, what
        is published instead of the working copy's values, differs from them: one locale's publish).
        `scheduled_at`: the time of the scheduled publish this is, which the working copy must still show
        (then cleared). `ends_schedule`: a publish now (`publish`), which ends a pending schedule in the
        same unit (`scheduled_at` null; the schedule, no longer shown, is then dropped unrun). `undo`:
        without a transaction, where to add what puts the working state and the published copy back as
        they were (`publish_many` runs them when a later item fails). Raises
        LostRace (the working state, or its schedule, changed since it was read) or AlreadyExists (a
        unique field, taken meanwhile)."""
        copies, now = self._copies, self._copies.writer.clock()
        state = working.state or DraftState(DRAFT)
        values = working.data if data is None else data
        status = PUBLISHED if values == working.data else CHANGED
        claimed = await copies.working.set_state(collection.id, working.id, DraftState(status, now),
                                                 revision=state.revision, updated=now, scheduled_at=scheduled_at,
                                                 end_schedule=ends_schedule)
        if claimed is None:
            raise LostRace
        published = Record(id=working.id, created=working.created, updated=now, data=values,
                           state=DraftState(PUBLISHED, now))
        try:
            before = await copies.records.put(collection.id, published)
        except AlreadyExists:
            if current_session() is None and claimed.state is not None:  # no transaction to abort: undo the claim
                await copies.working.set_state(collection.id, working.id, state, revision=claimed.state.revision,
                                               updated=working.updated)
                if ends_schedule and state.scheduled_at is not None:  # the schedule it ended stands again
                    await copies.working.set_schedule(collection.id, working.id, state.scheduled_at,
                                                      state.schedule_error)
            raise
        if undo is not None and current_session() is None and claimed.state is not None:
            undo.append(functools.partial(self._unpublish_claim, collection, working, claimed.state.revision, before))
        if before is None:
            await copies.writer.emit_created(collection, [published])
        else:
            await copies.writer.emit_updated(collection, [published], [before])
        await self.on_published(collection, published, by)
        return claimed

    async def _unpublish_claim(self, collection: Collection, working: Record, revision: int,
                               before: Record | None) -> None:
        """Put back what `publish_in` changed without a transaction: the published copy it replaced
        (`before`; None: none, so the new one goes) and the working state it claimed (still at
        `revision`, unless another writer changed it since)."""
        copies = self._copies
        if before is None:
            await copies.records.delete(collection.id, working.id)
        else:
            await copies.records.put(collection.id, before)
        await copies.working.set_state(collection.id, working.id, working.state or DraftState(DRAFT),
                                       revision=revision, updated=working.updated)

    async def publish_all_in(self, collection: Collection, workings: Sequence[Record], *, by: str | None,
                             scheduled_at: Sequence[datetime | None], ends_schedules: bool = False) -> list[Record]:
        """`publish_in` for many working copies of `collection` (checked by `check`) with a few bulk
        writes, inside the caller's transaction (raises RuntimeError outside one, as a partial batch
        could not be undone): the published copies they replace read at once, every working state
        claimed in one bulk write, every published copy stored in another, one emit for the lot.
        `scheduled_at[i]`: as `publish_in`'s, for `workings[i]`; `ends_schedules`: every working copy's
        pending schedule ends (`scheduled_at` null: a release published now; the schedule, no longer shown,
        is dropped unrun when it comes due). Returns the published copies. Raises
        LostRace (any working state, or its schedule, changed since it was read: the caller's
        transaction aborts) or AlreadyExists (a unique field)."""
        if current_session() is None:
            raise RuntimeError("publish_all_in runs inside the caller's transaction")
        copies, now = self._copies, self._copies.writer.clock()
        before = await copies.records.find_by_ids(collection.id, [w.id for w in workings])
        claims = [(w.id, (w.state or DraftState(DRAFT)).revision, at)
                  for w, at in zip(workings, scheduled_at, strict=True)]
        claimed = await copies.working.set_states(collection.id, claims, DraftState(PUBLISHED, now), updated=now,
                                                  end_schedules=ends_schedules)
        if claimed < len(claims):
            raise LostRace
        published = [Record(id=w.id, created=w.created, updated=now, data=w.data, state=DraftState(PUBLISHED, now))
                     for w in workings]
        await copies.records.put_all(collection.id, published)
        known = {r.id for r in before}
        await copies.writer.emit_created(collection, [p for p in published if p.id not in known])
        await copies.writer.emit_updated(collection, [p for p in published if p.id in known], before)
        for record in published:
            await self.on_published(collection, record, by)
        return published

    async def _write_bulk(self, items: Sequence[tuple[Collection, str]], workings: Sequence[Record], *,
                          by: str | None, inside: Inside | None) -> list[Record]:
        """The writes of `publish_many` in one transaction, a few bulk writes per collection
        (`publish_all_in`), then `inside`. Raises what those raise (the transaction aborted: nothing
        written), without telling which item failed."""
        pending: dict[str, tuple[Collection, list[int]]] = {}
        for index, ((collection, _), working) in enumerate(zip(items, workings, strict=True)):
            if working.state is None or working.state.status != PUBLISHED:
                pending.setdefault(collection.id, (collection, []))[1].append(index)
        results = list(workings)
        async with self._copies.atomic():
            for collection, indexes in pending.values():
                published = await self.publish_all_in(collection, [workings[i] for i in indexes], by=by,
                                                      scheduled_at=[None] * len(indexes), ends_schedules=True)
                for index, record in zip(indexes, published, strict=True):
                    results[index] = record
            if inside is not None:
                await inside()
        return results

    async def _write_many(self, items: Sequence[tuple[Collection, str]], workings: Sequence[Record],
                          results: list[Record], *, by: str | None, inside: Inside | None) -> list[Record]:
        """The writes of `publish_many` item by item (`publish_in`), then `inside`, in one unit,
        appending each item's working copy to `results` as it is written (so its length names the item
        that failed); without a transaction, what was written is put back when one fails."""
        undo: list[Undo] = []  # without a transaction: how to put back the items written so far
        try:
            async with self._copies.atomic():
                for (collection, _), working in zip(items, workings, strict=True):
                    pending = working.state is None or working.state.status != PUBLISHED
                    results.append(await self.publish_in(collection, working, by=by, undo=undo, ends_schedule=True)
                                   if pending else working)
                if inside is not None:
                    await inside()
        except BaseException:
            for step in reversed(undo):  # the unit dropped the events; nothing published stays
                await step()
            raise
        return results

    async def publish_many(self, items: Sequence[tuple[Collection, str]], *, by: str | None,
                           inside: Inside | None = None) -> list[Record]:
        """Publish the working copy of every (collection, record id) of `items`, all or nothing, in one
        transaction (a release); items with nothing pending stay as they are. Checks every item
        first, then writes: with transactions a few bulk writes per collection (`publish_all_in`), and
        when that fails, item by item in a new transaction to name the item that fails; without
        transactions item by item, an item that fails putting back the items written before it
        (`publish_in`'s `undo`). `inside`: called after the writes, in the same unit (a release marks
        itself published there; raising aborts everything). Returns the records, in order (the
        published copies of those published). Raises PublishFailed(index, error) for the first item
        that fails: a collection without drafts (BadRequest), a missing record (NotFound), a working
        copy that does not validate (ValidationFailed) or one that changed or clashed meanwhile
        (BadRequest, ValidationFailed; `race`); nothing is published then. Another error (a hook's,
        `inside`'s) publishes nothing too, and propagates."""
        workings: list[Record] = []
        for index, (collection, record_id) in enumerate(items):
            try:
                require_drafts(collection)
                working = await self._copies.current(collection, record_id)
                if working is None:
                    raise NotFound("Record not found")
                if working.state is None or working.state.status != PUBLISHED:
                    await self.check(collection, working, None)
            except CmsError as exc:
                raise PublishFailed(index, exc) from None
            workings.append(working)
        if self._copies.transactional:
            try:
                return await self._write_bulk(items, workings, by=by, inside=inside)
            except (LostRace, AlreadyExists, WriteConflict):
                pass  # nothing was written: again item by item, which names the item that fails
        results: list[Record] = []  # its length is the index of the item being written
        try:
            return await self._write_many(items, workings, results, by=by, inside=inside)
        except LostRace:
            raise PublishFailed(len(results), kept_changing(), race=True) from None
        except AlreadyExists as exc:
            raise PublishFailed(len(results), ValidationFailed("The working copy does not validate",
                                                               errors=exc.errors)) from None
        except WriteConflict as exc:
            raise PublishFailed(len(results), exc, race=True) from None

    async def unpublish(self, principal: Principal | None, collection_name: str, record_id: str) -> Record:
        """Turn a published record back into a `draft`, its working copy kept (a `changed` record keeps
        its pending values), under the view and update rules on the working copy; the published copy
        goes (`delete` event). Answers the working copy. Raises NotFound, Unauthorized / Forbidden,
        BadRequest (no drafts; a `draft` already, unless another request just unpublished it)."""
        collection = await self._copies.catalog.by_name(collection_name)
        require_drafts(collection)
        view, update = check(principal, collection, actions.VIEW), check(principal, collection, actions.UPDATE)
        copies, lost = self._copies, False
        for attempt in range(MAX_PUBLISH_ATTEMPTS):
            working = await copies.editable(view, update, record_id)
            state = working.state or DraftState(DRAFT)
            if state.status == DRAFT:
                if lost:
                    return working
                raise BadRequest("This record is not published")
            try:
                async with copies.atomic():
                    claimed = await copies.working.set_state(collection.id, record_id, DraftState(DRAFT),
                                                             revision=state.revision)
                    if claimed is None:
                        raise LostRace
                    gone = await copies.records.delete(collection.id, record_id)
                    if gone is not None:  # readers' delete; the record and its versions stay
                        await copies.writer.emit_deleted(collection, [record_id], [gone], forget=False)
                    return claimed
            except (LostRace, WriteConflict):
                lost = True
                await backoff(attempt)
        raise kept_changing()
