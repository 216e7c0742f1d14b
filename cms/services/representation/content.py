"""How collections and files become JSON (decisions.md, Response shapes: collection, file). Records:
records.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from marshmallow import fields

from cms.models import Collection, SlowQuery, StoredFile
from cms.services.representation.base import Representation, SameObject, Timestamp, dump_many, dump_one

FIELD_TYPES = ["text", "editor", "bool", "email", "url", "number", "date", "select", "json", "relation", "file"]


def rule_description(action: str) -> str:
    """What the `<action>_rule` of a collection means, for the document (requests and responses)."""
    if action == "email_view":
        return EMAIL_VIEW_RULE
    return (f"Who may {action} records: null = admins only, \"\" = everyone, or a rule expression "
            "(filter grammar with @request.auth.* and, for create/update, @request.data.*)")


FIELD_VIEW_RULE = ("Who sees this field's value on a record: \"\" = whoever sees the record, null = admins only "
                   "(an unknown field to everyone else), or a rule expression evaluated per record and caller")
FIELD_WRITE_RULE = ("Who may set this field in a create or update: \"\" = whoever may write the record, null = "
                    "admins only, or a rule expression (with @request.data.*); refused writes are 403")
EMAIL_VIEW_RULE = ("Auth collections: who sees a user's email (a field view rule; default: the user themself). "
                   "Base collections ignore it")


class FieldValidationSchema(Representation):
    """A field's validation: `{required, min, max, pattern, unique}`."""

    required = fields.Boolean()
    min = fields.Raw(allow_none=True, metadata={"type": "number"})
    max = fields.Raw(allow_none=True, metadata={"type": "number"})
    pattern = fields.String(allow_none=True)
    unique = fields.Boolean()


class FieldSpecSchema(Representation):
    """A field of a collection's schema."""

    name = fields.String()
    type = fields.String(metadata={"enum": FIELD_TYPES})
    validation = fields.Nested(FieldValidationSchema)
    values = fields.List(fields.String(), allow_none=True)
    max_select = fields.Integer(allow_none=True)
    collection_id = fields.String(allow_none=True)
    cascade_delete = fields.Boolean(metadata={"description": "relation: deleting a target record deletes the "
                                              "records pointing to it (else the reference is removed)"})
    view_rule = fields.String(allow_none=True, metadata={"description": FIELD_VIEW_RULE})
    write_rule = fields.String(allow_none=True, metadata={"description": FIELD_WRITE_RULE})
    localized = fields.Boolean(metadata={"description": "decisions.md, Localized fields: the value is stored per "
                                         "locale (an object of locale code to value); reads answer the `?locale=` "
                                         "asked, with its fallbacks; any type but relation"})
    max_size = fields.Integer(allow_none=True, metadata={"description": "file: the largest file, in bytes"})
    mime_types = fields.List(fields.String(), allow_none=True, metadata={
        "description": "file: the accepted types (`image/*`, `application/pdf`), checked on the bytes' signature"})
    thumbs = fields.List(fields.String(), allow_none=True, metadata={
        "description": "file: thumbnail sizes besides `100x100` (`WxH`, `WxHt`, `WxHb`, `WxHf`, `0xH`, `Wx0`)"})
    protected = fields.Boolean(metadata={"description": "file: downloads need a file token (`?token=`)"})


class CollectionSchemaSchema(Representation):
    """A collection's `schema`: `{fields: [...]}`."""

    fields_ = fields.List(fields.Nested(FieldSpecSchema), data_key="fields", attribute="fields")


class IndexDeclarationSchema(Representation):
    """A declared index: `{fields, unique}` as given (`-` prefix: descending)."""

    fields_ = fields.List(fields.String(), data_key="fields", attribute="fields")
    unique = fields.Boolean()


class ViewDefinitionSchema(Representation):
    """A view collection's definition: `{source, filter, group_by, aggregates}` (strings, "" for none)."""

    source = fields.String(metadata={"description": "the collection whose records are grouped"})
    filter = fields.String(metadata={"description": "which of its records (the filter grammar)"})
    group_by = fields.String(metadata={"description": "the key fields; a date field may add :year, :month, :day "
                                                     "or :hour"})
    aggregates = fields.String(metadata={"description": "count(), count_distinct(f), sum(f), avg(f), min(f), max(f)"})


def _rule(action: str) -> fields.String:
    return fields.String(attribute=f"rules.{action}_rule", allow_none=True,
                         metadata={"description": rule_description(action)})


