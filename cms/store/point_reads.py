"""Point reads by id, batched per collection (issue 38, item 6): concurrent `get`s of records of one
collection are answered by one `find({_id: {$in: ids}})` instead of one `find_one` each.

A `find_one` costs about 0.3 ms of the driver's CPU in the web process (the cursor, the session,
server selection, the command's events) and a round trip; a find of 16 ids through the `_id` index
costs about 25 µs per id on the embedded server (and one round trip for all of them). The policy is
group commit's (content/group_commit.py): nothing waits on a timer. While a collection has a read in
flight, the gets that arrive for it form the next batch, sent as soon as that read returns (or at
once when it reaches ID_CHUNK ids, the `$in` size the store uses everywhere). So a lone get is sent
straight away as a `find_one`, and only gets that would have queued on the database anyway are
batched.

A batch is sent after every get in it was asked, so a get never joins a query sent before it began
(a get after a write sees the write, as a `find_one` would). A get inside a transaction reads in its
session alone. A failed batch raises its error to every get in it; a get whose caller is cancelled
does not cancel the batch.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cms.store.bulk import ID_CHUNK

Document = dict[str, Any]
FindOne = Callable[[str, str], Awaitable[Document | None]]
"""`(collection id, record id)` -> the document or None: a read on its own."""
FindMany = Callable[[str, Sequence[str]], Awaitable[list[Document]]]
"""`(collection id, record ids)` -> the documents among them that exist (any order): one query."""


@dataclass
class _Line:
    """One collection's reads: whether one is in flight, and the gets waiting for the next batch."""

    busy: bool = False
    waiting: dict[str, list[asyncio.Future[Document | None]]] = field(default_factory=dict)


class PointReads:
    """The point reads of one process (see the module docstring). `find_one` reads one id alone,
    `find_many` a batch of at most `batch_max` ids in one query."""

    def __init__(self, find_one: FindOne, find_many: FindMany, *, batch_max: int = ID_CHUNK) -> None:
        self._find_one = find_one
        self._find_many = find_many
        self._batch_max = batch_max
        self._lines: dict[str, _Line] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, collection_id: str, record_id: str) -> Document | None:
        """The document of `record_id` in the collection, or None: read at once when nothing of the
        collection is in flight, else in the next batch. Raises what the read raises."""
        line = self._lines.setdefault(collection_id, _Line())
        if not line.busy:
            line.busy = True
            try:
                return await self._find_one(collection_id, record_id)
            finally:
                self._next(collection_id, line)
        waiter: asyncio.Future[Document | None] = asyncio.get_running_loop().create_future()
        line.waiting.setdefault(record_id, []).append(waiter)
        if len(line.waiting) >= self._batch_max:  # full: send it now, beside the read in flight
            self._send(collection_id, self._take(line))
        return await waiter

    def _take(self, line: _Line) -> dict[str, list[asyncio.Future[Document | None]]]:
        """The waiting gets of `line`, removed from it."""
        batch, line.waiting = line.waiting, {}
        return batch

    def _next(self, collection_id: str, line: _Line) -> None:
        """After a read of the collection: send the waiting batch, or mark the line idle."""
        if line.waiting:
            self._send(collection_id, self._take(line), line)
        else:
            line.busy = False
            if self._lines.get(collection_id) is line:
                del self._lines[collection_id]

    def _send(self, collection_id: str, batch: dict[str, list[asyncio.Future[Document | None]]],
              line: _Line | None = None) -> None:
        """Read `batch` in one query, in a task of its own; then (`line` given) go on with the line."""
        task = asyncio.get_running_loop().create_task(self._read(collection_id, batch, line))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, collection_id: str, batch: dict[str, list[asyncio.Future[Document | None]]],
                    line: _Line | None) -> None:
        """One query for the ids of `batch`; each waiter gets its document (None when missing) or the
        query's error."""
        try:
            found = {doc["_id"]: doc for doc in await self._find_many(collection_id, list(batch))}
        except Exception as exc:  # noqa: BLE001 - every waiter gets the read's own error
            for waiters in batch.values():
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
        else:
            for record_id, waiters in batch.items():
                doc = found.get(record_id)
                for number, waiter in enumerate(waiters):
                    if not waiter.done():  # a second get of one id gets its own copy, as from its own read
                        waiter.set_result(doc if number == 0 or doc is None else copy.deepcopy(doc))
        finally:
            if line is not None:
                self._next(collection_id, line)

    def pending(self) -> int:
        """How many gets wait for a batch now (for tests and metrics)."""
        return sum(len(waiters) for line in self._lines.values() for waiters in line.waiting.values())
