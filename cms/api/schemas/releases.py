"""Request schemas of `/api/v1/releases` (decisions.md, Drafts, versions and scheduled publishing:
Releases); the response shapes are `cms.services.representation.releases`."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from cms.api.schemas.records import RecordPublishSchema, VersionListQuerySchema
from cms.services.content.releases import MAX_RELEASE_ITEMS, MAX_RELEASE_NAME

MAX_ID_LENGTH = 200
"""Characters of a collection name or record id in a release item (longer names nothing)."""


class ReleaseItemInputSchema(Schema):
    """One item of a release: `{collection, record_id}` (a collection with drafts, an existing record)."""

    collection = fields.String(required=True, validate=validate.Length(min=1, max=MAX_ID_LENGTH))
    record_id = fields.String(required=True, validate=validate.Length(min=1, max=MAX_ID_LENGTH))


def _items(**kwargs: Any) -> fields.List[Any]:
    return fields.List(fields.Nested(ReleaseItemInputSchema), validate=validate.Length(max=MAX_RELEASE_ITEMS),
                       metadata={"description": f"at most {MAX_RELEASE_ITEMS:,}; each record once; errors name an item "
                                                "by its index (`items.3`)"}, **kwargs)


class ReleaseCreateSchema(Schema):
    """Body of a release create: `{name, items}`."""

    name = fields.String(required=True, validate=validate.Length(min=1, max=MAX_RELEASE_NAME))
    items = _items(required=True)


class ReleaseUpdateSchema(Schema):
    """Body of a release change: `{name?, items?}` (items replace the release's)."""

    name = fields.String(load_default=None, validate=validate.Length(min=1, max=MAX_RELEASE_NAME))
    items = _items(load_default=None)


class ReleasePublishSchema(RecordPublishSchema):
    """Body of a release's publish: none (publish now) or `{"at": "<ISO 8601>"}` (schedule it), as a record's."""


class ReleaseListQuerySchema(VersionListQuerySchema):
    """Query of the releases' list: page (1-based) and per_page, as a record list's."""
