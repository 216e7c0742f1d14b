"""What happens to the records that point at deleted records (decisions.md, Records: relation
fields; docs/concepts/expand.md, "Deleting a record that others point to").

Deleting a record releases every relation value that names it, in the same request:
- a relation field with `cascade_delete: true` deletes the records that point to it (and so on,
  through their own referrers);
- otherwise the id is removed from the field: a one-value field is cleared, a many-value field
  loses that item.
A delete that would leave a *required* relation field empty (and is not cascaded) is refused
before anything changes: 400 naming the field and how many records need the target, as
PocketBase does. Released records get an `update` event, cascaded ones a `delete` event.

The plan is computed before the delete (so a refusal changes nothing) and carried out after it.
A process that dies between the two leaves references to missing records, which reads tolerate.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from cms.errors import BadRequest
from cms.models import Collection, FieldSpec, Record
from cms.services.caching.catalog import Catalog
from cms.services.content.fields import is_multi, value_list
from cms.services.content.record_writer import RecordWriter
from cms.store.records import RecordRepository

log = logging.getLogger("cms.relations")

MAX_CASCADE_RECORDS = 10_000
"""Most records one delete may remove through `cascade_delete`, the deleted ones included."""

@dataclass(frozen=True)
class Referrer:
    """A relation field (`spec`) of `collection` that points at another collection."""

    collection: Collection
    spec: FieldSpec


@dataclass
class ReleasePlan:
    """What to do after a delete: `cascade` maps a collection id to (collection, record ids to
    delete); `clear` lists (referrer, target ids) whose references are removed."""

    cascade: dict[str, tuple[Collection, set[str]]] = field(default_factory=dict)
    clear: list[tuple[Referrer, list[str]]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing points at the deleted records."""
        return not self.cascade and not self.clear


class RelationRelease:
    """Plans and carries out the release of references to deleted records; the records it changes
    and deletes emit their events through the one record writer (`writer`), stamped by its clock."""

    def __init__(self, catalog: Catalog, records: RecordRepository, writer: RecordWriter) -> None:
        self._catalog = catalog
        self._records = records
        self._writer = writer

    async def plan_release(self, collection: Collection, record_ids: Sequence[str]) -> ReleasePlan:
        """The release that deleting `record_ids` of `collection` needs, following cascades.

        Raises BadRequest when a required relation field without `cascade_delete` would be left
        empty, or when the cascade would delete more than MAX_CASCADE_RECORDS records."""
        plan = ReleasePlan()
        all_collections = await self._catalog.all()
        deleted: dict[str, set[str]] = {collection.id: set(record_ids)}
        queue: list[tuple[Collection, list[str]]] = [(collection, list(record_ids))]
        total = len(record_ids)
        while queue:
            target, ids = queue.pop(0)
            for referrer in _referrers(all_collections, target.id):
                holders = [h for h in await self._records.find_holders(referrer.collection.id, referrer.spec.name, ids)
                           if h.id not in deleted.get(referrer.collection.id, set())]
                if not holders:
                    continue
                if referrer.spec.cascade_delete:
                    new_ids = [h.id for h in holders]
                    deleted.setdefault(referrer.collection.id, set()).update(new_ids)
                    _, planned = plan.cascade.setdefault(referrer.collection.id, (referrer.collection, set()))
                    planned.update(new_ids)
                    total += len(new_ids)
                    if total > MAX_CASCADE_RECORDS:
                        raise BadRequest(f"This delete would remove more than {MAX_CASCADE_RECORDS:,} records "
                                         "through cascade_delete relations; delete fewer at a time")
                    queue.append((referrer.collection, new_ids))
                else:
                    _check_not_required(referrer, holders, set(ids))
                    plan.clear.append((referrer, list(ids)))
        # A record both cleared and cascaded is simply deleted.
        return plan

    async def release(self, plan: ReleasePlan) -> None:
        """Carry out `plan` after the delete: delete the cascaded records, then remove the
        references left, and emit their events. The `update` events of the records whose
        references were removed carry no `previous` (None): the records are read only after the
        change (`find_by_ids`), and one record may lose references through several fields. Failures
        are logged, not raised: the delete the client asked for has happened."""
        if plan.empty:
            return
        try:
            for collection, ids in plan.cascade.values():
                ordered = sorted(ids)
                await self._records.delete_many(collection.id, ordered)
                await self._writer.emit_deleted(collection, ordered)
            changed: dict[str, tuple[Collection, set[str]]] = {}
            for referrer, target_ids in plan.clear:
                cascaded = plan.cascade.get(referrer.collection.id, (referrer.collection, set()))[1]
                changed_ids = await self._records.remove_references(
                    referrer.collection.id, referrer.spec.name, target_ids, multi=is_multi(referrer.spec),
                    now=self._writer.clock(), skip_ids=sorted(cascaded),
                )
                changed.setdefault(referrer.collection.id, (referrer.collection, set()))[1].update(changed_ids)
            for collection, ids in changed.values():  # one event per record, however many fields changed
                if ids:
                    changed_records = await self._records.find_by_ids(collection.id, sorted(ids))
                    await self._writer.emit_updated(collection, changed_records)
        except Exception:
            log.exception("releasing references to deleted records failed; some references may dangle")


def _referrers(collections: Sequence[Collection], target_id: str) -> list[Referrer]:
    """Every relation field of `collections` that points at the collection `target_id`."""
    return [Referrer(c, spec) for c in collections for spec in c.fields
            if spec.type == "relation" and spec.collection_id == target_id]


def _check_not_required(referrer: Referrer, holders: Sequence[Record], deleted_ids: set[str]) -> None:
    """Raise BadRequest when removing `deleted_ids` would leave the required field empty in one
    of `holders`."""
    if not referrer.spec.validation.required:
        return
    emptied = [h for h in holders if not set(value_list(h.data.get(referrer.spec.name))) - deleted_ids]
    if emptied:
        raise BadRequest(
            f"The record is needed by the required relation field '{referrer.collection.name}.{referrer.spec.name}' "
            f"of {len(emptied)} record(s); change or delete those first, or set cascade_delete on the field"
        )
