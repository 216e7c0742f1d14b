"""The schema snapshot (decisions.md, Schema as code): every collection as the collections API shows it
(`representation.collection`, the one serializer of a collection definition), less what belongs to one
instance only, with relations naming their target collection by name instead of id; sorted by name;
canonical JSON bytes (sorted keys, no spaces, UTF-8) and their SHA-256.

    {"collections": [{"name": "posts", "type": "base", "schema": {"fields": [...]}, "indexes": [...],
                      "list_rule": "", ..., "otp_enabled": false, ...}],
     "format": 1, "hash": "<sha256 hex of the canonical bytes of {collections, format}>"}

A collection attribute added to the model and to its representation is in the snapshot without a change
here; only an attribute that holds a collection id needs a line in REFERENCES (and one that is instance
state, not schema, a line in INSTANCE_KEYS). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cms.models import Collection
from cms.services.representation.content import collection as collection_json
from cms.services.representation.schema import canonical_bytes

FORMAT = 1
"""The snapshot format this service writes and reads."""
INSTANCE_KEYS = ("id", "created", "updated")
"""Keys of a collection's representation that belong to one instance, not to the schema: left out."""


@dataclass(frozen=True)
class Reference:
    """A key of a collection's representation that holds a collection id: in the snapshot, `name_key`
    holds that collection's name instead (`field_level`: the key is on each field of `schema.fields`,
    else on the collection)."""

    id_key: str
    name_key: str
    field_level: bool


REFERENCES = (Reference("collection_id", "collection", field_level=True),)
"""Every place a collection id appears in a collection's representation (a relation field's target)."""


def entry(collection: Collection, name_of: Mapping[str, str]) -> dict[str, Any]:
    """One collection's snapshot entry: its representation without INSTANCE_KEYS, each REFERENCES id
    replaced by the name `name_of` gives it (None for an id it does not know)."""
    shown = {key: value for key, value in collection_json(collection).items() if key not in INSTANCE_KEYS}
    return swap_references(shown, lambda id_: name_of.get(id_), to_names=True)


def swap_references(shown: dict[str, Any], swap: Callable[[str], str | None], *, to_names: bool) -> dict[str, Any]:
    """`shown` (a representation or a snapshot entry) with every REFERENCES value passed through `swap`:
    `to_names` moves id keys to name keys (export), else name keys to id keys (apply). A key holding
    None stays None under its new name. A copy; `shown` is not changed."""
    result = _swapped(shown, swap, to_names=to_names, field_level=False)
    schema = result.get("schema")
    if isinstance(schema, dict) and isinstance(schema.get("fields"), list):
        result["schema"] = {**schema, "fields": [
            swap_field_references(f, swap, to_names=to_names) if isinstance(f, dict) else f
            for f in schema["fields"]]}
    return result


def swap_field_references(spec: dict[str, Any], swap: Callable[[str], str | None], *,
                          to_names: bool) -> dict[str, Any]:
    """One field entry with its REFERENCES swapped as `swap_references` does. A copy."""
    return _swapped(spec, swap, to_names=to_names, field_level=True)


def _swapped(part: dict[str, Any], swap: Callable[[str], str | None], *, to_names: bool,
             field_level: bool) -> dict[str, Any]:
    part = dict(part)
    for ref in REFERENCES:
        if ref.field_level != field_level:
            continue
        source, target = (ref.id_key, ref.name_key) if to_names else (ref.name_key, ref.id_key)
        if source in part:
            value = part.pop(source)
            part[target] = swap(value) if isinstance(value, str) else None
    return part


def entries(collections: Iterable[Collection]) -> list[dict[str, Any]]:
    """The snapshot entries of `collections` (a whole instance: references resolve among them), by name."""
    items = sorted(collections, key=lambda c: c.name)
    name_of = {c.id: c.name for c in items}
    return [entry(c, name_of) for c in items]


def snapshot_hash(collection_entries: Sequence[dict[str, Any]]) -> str:
    """The SHA-256 (hex) of the canonical bytes of `{"collections": collection_entries, "format": FORMAT}`."""
    return hashlib.sha256(canonical_bytes({"collections": list(collection_entries), "format": FORMAT})).hexdigest()


def snapshot(collections: Iterable[Collection]) -> dict[str, Any]:
    """The snapshot of an instance holding `collections`: `{"collections", "format", "hash"}`."""
    items = entries(collections)
    return {"collections": items, "format": FORMAT, "hash": snapshot_hash(items)}


def field_entries(collection_entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The field entries of a collection's snapshot entry (`schema.fields`), in schema order."""
    fields: list[dict[str, Any]] = collection_entry.get("schema", {}).get("fields", [])
    return fields
