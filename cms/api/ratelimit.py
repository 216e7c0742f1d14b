"""Rate-limit middleware and the auth-endpoint and mail checks: 429 `rate_limited` with
`Retry-After` and `X-RateLimit-Limit` / `-Remaining` / `-Reset` headers (decisions.md, Limits).
A refusal is audited (`rate_limited`) once per limit key and window, not once per request."""

from __future__ import annotations

import logging
from enum import Enum

from aiohttp import web
from aiohttp.typedefs import Handler

from cms.api.context import client_ip, services, user_agent
from cms.api.guards import route_of
from cms.errors import RateLimited
from cms.services.operations.rate_limits import RateLimitDecision

log = logging.getLogger("cms.api")

DECISION_KEY = "rate_limit_decision"
EXEMPT_PREFIXES = ("/docs/static/", "/openapi.json")
"""Paths outside the route table that the general limit leaves alone (the table's routes say it)."""


class RateLimit(Enum):
    """The rate-limit class of a route of the table: GENERAL (the per-IP limit) or EXEMPT (health, docs)."""

    GENERAL = "general"
    EXEMPT = "exempt"


def _headers(decision: RateLimitDecision) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(decision.limit),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(decision.reset_after_s),
    }


async def _refuse(request: web.Request, decision: RateLimitDecision, what: str, identifier: str = "") -> RateLimited:
    ip = client_ip(request)
    try:
        first = await services(request).rate_limits.first_refusal(what, ip, identifier, decision.window_s)
    except Exception:  # without Redis we cannot tell; an extra entry beats a missing one
        log.warning("rate limiter unavailable; refusal audited without de-duplication", exc_info=True)
        first = True
    if first:
        await services(request).audit.record(
            "rate_limited", ip_address=ip, user_agent=user_agent(request),
            details={"limit": what, "path": request.path},
        )
    error = RateLimited(f"Too many requests; retry in {decision.reset_after_s} s", retry_after_s=decision.reset_after_s)
    error.headers = _headers(decision)
    return error


@web.middleware
async def rate_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Apply the general per-IP limit to every request but the routes of class EXEMPT (health, docs),
    the docs' files and preflight requests. If Redis fails, the request is let through (fail open)
    and the failure logged."""
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
        raise await _refuse(request, decision, "general")
    response = await handler(request)
    if decision is not None:
        response.headers.update(_headers(request.get(DECISION_KEY, decision)))
    return response


async def enforce_auth_limit(request: web.Request, action: str, identifier: str) -> None:
    """Count one auth attempt (`action`: login, register, otp, reset, refresh) for the client IP
    and `identifier` (email or token). Raises RateLimited (429) past the auth limit."""
    try:
        decision = await services(request).rate_limits.hit_auth(action, client_ip(request), identifier)
    except Exception:  # fail open, as above
        log.warning("rate limiter unavailable; auth attempt let through", exc_info=True)
        return
    if decision is None:
        return
    request[DECISION_KEY] = decision
    if not decision.allowed:
        raise await _refuse(request, decision, f"auth:{action}", identifier)


async def enforce_mail_limit(request: web.Request, endpoint: str, address: str, *, user_id: str | None = None) -> None:
    """Count one email `endpoint` is about to send to `address` (and for `user_id`, when given);
    call it before the service that queues the mail. Raises RateLimited (429, `Retry-After` =
    seconds until the exhausted window frees) past MAIL_PER_MINUTE or MAIL_PER_HOUR, the same
    whether or not the address belongs to anyone. Off with `rate_limit_enabled`; fails open when
    Redis errors."""
    try:
        decision = await services(request).rate_limits.hit_mail(endpoint, address, user_id=user_id)
    except Exception:  # fail open, as above
        log.warning("rate limiter unavailable; email let through", exc_info=True)
        return
    if decision is not None and not decision.allowed:
        raise await _refuse(request, decision, f"mail:{endpoint}", address)
