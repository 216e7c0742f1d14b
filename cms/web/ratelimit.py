"""The rate limits the API and the admin UI share: the auth-endpoint and mail checks and the
refusal, 429 `rate_limited` with `Retry-After` and `X-RateLimit-Limit` / `-Remaining` / `-Reset`
headers (decisions.md, Limits). A refusal is audited (`rate_limited`, by `RateLimitService.refused`)
once per limit key and window, not once per request, with the request's origin (decisions.md, Audit
context). The API's general limit is `cms.api.ratelimit`'s middleware."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from aiohttp import web

from cms.errors import RateLimited
from cms.services.operations.rate_limits import RateLimitDecision
from cms.services.origin import NO_ORIGIN, current_origin, origin_scope
from cms.web.context import client_ip, request_origin, services

log = logging.getLogger("cms.api")

DECISION_KEY = "rate_limit_decision"
def limit_headers(decision: RateLimitDecision) -> dict[str, str]:
    """The `X-RateLimit-*` headers of `decision` (limit, remaining, seconds until reset)."""
    return {
        "X-RateLimit-Limit": str(decision.limit),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(decision.reset_after_s),
    }


async def refusal(request: web.Request, decision: RateLimitDecision, what: str, identifier: str = "") -> RateLimited:
    """The 429 for a refused `decision` of limit `what` (`identifier`: the email or token counted,
    if any), with its headers; the refusal is audited first (once per key and window)."""
    ip = client_ip(request)
    # the general limit refuses before the principal is known (and its origin set): anonymous then
    origin = current_origin() if current_origin() != NO_ORIGIN else request_origin(request, None)
    with origin_scope(origin):
        await services(request).rate_limits.refused(what, ip, identifier, decision.window_s, path=request.path)
    error = RateLimited(f"Too many requests; retry in {decision.reset_after_s} s", retry_after_s=decision.reset_after_s)
    error.headers = limit_headers(decision)
    return error


async def enforce(request: web.Request, hit: Awaitable[RateLimitDecision | None], what: str, identifier: str = "",
                  *, outage: str, remember: bool = True) -> None:
    """Await the limiter's `hit` (a count already under way) and raise the 429 of a refused
    decision of limit `what` (`identifier` as for `refusal`). `remember`: keep the decision for
    the response's `X-RateLimit-*` headers. Fails open: when the limiter errors (Redis down) the
    request goes on and "rate limiter unavailable; <outage> let through" is logged."""
    try:
        decision = await hit
    except Exception:  # a limiter outage must not take the API down
        log.warning("rate limiter unavailable; %s let through", outage, exc_info=True)
        return
    if decision is None:
        return
    if remember:
        request[DECISION_KEY] = decision
    if not decision.allowed:
        raise await refusal(request, decision, what, identifier)


async def enforce_auth_limit(request: web.Request, action: str, identifier: str) -> None:
    """Count one auth attempt (`action`: login, register, otp, reset, refresh) for the client IP
    and `identifier` (email or token). Raises RateLimited (429) past the auth limit."""
    await enforce(request, services(request).rate_limits.hit_auth(action, client_ip(request), identifier),
                  f"auth:{action}", identifier, outage="auth attempt")


async def enforce_mail_limit(request: web.Request, endpoint: str, address: str, *, user_id: str | None = None) -> None:
    """Count one email `endpoint` is about to send to `address` (and for `user_id`, when given);
    call it before the service that queues the mail. Raises RateLimited (429, `Retry-After` =
    seconds until the exhausted window frees) past MAIL_PER_MINUTE or MAIL_PER_HOUR, the same
    whether or not the address belongs to anyone. Off with `rate_limit_enabled`; fails open when
    Redis errors."""
    await enforce(request, services(request).rate_limits.hit_mail(endpoint, address, user_id=user_id),
                  f"mail:{endpoint}", address, outage="email", remember=False)
