"""Request schema of the aggregate endpoint (decisions.md, Aggregation and view collections); the
answer's shape is `cms.services.representation.aggregates`."""

from __future__ import annotations

from marshmallow import fields, validate

from cms.api.schemas.records import RecordLocaleQuerySchema
from cms.filters.grouping import MAX_AGGREGATES, MAX_GROUP_FIELDS, MAX_PARAMETER_LENGTH
from cms.services.content.aggregates import DEFAULT_PER_PAGE, MAX_PER_PAGE


class AggregateQuerySchema(RecordLocaleQuerySchema):
    """Query of `GET .../aggregate`: filter, group_by, aggregates, sort, page (1-based), per_page, and
    `locale` (what a `filter` on a localized field reads, as in a list; unknown: 400)."""

    filter = fields.String(load_default=None, metadata={
        "description": "which records (the filter grammar, under the list rule and field rules)",
        "example": "status = 'paid'"})
    group_by = fields.String(load_default=None, validate=validate.Length(max=MAX_PARAMETER_LENGTH), metadata={
        "description": f"comma-separated fields (at most {MAX_GROUP_FIELDS}); a date field may add :year, :month, "
                       ":day or :hour (the key is the bucket's start, UTC). None: one group with the key {}",
        "example": "status,placed:month"})
    aggregates = fields.String(load_default=None, validate=validate.Length(max=MAX_PARAMETER_LENGTH), metadata={
        "description": f"comma-separated count(), count_distinct(f) (one per request), sum(f), avg(f), min(f), "
                       f"max(f) (at most {MAX_AGGREGATES}); named count, count_distinct_f, sum_f, avg_f, min_f, "
                       "max_f. Default count()",
        "example": "count(),sum(total)"})
    sort = fields.String(load_default=None, metadata={
        "description": "group keys or aggregate names, `-` for descending (default: the keys ascending)",
        "example": "-sum_total"})
    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(load_default=DEFAULT_PER_PAGE, validate=validate.Range(min=1),
                              metadata={"description": f"1..{MAX_PER_PAGE}; larger values are clamped"})
