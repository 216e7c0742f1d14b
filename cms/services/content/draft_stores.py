"""What a collection's definition change does to the stores of drafts (decisions.md, Drafts, versions and
scheduled publishing: "Changing either later keeps existing data"; docs/concepts/drafts.md, Turning
drafts on and off). The collection service calls it; the records' own upkeep stays there.

- Turning drafts on: every record is `published` (its published copy marked with the time) and gets a
  working copy equal to it; working copies kept from an earlier time with drafts keep their pending
  changes (`changed`, `draft`), the others are made again from the published copies.
- Turning drafts off: nothing is published or discarded; the published copies lose their draft keys
  (readers see plain records again), working copies stay for `DELETE .../draft`, pending schedules go.
- A schema change reaches the working copies as it reaches the records: dropped fields go, changed ones
  convert (a value that does not convert stays as it is: the publish checks it).
- A deleted collection's working copies and schedules go with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace

from cms.clock import Clock
from cms.models import PUBLISHED, Collection, DraftState, Record
from cms.services.content.schema_changes import FieldChange, apply_schema_change
from cms.store.records import RecordRepository
from cms.store.schedules import ScheduleRepository
from cms.store.working_copies import WorkingCopyRepository

COPY_BATCH = 1_000
"""Records copied per insert when a collection turns drafts on."""


@dataclass(frozen=True)
class DraftStores:
    """The published copies (`records`), the working copies (`working`) and the pending schedules
    (`schedules`) of collections with drafts; `clock` stamps a turn-on's `published_at`."""

    records: RecordRepository
    working: WorkingCopyRepository
    schedules: ScheduleRepository
    clock: Clock

    async def follow(self, current: Collection, changed: Collection, dropped: Sequence[str],
                     field_changes: Sequence[FieldChange]) -> None:
        """After `current` was stored as `changed` (and its records followed the schema): turn drafts
        on or off, and give the working copies the same schema change (`dropped` fields, converting
        `field_changes`). Driver errors propagate."""
        if changed.drafts and not current.drafts:
            await self.turn_on(changed)
        elif current.drafts and not changed.drafts:
            await self.turn_off(changed)
        if current.drafts or changed.drafts:
            await self.working.unset_fields(changed.id, dropped)
            await apply_schema_change(self.working, changed.id, field_changes)

    async def turn_on(self, collection: Collection) -> int:
        """Mark every record of `collection` published now and give each a working copy equal to it
        (pending ones from an earlier time with drafts kept), COPY_BATCH records at a time. Returns how
        many working copies were made."""
        now = self.clock()
        await self.working.ensure_indexes(collection.id)
        await self.working.drop_published(collection.id)
        made = 0
        async for batch in self._batches(collection):
            await self.records.mark_published(collection.id, [r.id for r in batch], now)
            made += await self.working.insert_missing(
                collection.id, [replace(r, state=DraftState(PUBLISHED, now)) for r in batch])
        return made

    async def turn_off(self, collection: Collection) -> None:
        """The records of `collection` are plain records again; its pending schedules go."""
        async for batch in self._batches(collection):
            await self.records.mark_published(collection.id, [r.id for r in batch], None)
        await self.schedules.cancel_collection(collection.id)

    async def _batches(self, collection: Collection) -> AsyncIterator[list[Record]]:
        """Every record of `collection`, COPY_BATCH at a time (one cursor: memory stays flat)."""
        batch: list[Record] = []
        async for record in self.records.stream(collection.id, {}, [("created", 1), ("_id", 1)],
                                                batch_size=COPY_BATCH):
            batch.append(record)
            if len(batch) >= COPY_BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    async def drop(self, collection_id: str) -> None:
        """A deleted collection's working copies and schedules go."""
        await self.working.drop(collection_id)
        await self.schedules.cancel_collection(collection_id)
