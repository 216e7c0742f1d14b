"""Single-document writes that answer the document as it was, without `findAndModify` (issue 38).

`find_one_and_update` / `find_one_and_delete` by `_id` are one atomic command on MongoDB, but the
embedded SecantusDB 0.7.0b3 runs them as a scan of the collection: its `findAndModify` writes with the
filter `{_id: <matched>, $and: [<query>]}`, and a filter with a `$` key never rides an index there
(measured at 10,000 documents: 82 ms against 0.8 ms for `update_one` by `_id` at load average 0.5, 241 ms
against 0.8 ms on a loaded machine; docs/performance.md, "Writes by id"). A plain `update_one` /
`delete_one` whose filter is `_id` plus top-level equalities is a point write on both servers.

So a write of one document reads it by `_id`, then writes it with a filter that also names a field
every writer changes (a *guard*: a record's `updated`), so the write lands only if nothing changed in
between; a write that finds the guard moved reads again and retries. The answer is the document as it
was when the write landed, as `findAndModify` answers; of two concurrent writers both land, one after
the other, and each answers the document as its own write found it. The same path runs on every
server (no capability to detect: explain on SecantusDB reports its `findAndModify` as an `_id_` IXSCAN
and its guarded `update` as a COLLSCAN, the opposite of what they cost), at the price of one round trip
more on MongoDB. Inside a transaction both steps run in its session (a concurrent writer then meets the
transaction's own write conflict).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from cms.errors import WriteConflict

GUARDED_WRITE_ATTEMPTS = 16
"""Most reads-then-writes of one document that `write_unchanged` tries before it gives up with
WriteConflict (each retry means another writer changed the document in between)."""

Document = dict[str, Any]


async def write_unchanged(read: Callable[[], Awaitable[Document | None]],
                          write: Callable[[Document], Awaitable[bool]]) -> Document | None:
    """Read the document (`read`: None when it is missing, or no longer the one the caller means),
    then `write` it guarded by what was read (True when the write matched: nothing changed in
    between); on a miss read again, up to GUARDED_WRITE_ATTEMPTS times. Returns the document as it
    was when the write landed, or None when `read` found none. Raises WriteConflict when every
    attempt lost to another writer; whatever `read` or `write` raise (nothing is written then)."""
    for _ in range(GUARDED_WRITE_ATTEMPTS):
        doc = await read()
        if doc is None:
            return None
        if await write(doc):
            return doc
    raise WriteConflict("The record kept changing while it was written; retry")
