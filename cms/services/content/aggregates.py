"""`GET /api/v1/collections/{name}/aggregate` (decisions.md, Aggregation and view collections): counts,
sums and groups of the records a list would show the caller, without sending the records.

One pipeline on the database (`access.aggregation.AggregateQuery`): the `$match` of the same list
query (the list rule, the filter with field rules joined: indexes serve it), `$group`, `$sort`, and a
`$facet` with the page of groups and their number, run with a time limit (AGGREGATE_MAX_TIME_MS: 503
with `Retry-After` past it) in the caller's share of the scan line like a list's scans. Answers go
through the read cache like lists (the collection's version is in the stamp), so a dashboard's
repeated aggregation costs one Redis round trip until the next write.
"""

from __future__ import annotations

from typing import Any

import orjson

from cms.errors import BadRequest
from cms.models import Collection, Principal
from cms.services import access as actions
from cms.services.access import check
from cms.services.access.aggregation import aggregate_query
from cms.services.caching.read_cache import CachedBody, entry_key
from cms.services.content.read_through import Prepared, ReadThrough
from cms.services.content.record_pages import scan_client
from cms.services.representation import aggregates as represent
from cms.store.records import RecordRepository

AGGREGATE_MAX_TIME_MS = 10_000
"""The database's time limit for one aggregation, in milliseconds (503 with `Retry-After` past it)."""
MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 30


class AggregateReads:
    """Aggregations of the records of `records`, through `reads` (the read cache's read-through)."""

    def __init__(self, records: RecordRepository, reads: ReadThrough) -> None:
        self._records = records
        self._reads = reads

    async def aggregate_body(self, collection_name: str, *, principal: Principal | None = None,
                             filter_expr: str | None = None, group_by: str | None = None,
                             aggregates: str | None = None, sort: str | None = None, page: int = 1,
                             per_page: int = DEFAULT_PER_PAGE, locale: str | None = None,
                             client_ip: str | None = None) -> CachedBody:
        """The answer `{items: [{key: {name: value}, <aggregate name>: value}], total, page, per_page}`
        as JSON bytes: the groups of the records the list rule lets `principal` see that match
        `filter_expr`, keyed by `group_by`, with `aggregates`, in `sort` order (default: the keys
        ascending), page `page` (1-based) of `per_page` (clamped to MAX_PER_PAGE), a filter on a
        localized field reading `locale` (None: the default locale; decisions.md, Localized fields);
        `total` is the number of groups. Without `group_by`, one group whose key is `{}` (over no
        records: `count` 0, `sum` 0, the others null). Raises NotFound (collection), BadRequest (a view:
        aggregate its source; a locale not configured, as a list does: `check`), Unauthorized /
        Forbidden (the list rule refuses outright), InvalidFilter (400: syntax, unknown
        field, a field with a view rule, `sum` / `avg` of a non-number, a date unit on a non-date,
        a field holding a list or JSON), ValidationFailed (422: too many keys or aggregates),
        ServiceUnavailable (503: the scan line is full, or the time limit passed)."""
        per_page = min(per_page, MAX_PER_PAGE)
        client = scan_client(principal, client_ip)

        def prepare(collection: Collection) -> Prepared:
            if collection.view is not None:
                raise BadRequest(f"'{collection.name}' is a view: list its records, or aggregate its source "
                                 f"'{collection.view.source}'")
            access = check(principal, collection, actions.LIST, locale=locale)
            query = aggregate_query(access, filter_expr=filter_expr, group_by=group_by, aggregates=aggregates,
                                    sort=sort)
            parts: list[Any] = [collection.id, query.key_parts(), page, per_page, access.fields.key_parts()]
            key = entry_key(collection.name, "aggregate", *parts)

            async def compute(stamp: str | None) -> bytes:
                found, total = await self._records.aggregate(
                    collection.id, query.pipeline((page - 1) * per_page, per_page),
                    max_time_ms=AGGREGATE_MAX_TIME_MS, client=client)
                grouping = query.grouping
                rows = [grouping.row(d) for d in found]
                if not grouping.keys and total == 0:  # one group, whatever matched
                    rows, total = ([grouping.empty_row()] if page == 1 else []), 1
                return represent.aggregate_page_bytes(rows, total=total, page=page, per_page=per_page)

            return key, compute, access.shared, access.localization.language

        return await self._reads.read(collection_name, prepare)

    async def aggregate_json(self, collection_name: str, **query: Any) -> dict[str, Any]:
        """`aggregate_body` read back as a dict (for callers that render it other than as the API's
        bytes: the admin UI's explorer). Takes and raises what `aggregate_body` does."""
        answer: dict[str, Any] = orjson.loads((await self.aggregate_body(collection_name, **query)).body)
        return answer
