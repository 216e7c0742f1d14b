"""Record events into the realtime stream (decisions.md, Realtime): the event bus's subscriber that
appends one RECORD entry per record event, after the write committed and before it is answered, so
a write answered before another began has the smaller id (the order every stream keeps)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson

from cms.services.delivery.events import DELETE, RecordEvent
from cms.services.delivery.realtime.stream import RECORD, EventStream
from cms.services.representation import records as represent

log = logging.getLogger("cms.realtime")

APPEND_CHUNK = 1_000
"""Entries one append call writes (a bulk write of 50,000 records is 50 calls, none holding Redis long)."""


class RealtimePublisher:
    """Appends record events to `stream` (subscribe `on_record_events` to the bus)."""

    def __init__(self, stream: EventStream) -> None:
        self._stream = stream

    async def on_record_events(self, events: Sequence[RecordEvent]) -> None:
        """One RECORD entry per event: `{n: collection name, a: action, i: record id, r: the record's
        JSON after the write (as it was, for a delete; null when unknown), p: its JSON before an
        update (null when unknown)}`. Redis errors propagate (the bus logs them; the write stands)."""
        bodies = [orjson.dumps(_body(event)) for event in events]
        for start in range(0, len(bodies), APPEND_CHUNK):
            await self._stream.append(RECORD, bodies[start:start + APPEND_CHUNK])


def _body(event: RecordEvent) -> dict[str, Any]:
    if event.event == DELETE:
        record = None if event.record is None else represent.record_json(event.record)
    else:
        record = event.data
    previous = getattr(event, "previous", None)
    return {"n": event.collection, "a": event.event, "i": event.record_id, "r": record,
            "p": None if previous is None else represent.record_json(previous)}
