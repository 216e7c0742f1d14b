"""Jobs of the auth flows: the queued halves of password-reset and OTP requests.

The web request only queues them, so its answer and timing do not depend on whether the address
exists; the job looks the address up and, if it is known, queues the email (send_email job).
"""

from __future__ import annotations

from typing import Any

AUTH_JOB_MAX_TRIES = 3
"""A job interrupted by a worker shutdown runs again; a second run only replaces the first's token or code."""


async def send_password_reset(ctx: dict[str, Any], audience: str, email: str, ip: str,
                              user_agent: str) -> None:
    """Email a reset link if `email` is a user of the user system `audience` (`admin` or
    `collection:<id>`). The outcome is not returned: job results are kept in Redis."""
    await ctx["services"].identity.password_reset.send_link(audience, email, ip=ip, user_agent=user_agent)


async def send_otp(ctx: dict[str, Any], collection_id: str, email: str, ip: str, user_agent: str) -> None:
    """Email an OTP login code if `email` is a user of the auth collection `collection_id`."""
    await ctx["services"].identity.otp.send_code(collection_id, email)
