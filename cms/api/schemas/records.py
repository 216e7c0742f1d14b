"""Request schemas of the records endpoints (spec: Records; decisions.md, Records, Batch writes); the
response shapes are `cms.services.representation.records`."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from cms.services.content.records import DEFAULT_PER_PAGE
from cms.services.content.value_fields import IsoDateTime


class RecordWriteSchema(Schema):
    """Body of a record create or update: `{data: {field: value}}`."""

    data = fields.Dict(required=True, metadata={"description": "Field values of the record"})


LOCALE_DESCRIPTION = ("decisions.md, Localized fields: the locale localized fields answer (their value there, else "
                      "the first value along its fallback chain, else null; default: the default locale), or `*` for "
                      "objects of locale code to value; on writes, the locale the values are for (`*`: objects that "
                      "replace the stored ones). Filters, sorts and searches read the same values. A locale that is "
                      "not configured is 400 `bad_request`; the answer's `Content-Language` names the locale")


class RecordLocaleQuerySchema(Schema):
    """`?locale=` (decisions.md, Localized fields)."""

    locale = fields.String(load_default=None, metadata={"description": LOCALE_DESCRIPTION, "example": "de"})


class RecordViewQuerySchema(RecordLocaleQuerySchema):
    """How the records of an answer are shown (decisions.md, Relations in one request; Localized fields):
    `expand`, `fields` and `locale`, on record list, view, create and update (and a batch request's URL)."""

    expand = fields.String(load_default=None, metadata={
        "description": "Relation paths whose records are embedded under each record's `expand`: field names joined "
                       "by `.` (at most 6 levels), or back-relations `<collection>_via_<field>`; at most 10 paths, "
                       "comma-separated. Records the caller may not view are left out. An unknown or non-relation "
                       "segment is 400 `invalid_filter`",
        "example": "author.team,comments_via_post"})
    field_names = fields.String(load_default=None, data_key="fields", metadata={
        "description": "Keys kept in each record (the list envelope is never narrowed): names, `*` (every top-level "
                       "field) and `expand.<segment>.<name>`; unknown names are ignored",
        "example": "id,title,expand.author.name"})


DRAFT_DOC = ("Collections with drafts only (400 elsewhere): true answers working copies (`status`, `scheduled_at`, the "
             "pending values) of the records the caller may update and view; without that right a view is 403 (401 "
             "without credentials) and a list is empty. Never cached")


def draft_flag() -> fields.Boolean:
    """The `draft` query parameter of record list and view."""
    return fields.Boolean(load_default=False, truthy={"true", "1"}, falsy={"false", "0"},
                          metadata={"description": DRAFT_DOC})


class RecordGetQuerySchema(RecordViewQuerySchema):
    """Query of a record view: the view (`expand`, `fields`) and `draft`."""

    draft = draft_flag()


class RecordPublishSchema(Schema):
    """Body of a publish: none (publish now) or `{"at": "<ISO 8601>"}` (schedule it)."""

    at = IsoDateTime(load_default=None, allow_none=True, metadata={
        "description": "When to publish (ISO 8601; naive means UTC); must be in the future (422 otherwise). "
                       "Replaces a pending schedule. Absent or null: publish now",
        "type": "string", "format": "date-time"})


class RecordListQuerySchema(RecordViewQuerySchema):
    """Query of a record list: page (1-based), per_page, sort, filter, search, skip_total, explain, and
    the view (`expand`, `fields`)."""

    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(load_default=DEFAULT_PER_PAGE, validate=validate.Range(min=1),
                              metadata={"description": "1..100; larger values are clamped to 100"})
    sort = fields.String(load_default=None, metadata={"description": "e.g. `-created,title`"})
    filter = fields.String(load_default=None, metadata={"description": "e.g. `status=published && views>10`"})
    search = fields.String(load_default=None, validate=validate.Length(max=500))
    skip_total = fields.Boolean(load_default=False, truthy={"true", "1"}, falsy={"false", "0"},
                                metadata={"description": "true: do not count the matches (`total` is -1)"})
    draft = draft_flag()
    explain = fields.Boolean(load_default=False, truthy={"true", "1"}, falsy={"false", "0"},
                             metadata={"description": "admins only (403 for others): true adds `explain`, how the "
                                       "database ran the page's query: {index (name or null), collection_scan, "
                                       "docs_examined, returned}; never cached; 400 when the server cannot explain"})


class VersionListQuerySchema(Schema):
    """Query of a record's versions: page (1-based) and per_page, as a record list's."""

    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(load_default=DEFAULT_PER_PAGE, validate=validate.Range(min=1),
                              metadata={"description": "1..100; larger values are clamped to 100"})


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


class RecordExportQuerySchema(RecordLocaleQuerySchema):
    """Query of a CSV export: sort, filter, search, locale (`*`: a column per locale, `title:de`)."""

    sort = fields.String(load_default=None, metadata={"description": "e.g. `-created,title`"})
    filter = fields.String(load_default=None, metadata={"description": "e.g. `status=published && views>10`"})
    search = fields.String(load_default=None, validate=validate.Length(max=500))
