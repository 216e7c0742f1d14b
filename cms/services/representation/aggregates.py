"""How an aggregation's answer becomes JSON (decisions.md, Aggregation and view collections):
`{items: [{key: {name: value}, <aggregate name>: value}], total, page, per_page}`, dates (a bucket's
start, a `min` or `max` of a date) as ISO 8601 UTC with milliseconds and `Z`, like records. The
schemas here are what /openapi.json documents; `aggregate_page_bytes` writes the bytes the read cache
keeps and the API sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from marshmallow import INCLUDE, fields

from cms.services.content.fields import to_json_value
from cms.services.representation.base import Rendered, Representation


class AggregateGroupSchema(Representation):
    """One group: `key` (group key name -> value; `{}` without `group_by`) and each aggregate by its name
    (`count`, `count_distinct_f`, `sum_f`, `avg_f`, `min_f`, `max_f`) beside it."""

    class Meta:
        """marshmallow options."""

        unknown = INCLUDE  # documents additionalProperties: the aggregates sit beside `key`

    key = fields.Dict(metadata={"description": "the group's key: each group_by name (`placed:month` for a bucket, "
                                               "its start in ISO 8601) -> its value",
                                "example": {"published": True}})


class AggregatePageSchema(Representation):
    """One page of groups: `{items, total, page, per_page}`, `total` counting every group."""

    items = fields.List(Rendered(AggregateGroupSchema), metadata={
        "description": "the groups of the page, in order", "example": [{"key": {"published": True}, "count": 12,
                                                                       "sum_views": 340}]})
    total = fields.Integer(metadata={"description": "the number of groups"})
    page = fields.Integer()
    per_page = fields.Integer()


def group_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A group `{key: {...}, <aggregate>: value}` with JSON-safe values."""
    return {"key": {name: to_json_value(value) for name, value in row["key"].items()},
            **{name: to_json_value(value) for name, value in row.items() if name != "key"}}


def aggregate_page_bytes(rows: Sequence[Mapping[str, Any]], *, total: int, page: int, per_page: int) -> bytes:
    """The answer of an aggregation as JSON bytes (see the module docstring)."""
    return orjson.dumps({"items": [group_json(row) for row in rows], "total": total, "page": page,
                         "per_page": per_page})
