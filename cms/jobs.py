"""JobQueue: the one way services hand work to the arq workers (emails, password-reset and OTP
requests, webhook deliveries).

With tracing on, every job carries the W3C trace context of the span current where it was queued, in
the keyword argument TRACE_CONTEXT; the worker's job wrapper (workers.settings) takes it off and runs
the job in a span of that trace (decisions.md, Traces)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from arq.connections import ArqRedis

from cms.observability import tracing

SEND_EMAIL = "send_email"
SEND_PASSWORD_RESET = "send_password_reset"
SEND_OTP = "send_otp"
DELIVER_WEBHOOK = "deliver_webhook"
"""One delivery per job: the jobs of earlier versions, still run (as a batch of one) after an upgrade."""
DELIVER_WEBHOOKS = "deliver_webhooks"
TRACE_CONTEXT = "trace_context"
"""The job keyword argument holding the W3C trace context (`{"traceparent": ...}`) of the enqueuing span;
absent when tracing was off there, and in jobs queued by earlier versions."""


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

    def _enqueue_options(self) -> dict[str, Any]:
        """arq's `_queue_name` and, with tracing on, the TRACE_CONTEXT keyword argument."""
        trace_context = tracing.carrier()
        if trace_context:
            return {"_queue_name": self._queue_name, TRACE_CONTEXT: trace_context}
        return {"_queue_name": self._queue_name}

    async def enqueue_email(self, message: EmailMessage) -> None:
        """Queue `message` for the `send_email` job."""
        await self._pool.enqueue_job(SEND_EMAIL, asdict(message), **self._enqueue_options())

    async def enqueue_password_reset(self, audience: str, email: str, origin: dict[str, Any]) -> None:
        """Queue the `send_password_reset` job: look the address up in the user system `audience`
        and, if it exists, email a reset link. The web request never learns which it was. `origin`
        is the request's `RequestOrigin.to_json()`: the job audits under it."""
        await self._pool.enqueue_job(SEND_PASSWORD_RESET, audience, email, origin, **self._enqueue_options())

    async def enqueue_otp(self, collection_id: str, email: str, origin: dict[str, Any]) -> None:
        """Queue the `send_otp` job: if the address is a user of the auth collection, email a login
        code. `origin` as for `enqueue_password_reset`."""
        await self._pool.enqueue_job(SEND_OTP, collection_id, email, origin, **self._enqueue_options())

    async def enqueue_webhook_batch(self, batch_id: str, *, defer_s: float = 0) -> None:
        """Queue the `deliver_webhooks` job for an outbox batch of webhook deliveries, `defer_s`
        seconds from now. The arq job id is derived from the batch id, so a batch handed on twice
        (by the web request and a relay, by two relays, or by a re-run handing over a retry) is
        queued once while its job is queued, running or its result kept."""
        await self._pool.enqueue_job(DELIVER_WEBHOOKS, batch_id, _job_id=f"webhooks:{batch_id}",
                                     _defer_by=defer_s or None, **self._enqueue_options())
