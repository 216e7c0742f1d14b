"""JobQueue: the one way services hand work to the arq workers (email now, webhooks later)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from arq.connections import ArqRedis

SEND_EMAIL = "send_email"


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
