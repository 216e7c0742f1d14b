"""The flows of records (decisions.md, Records; Relations in one request) and of batches (Batch writes)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Generic, Self, TypeVar, cast
from urllib.parse import urlencode

from cms_client._core import Call, FileArg, Flow, Params, ask, segment
from cms_client.errors import BatchError, CmsError
from cms_client.shapes import AggregatePage, BatchAnswer, BulkDeleted, BulkUpdated, CsvImportResult, Record, RecordPage

FULL_LIST_PER_PAGE = 100
"""Records per request of `get_full_list` (the service's MAX_PER_PAGE)."""

B = TypeVar("B", bound="BatchBuilder")


def records_path(collection: str, record_id: str | None = None) -> str:
    """`/api/v1/collections/{collection}/records[/{record_id}]`, each part escaped."""
    path = f"/api/v1/collections/{segment(collection)}/records"
    return path if record_id is None else f"{path}/{segment(record_id)}"


def get_list(collection: str, page: int = 1, per_page: int = 30, *, filter: str | None = None,
             sort: str | None = None, search: str | None = None, expand: str | None = None,
             fields: str | None = None, skip_total: bool = False, locale: str | None = None,
             draft: bool = False) -> Flow[RecordPage]:
    """One page (1-based; `per_page` 1..100, more is clamped) of the records the caller may list; localized
    fields in `locale` (with its fallbacks; `*`: objects of locale to value; None: the default locale); with
    `draft`, the working copies of the records the caller may update (decisions.md, Drafts, versions and
    scheduled publishing)."""
    params: Params = {"page": page, "per_page": per_page, "filter": filter, "sort": sort, "search": search,
                      "expand": expand, "fields": fields, "skip_total": skip_total or None, "locale": locale,
                      "draft": draft or None}
    return (yield from ask(Call[RecordPage]("GET", records_path(collection), params=params)))


def get_full_list(collection: str, *, filter: str | None = None, sort: str | None = None,
                  search: str | None = None, expand: str | None = None, fields: str | None = None,
                  per_page: int = FULL_LIST_PER_PAGE, locale: str | None = None,
                  draft: bool = False) -> Flow[list[Record]]:
    """Every matching record, paging through (`per_page` per request, no counting) until a short page."""
    records: list[Record] = []
    page = 1
    while True:
        answer = yield from get_list(collection, page, per_page, filter=filter, sort=sort, search=search,
                                     expand=expand, fields=fields, skip_total=True, locale=locale, draft=draft)
        records.extend(answer["items"])
        if len(answer["items"]) < answer["per_page"]:
            return records
        page += 1


def get_first_list_item(collection: str, filter: str, *, sort: str | None = None, expand: str | None = None,
                        fields: str | None = None, locale: str | None = None, draft: bool = False) -> Flow[Record]:
    """The first record `filter` matches (in `sort` order). CmsError 404 `not_found` when none does (as a view
    of a missing record answers)."""
    answer = yield from get_list(collection, 1, 1, filter=filter, sort=sort, expand=expand, fields=fields,
                                 skip_total=True, locale=locale, draft=draft)
    if not answer["items"]:
        raise CmsError(404, "not_found", f"No record of {collection} matches the filter")
    return answer["items"][0]


def get_one(collection: str, record_id: str, *, expand: str | None = None,
            fields: str | None = None, locale: str | None = None, draft: bool = False) -> Flow[Record]:
    """The record `record_id` (localized fields in `locale`, as `get_list`; `draft`: its working copy, 403 without
    the update right). CmsError 404 when it does not exist or the view rule hides it."""
    params: Params = {"expand": expand, "fields": fields, "locale": locale, "draft": draft or None}
    return (yield from ask(Call[Record]("GET", records_path(collection, record_id), params=params)))


def aggregate(collection: str, *, group_by: str | Sequence[str] | None = None,
              aggregates: str | Sequence[str] | None = None, filter: str | None = None, sort: str | None = None,
              page: int = 1, per_page: int = 30) -> Flow[AggregatePage]:
    """Groups of the records a list shows the caller (decisions.md, Aggregation and view collections): `group_by`
    fields (`placed:month` buckets a date), `aggregates` such as `count()`, `sum(views)`; a list is joined with
    commas. `{items: [{key, count, sum_views, ...}], total (groups), page, per_page}`. CmsError 400
    `invalid_filter` (an unknown field or function, a non-numeric field in sum/avg)."""
    params: Params = {"group_by": _joined(group_by), "aggregates": _joined(aggregates), "filter": filter,
                      "sort": sort, "page": page, "per_page": per_page}
    path = f"/api/v1/collections/{segment(collection)}/aggregate"
    return (yield from ask(Call[AggregatePage]("GET", path, params=params)))


def _joined(value: str | Sequence[str] | None) -> str | None:
    return value if value is None or isinstance(value, str) else ",".join(value)


RecordFiles = Mapping[str, FileArg | Sequence[FileArg]]
"""Files sent with a record write, by file field: one `(filename, content, content_type)` or several. On a
change, a field named `field+` adds them after the field's files instead of replacing them, and `data` may
list ids to take out as `"field-": [...]` (decisions.md, Files in records, thumbnails and file tokens)."""


def _write(method: str, path: str, data: Mapping[str, Any], params: Params, files: RecordFiles | None) -> Call[Record]:
    """A record write: JSON, or multipart (a `data` part, then each file part) when it carries files."""
    if not files:
        return Call[Record](method, path, params=params, json_body={"data": dict(data)})
    parts: list[tuple[str, FileArg]] = []
    for name, value in files.items():
        one = isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], bytes | bytearray)
        parts.extend((name, file) for file in (cast(list[FileArg], [value]) if one else cast(Sequence[FileArg], value)))
    return Call[Record](method, path, params=params, files=parts, form={"data": json.dumps(dict(data))})


