"""How a record version becomes JSON (decisions.md, Drafts, versions and scheduled publishing):
`{version, created, by, data}`, and a page of them `{items, total, page, per_page}` like a page of
records. `data` holds the field values as a record shows them (`records.record_json`)."""

from __future__ import annotations

from typing import Any

from marshmallow import fields

from cms.models import Page, Record, RecordVersion
from cms.services.representation.base import Representation, Timestamp, dump_one
from cms.services.representation.records import SYSTEM_KEYS, record_json


class RecordVersionSchema(Representation):
    """One version of a record: `{version, created, by, data}`."""

    version = fields.Integer(metadata={"description": "counts up from 1 per record"})
    created = Timestamp(metadata={"description": "when the write this version records happened"})
    by = fields.String(allow_none=True, metadata={"description": "the writer's user id; null for the system"})
    data = fields.Method("_data", metadata={
        "type": "object", "additionalProperties": True,
        "description": "the record's field values as that write left them (relation ids as they were), as the "
                       "caller's field view rules show them"})

    def _data(self, version: RecordVersion) -> dict[str, Any]:
        return version_data(version)


class RecordVersionPageSchema(Representation):
    """One page of a record's versions, newest first: `{items, total, page, per_page}`."""

    items = fields.List(fields.Nested(RecordVersionSchema))
    total = fields.Integer(metadata={"description": "every version kept"})
    page = fields.Integer()
    per_page = fields.Integer()


_VERSION = RecordVersionSchema()
_VERSION_PAGE = RecordVersionPageSchema()


def version_data(version: RecordVersion) -> dict[str, Any]:
    """A version's `data` as JSON: its values rendered as a record's (`record_json`)."""
    body = record_json(Record(id=version.record_id, created=version.created, updated=version.created,
                              data=version.data))
    for key in SYSTEM_KEYS:
        body.pop(key, None)
    return body


def record_version(version: RecordVersion) -> dict[str, Any]:
    """`{version, created, by, data}`."""
    return dump_one(_VERSION, version)


def record_version_page(page: Page[RecordVersion]) -> dict[str, Any]:
    """`{items: [{version, created, by, data}], total, page, per_page}`."""
    return dump_one(_VERSION_PAGE, page)
