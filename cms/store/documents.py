"""Conversions between stored documents and `cms.models` values: `id` <-> `_id`; records as
documents (field values at the top level) and the names of the Mongo collections and indexes
that hold them."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from cms.models import Record

T = TypeVar("T")

SYSTEM_KEYS = ("_id", "created", "updated")
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


def record_from_document(doc: dict[str, Any]) -> Record:
    """A stored document as a Record: system keys apart, the rest in `data`."""
    data = {k: v for k, v in doc.items() if k not in SYSTEM_KEYS}
    return Record(id=doc["_id"], created=doc["created"], updated=doc["updated"], data=data)


def record_to_document(record: Record) -> dict[str, Any]:
    """A Record as a document (`data` values at the top level)."""
    return {"_id": record.id, "created": record.created, "updated": record.updated, **record.data}


def record_after_update(record: Record, set_values: Mapping[str, Any], unset: Iterable[str]) -> Record:
    """`record` as MongoDB stores it after `{"$set": set_values, "$unset": unset}` (top-level
    names, or `field.key` inside an object, a localized field's locale; `updated` in `set_values`
    stamps the record, any other name is a field value), computed in memory: the one place that
    replays an update on a record read before it (single and bulk record updates, auth-collection
    user updates)."""
    doc = record_to_document(record)
    for name in unset:
        parent, _, key = name.partition(".")
        if not key:
            doc.pop(name, None)
        elif isinstance(doc.get(parent), dict):
            doc[parent] = {k: v for k, v in doc[parent].items() if k != key}
    for name, value in set_values.items():
        parent, _, key = name.partition(".")
        if not key:
            doc[name] = value
        else:
            nested = doc.get(parent)
            doc[parent] = {**(nested if isinstance(nested, dict) else {}), key: value}
    return record_from_document(doc)
