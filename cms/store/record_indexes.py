"""The indexes of a records collection that the service manages beside `created_id`, the `unique_*`
indexes and the text index (issue 38): automatic ones (`auto_relation_<field>`, `auto_rule_<field>`)
and the ones an admin declared (`idx_<fields>`). `RecordRepository.sync_indexes` makes them match a
list of `IndexSpec`s; the service decides which (cms.services.content.indexes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure

from cms.errors import ValidationFailed
from cms.store.bulk import DUPLICATE_KEY

MANAGED_PREFIXES = ("auto_", "idx_")
"""Indexes whose names start so are the service's to create and drop (`sync_managed`)."""


@dataclass(frozen=True)
class IndexSpec:
    """One managed index: `name` (a MANAGED_PREFIXES name), `keys` as pymongo takes them (document
    paths, 1 ascending or -1 descending; a list value makes the index multikey by itself), `unique`
    (then partial over `present`: records without all of those paths do not collide), and `label`,
    how a refusal names it (the `errors` key: `indexes`, or a field name)."""

    name: str
    keys: tuple[tuple[str, int], ...]
    unique: bool = False
    present: tuple[str, ...] = ()
    label: str = "indexes"


def _matches(spec: IndexSpec, info: Mapping[str, Any]) -> bool:
    keys = tuple((str(path), int(direction)) for path, direction in info.get("key", []))
    return keys == spec.keys and bool(info.get("unique", False)) == spec.unique


async def sync_managed(mongo_coll: AsyncCollection[dict[str, Any]], existing: Mapping[str, Any],
                       wanted: Sequence[IndexSpec], *, background: bool) -> None:
    """Make the managed indexes of `mongo_coll` be `wanted`: create the missing ones (an index of the
    same name but other keys or uniqueness is dropped first), then drop the managed ones not wanted.
    `existing` is `index_information()`; `background`: pass `background: true` (the server accepts it:
    MongoDB before 4.2 then builds without blocking writes; 4.2 and later always do, and ignore it).

    Raises ValidationFailed (under `spec.label`, naming a duplicate value) when records already hold
    duplicates of a new unique index; the indexes created before it stay (the caller restores)."""
    names = {spec.name for spec in wanted}
    for spec in wanted:
        current = existing.get(spec.name)
        if current is not None and _matches(spec, current):
            continue
        if current is not None:
            await mongo_coll.drop_index(spec.name)
        options: dict[str, Any] = {"name": spec.name}
        if background:
            options["background"] = True
        if spec.unique:
            options["unique"] = True
            if spec.present:
                options["partialFilterExpression"] = {path: {"$exists": True} for path in spec.present}
        try:
            await mongo_coll.create_index(list(spec.keys), **options)
        except OperationFailure as exc:
            if exc.code == DUPLICATE_KEY:
                raise _duplicates(spec, exc) from None
            raise
    for index_name in existing:
        if index_name.startswith(MANAGED_PREFIXES) and index_name not in names:
            await drop_index_if_there(mongo_coll, index_name)


INDEX_NOT_FOUND = 27
"""The server's code for dropping an index that is not there."""


async def drop_index_if_there(mongo_coll: AsyncCollection[dict[str, Any]], index_name: str) -> None:
    """Drop the index `index_name`; one already gone (dropped meanwhile by another process syncing the
    same collection: the start-up sync, another replica) is no error."""
    try:
        await mongo_coll.drop_index(index_name)
    except OperationFailure as exc:
        if exc.code != INDEX_NOT_FOUND:
            raise


def _duplicates(spec: IndexSpec, exc: OperationFailure) -> ValidationFailed:
    """The 422 of a unique index refused over existing duplicates, naming one duplicate value (the
    server's `keyValue`, else its message)."""
    details = exc.details or {}
    value = details.get("keyValue")
    if isinstance(value, Mapping):
        shown = ", ".join(f"{'id' if path == '_id' else path}={value[path]!r}" for path in value)
    else:
        message = str(details.get("errmsg", ""))
        shown = message.split("dup key:", 1)[1].strip() if "dup key:" in message else "unknown"
    text = f"Existing records hold duplicate values ({shown})"
    return ValidationFailed(f"{text} for the unique index {spec.name}", errors={spec.label: [text]})
