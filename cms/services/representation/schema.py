"""How schema snapshots and their diffs become JSON (decisions.md, Schema as code). The snapshot's bytes are
canonical (`canonical_bytes`: the same schema gives the same bytes on any instance);
these shapes are what /openapi.json documents of them."""

from __future__ import annotations

import json
from typing import Any

from marshmallow import fields

from cms.services.representation.base import Representation

SNAPSHOT_ENTRY_DOC = ("A collection as `GET /collections/{id}` shows it, without `id`, `created` and `updated`; "
                      "a relation field names its target by `collection` (a name) instead of `collection_id`. "
                      "In a snapshot sent to diff or apply, a field may carry `renamed_from`: the stored field "
                      "whose values it keeps")


class SchemaSnapshotSchema(Representation):
    """A snapshot: `{collections, format, hash}`; collections by name."""

    collections = fields.List(fields.Dict(), metadata={"description": SNAPSHOT_ENTRY_DOC})
    format = fields.Integer(metadata={"description": "The snapshot format: 1"})
    hash = fields.String(metadata={"description": "SHA-256 (hex) of the canonical JSON of {collections, format}"})


class SchemaChangeSchema(Representation):
    """One change of a diff."""

    op = fields.String(metadata={"enum": ["create", "update", "delete"]})
    collection = fields.String()
    field = fields.String(allow_none=True, metadata={"description": "null: the collection itself"})
    from_ = fields.Raw(data_key="from", attribute="from", allow_none=True,
                       metadata={"description": "What changes, before (null for a create)"})
    to = fields.Raw(allow_none=True, metadata={"description": "What changes, after (null for a delete)"})
    data_loss = fields.Boolean(metadata={"description": "Stored data is removed or converted: the apply needs "
                                                        "allow_data_loss"})


class SchemaDiffSchema(Representation):
    """A diff: `{hash, changes}`."""

    hash = fields.String(metadata={"description": "The instance's current hash: send it to apply"})
    changes = fields.List(fields.Nested(SchemaChangeSchema))


def canonical_bytes(value: Any) -> bytes:
    """`value` (JSON-safe) as canonical JSON: keys sorted, no whitespace, UTF-8, no NaN (the bytes a snapshot's
    hash is taken of, and the body of `GET /schema`)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def snapshot_bytes(snapshot: dict[str, Any]) -> bytes:
    """A snapshot's canonical JSON bytes (the body of `GET /schema` and of an apply's answer)."""
    return canonical_bytes(snapshot)


_DIFF = SchemaDiffSchema()


def schema_diff(diff: dict[str, Any]) -> dict[str, Any]:
    """`{hash, changes: [{op, collection, field, from, to, data_loss}]}`."""
    result: dict[str, Any] = _DIFF.dump(diff)
    return result
