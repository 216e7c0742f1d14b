"""How a record becomes JSON (spec: Records, Events; decisions.md, Response shapes: record): the one
entry point for every caller that shows a record. REST answers (cms/api/records.py), the read cache's
bytes (`record_page_bytes`, `record_bytes`: content/record_reads.py builds the cached list and view
bodies with them, and `read_record_page` / `read_record` are their inverses for the admin UI), record
events and webhook payloads (`RecordEvent.data`, `event_body`), the create rule's `@request.data`,
and auth-collection users (`collection_user`).

A record is `{id, created, updated, ...fields}`: the system fields, then its collection's own fields
(flat; dates as ISO 8601 UTC with milliseconds and `Z`). `RecordSchema` declares the system fields
`record_json` writes and is what /openapi.json documents as `Record`; the page, bulk and CSV answers
are dumped by their schemas. How a record is shown (`RecordView`: `expand` and `fields`, record_view.py)
is an argument of every function here, with the related records loaded for it (`Expanded` trees, from
`content/expansion.py`): each record gains `expand: {segment: record or [records]}` and is then
narrowed to `fields` (decisions.md, Relations in one request).

    from cms.services import representation as represent
    return json_response(represent.record_json(record), status=201)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from marshmallow import INCLUDE, fields

from cms.models import Collection, DraftState, FieldSpec, Page, QueryPlan, Record
from cms.services.content.fields import to_json_value
from cms.services.representation.base import Rendered, Representation, Timestamp, dump_one
from cms.services.representation.record_view import FULL, Expanded, RecordView

if TYPE_CHECKING:  # the services import this module: only their types here
    from cms.services.content.csv_io import ImportResult
    from cms.services.delivery.events import RecordEvent


class RecordSchema(Representation):
    """A record: the system fields, then the collection's own fields beside them (flat).

    `record_json` renders it: each field declared here from the record's attribute of that name,
    then `Record.data`, every value through `to_json_value` (what `Timestamp` does), in one pass
    (a marshmallow dump per record would double what a cache miss of a 100-record page costs)."""

    class Meta:
        """marshmallow options."""

        unknown = INCLUDE  # documents additionalProperties: the collection's fields sit beside these
        # `expand` only with `?expand=` (and a visible related record); the draft keys only in collections with drafts
        optional = ("expand", "status", "published_at", "scheduled_at", "schedule_error")

    id = fields.String()
    created = Timestamp()
    updated = Timestamp()
    status = fields.String(metadata={
        "enum": ["draft", "published", "changed"],
        "description": "Only in collections with drafts: `draft` (never published, or unpublished), `published` (no "
                       "pending change), `changed` (published, with a pending working copy). Readers see published "
                       "copies only, always `published`; `?draft=true` shows the working state"})
    published_at = Timestamp(allow_none=True, metadata={
        "description": "Only in collections with drafts: when the published copy was last published (null: never)"})
    scheduled_at = Timestamp(allow_none=True, metadata={
        "description": "Only in collections with drafts: when a scheduled publish will run (null: none; readers "
                       "always see null)"})
    schedule_error = fields.String(allow_none=True, metadata={
        "description": "Only in a working copy whose last scheduled publish failed validation: why"})
    expand = fields.Dict(metadata={
        "description": "Only with `?expand=`: relation segment -> the related record (a relation holding at most "
                       "one id) or an array of records (more, and back-relations `<collection>_via_<field>`); "
                       "records the caller may not view are left out, and so is a segment with none",
        "example": {"author": {"id": "u1", "name": "Ada"}}})


SYSTEM_KEYS = ("id", "created", "updated")
"""The record attributes `record_json` writes first, in order (`expand` is added only when asked)."""
DRAFT_KEYS = ("status", "published_at", "scheduled_at", "schedule_error")
"""The keys `record_json` writes after SYSTEM_KEYS for a record with a draft state (`schedule_error` only
when there is one); a collection with drafts reserves them as field names."""


class RecordPageSchema(Representation):
    """One page of records: `{items, total, page, per_page}` (`total` -1 with skip_total)."""

    items = fields.List(Rendered(RecordSchema), metadata={"description": "the records of the page, in order"})
    total = fields.Integer(metadata={"description": "every match; -1 with skip_total"})
    page = fields.Integer()
    per_page = fields.Integer()


class BulkDeletedSchema(Representation):
    """Answer of bulk-delete: `{deleted: n}`."""

    deleted = fields.Integer()


class BulkUpdatedSchema(Representation):
    """Answer of bulk-update: `{updated: n}`."""

    updated = fields.Integer()


class CsvImportFailureSchema(Representation):
    """One refused CSV row: `{row, errors}`."""

    row = fields.Integer(metadata={"description": "1-based data-row number (the header is not counted)"})
    errors = fields.Dict(metadata={"description": "field name (or `_row`) -> list of messages"})


class CsvImportResultSchema(Representation):
    """Answer of a CSV import: `{imported: n, failed: [{row, errors}]}`."""

    imported = fields.Integer()
    failed = fields.List(fields.Nested(CsvImportFailureSchema))


_RECORD_PAGE = RecordPageSchema()
_BULK_DELETED = BulkDeletedSchema()
_BULK_UPDATED = BulkUpdatedSchema()
_CSV_IMPORT = CsvImportResultSchema()


def record_json(record: Record, view: RecordView = FULL, expanded: Sequence[Expanded] = ()) -> dict[str, Any]:
    """`{id, created, updated, ...fields}` with JSON-safe values, as `view` shows it: with
    `expand: {segment: record | [records]}` when `expanded` (the related records `view.expand`
    loaded) holds any for this record (no `expand` key otherwise), then narrowed to `view.fields`."""
    body: dict[str, Any] = {key: to_json_value(getattr(record, key)) for key in SYSTEM_KEYS}
    state = record.state
    if state is not None:
        body["status"] = state.status
        body["published_at"] = to_json_value(state.published_at)
        body["scheduled_at"] = to_json_value(state.scheduled_at)
        if state.schedule_error is not None:
            body["schedule_error"] = state.schedule_error
    for key, value in record.data.items():
        body[key] = _json_value(value)
    if expanded:
        expand = _expand_json(record.id, expanded)
        if expand:
            body["expand"] = expand
    return body if view.fields is None else view.fields.pick(body)


def _json_value(value: Any) -> Any:
    """A field's stored value as JSON: one value, a list of them, or a localized field's object of locale
    to either (decisions.md, Localized fields)."""
    if isinstance(value, list):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return to_json_value(value)


_WRITTEN_JSON = "_cms_written_json"
"""The attribute under which `written_record_json` keeps a written record's JSON on the record."""


