"""Jobs of the auth flows: the queued halves of password-reset and OTP requests.

The web request only queues them, so its answer and timing do not depend on whether the address
exists; the job looks the address up and, if it is known, queues the email (send_email job). Each
job runs under the origin of the request that queued it, so what it audits carries that request
(decisions.md, Audit context).
"""

from __future__ import annotations

from typing import Any

from cms.services.origin import RequestOrigin, origin_scope

AUTH_JOB_MAX_TRIES = 3
"""A job interrupted by a worker shutdown runs again; a second run only replaces the first's token or code."""


def job_origin(origin: dict[str, Any] | str | None, legacy_user_agent: str = "") -> RequestOrigin:
    """The origin a job was queued with: `RequestOrigin.to_json()`, or for a job queued by an
    earlier version the client's address (a string) followed by its user agent."""
    if isinstance(origin, str):
        return RequestOrigin(ip_address=origin, user_agent=legacy_user_agent)
    return RequestOrigin.from_json(origin)


async def send_password_reset(ctx: dict[str, Any], audience: str, email: str,
                              origin: dict[str, Any] | str | None = None, legacy_user_agent: str = "") -> None:
    """Email a reset link if `email` is a user of the user system `audience` (`admin` or
    `collection:<id>`), audited under the request's `origin` (`RequestOrigin.to_json()`). The
    outcome is not returned: job results are kept in Redis."""
    with origin_scope(job_origin(origin, legacy_user_agent)):
        await ctx["services"].identity.password_reset.send_link(audience, email)


async def send_otp(ctx: dict[str, Any], collection_id: str, email: str,
                   origin: dict[str, Any] | str | None = None, legacy_user_agent: str = "") -> None:
    """Email an OTP login code if `email` is a user of the auth collection `collection_id`, under
    the request's `origin`."""
    with origin_scope(job_origin(origin, legacy_user_agent)):
        await ctx["services"].identity.otp.send_code(collection_id, email)
