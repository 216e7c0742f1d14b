"""Slow queries (`/_/slow-queries`; issue 38, item 3): the list queries of records every replica found
slower than SLOW_QUERY_MS, by collection and shape (field names and operators, never values), each with
the index that would serve it and a button that creates it. The same `SlowQueryService` calls, with the
same principal, as `/api/v1/slow-queries`.

- `GET /_/slow-queries`: the list, the most recently seen first.
- `POST /_/slow-queries/{slow_query_id}/index`: add the suggested index to the collection's declared
  `indexes` (the collection update seam: a refusal, 422 past 16 indexes, is shown on the list and
  nothing changes) and drop the entry.
- `POST /_/slow-queries/{slow_query_id}/dismiss`: drop the entry (it comes back if the query is slow again).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, error_message, flash_redirect, render
from cms.errors import CmsError
from cms.models import Principal
from cms.services.content.indexes import declared_name
from cms.web.context import services

BASE = PREFIX + "/slow-queries"


async def _page(request: web.Request, principal: Principal, *, status: int = 200, **context: Any) -> web.Response:
    entries = await services(request).slow_queries.list(principal)
    context.setdefault("error", None)
    return await render(request, "slow_queries/index.html", status=status, entries=entries,
                        threshold_ms=services(request).config.slow_query_ms, **context)


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/slow-queries: every entry with its suggestion."""
    return await _page(request, principal)


@admin_page
async def create_index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/slow-queries/{slow_query_id}/index: create the entry's suggested index, then back to the list."""
    slow_queries = services(request).slow_queries
    slow_query_id = request.match_info["slow_query_id"]
    try:
        entry = await slow_queries.get(principal, slow_query_id)
        await slow_queries.create_index(principal, slow_query_id)
    except CmsError as exc:
        if exc.status >= 500:
            raise
        return await _page(request, principal, status=exc.status, error=error_message(exc))
    name = declared_name(entry.suggested_index) if entry.suggested_index else "index"
    return flash_redirect(request, BASE, f"Index {name} created on {entry.collection}")


@admin_page
async def dismiss(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/slow-queries/{slow_query_id}/dismiss: drop the entry."""
    await services(request).slow_queries.dismiss(principal, request.match_info["slow_query_id"])
    return flash_redirect(request, BASE, "Slow query dismissed", level="info")


def routes() -> list[web.RouteDef]:
    """The slow queries screen's routes."""
    return [
        web.get(BASE, index, name="admin_ui.slow_queries"),
        web.post(BASE + "/{slow_query_id}/index", create_index),
        web.post(BASE + "/{slow_query_id}/dismiss", dismiss),
    ]
