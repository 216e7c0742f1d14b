"""The one way record events are made (spec: Events): a `create` or `update` event per written
record, a `delete` event per deleted one, as the record writer (record_writer.py) emits them once a
write is committed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cms.models import Collection, Record
from cms.services.content.locales import ALL, localization
from cms.services.delivery.events import DELETE, EventBus, RecordEvent
from cms.services.representation import records as represent


async def emit_changed(events: EventBus, kind: str, collection: Collection, records: Sequence[Record],
                       now: datetime, previous: Sequence[Record] = ()) -> None:
    """The one way record events are made: one `create` or `update` event per record, carrying the
    full record as the API shows it with `?locale=*` (`represent.written_record_json`: the write's
    answer shows the same rendering, made once; localized fields as objects of the configured locales,
    decisions.md, Localized fields), stamped `now`. `previous` (updates):
    the records as they were before the change, matched by id, any order; each rides along as
    `RecordEvent.previous` (None for a record without one). Used by every service that writes
    records (records, bulk, CSV import, auth-collection users)."""
    before = {r.id: r for r in previous}
    objects = localization(collection, ALL)
    await events.emit([RecordEvent(kind, collection.name, r.id, represent.written_record_json(objects.localize(r)),
                                   now, record=r, previous=before.get(r.id))
                       for r in records])


async def emit_deleted(events: EventBus, collection: Collection, record_ids: Sequence[str],
                       now: datetime, records: Sequence[Record] = ()) -> None:
    """One `delete` event per record id, carrying `{id}`, stamped `now`; `records` are the deleted
    records the writer read (they ride along as `RecordEvent.record`, for access rules)."""
    known = {r.id: r for r in records}
    await events.emit([RecordEvent(DELETE, collection.name, rid, {"id": rid}, now, record=known.get(rid))
                       for rid in record_ids])
