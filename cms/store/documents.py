"""Conversions between stored documents and `cms.models` values: `id` <-> `_id`; records as
documents (field values at the top level) and the names of the Mongo collections and indexes
that hold them."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from cms.models import DRAFT, PUBLISHED, DraftState, Record

T = TypeVar("T")

STATUS, PUBLISHED_AT, SCHEDULED_AT, SCHEDULE_ERROR, REVISION = (
    "_status", "_published_at", "_scheduled_at", "_schedule_error", "_rev")
"""The keys of a record's draft state (decisions.md, Drafts, versions and scheduled publishing): a
published copy of a collection with drafts carries PUBLISHED_AT; a working copy (`working_document`)
carries all five. Field names start with a letter, so `_`-keys never clash with one."""
SYSTEM_KEYS = frozenset({"_id", "created", "updated", STATUS, PUBLISHED_AT, SCHEDULED_AT, SCHEDULE_ERROR, REVISION})
"""The keys of a record's document that are not field values."""
UNIQUE_PREFIX = "unique_"
"""The name of the unique index of a record field `<name>` is `unique_<name>`."""


def to_document(value: Any) -> dict[str, Any]:
    """A dataclass as a document: its fields, with `id` stored as `_id`."""
    doc = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    doc["_id"] = doc.pop("id")
    return doc


def from_document(cls: type[T], doc: dict[str, Any]) -> T:
    """Build `cls` (a dataclass) from a document, ignoring stored keys the class does not have."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in doc.items() if k in names}
    values["id"] = doc["_id"]
    return cls(**values)


RECORDS_PREFIX = "records_"
"""Every records collection's MongoDB name starts so (`records_mongo_name`)."""


def records_mongo_name(collection_id: str) -> str:
    """The Mongo collection holding a CMS collection's records: `records_<id without dashes>`."""
    return f"{RECORDS_PREFIX}{collection_id.replace('-', '')}"


def collection_id_of(mongo_name: str) -> str | None:
    """The collection id whose records `records_mongo_name` keeps under `mongo_name`, or None when
    the name is not of that form (ids are UUIDs, stored without dashes)."""
    hex_part = mongo_name.removeprefix(RECORDS_PREFIX)
    if hex_part == mongo_name:
        return None
    try:
        parsed = uuid.UUID(hex=hex_part)
    except ValueError:
        return None
    return str(parsed) if parsed.hex == hex_part else None


WORKING_PREFIX = "drafts_"
"""Every working-copy collection's MongoDB name starts so (`working_mongo_name`)."""


def working_mongo_name(collection_id: str) -> str:
    """The Mongo collection holding the working copies of a collection with drafts:
    `drafts_<id without dashes>` (docs/concepts/drafts.md, Storage)."""
    return f"{WORKING_PREFIX}{collection_id.replace('-', '')}"


def record_from_document(doc: dict[str, Any]) -> Record:
    """A stored document as a Record: system keys apart, the rest in `data`; a document with draft
    keys (a published copy, or a working copy) gives the record its `state`."""
    data = {k: v for k, v in doc.items() if k not in SYSTEM_KEYS}
    state = None
    if STATUS in doc:
        state = DraftState(doc[STATUS], doc.get(PUBLISHED_AT), doc.get(SCHEDULED_AT), doc.get(SCHEDULE_ERROR),
                           doc.get(REVISION, 0))
    elif PUBLISHED_AT in doc:
        state = DraftState(PUBLISHED, doc[PUBLISHED_AT])
    return Record(id=doc["_id"], created=doc["created"], updated=doc["updated"], data=data, state=state)


def record_to_document(record: Record) -> dict[str, Any]:
    """A Record as a document (`data` values at the top level); a record with a `state` is stored as
    a published copy (its `published_at` under PUBLISHED_AT)."""
    doc = {"_id": record.id, "created": record.created, "updated": record.updated, **record.data}
    if record.state is not None:
        doc[PUBLISHED_AT] = record.state.published_at
    return doc


def state_document(state: DraftState) -> dict[str, Any]:
    """The draft keys of a working copy in `state` (REVISION apart, which writes raise with `$inc`)."""
    return {STATUS: state.status, PUBLISHED_AT: state.published_at, SCHEDULED_AT: state.scheduled_at,
            SCHEDULE_ERROR: state.schedule_error}


def working_document(record: Record) -> dict[str, Any]:
    """A working copy as a document: the record's values at the top level (as `record_to_document`, so
    filters and sorts read the same paths) and every key of its `state` (a draft without one)."""
    state = record.state or DraftState(DRAFT)
    return {"_id": record.id, "created": record.created, "updated": record.updated, **record.data,
            **state_document(state), REVISION: state.revision}


def record_after_update(record: Record, set_values: Mapping[str, Any], unset: Iterable[str]) -> Record:
    """`record` as MongoDB stores it after `{"$set": set_values, "$unset": unset}` (top-level
    names, or `field.key` inside an object, a localized field's locale; `updated` in `set_values`
    stamps the record, any other name is a field value), computed in memory: the one place that
    replays an update on a record read before it (single and bulk record updates, auth-collection
    user updates)."""
    changed = record_from_document(document_after_update(record_to_document(record), set_values, unset))
    return changed if record.state is None else dataclasses.replace(changed, state=record.state)


def document_after_update(doc: Mapping[str, Any], set_values: Mapping[str, Any], unset: Iterable[str],
                          inc: Mapping[str, int] | None = None) -> dict[str, Any]:
    """A copy of stored document `doc` as MongoDB stores it after `{"$set": set_values, "$unset":
    unset, "$inc": inc}` (names as `record_after_update`; `inc` top-level numbers): `record_after_update`
    on a record, and a working copy's guarded writes (working_copies.py) on its whole document."""
    changed = dict(doc)
    for name in unset:
        parent, _, key = name.partition(".")
        if not key:
            changed.pop(name, None)
        elif isinstance(changed.get(parent), dict):
            changed[parent] = {k: v for k, v in changed[parent].items() if k != key}
    for name, value in set_values.items():
        parent, _, key = name.partition(".")
        if not key:
            changed[name] = value
        else:
            nested = changed.get(parent)
            changed[parent] = {**(nested if isinstance(nested, dict) else {}), key: value}
    for name, step in (inc or {}).items():
        changed[name] = changed.get(name, 0) + step
    return changed