def create(collection: str, data: Mapping[str, Any], *, expand: str | None = None,
           fields: str | None = None, locale: str | None = None, files: RecordFiles | None = None) -> Flow[Record]:
    """Create a record from its field values (localized ones `locale`'s; `*`: objects), and `files` in the same
    request, all or nothing; the stored record. CmsError 422 with `errors` per field (a file its field refuses,
    too)."""
    params: Params = {"expand": expand, "fields": fields, "locale": locale}
    return (yield from ask(_write("POST", records_path(collection), data, params, files)))


def update(collection: str, record_id: str, data: Mapping[str, Any], *, expand: str | None = None,
           fields: str | None = None, locale: str | None = None, files: RecordFiles | None = None) -> Flow[Record]:
    """Change some fields of a record (a localized one only in `locale`; `*`: its object replaced) and its files
    (`files`); the record after the change."""
    params: Params = {"expand": expand, "fields": fields, "locale": locale}
    return (yield from ask(_write("PATCH", records_path(collection, record_id), data, params, files)))


def delete(collection: str, record_id: str) -> Flow[None]:
    """Delete a record (204)."""
    return (yield from ask(Call[None]("DELETE", records_path(collection, record_id), expect="none")))


def bulk_update(collection: str, record_ids: Sequence[str], data: Mapping[str, Any]) -> Flow[BulkUpdated]:
    """Set `data` on every record of `record_ids` (1..1,000), all or nothing: `{updated: n}`."""
    return (yield from ask(Call[BulkUpdated]("POST", records_path(collection) + "/bulk-update",
                                             json_body={"record_ids": list(record_ids), "data": dict(data)})))


def bulk_delete(collection: str, record_ids: Sequence[str]) -> Flow[BulkDeleted]:
    """Delete every record of `record_ids` (1..1,000), all or nothing: `{deleted: n}`."""
    return (yield from ask(Call[BulkDeleted]("POST", records_path(collection) + "/bulk-delete",
                                             json_body={"record_ids": list(record_ids)})))


def import_csv(collection: str, csv: str | bytes, *, filename: str = "import.csv") -> Flow[CsvImportResult]:
    """Create records from CSV text (UTF-8, a header row naming fields): `{imported, failed: [{row, errors}]}`."""
    content = csv.encode() if isinstance(csv, str) else csv
    return (yield from ask(Call[CsvImportResult]("POST", records_path(collection) + "/import/csv",
                                                 files={"file": (filename, content, "text/csv")})))


def export_csv(collection: str, *, filter: str | None = None, sort: str | None = None,
               search: str | None = None, locale: str | None = None) -> Flow[str]:
    """The records the caller may list (filtered, sorted, searched) as CSV text with a header row; localized
    fields in `locale` (`*`: a column per locale, `title:de`)."""
    params: Params = {"filter": filter, "sort": sort, "search": search, "locale": locale}
    return (yield from ask(Call[str]("GET", records_path(collection) + "/export/csv", params=params,
                                     headers={"Accept": "text/csv"}, expect="text")))


class BatchCollection(Generic[B]):
    """The requests on the records of one collection in a batch (`batch.collection(name)`): `create`, `update` and
    `delete` add one and return the batch itself, so calls chain (`.collection(other)` switches collection)."""

    def __init__(self, builder: B, name: str) -> None:
        self._builder = builder
        self.name = name

    def create(self, data: Mapping[str, Any], *, expand: str | None = None, fields: str | None = None,
               locale: str | None = None) -> B:
        """Add a record creation (its answer: 201 and the record; localized values `locale`'s)."""
        return self._builder.add({"method": "POST", "url": _shaped(records_path(self.name), expand, fields, locale),
                                  "body": {"data": dict(data)}})

    def update(self, record_id: str, data: Mapping[str, Any], *, expand: str | None = None,
               fields: str | None = None, locale: str | None = None) -> B:
        """Add a change of a record (its answer: 200 and the record; localized values `locale`'s)."""
        return self._builder.add({"method": "PATCH",
                                  "url": _shaped(records_path(self.name, record_id), expand, fields, locale),
                                  "body": {"data": dict(data)}})

    def delete(self, record_id: str) -> B:
        """Add a deletion (its answer: 204 and `body` None)."""
        return self._builder.add({"method": "DELETE", "url": records_path(self.name, record_id)})


def _shaped(url: str, expand: str | None, fields: str | None, locale: str | None = None) -> str:
    query = urlencode({key: value for key, value in (("expand", expand), ("fields", fields), ("locale", locale))
                       if value})
    return f"{url}?{query}" if query else url


class BatchBuilder:
    """The requests of one `POST /api/v1/batch`, added in order: all run in one transaction or none does.

    `collection(name)` adds requests on a collection's records; the flavour's `send()` posts the batch."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def collection(self, name: str) -> BatchCollection[Self]:
        """Add requests on the records of collection `name`."""
        return BatchCollection(self, name)

    def add(self, request: Mapping[str, Any]) -> Self:
        """Add one raw request `{method, url, body?}` (`url` from `/api/v1/...`); returns the batch."""
        self.requests.append(dict(request))
        return self

    def flow(self) -> Flow[list[BatchAnswer]]:
        """Post the batch: one `{status, body}` per request, in order. BatchError (a CmsError) when it fails: 400
        `bad_request` when one request fails (nothing is stored; `failed` is `{index, status, body}` of the first
        failing request), 422 over the service's limit of requests."""
        try:
            return (yield from ask(Call[list[BatchAnswer]]("POST", "/api/v1/batch",
                                                           json_body={"requests": list(self.requests)})))
        except CmsError as exc:
            raise BatchError.of(exc) from None
