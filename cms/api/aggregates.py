"""Handler of `GET /api/v1/collections/{collection_name}/aggregate` (decisions.md, Aggregation and
view collections)."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import principal_of
from cms.api.records import cached_response, query_locale
from cms.api.schemas.aggregates import AggregateQuerySchema
from cms.web.context import client_ip, parse_query, services

AGGREGATE_QUERY = AggregateQuerySchema()


async def aggregate(request: web.Request) -> web.StreamResponse:
    """`GET .../aggregate`: groups of the records the list rule shows the caller, through the read
    cache (ETag, 304) like a list."""
    query = parse_query(request, AGGREGATE_QUERY)
    cached = await services(request).records.aggregates.aggregate_body(
        request.match_info["collection_name"], principal=principal_of(request), filter_expr=query["filter"],
        group_by=query["group_by"], aggregates=query["aggregates"], sort=query["sort"], page=query["page"],
        per_page=query["per_page"], locale=query_locale(request), client_ip=client_ip(request))
    return cached_response(request, cached)
