"""Bulk update and bulk delete on a collection with drafts (decisions.md, Drafts, versions and scheduled
publishing; docs/concepts/drafts.md, Bulk writes and CSV import; issue 39).

They do what the single writes do, for many records at once, all or nothing on the checks:
- a bulk update writes the working copies (types and lengths checked, `required`, `unique` and relation
  targets at publish; a `published` record becomes `changed`), no record event, readers unchanged;
- a bulk delete deletes both copies of every record: a `delete` event for each one that had a published
  copy, the relations pointing to them released, their schedules cancelled, and the files of those never
  published deleted (`WorkingCopies.dropped`; a `delete` event takes the others').
The view rule and the update (delete) rule are checked on every working copy before anything is written,
as the records' bulk changes check them on the records (`RecordService._permitted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cms.models import CHANGED, DRAFT, PUBLISHED, Collection, DraftState, Principal, Record
from cms.services import access as actions
from cms.services.access import Access, check
from cms.services.content.bulk_checks import bulk_refused, permit_all
from cms.services.content.drafts import MAX_EDIT_ATTEMPTS, DroppedCopy, WorkingCopies, kept_changing
from cms.services.content.relations import RelationRelease
from cms.store.transactions import current_session


class DraftBulk:
    """Bulk changes of working copies (see the module docstring) on `copies`' stores; `relations`
    releases the relations pointing to deleted records."""

    def __init__(self, copies: WorkingCopies, relations: RelationRelease) -> None:
        self._copies = copies
        self._relations = relations

    async def update(self, principal: Principal | None, collection: Collection, record_ids: Sequence[str],
                     data: Any, *, locale: str | None = None) -> int:
        """Apply the same partial `data` (localized values `locale`'s) to the working copy of every
        record of `record_ids` (checked ids), as `WorkingCopies.update` does to one. Returns how many
        were written (a record deleted meanwhile is not counted). Raises ValidationFailed (bad `data`;
        `errors.<record id>` for missing records), Unauthorized / Forbidden (`_editable_all`), BadRequest
        (a record kept changing)."""
        copies = self._copies
        view = check(principal, collection, actions.VIEW)
        update = check(principal, collection, actions.UPDATE, data if isinstance(data, dict) else None)
        set_values, unset = copies.writer.changes(collection, data, locale, working=True)
        found = await self._editable_all(view, update, record_ids, "change")
        missing = {i: ["Record not found."] for i in record_ids if i not in found}
        if missing:
            raise bulk_refused("updated", missing, len(record_ids))
        change = {**set_values, "updated": copies.writer.clock()}
        edits = [(i, _state(found[i]).revision, _edited_status(found[i])) for i in record_ids]
        if await copies.working.edit_many(collection.id, edits, change, unset) == len(edits):
            await copies.files_left(collection, list(found.values()))
            return len(edits)
        # some changed (or went) meanwhile: each again, read afresh and its rules checked again (an edit
        # made already is made again)
        written = 0
        for record_id in record_ids:
            working: Record | None = await copies.current(collection, record_id)
            for _ in range(MAX_EDIT_ATTEMPTS):
                if working is None or not view.allows(working):  # deleted (or hidden) meanwhile
                    break
                update.permit(working)
                if await copies.working.edit(collection.id, record_id, change, unset, status=_edited_status(working),
                                             revision=_state(working).revision) is not None:
                    written += 1
                    break
                working = await copies.current(collection, record_id)  # changed meanwhile: again
            else:
                raise kept_changing()
        await copies.files_left(collection, list(found.values()))
        return written

    async def delete(self, principal: Principal | None, collection: Collection, record_ids: Sequence[str]) -> int:
        """Delete every record of `record_ids` (checked ids), both copies, in one unit: one `delete` event
        per record that had a published copy. Returns how many working copies were deleted. Raises
        ValidationFailed (`errors.<record id>` for missing records), Unauthorized / Forbidden, BadRequest
        (a relation release refused: `RelationRelease.plan_release`)."""
        copies = self._copies
        view, delete = check(principal, collection, actions.VIEW), check(principal, collection, actions.DELETE)
        found = await self._editable_all(view, delete, record_ids, "delete")
        missing = {i: ["Record not found."] for i in record_ids if i not in found}
        if missing:
            raise bulk_refused("deleted", missing, len(record_ids))
        plan = await self._relations.plan_release(collection, record_ids)
        published = await copies.records.find_by_ids(collection.id, record_ids)
        async with await copies.writer.unit(collection):
            deleted = await copies.working.delete_many(collection.id, record_ids)
            await copies.records.delete_many(collection.id, record_ids)
            await copies.writer.emit_deleted(collection, [r.id for r in published], published)
            await self._relations.release(plan)
        await copies.schedules.cancel_many(collection.id, record_ids)
        if current_session() is None:  # committed: the drafts never published take their files
            shown = {r.id for r in published}
            await copies.dropped(collection, [DroppedCopy(i, found[i].data, None)
                                              for i in record_ids if i not in shown])
        return deleted

    async def _editable_all(self, view: Access, change: Access, record_ids: Sequence[str],
                            verb: str) -> dict[str, Record]:
        """The working copies of `record_ids` that exist, by id (a published record without one gets
        one first, as `WorkingCopies.current`), once the view rule shows and `change` permits every one.
        When either rule depends on the record, a missing id counts as refused, so the answer never
        tells it from a hidden one. Raises the `refusal()` of a rule that refuses outright, Forbidden
        naming every refused id (`refused_ids`) or the refusal of a ruled field."""
        view.require()
        change.require()
        collection, copies = view.collection, self._copies
        found = {r.id: r for r in await copies.working.find_by_ids(collection.id, record_ids)}
        lacking = [i for i in record_ids if i not in found]
        if lacking:  # published before drafts were turned on: their working copies are made now
            published = await copies.records.find_by_ids(collection.id, lacking)
            await copies.working.insert_missing(collection.id, [
                replace(r, state=r.state or DraftState(PUBLISHED, r.updated)) for r in published])
            found.update((r.id, r) for r in await copies.working.find_by_ids(collection.id, lacking))
        return permit_all(view, change, record_ids, found, verb)


def _state(working: Record) -> DraftState:
    return working.state or DraftState(DRAFT)


def _edited_status(working: Record) -> str:
    """The status of `working` once edited: a `published` record becomes `changed`."""
    status = _state(working).status
    return CHANGED if status == PUBLISHED else status
