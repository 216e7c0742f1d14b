"""The API's general rate limit: a middleware that counts every request of a route of class
GENERAL per client IP (decisions.md, Limits); the route table says each route's class, and the
refusal and its headers are `cms.web.ratelimit`'s, which the admin UI shares."""

from __future__ import annotations

import logging
from enum import Enum

from aiohttp import web
from aiohttp.typedefs import Handler

from cms.api.guards import route_of
from cms.web.context import client_ip, services
from cms.web.ratelimit import DECISION_KEY, enforce, limit_headers, refusal

log = logging.getLogger("cms.api")

EXEMPT_PREFIXES = ("/docs/static/", "/docs/guide/", "/openapi.json")
"""Paths outside the route table that the general limit leaves alone (the table's routes say it)."""


class RateLimit(Enum):
    """The rate-limit class of a route of the table: GENERAL (the per-IP limit) or EXEMPT (health, docs)."""

    GENERAL = "general"
    EXEMPT = "exempt"


@web.middleware
async def rate_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Apply the general per-IP limit to every request but the routes of class EXEMPT (health, docs),
    the docs' files (the explorer's and the docs site's) and preflight requests. If Redis fails, the
    request is let through (fail open) and the failure logged."""
    route = route_of(request)
    exempt = route.rate_limit is RateLimit.EXEMPT if route is not None else request.path.startswith(EXEMPT_PREFIXES)
    if request.method == "OPTIONS" or exempt:
        return await handler(request)
    try:
        decision = await services(request).rate_limits.hit_general(client_ip(request))
    except Exception:  # a limiter outage must not take the API down
        log.warning("rate limiter unavailable; request let through", exc_info=True)
        decision = None
    if decision is not None and not decision.allowed:
        raise await refusal(request, decision, "general")
    response = await handler(request)
    if decision is not None:
        response.headers.update(limit_headers(request.get(DECISION_KEY, decision)))
    return response


async def charge_general(request: web.Request, cost: int) -> None:
    """Count `cost` more requests of the client against the general limit, all or none: a batch
    costs one per request it holds, and the middleware already counted the batch itself as one
    (decisions.md, Batch writes). Raises RateLimited (429) when fewer than `cost` remain (nothing is
    counted then); lets the request through when the limiter fails, as the middleware does."""
    if cost < 1:
        return
    await enforce(request, services(request).rate_limits.hit_general(client_ip(request), cost=cost), "general",
                  outage="batch")
