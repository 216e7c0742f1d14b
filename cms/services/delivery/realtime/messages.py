"""What the hub hands a stream (decisions.md, Realtime): neutral messages, framed as server-sent events by
the HTTP layer (aiohttp-sse: `cms.api.realtime`, `cms.admin_ui.views.records_live`), and the event ids.

A `Message` is an event name, the stream position it covers and its data as compact JSON. One message is
shared by every subscriber who sees an event the same way; the SSE `id` of a client's copy is
`event_id(client id, position)`, so a browser's EventSource, which sends back only `Last-Event-ID` when it
reconnects to the URL it was opened with, resumes its client by itself (`split_event_id`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from cms.services.delivery.realtime.stream import entry_order

CLIENT_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
"""What a client id may look like (ours are UUIDs)."""
CONNECT, RESYNC = "connect", "resync"
"""The two event names of the protocol's own (every other event is named by its topic)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One event: `event` (its SSE name: `connect`, `resync` or a topic as subscribed), `position` (the
    stream entry id it covers, `<ms>-<seq>`) and `data` (compact JSON bytes)."""

    event: str
    position: str
    data: bytes


def message(event: str, position: str, data: Any) -> Message:
    """A Message whose `data` is `data` as compact JSON."""
    return Message(event, position, orjson.dumps(data))


def resync(position: str, reason: str) -> Message:
    """The `resync` event (reload your data), with `{"reason": reason}`."""
    return message(RESYNC, position, {"reason": reason})


def event_id(client_id: str, position: str) -> str:
    """The SSE id of stream entry `position` on client `client_id`'s stream: `<client id>:<position>`."""
    return f"{client_id}:{position}"


def split_event_id(text: str | None) -> tuple[str | None, str | None]:
    """(client id, entry id) of a `Last-Event-ID`: `<client id>:<entry id>` as `event_id` makes them,
    or a bare entry id (client None); (None, None) for nothing usable."""
    if not text:
        return None, None
    client_id, colon, entry_id = text.strip().rpartition(":")
    if order_or_none(entry_id) is None:
        return None, None
    if colon and CLIENT_ID.match(client_id) is None:
        return None, None
    return (client_id or None), entry_id


def order_or_none(entry_id: str | None) -> tuple[int, int] | None:
    """`entry_order(entry_id)`, or None when it is not a stream entry id."""
    if entry_id is None:
        return None
    try:
        return entry_order(entry_id.strip())
    except ValueError:
        return None
