"""A resume (decisions.md, Realtime): what a resumed stream is sent first, the replay of the events it
missed, and what the admin UI asks (`written_since`).

A resume whose `Last-Event-ID` is within the kept history gets `connect` (with that id) and then every
entry after it, replayed under its subscriptions and credential as they are now; meanwhile the reader
queues live entries for it too. The replay reads until the stream has nothing more and records the last
entry it covered (`Connection.replayed_through`): queued live messages up to there were sent already and
are dropped, later ones follow (no gap, no repeat at the seam). Otherwise it gets `resync`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from cms.services.caching.definition_cache import request_scope
from cms.services.delivery.realtime.connections import Connection
from cms.services.delivery.realtime.fanout import Fanout
from cms.services.delivery.realtime.messages import CONNECT, Message, message, order_or_none, resync, split_event_id
from cms.services.delivery.realtime.rendering import collection_of
from cms.services.delivery.realtime.stream import LOST, RECORD, EventStream, entry_order

READ_COUNT = 500
"""Entries one read of the stream takes (live and replay)."""
MAX_SCAN = 10_000
"""Entries `written_since` looks at; past them it answers "maybe" (True)."""
WRITE_BATCH_BYTES = 256 * 1024
"""Most bytes of data one batch of messages handed to a stream holds (one write for a burst of events)."""
LOST_REASON = "events were lost"


def first_messages(client_id: str, last_event_id: str | None, takeover_id: str,
                   floor: str | None) -> tuple[list[Message], str | None]:
    """(What a resumed stream of `client_id` is sent first, the position its replay starts after or None).
    `takeover_id` is its TAKEOVER entry; `floor` the id above which history is complete (None: unknown)."""
    last = order_or_none(last_event_id)
    if last is not None and floor is not None and entry_order(floor) <= last <= entry_order(takeover_id):
        assert last_event_id is not None
        return [message(CONNECT, last_event_id, {"client_id": client_id})], last_event_id
    reason = "no Last-Event-ID" if last is None else "missed events are no longer kept"
    return [message(CONNECT, takeover_id, {"client_id": client_id}), resync(takeover_id, reason)], None


async def replay(stream: EventStream, fanout: Fanout, conn: Connection, after: str,
                 send: Callable[[list[Message]], Awaitable[None]]) -> int:
    """Send `conn` what it missed after entry `after`, in order, in batches of at most about
    WRITE_BATCH_BYTES, until the stream has no more (or `conn` closed); returns the record events sent."""
    sent = 0
    while not conn.closed:
        entries = await stream.range(after, count=READ_COUNT)
        if not entries:
            return sent
        batch: list[Message] = []
        size = 0
        with request_scope():
            for entry in entries:
                if entry.kind == RECORD:
                    delivered = await fanout.deliver(entry, [conn], replaying=True)
                    batch.extend(delivered)
                    sent += len(delivered)
                    size += sum(len(m.data) for m in delivered)
                elif entry.kind == LOST:
                    batch.append(resync(entry.id, LOST_REASON))
                conn.replayed_through = entry.order
                if size >= WRITE_BATCH_BYTES:
                    await send(batch)
                    batch, size = [], 0
        if batch:
            await send(batch)
        after = entries[-1].id
    return sent


async def written_since(stream: EventStream, collection: str, after: str) -> tuple[bool, str]:
    """(Whether a record of `collection` may have been written since stream entry `after`, the newest
    entry id that answer covers). True also when that can no longer be told: `after` is not a stream id,
    entries after it were trimmed or lost, or more than MAX_SCAN follow it. `after` "0-0" looks at the
    stream from its start. Raises what the stream raises when Redis does not answer."""
    floor = await stream.floor()
    after = split_event_id(after)[1] or after
    order = order_or_none(after)
    if floor is None or order is None or (order != (0, 0) and order < entry_order(floor)):
        return True, await stream.last_id()
    seen, scanned = after, 0
    while scanned < MAX_SCAN:
        entries = await stream.range(seen, count=READ_COUNT)
        if not entries:
            return False, seen
        seen, scanned = entries[-1].id, scanned + len(entries)
        if any(e.kind == RECORD and collection_of(e.body) == collection for e in entries):
            return True, seen
    return True, seen