def written_record_json(record: Record) -> dict[str, Any]:
    """`record_json(record)` (FULL) of a record just written, computed once per record object: the
    record event carries it (`RecordEvent.data`) and the write's answer (a create's 201 body, an
    update's 200) sends the same one. A `Record` never changes (frozen, its `data` is never changed
    in place), and neither reader changes the JSON, so they may share it."""
    shown: dict[str, Any] | None = record.__dict__.get(_WRITTEN_JSON)
    if shown is None:
        shown = record.__dict__[_WRITTEN_JSON] = record_json(record)
    return shown


def record_from_json(body: dict[str, Any], collection: Collection) -> Record:
    """The inverse of `record_json` (FULL view) for a record of `collection`: `created`, `updated` and
    the values of its date fields back to aware datetimes, the draft keys (a collection with drafts)
    back to its `state`, everything else as is. Raises KeyError (no `id`) or ValueError (a date that
    is not ISO 8601)."""
    dates = {spec.name for spec in collection.fields if spec.type == "date"}
    data: dict[str, Any] = {}
    for key, value in body.items():
        if key in SYSTEM_KEYS or key == "expand" or (collection.drafts and key in DRAFT_KEYS):
            continue
        if key in dates and value is not None:
            value = _datetimes(value)
        data[key] = value
    created, updated = body.get("created"), body.get("updated")
    return Record(id=body["id"], created=_datetime(created) if created else _EPOCH,
                  updated=_datetime(updated) if updated else _EPOCH, data=data,
                  state=_state_from_json(body) if collection.drafts else None)


def _state_from_json(body: dict[str, Any]) -> DraftState | None:
    """The draft state `record_json` wrote into `body` (None when it wrote none)."""
    status = body.get("status")
    if not isinstance(status, str):
        return None
    published_at, scheduled_at = body.get("published_at"), body.get("scheduled_at")
    return DraftState(status, _datetime(published_at) if published_at else None,
                      _datetime(scheduled_at) if scheduled_at else None, body.get("schedule_error"))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _datetimes(value: Any) -> Any:
    """A date field's JSON value back to datetimes: one, a list, or a localized field's object of them."""
    if isinstance(value, dict):
        return {code: None if item is None else _datetimes(item) for code, item in value.items()}
    return [_datetime(v) for v in value] if isinstance(value, list) else _datetime(value)


