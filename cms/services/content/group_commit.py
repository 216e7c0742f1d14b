"""Group commit of record creates (issue "Fast reads", item 5): concurrent creates into one
collection are stored by one unordered `insert_many` instead of one `insert_one` each.

The embedded server stores about 830 documents a second through `insert_one` and several times
that through `insert_many`; a busy MongoDB gains too (one round trip and one journal write per
group). A group never spans collections, and nothing waits on a timer: while a collection's insert
is in flight, the creates that arrive for it form the next group, which is sent as soon as that
insert returns (or at once when it reaches MAX_GROUP). So a lone create is sent straight away and
only creates that would have queued on the database anyway are grouped.

Each create still gets its own answer: a record refused by a unique index raises AlreadyExists for
its own request only (the others of its group are stored); a failure of the whole insert (the
database down) reaches every waiter. After each insert, `after` runs once for the group with the
records it stored: it checks that the collection still exists (the check every insert makes,
record_writer.RecordWriter.guard) and emits their `create` events as one batch (one read-cache version bump
and one outbox pass for the group), before any waiter is answered.

The next group's insert does not wait for `after` (issue 37): `after` makes Redis round trips (the
epoch check, the version bump, the realtime append) that take tens of milliseconds, hundreds when the
process is busy fanning events out, and creates queued behind them. A collection's groups still run
`after` one at a time and in the order of their inserts (their events keep the order of the writes),
so at most two groups of a collection are past the database at once: one running `after`, the next
inserted and waiting for it; the creates that arrive meanwhile form the group after.

A waiter that is cancelled (its client went away) does not cancel the group: its record is stored
like the others, as a single insert would have been.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cms.models import Collection, Record
from cms.observability import tracing
from cms.services.caching.definition_cache import request_scope
from cms.store.bulk import DUPLICATE_KEY, InsertFailure
from cms.store.errors import already_exists
from cms.store.records import RecordRepository

log = logging.getLogger("cms.group_commit")

MAX_GROUP = 100
"""Most records in one `insert_many`; a full group is sent even while another is in flight."""


@dataclass
class _Group:
    collection: Collection
    records: list[Record] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    epochs: set[str | None] = field(default_factory=set)

    @property
    def epoch(self) -> str | None:
        """The catalog epoch every create of the group looked its collection up under, or None
        when they differ (or one is unknown)."""
        return next(iter(self.epochs)) if len(self.epochs) == 1 else None


class InsertGroups:
    """Creates grouped per collection (see the module docstring). `after(collection, stored, epoch)`
    runs once after each group's insert with the records it stored (in order; none refused) and
    the catalog epoch all its creates looked the collection up under (None when they differ), and
    may raise (e.g. NotFound when the collection was deleted meanwhile); what it raises reaches
    every waiter of the group."""

    def __init__(self, records: RecordRepository, *,
                 after: Callable[[Collection, list[Record], str | None], Awaitable[None]],
                 max_group: int = MAX_GROUP) -> None:
        self._records = records
        self._after = after
        self._max_group = max_group
        self._waiting: dict[str, _Group] = {}
        self._in_flight: dict[str, int] = {}
        """Per collection id: groups sent whose `after` may not start yet (inserting, or waiting
        for the previous group's `after`)."""
        self._after_tail: dict[str, asyncio.Future[None]] = {}
        """Per collection id: done once the `after` of its latest inserted group has run."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def insert(self, collection: Collection, record: Record, epoch: str | None = None) -> None:
        """Store `record` in `collection` (looked up under the catalog epoch `epoch`, if known),
        grouped with concurrent creates into the same collection. Raises AlreadyExists (this record
        clashed with a unique index), NotFound (the collection was deleted meanwhile: nothing of the
        group stays) or the driver's error of the whole insert."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        group = self._waiting.get(collection.id)
        if group is None:
            group = self._waiting[collection.id] = _Group(collection)
        group.records.append(record)
        group.waiters.append(waiter)
        group.epochs.add(epoch)
        if not self._in_flight.get(collection.id) or len(group.records) >= self._max_group:
            self._send(collection.id)
        await asyncio.shield(waiter)

    def _send(self, collection_id: str) -> None:
        group = self._waiting.pop(collection_id, None)
        if group is None:
            return
        self._in_flight[collection_id] = self._in_flight.get(collection_id, 0) + 1
        # a fresh context: the insert belongs to no request (and to no request's transaction); with
        # tracing on it continues the trace of the request that sends the group
        task = asyncio.get_running_loop().create_task(self._store(group), context=tracing.detached_context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _store(self, group: _Group) -> None:
        collection_id = group.collection.id
        released = False

        def release() -> None:  # the next group of the collection may be sent
            nonlocal released
            if released:
                return
            released = True
            left = self._in_flight.get(collection_id, 1) - 1
            if left:
                self._in_flight[collection_id] = left
            else:
                self._in_flight.pop(collection_id, None)
            if collection_id in self._waiting and not left:
                self._send(collection_id)

        turn: asyncio.Future[None] | None = None
        try:
            failures = await self._records.insert_many(collection_id, group.records)
            refused = {failure.index: failure for failure in failures}
            previous = self._after_tail.get(collection_id)
            turn = self._after_tail[collection_id] = asyncio.get_running_loop().create_future()
            if previous is not None:
                await asyncio.shield(previous)  # `after` in insert order: the events keep the writes' order
            release()  # the next group is inserted while this one's `after` runs
            with request_scope():  # the group's look-ups read each epoch once, as a request's do
                await self._after(group.collection,
                                  [record for index, record in enumerate(group.records) if index not in refused],
                                  group.epoch)
        except BaseException as exc:
            for waiter in group.waiters:
                _fail(waiter, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for index, waiter in enumerate(group.waiters):
                failure = refused.get(index)
                if failure is None:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    _fail(waiter, insert_refusal(failure))
        finally:
            if turn is not None:
                turn.set_result(None)
                if self._after_tail.get(collection_id) is turn:
                    del self._after_tail[collection_id]
            release()

    async def drain(self) -> None:
        """Wait until every group sent so far is stored (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def waiting(self, collection_id: str | None = None) -> int:
        """How many creates (of `collection_id`, or of every collection) wait, unsent, for their
        collection's group in flight (inserting, or inserted and waiting for the previous group's
        `after`); they are sent as the next group (monitoring, tests)."""
        groups = self._waiting.values() if collection_id is None else [g for g in self._waiting.values()
                                                                      if g.collection.id == collection_id]
        return sum(len(group.records) for group in groups)


def insert_refusal(failure: InsertFailure) -> Exception:
    """The error one record of a group (or of a batch's run of creates) gets: AlreadyExists for a
    duplicate key, else the server's refusal as a RuntimeError (a 500, as a single insert's
    unexpected refusal would be)."""
    if failure.code == DUPLICATE_KEY:
        return already_exists(failure.field, "record")
    return RuntimeError(f"insert refused by the server (code {failure.code}): {failure.message}")


def _fail(waiter: asyncio.Future[None], exc: BaseException) -> None:
    if not waiter.done():
        waiter.set_exception(exc)
        waiter.exception()  # retrieved: a waiter whose request was cancelled logs no warning
