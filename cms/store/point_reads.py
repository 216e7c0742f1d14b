"""Point reads by id, batched per collection (issue 38, item 6): concurrent `get`s of records of one
collection are answered by one `find({_id: {$in: ids}})` instead of one `find_one` each.

A `find_one` costs about 0.3 ms of the driver's CPU in the web process (the cursor, the session,
server selection, the command's events) and a round trip; a find of 16 ids through the `_id` index
costs about 25 µs per id on the embedded server (and one round trip for all of them). The policy is
group commit's (content/group_commit.py): nothing waits on a timer. While a collection has a read in
flight, the gets that arrive for it form the next batch, sent as soon as that read returns (or at
once when it reaches ID_CHUNK ids, the `$in` size the store uses everywhere). So a lone get is sent
straight away as a `find_one`, and only gets that would have queued on the database anyway are
batched. `get_many` does the same for several ids at once (a page of a result set, a forward
`expand`): they join the batch as one caller.

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
class _Wait:
    """One caller waiting for the next batch: the ids it asked and where its answer goes."""

    ids: list[str]
    answer: asyncio.Future[dict[str, Document]]


@dataclass
class _Line:
    """One collection's reads: whether one is in flight, and the callers waiting for the next batch."""

    busy: bool = False
    waits: list[_Wait] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)


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
        """The document of `record_id` in the collection, or None (`get_many` of one id)."""
        return (await self.get_many(collection_id, [record_id])).get(record_id)

    async def get_many(self, collection_id: str, record_ids: Sequence[str]) -> dict[str, Document]:
        """The documents of those of `record_ids` that exist, by id: read at once when nothing of the
        collection is in flight (one `find_one` for one id, else `find_many` per `batch_max` ids) or
        when they alone fill a batch, else in the next batch. Raises what the read raises."""
        wanted = list(dict.fromkeys(record_ids))
        if not wanted:
            return {}
        line = self._lines.setdefault(collection_id, _Line())
        if not line.busy or len(wanted) >= self._batch_max:
            owner = not line.busy
            line.busy = True
            try:
                return await self._alone(collection_id, wanted)
            finally:
                if owner:
                    self._next(collection_id, line)
        wait = _Wait(wanted, asyncio.get_running_loop().create_future())
        if len(line.ids | set(wanted)) > self._batch_max:  # it would overflow: send the batch so far now
            self._send(collection_id, self._take(line))
        line.waits.append(wait)
        line.ids.update(wanted)
        return await wait.answer

    async def _alone(self, collection_id: str, wanted: list[str]) -> dict[str, Document]:
        """`wanted` read on their own: one `find_one`, or `find_many` per `batch_max` ids."""
        if len(wanted) == 1:
            doc = await self._find_one(collection_id, wanted[0])
            return {} if doc is None else {wanted[0]: doc}
        found: dict[str, Document] = {}
        for start in range(0, len(wanted), self._batch_max):
            found.update((doc["_id"], doc) for doc in await self._find_many(
                collection_id, wanted[start:start + self._batch_max]))
        return found

    def _take(self, line: _Line) -> list[_Wait]:
        """The waiting callers of `line`, removed from it."""
        waits, line.waits, line.ids = line.waits, [], set()
        return waits

    def _next(self, collection_id: str, line: _Line) -> None:
        """After a read of the collection: send the waiting batch, or mark the line idle."""
        if line.waits:
            self._send(collection_id, self._take(line), line)
        else:
            line.busy = False
            if self._lines.get(collection_id) is line:
                del self._lines[collection_id]

    def _send(self, collection_id: str, waits: list[_Wait], line: _Line | None = None) -> None:
        """Read the ids of `waits` in one query, in a task of its own; then (`line` given) go on with
        the line."""
        task = asyncio.get_running_loop().create_task(self._read(collection_id, waits, line))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, collection_id: str, waits: list[_Wait], line: _Line | None) -> None:
        """One query for the ids of `waits`; each caller gets its documents or the query's error. A
        document two callers asked for is copied for the second (each gets its own, as from its own
        read)."""
        try:
            ids = list(dict.fromkeys(i for wait in waits for i in wait.ids))
            found = {doc["_id"]: doc for doc in await self._find_many(collection_id, ids)}
        except Exception as exc:  # noqa: BLE001 - every caller gets the read's own error
            for wait in waits:
                if not wait.answer.done():
                    wait.answer.set_exception(exc)
        else:
            given: set[str] = set()
            for wait in waits:
                if wait.answer.done():  # its caller was cancelled
                    continue
                answer = {i: found[i] if i not in given else copy.deepcopy(found[i]) for i in wait.ids if i in found}
                given.update(answer)
                wait.answer.set_result(answer)
        finally:
            if line is not None:
                self._next(collection_id, line)

    def pending(self) -> int:
        """How many callers wait for a batch now (for tests and metrics)."""
        return sum(len(line.waits) for line in self._lines.values())
