"""JobQueue: the one way services hand work to the arq workers (emails, password-reset and OTP
requests, webhook deliveries)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from arq.connections import ArqRedis

SEND_EMAIL = "send_email"
SEND_PASSWORD_RESET = "send_password_reset"
SEND_OTP = "send_otp"
DELIVER_WEBHOOK = "deliver_webhook"
"""One delivery per job: the jobs of earlier versions, still run (as a batch of one) after an upgrade."""
DELIVER_WEBHOOKS = "deliver_webhooks"


@dataclass(frozen=True)
class EmailMessage:
    """A rendered email: recipient address, subject, plain-text and HTML bodies."""

    to: str
    subject: str
    text: str
    html: str


class JobQueue:
    """Enqueues JSON-safe jobs on one ArqRedis pool; never waits for their outcome."""

    def __init__(self, pool: ArqRedis, queue_name: str) -> None:
        self._pool = pool
        self._queue_name = queue_name

    async def enqueue_email(self, message: EmailMessage) -> None:
        """Queue `message` for the `send_email` job."""
        await self._pool.enqueue_job(SEND_EMAIL, asdict(message), _queue_name=self._queue_name)

    async def enqueue_password_reset(self, audience: str, email: str, origin: dict[str, Any]) -> None:
        """Queue the `send_password_reset` job: look the address up in the user system `audience`
        and, if it exists, email a reset link. The web request never learns which it was. `origin`
        is the request's `RequestOrigin.to_json()`: the job audits under it."""
        await self._pool.enqueue_job(SEND_PASSWORD_RESET, audience, email, origin, _queue_name=self._queue_name)

    async def enqueue_otp(self, collection_id: str, email: str, origin: dict[str, Any]) -> None:
        """Queue the `send_otp` job: if the address is a user of the auth collection, email a login
        code. `origin` as for `enqueue_password_reset`."""
        await self._pool.enqueue_job(SEND_OTP, collection_id, email, origin, _queue_name=self._queue_name)

    async def enqueue_webhook_batch(self, batch_id: str, *, defer_s: float = 0) -> None:
        """Queue the `deliver_webhooks` job for an outbox batch of webhook deliveries, `defer_s`
        seconds from now. The arq job id is derived from the batch id, so a batch handed on twice
        (by the web request and a relay, by two relays, or by a re-run handing over a retry) is
        queued once while its job is queued, running or its result kept."""
        await self._pool.enqueue_job(DELIVER_WEBHOOKS, batch_id, _job_id=f"webhooks:{batch_id}",
                                     _defer_by=defer_s or None, _queue_name=self._queue_name)
