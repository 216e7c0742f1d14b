"""Domain events: the one typed seam every change passes through (spec: Events; STYLE rule 14).

Services emit events after the change is stored; subscribers register for one event type on the
`EventBus`: record events feed webhooks (through the outbox, written before the change is
acknowledged), auth-collection clean-up and tests; collection events feed auth clean-up and
webhook clean-up; session and audit events feed the audit log. Realtime and the response cache
subscribe here later. Four event types:

- `RecordEvent`: a record was created, updated or deleted (single, bulk, CSV import, users).
- `CollectionEvent`: a collection was created, updated or deleted.
- `SessionEvent`: something happened to a login session (today: refresh-token reuse).
- `AuditEvent`: a security-relevant action to audit (login, key, setting, backup, ...), with the
  request that caused it (decisions.md, Audit context).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from cms.models import Collection, Record, Session
from cms.services.origin import RequestOrigin, current_origin

log = logging.getLogger("cms.events")

CREATE, UPDATE, DELETE = "create", "update", "delete"
REFRESH_TOKEN_REUSE = "refresh_token_reuse"


@dataclass(frozen=True)
class RecordEvent:
    """One record change: `event` is create/update/delete; `data` is the full record as JSON
    (create, update) or `{"id": record_id}` (delete); `timestamp` is when it happened (UTC)."""

    event: str
    collection: str
    record_id: str
    data: dict[str, Any]
    timestamp: datetime
    record: Record | None = field(default=None, compare=False, repr=False)
    """The record as stored (for delete: as it was, when the writer had it), for subscribers that
    apply access rules (webhooks); never serialized."""
    previous: Record | None = field(default=None, compare=False, repr=False)
    """For `update`: the record as it was before the change, so a subscriber (realtime) can tell
    whether the change made it enter or leave a view; None when the writer did not have it
    (relation releases) and for create/delete; never serialized."""


@dataclass(frozen=True)
class CollectionEvent:
    """A collection definition changed: `event` is create/update/delete; `collection` is the
    definition after the change (before it, for delete)."""

    event: str
    collection: Collection


@dataclass(frozen=True)
class SessionEvent:
    """Something happened to a login session: `event` is REFRESH_TOKEN_REUSE (the session was
    revoked because a spent refresh token came back)."""

    event: str
    session: Session
    origin: RequestOrigin = field(default_factory=current_origin)
    """The request that caused it, captured when the event is created."""


@dataclass(frozen=True)
class AuditEvent:
    """An action the audit log records (decisions.md, Audit events): `event_type` is a key of
    `cms.services.operations.audit.SEVERITIES`; `user_id` is whom it concerns (the caller, or for a
    login the user who logged in; None when unknown); `details` is a JSON-safe dict; `origin` is the
    request that caused it, captured when the event is created (decisions.md, Audit context)."""

    event_type: str
    user_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    origin: RequestOrigin = field(default_factory=current_origin)


Event = RecordEvent | CollectionEvent | SessionEvent | AuditEvent
E = TypeVar("E", RecordEvent, CollectionEvent, SessionEvent, AuditEvent)
Handler = Callable[[Sequence[Any]], Awaitable[None]]
EventHandler = Callable[[Sequence[RecordEvent]], Awaitable[None]]


class Outbox(Protocol):
    """The one subscriber written with the change itself (webhook deliveries, issue 8): `stage`
    writes what the events need (joining the open transaction) before the change is acknowledged;
    `publish` hands it on after the commit."""

    async def stage(self, events: Sequence[RecordEvent]) -> Any:
        """Write what `events` need; returns what `publish` takes."""
        ...

    async def publish(self, staged: Any) -> None:
        """Hand on what `stage` wrote (failures are left to a relay)."""
        ...

    async def wants(self, collection_id: str) -> bool:
        """Whether record events of the collection would make `stage` write anything."""
        ...


class Transaction(Protocol):
    """Something that runs a block in one database transaction (`cms.store.transactions`)."""

    def begin(self) -> AbstractAsyncContextManager[None]:
        """The transaction's context: committed at the end of the block, aborted on an error."""
        ...