class CollectionSchema(Representation):
    """A collection: `schema` is always an object `{fields: [...]}`; the five rules sit at the top. A
    view (type `view`) has `view`, and its `schema` lists its records' fields as they follow from it."""

    id = fields.String()
    name = fields.String()
    type = fields.String(metadata={"enum": ["base", "auth", "view"]})
    schema = SameObject(CollectionSchemaSchema)
    view = fields.Nested(ViewDefinitionSchema, allow_none=True, metadata={
        "description": "type view only (else null): what its records are; its `schema` lists their fields "
                       "(keys, then aggregates), read-only"})
    indexes = fields.List(fields.Nested(IndexDeclarationSchema),
                          metadata={"description": "Declared indexes, as given; the automatic ones are not listed"})
    drafts = fields.Boolean(metadata={"description": "Records have a published copy and a working copy"})
    otp_enabled = fields.Boolean()
    mfa_enabled = fields.Boolean()
    oauth_enabled = fields.Boolean()
    versions = fields.Integer(metadata={"description": "Versions kept per record (0: none)"})
    list_rule = _rule("list")
    view_rule = _rule("view")
    create_rule = _rule("create")
    update_rule = _rule("update")
    delete_rule = _rule("delete")
    email_view_rule = fields.String(attribute="rules.email_view_rule", allow_none=True,
                                    metadata={"description": EMAIL_VIEW_RULE})
    created = Timestamp()
    updated = Timestamp()


class SlowQuerySchema(Representation):
    """A slow query shape every replica reported (issue 38): `{id, collection, collection_id, shape,
    count, max_ms, last_ms, last_seen, suggested_index}`."""

    id = fields.String()
    collection = fields.String(metadata={"description": "collection name"})
    collection_id = fields.String()
    shape = fields.String(attribute="shape.text",
                          metadata={"description": "the query's filter and sort: field names and operators, "
                                                   "never values, e.g. `{status: $eq, views: $gte} sort -created`"})
    count = fields.Integer(metadata={"description": "slow runs seen (every replica)"})
    max_ms = fields.Float(metadata={"description": "the longest run (milliseconds)"})
    last_ms = fields.Float(metadata={"description": "the last run (milliseconds)"})
    last_seen = Timestamp()
    suggested_index = fields.Nested(IndexDeclarationSchema, allow_none=True,
                                    metadata={"description": "the declared index that would serve the query "
                                                             "(ESR rule); null when an index already does or "
                                                             "none can"})


class FileSchema(Representation):
    """A stored file: `{id, filename, content_type, size, collection, record_id, field, created}`."""

    id = fields.String()
    filename = fields.String(metadata={"description": "the uploaded name without path parts or control "
                                                      "characters, at most 255 characters"})
    content_type = fields.String(metadata={"description": "the type of the bytes' signature; for a type without "
                                                          "one, the part's Content-Type (`type/subtype`), else "
                                                          "application/octet-stream"})
    size = fields.Integer(metadata={"description": "bytes"})
    collection = fields.String(metadata={"description": "collection name"})
    record_id = fields.String()
    field = fields.String(allow_none=True, metadata={"description": "the file field it was uploaded for (null: none)"})
    created = Timestamp()


class FileTokenSchema(Representation):
    """A file token: `{token, expires}`."""

    token = fields.String(metadata={"description": "`?token=` of a file download; bound to the caller"})
    expires = Timestamp(metadata={"description": "when it stops being valid (2 minutes after it was issued)"})


_COLLECTION = CollectionSchema()
_FILE = FileSchema()
_SLOW_QUERY = SlowQuerySchema()
_FILE_TOKEN = FileTokenSchema()


def collection(c: Collection) -> dict[str, Any]:
    """`{id, name, type, schema: {fields}, view, indexes, drafts, otp_enabled, mfa_enabled, oauth_enabled, versions,
    <action>_rule x5, created, updated}`."""
    return dump_one(_COLLECTION, c)


def collections(items: Sequence[Collection]) -> list[dict[str, Any]]:
    """Each collection as `collection` shows it, in order."""
    return dump_many(_COLLECTION, items)


def file(f: StoredFile) -> dict[str, Any]:
    """`{id, filename, content_type, size (bytes), collection (name), record_id, field, created}`."""
    return dump_one(_FILE, f)


def slow_query(entry: SlowQuery) -> dict[str, Any]:
    """`{id, collection, collection_id, shape, count, max_ms, last_ms, last_seen, suggested_index:
    {fields, unique} or null}`."""
    return dump_one(_SLOW_QUERY, entry)


def slow_queries(items: Sequence[SlowQuery]) -> list[dict[str, Any]]:
    """Each entry as `slow_query` shows it, in order."""
    return dump_many(_SLOW_QUERY, items)


def file_token(token: str, expires: datetime) -> dict[str, Any]:
    """`{token, expires}`."""
    return dump_one(_FILE_TOKEN, {"token": token, "expires": expires})
