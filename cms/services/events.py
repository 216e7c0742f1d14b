"""Record events: the single seam every record change passes through (spec: Events).

Services emit one `RecordEvent` per changed record after the write succeeded; subscribers
(webhook delivery, tests) register handlers on the `EventDispatcher`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

log = logging.getLogger("cms.events")

CREATE, UPDATE, DELETE = "create", "update", "delete"


@dataclass(frozen=True)
class RecordEvent:
    """One record change: `event` is create/update/delete; `data` is the full record as JSON
    (create, update) or `{"id": record_id}` (delete); `timestamp` is when it happened (UTC)."""

    event: str
    collection: str
    record_id: str
    data: dict[str, Any]
    timestamp: datetime


EventHandler = Callable[[Sequence[RecordEvent]], Awaitable[None]]


class EventDispatcher:
    """In-process fan-out of record events to subscribed handlers, in subscription order."""

    def __init__(self) -> None:
        self._handlers: list[EventHandler] = []

    def subscribe(self, handler: EventHandler) -> None:
        """Call `handler` with every batch of events emitted from now on."""
        self._handlers.append(handler)

    def unsubscribe(self, handler: EventHandler) -> None:
        """Stop calling `handler`."""
        self._handlers.remove(handler)

    async def emit(self, events: Sequence[RecordEvent]) -> None:
        """Hand `events` to every handler. A failing handler is logged and does not stop the others:
        the write has already happened."""
        if not events:
            return
        for handler in list(self._handlers):
            try:
                await handler(events)
            except Exception:
                log.exception("record event handler %r failed", handler)