_held: ContextVar[list[Event] | None] = ContextVar("cms_held_events", default=None)


class EventBus:
    """In-process fan-out of typed events to the handlers subscribed to their type, in
    subscription order, plus the outbox. Every replica has its own; cross-replica effects go
    through MongoDB (outbox) or Redis.

    `emit` outside a `unit`: the outbox stages the record events, the handlers run, the outbox
    publishes. Inside `async with bus.unit(transaction)`: events are held; at the end of the block the
    outbox stages them inside the transaction (so the change and its outbox entries commit together),
    and after the commit the handlers run and the outbox publishes."""

    def __init__(self) -> None:
        self._handlers: dict[type, list[Handler]] = {}
        self._outbox: Outbox | None = None

    def attach_outbox(self, outbox: Outbox) -> None:
        """Stage every record event in `outbox` (one outbox per bus)."""
        self._outbox = outbox

    async def outbox_wants(self, collection_id: str) -> bool:
        """Whether the outbox (if one is attached) writes entries for record events of the
        collection `collection_id`; its writers then run in a transaction where they can."""
        return self._outbox is not None and await self._outbox.wants(collection_id)

    def subscribe(self, handler: Callable[[Sequence[E]], Awaitable[None]],
                  event_type: type[E] = RecordEvent) -> None:  # type: ignore[assignment]
        """Call `handler` with every batch of events of `event_type` (default RecordEvent) emitted
        from now on."""
        self._handlers.setdefault(event_type, []).append(handler)

    def unsubscribe(self, handler: Callable[[Sequence[E]], Awaitable[None]],
                    event_type: type[E] = RecordEvent) -> None:  # type: ignore[assignment]
        """Stop calling `handler` for `event_type`."""
        self._handlers.get(event_type, []).remove(handler)

    async def emit(self, events: Sequence[Event]) -> None:
        """Hand `events` (all of one type) on: held when a `unit` is open in this task, else staged
        in the outbox, dispatched and published now. Outbox write errors propagate (the change is
        then not acknowledged as a success); handler errors are logged."""
        if not events:
            return
        held = _held.get()
        if held is not None:
            held.extend(events)
            return
        staged = await self._stage(events)
        await self._dispatch(events)
        await self._publish(staged)

    @asynccontextmanager
    async def unit(self, transaction: Transaction | None = None) -> AsyncIterator[None]:
        """Hold the events emitted in the block. With `transaction`, the block and the outbox
        entries of its record events run in that transaction; handlers run after it committed.
        When the block raises, its events are dropped (nothing was committed in a transaction)."""
        if _held.get() is not None:  # nested: the outer unit stages and dispatches
            yield
            return
        held: list[Event] = []
        token = _held.set(held)
        try:
            if transaction is not None:
                async with transaction.begin():
                    yield
                    staged = await self._stage(held)
            else:
                yield
                staged = await self._stage(held)
        finally:
            _held.reset(token)
        for batch in _batches(held):
            await self._dispatch(batch)
        await self._publish(staged)

    async def _stage(self, events: Sequence[Event]) -> Any:
        records = [e for e in events if isinstance(e, RecordEvent)]
        return await self._outbox.stage(records) if self._outbox is not None and records else None

    async def _publish(self, staged: Any) -> None:
        if self._outbox is not None and staged:
            await self._outbox.publish(staged)

    async def _dispatch(self, events: Sequence[Event]) -> None:
        for handler in list(self._handlers.get(type(events[0]), [])):
            try:
                await handler(events)
            except Exception:
                log.exception("event handler %r failed", handler)


def _batches(events: Sequence[Event]) -> list[list[Event]]:
    """`events` cut into runs of one type, in order."""
    runs: list[list[Event]] = []
    for event in events:
        if runs and type(runs[-1][0]) is type(event):
            runs[-1].append(event)
        else:
            runs.append([event])
    return runs
