"""Server-sent events for the API and the admin UI: aiohttp-sse's `EventSourceResponse`, able to frame an
event once for many streams and to send a batch of events in one write.

aiohttp-sse frames every event (`send`: its `event:` and `data:` lines, its checks). An event that many
streams send differs between them only by its `id:` line: `frame` has aiohttp-sse frame it once, without
an id, and `send_framed` writes a batch of such events, each after its own `id:` line, in one write (one
write for a burst of events, not one per event). Pings (`: ping`) are aiohttp-sse's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiohttp_sse import EventSourceResponse


class BatchingEventSource(EventSourceResponse):
    """`EventSourceResponse` (same arguments) with `frame` and `send_framed`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._held: list[bytes] | None = None

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write `data`, or keep it while `frame` runs."""
        if self._held is not None:
            self._held.append(bytes(data))
            return
        await super().write(data)

    async def frame(self, data: str, event: str | None = None) -> bytes:
        """What `send(data, event=event)` would write (no `id:` line), framed by aiohttp-sse and not
        written. Raises ValueError for an event name with a line break."""
        held: list[bytes] = []
        self._held = held
        try:
            await self.send(data, event=event)
        finally:
            self._held = None
        return b"".join(held)

    async def send_framed(self, events: Iterable[tuple[str, bytes]]) -> None:
        """Write each `(id, framed)` (`framed` from `frame`) after its `id:` line, all in one write.
        Raises ValueError for an id with a line break or NUL (as `send`), and the connection's errors."""
        parts: list[bytes] = []
        for event_id, framed in events:
            if self.LINE_SEP_EXPR.search(event_id) or "\0" in event_id:
                raise ValueError("id must not contain line separators or null characters")
            parts.append(b"id: %s\n%s" % (event_id.encode(), framed))
        if parts:
            await super().write(b"".join(parts))
