"""Request schemas of the records endpoints (spec: Records; decisions.md, Records, Batch writes); the
response shapes are `cms.services.representation.records`."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from cms.services.content.records import DEFAULT_PER_PAGE


class RecordWriteSchema(Schema):
    """Body of a record create or update: `{data: {field: value}}`."""

    data = fields.Dict(required=True, metadata={"description": "Field values of the record"})


class RecordListQuerySchema(Schema):
    """Query of a record list: page (1-based), per_page, sort, filter, search, skip_total."""

    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(load_default=DEFAULT_PER_PAGE, validate=validate.Range(min=1),
                              metadata={"description": "1..100; larger values are clamped to 100"})
    sort = fields.String(load_default=None, metadata={"description": "e.g. `-created,title`"})
    filter = fields.String(load_default=None, metadata={"description": "e.g. `status=published && views>10`"})
    search = fields.String(load_default=None, validate=validate.Length(max=500))
    skip_total = fields.Boolean(load_default=False, truthy={"true", "1"}, falsy={"false", "0"},
                                metadata={"description": "true: do not count the matches (`total` is -1)"})


# --- records: bulk and CSV (issue 4) ----------------------------------------------------------


class BulkDeleteSchema(Schema):
    """Body of bulk-delete: `{record_ids}` (distinct, all or nothing)."""

    record_ids = fields.List(
        fields.String(validate=validate.Length(min=1, max=64)), required=True,
        metadata={"description": "1..1,000 distinct record ids (the `bulk_max_ids` setting); all or nothing",
                  "minItems": 1, "uniqueItems": True},
    )


class BulkUpdateSchema(BulkDeleteSchema):
    """Body of bulk-update: `{record_ids, data}`."""

    data = fields.Dict(required=True, metadata={"description": "Field values set on every record"})


class RecordExportQuerySchema(Schema):
    """Query of a CSV export: sort, filter, search."""

    sort = fields.String(load_default=None, metadata={"description": "e.g. `-created,title`"})
    filter = fields.String(load_default=None, metadata={"description": "e.g. `status=published && views>10`"})
    search = fields.String(load_default=None, validate=validate.Length(max=500))
