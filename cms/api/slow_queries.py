"""Handlers of `/api/v1/slow-queries` (issue 38, item 3; docs/concepts/indexes.md#slow-queries): the slow
query shapes every replica reported, each with the index that would serve it. Admins only."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.services import representation as represent
from cms.web.context import services


async def list_slow_queries(request: web.Request) -> web.Response:
    """GET /slow-queries: `[{id, collection, collection_id, shape, count, max_ms, last_ms, last_seen,
    suggested_index}]`, the most recently seen first. 401/403 unless admin."""
    entries = await services(request).slow_queries.list(signed_in_principal(request))
    return json_response(represent.slow_queries(entries))


async def create_suggested_index(request: web.Request) -> web.Response:
    """POST /slow-queries/{slow_query_id}/index: add the entry's suggested index to its collection's
    `indexes` (the rules of PATCH /collections apply: 422), drop the entry; 200 with the collection.
    400 (no index to suggest), 404, 401/403 unless admin."""
    collection = await services(request).slow_queries.create_index(signed_in_principal(request),
                                                                   request.match_info["slow_query_id"])
    return json_response(represent.collection(collection))


async def dismiss_slow_query(request: web.Request) -> web.Response:
    """DELETE /slow-queries/{slow_query_id}: 204 (the entry comes back if the query is slow again).
    404, 401/403 unless admin."""
    await services(request).slow_queries.dismiss(signed_in_principal(request), request.match_info["slow_query_id"])
    return web.Response(status=204)
