"""Bulk writes of the store: ids in `$in`-sized chunks, the records a bulk insert refused
(`InsertFailure`), and a failed bulk update as a CmsError."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pymongo.errors import BulkWriteError

from cms.errors import AlreadyExists
from cms.store.documents import UNIQUE_PREFIX

T = TypeVar("T")

DUPLICATE_KEY = 11000
"""The server's error code of a duplicate key (a unique index refused a write)."""
ID_CHUNK = 100
"""Ids per `$in` list. Bulk reads send one find per chunk, bulk writes one command holding one
statement per chunk. Real MongoDB serves a long `$in` from the `_id` index either way, but the
embedded SecantusDB matches every document against every listed id (1,000 ids: about 1 s for a
find, 3 s for an update; in chunks of 100: 0.15 s and 0.3 s)."""


@dataclass(frozen=True)
class InsertFailure:
    """A record of a bulk insert that was not stored: `index` into the records given, `field` the
    unique field whose index refused it (None when the server names none), `code` the server's
    error code (11000 for a duplicate key) and its `message`."""

    index: int
    field: str | None
    code: int
    message: str


def write_failure(error: Mapping[str, Any]) -> InsertFailure:
    """One `writeErrors` entry of a bulk insert as an InsertFailure."""
    code = int(error.get("code", 0))
    pattern = error.get("keyPattern") or {}
    field_name = str(next(iter(pattern))) if pattern else None
    message = str(error.get("errmsg", ""))
    if field_name is None and code == DUPLICATE_KEY and f"index: {UNIQUE_PREFIX}" in message:
        field_name = message.split(f"index: {UNIQUE_PREFIX}", 1)[1].split()[0]
    return InsertFailure(index=int(error["index"]), field=field_name, code=code, message=message)


def chunks(items: Sequence[T]) -> list[list[T]]:
    """`items` (ids, or documents of one bulk write) in lists of at most ID_CHUNK, in order."""
    values = list(items)
    return [values[i:i + ID_CHUNK] for i in range(0, len(values), ID_CHUNK)]


def bulk_write_error(exc: BulkWriteError) -> Exception:
    """A failed bulk update as a CmsError: a duplicate key becomes AlreadyExists naming the field."""
    errors = exc.details.get("writeErrors", [])
    if errors and errors[0].get("code") == DUPLICATE_KEY:
        failure = write_failure(errors[0])
        if failure.field:
            return AlreadyExists(f"A record with this {failure.field} already exists",
                                 errors={failure.field: ["Value must be unique"]})
        return AlreadyExists("This record already exists")
    return exc
