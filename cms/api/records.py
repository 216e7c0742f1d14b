"""Handlers of `/api/v1/collections/{collection_name}/records` (spec: Records)."""

from __future__ import annotations

from aiohttp import web

from cms.api.context import parse_body, parse_query, services
from cms.api.guards import require_user
from cms.api.schemas import RecordListQuerySchema, RecordWriteSchema
from cms.services.records import record_json


async def list_records(request: web.Request) -> web.Response:
    # Other parameters (cache busters, `filter[title][$ne]=x`) are ignored, never read as a query.
    query = parse_query(request, RecordListQuerySchema())
    page = await services(request).records.list(
        request.match_info["collection_name"],
        page=query["page"],
        per_page=query["per_page"],
        sort=query["sort"],
        filter_expr=query["filter"],
        search=query["search"],
    )
    return web.json_response(
        {"items": [record_json(r) for r in page.items], "total": page.total,
         "page": page.page, "per_page": page.per_page}
    )


async def get_record(request: web.Request) -> web.Response:
    record = await services(request).records.get(
        request.match_info["collection_name"], request.match_info["record_id"]
    )
    return web.json_response(record_json(record))


async def create_record(request: web.Request) -> web.Response:
    principal = await require_user(request)
    body = await parse_body(request, RecordWriteSchema())
    record = await services(request).records.create(principal, request.match_info["collection_name"], body["data"])
    return web.json_response(record_json(record), status=201)


async def update_record(request: web.Request) -> web.Response:
    principal = await require_user(request)
    body = await parse_body(request, RecordWriteSchema())
    record = await services(request).records.update(
        principal, request.match_info["collection_name"], request.match_info["record_id"], body["data"]
    )
    return web.json_response(record_json(record))


async def delete_record(request: web.Request) -> web.Response:
    principal = await require_user(request)
    await services(request).records.delete(
        principal, request.match_info["collection_name"], request.match_info["record_id"]
    )
    return web.Response(status=204)
