"""How a release becomes JSON (decisions.md, Drafts, versions and scheduled publishing: Releases;
docs/concepts/releases.md): `{id, name, items, status, scheduled_at, published_at, error, errors,
created, updated}`, and a page of them `{items, total, page, per_page}` like a page of records."""

from __future__ import annotations

from typing import Any

from marshmallow import fields, validate

from cms.models import RELEASE_FAILED, RELEASE_PENDING, RELEASE_PUBLISHED, RELEASE_SCHEDULED, Page, Release
from cms.services.representation.base import Representation, Timestamp, dump_one


class ReleaseItemSchema(Representation):
    """One item of a release: `{collection, collection_id, record_id}`."""

    collection = fields.String(metadata={"description": "the collection's name when the item was added"})
    collection_id = fields.String()
    record_id = fields.String()


class ReleaseSchema(Representation):
    """A release: `{id, name, items, status, scheduled_at, published_at, error, errors, created, updated}`."""

    id = fields.String()
    name = fields.String()
    items = fields.List(fields.Nested(ReleaseItemSchema))
    status = fields.String(validate=validate.OneOf([RELEASE_PENDING, RELEASE_SCHEDULED, RELEASE_PUBLISHED,
                                                    RELEASE_FAILED]),
                           metadata={"description": "pending, scheduled (`scheduled_at` set), published or failed "
                                                    "(its last publish failed: `error`, `errors`)"})
    scheduled_at = Timestamp(allow_none=True, metadata={"description": "its pending scheduled publish, or null"})
    published_at = Timestamp(allow_none=True, metadata={"description": "when it was published, or null"})
    error = fields.String(allow_none=True, metadata={"description": "why its last publish failed, or null"})
    errors = fields.Dict(keys=fields.String(), values=fields.List(fields.String()), metadata={
        "description": "the item that made its last publish fail, by index: `{\"items.3\": [message]}`; else {}"})
    created = Timestamp()
    updated = Timestamp()


class ReleasePageSchema(Representation):
    """One page of releases, newest first: `{items, total, page, per_page}`."""

    items = fields.List(fields.Nested(ReleaseSchema))
    total = fields.Integer()
    page = fields.Integer()
    per_page = fields.Integer()


_RELEASE = ReleaseSchema()
_RELEASE_PAGE = ReleasePageSchema()


def release(value: Release) -> dict[str, Any]:
    """A release as JSON."""
    return dump_one(_RELEASE, value)


def release_page(page: Page[Release]) -> dict[str, Any]:
    """`{items: [release], total, page, per_page}`."""
    return dump_one(_RELEASE_PAGE, page)