def _datetime(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _expand_json(record_id: str, expanded: Sequence[Expanded]) -> dict[str, Any]:
    """`{segment: record | [records]}` of the segments with visible records related to `record_id`."""
    expand: dict[str, Any] = {}
    for segment in expanded:
        related = segment.related.get(record_id)
        if not related:
            continue
        shown = [record_json(r, FULL, segment.children) for r in related]
        expand[segment.segment] = shown if segment.many else shown[0]
    return expand


def record_page(page: Page[Record], view: RecordView = FULL, expanded: Sequence[Expanded] = ()) -> dict[str, Any]:
    """`{items: [record_json], total, page, per_page}` (`total` -1 when not counted); the envelope
    is never narrowed by `view.fields`, its records are."""
    return dump_one(_RECORD_PAGE, {"items": [record_json(r, view, expanded) for r in page.items],
                                   "total": page.total, "page": page.page, "per_page": page.per_page})


def query_plan(plan: QueryPlan) -> dict[str, Any]:
    """`{index: name or null, collection_scan, docs_examined, returned}` (decisions.md, Indexes and query plans)."""
    return {"index": plan.index, "collection_scan": plan.collection_scan, "docs_examined": plan.docs_examined,
            "returned": plan.returned}


def record_bytes(record: Record, view: RecordView = FULL, expanded: Sequence[Expanded] = ()) -> bytes:
    """`record_json` encoded: the bytes the read cache keeps and the API sends for a view."""
    return orjson.dumps(record_json(record, view, expanded))


def record_page_bytes(page: Page[Record], view: RecordView = FULL, expanded: Sequence[Expanded] = ()) -> bytes:
    """`record_page` encoded: the bytes the read cache keeps and the API sends for a list."""
    return orjson.dumps(record_page(page, view, expanded))


def view_record_json(row: Mapping[str, Any], fields: Sequence[FieldSpec], view: RecordView = FULL) -> dict[str, Any]:
    """A view collection's record (decisions.md, Aggregation and view collections): `{id, <key fields>,
    <aggregates>}` in the order of the view's `fields`, values as `record_json` writes them; narrowed
    to `view.fields`. `row` is the stored form (`_id` and the fields)."""
    body: dict[str, Any] = {"id": row["_id"], **{spec.name: to_json_value(row.get(spec.name)) for spec in fields}}
    return body if view.fields is None else view.fields.pick(body)


def view_record_bytes(row: Mapping[str, Any], fields: Sequence[FieldSpec], view: RecordView = FULL) -> bytes:
    """`view_record_json` encoded: the bytes the read cache keeps and the API sends for a view record."""
    return orjson.dumps(view_record_json(row, fields, view))


def view_page_bytes(rows: Sequence[Mapping[str, Any]], fields: Sequence[FieldSpec], view: RecordView, *,
                    total: int, page: int, per_page: int) -> bytes:
    """A page of a view collection's records, `{items, total, page, per_page}` like `record_page_bytes`."""
    return orjson.dumps({"items": [view_record_json(row, fields, view) for row in rows], "total": total,
                         "page": page, "per_page": per_page})


def read_record(body: bytes) -> dict[str, Any]:
    """The inverse of `record_bytes`: the record's JSON as a dict (for callers that show it other
    than as bytes, through the service). Raises orjson.JSONDecodeError on bytes it did not make."""
    record: dict[str, Any] = orjson.loads(body)
    return record


def read_record_page(body: bytes) -> Page[dict[str, Any]]:
    """The inverse of `record_page_bytes`: the page with each record's JSON as a dict. Raises
    orjson.JSONDecodeError or KeyError on bytes it did not make."""
    listing: dict[str, Any] = orjson.loads(body)
    return Page(items=listing["items"], total=listing["total"], page=listing["page"], per_page=listing["per_page"])


def bulk_deleted(count: int) -> dict[str, Any]:
    """`{deleted: n}`."""
    return dump_one(_BULK_DELETED, {"deleted": count})


def bulk_updated(count: int) -> dict[str, Any]:
    """`{updated: n}`."""
    return dump_one(_BULK_UPDATED, {"updated": count})


def csv_import(result: ImportResult) -> dict[str, Any]:
    """`{imported: n, failed: [{row (1-based data row), errors: {field or _row: [messages]}}]}`."""
    return dump_one(_CSV_IMPORT, result)


def event_body(event: RecordEvent) -> str:
    """The JSON text of a record event as webhooks deliver it (spec: Events): `{event, collection,
    record_id, data, timestamp}`; `data` is the event's `record_json` of the record (create, update)
    or `{id}` (delete). Compact, non-ASCII kept as is: the bytes the signature covers."""
    return json.dumps({"event": event.event, "collection": event.collection, "record_id": event.record_id,
                       "data": event.data, "timestamp": to_json_value(event.timestamp)},
                      ensure_ascii=False, separators=(",", ":"))
