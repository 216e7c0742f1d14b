"""Loading a schema snapshot a client sends (decisions.md, Schema as code): the bodies of `POST
/api/v1/schema/diff` and `/schema/apply`, the admin UI's upload and the file of `cms schema diff|apply`
and SCHEMA_FILE all go through `load_snapshot`, so each accepts the same snapshots.

Each collection of a snapshot is loaded as the body of a collection create (`CollectionCreateSchema`):
a snapshot accepts exactly the attributes the collections API accepts, plus what a snapshot entry
carries instead of instance state (relations name their target by `collection`; a field may name
`renamed_from`; `id`, `created` and `updated`, as a collection read shows them, are ignored).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marshmallow import Schema, fields, validate

from cms.errors import ValidationFailed
from cms.security.json_input import JsonInputError, decode_json
from cms.services.content.schema_plan import WantedCollection
from cms.services.content.schema_snapshot import FORMAT, INSTANCE_KEYS
from cms.services.content.value_fields import StrictBoolean
from cms.web.context import load
from cms.web.schemas import RULE_NAMES, CollectionCreateSchema

MAX_SNAPSHOT_BYTES = 8 * 1024 * 1024
"""Largest snapshot accepted, in bytes of JSON (a request body of diff or apply, an upload, a file): about
30 times a 50-collection schema of 20 fields each."""
MAX_SNAPSHOT_COLLECTIONS = 1000
"""Most collections one snapshot may hold."""
HASH_LENGTH = 64
"""Characters of a snapshot hash (SHA-256, hex)."""


class SnapshotSchema(Schema):
    """A snapshot: `{"format": 1, "collections": [...]}` (a `hash` it carries, as exported, is ignored)."""

    format = fields.Integer(required=True, strict=True, validate=validate.Equal(
        FORMAT, error=f"This service reads snapshot format {FORMAT}."))
    collections = fields.List(fields.Dict(), required=True, validate=validate.Length(max=MAX_SNAPSHOT_COLLECTIONS),
                              metadata={"description": "Collections as `GET /schema` shows them"})
    hash = fields.String(load_default=None, validate=validate.Length(max=HASH_LENGTH),
                         metadata={"description": "Ignored (the hash of the instance it was exported from)"})


class SchemaApplySchema(Schema):
    """Body of an apply: `{"hash", "snapshot", "allow_data_loss"}`."""

    hash = fields.String(required=True, validate=validate.Length(equal=HASH_LENGTH), metadata={
        "description": "The hash `POST /schema/diff` answered (the instance's schema the diff was made against)"})
    snapshot = fields.Dict(required=True, metadata={"description": "The snapshot to apply (`GET /schema`'s shape)"})
    allow_data_loss = StrictBoolean(load_default=False, metadata={
        "description": "Accept the changes the diff marks `data_loss` (deleted collections and fields, "
                       "converted types: values that do not convert are cleared)"})


def load_snapshot(raw: Any) -> list[WantedCollection]:
    """The collections of snapshot `raw` (decoded JSON). Raises ValidationFailed (422) with `errors` under
    `format`, `collections` or `collections.<i>.<attribute>` (each collection loaded as a collection create
    body; its schema a list of field objects or `{fields}`)."""
    if not isinstance(raw, dict):
        raise ValidationFailed("A snapshot is a JSON object", errors={"snapshot": ["Must be an object."]})
    snapshot = load(SnapshotSchema(), raw)
    wanted: list[WantedCollection] = []
    errors: dict[str, list[str]] = {}
    for position, item in enumerate(snapshot["collections"]):
        where = f"collections.{position}"
        body = {key: value for key, value in item.items() if key not in INSTANCE_KEYS}
        try:
            loaded = load(CollectionCreateSchema(), body)
            schema = _field_list(loaded.pop("schema"))
        except ValidationFailed as exc:
            for key, messages in (exc.errors or {"": [exc.detail]}).items():
                errors.setdefault(f"{where}.{key}".rstrip("."), []).extend(messages)
            continue
        rules = {name: loaded.pop(name) for name in RULE_NAMES if name in loaded}
        wanted.append(WantedCollection(name=loaded.pop("name"), type=loaded.pop("type"), schema=schema,
                                       rules=rules, options=loaded))
    if errors:
        raise ValidationFailed("Invalid snapshot", errors=errors)
    return wanted


def _field_list(schema: Any) -> tuple[dict[str, Any], ...]:
    """A collection's `schema` (a list of field objects or `{fields}`) as its field objects."""
    if isinstance(schema, dict) and set(schema) <= {"fields"}:
        schema = schema.get("fields", [])
    if not isinstance(schema, list) or not all(isinstance(spec, dict) for spec in schema):
        raise ValidationFailed("Invalid schema", errors={"schema": ["Must be a list of field objects or {fields}."]})
    return tuple(schema)


def read_snapshot_file(path: Path) -> list[WantedCollection]:
    """The collections of the snapshot in file `path` (`cms schema diff|apply`, SCHEMA_FILE). Raises
    ValidationFailed: the file cannot be read, is over MAX_SNAPSHOT_BYTES, is not JSON, or not a valid
    snapshot (`load_snapshot`)."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as exc:
        raise ValidationFailed(f"Cannot read the snapshot {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SNAPSHOT_BYTES:
        raise ValidationFailed(f"The snapshot {path} is over {MAX_SNAPSHOT_BYTES:,} bytes")
    try:
        decoded = decode_json(raw)
    except JsonInputError as exc:
        raise ValidationFailed(f"The snapshot {path} is not JSON: {exc}") from None
    return load_snapshot(decoded)
