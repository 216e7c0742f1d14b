"""Webhook jobs: `deliver_webhooks` (one attempt of each delivery of a batch),
`relay_webhook_outbox` (hands on deliveries whose enqueue was lost) and `deliver_webhook` (the
one-delivery job of earlier versions, run as a batch of one). No business rules here:
WebhookOutbox decides."""

from __future__ import annotations

import logging
from typing import Any

from arq import Retry

from cms.wiring import Services

log = logging.getLogger("cms.workers.webhooks")

BATCH_MAX_TRIES = 5
"""arq runs of one batch job: the first and up to four re-runs after a crash or an error (MongoDB
or Redis unreachable). Retries of deliveries are child batches, not re-runs."""
RERUN_DELAY_S = 5
"""Seconds before a batch that raised is run again."""
RELAY_EVERY_S = 5
"""The relay runs at start-up and every this many seconds on every (non-burst) worker."""


async def deliver_webhooks(ctx: dict[str, Any], batch_id: str) -> str:
    """Run an outbox batch (see WebhookOutbox.deliver_batch); a failure (MongoDB or Redis down)
    runs it again after RERUN_DELAY_S, and that run, like one after a crash, completes what the
    earlier one left. Returns a summary for arq's result."""
    services: Services = ctx["services"]
    try:
        outcome = await services.webhook_outbox.deliver_batch(batch_id, rerun=int(ctx.get("job_try", 1)) > 1)
    except Exception as exc:
        if int(ctx.get("job_try", 1)) >= BATCH_MAX_TRIES:
            raise
        log.warning("webhook batch %s failed (%s); running it again in %d s", ctx["job_id"], type(exc).__name__,
                    RERUN_DELAY_S, exc_info=True)
        raise Retry(defer=RERUN_DELAY_S) from exc
    return (f"sent {outcome.sent}, delivered {outcome.delivered}, failed {outcome.failed}, "
            f"retrying {outcome.retrying}, dropped {outcome.dropped}")


async def deliver_webhook(ctx: dict[str, Any], delivery_id: str) -> str:
    """The job of earlier versions (one delivery, job id `webhook:<delivery id>`), still queued
    after an upgrade: the outbox document of that delivery is a batch of one, and it may have been
    attempted already, so the log is read first."""
    services: Services = ctx["services"]
    outcome = await services.webhook_outbox.deliver_batch(delivery_id, rerun=True)
    return f"sent {outcome.sent}, delivered {outcome.delivered}, retrying {outcome.retrying}"


async def relay_webhook_outbox(ctx: dict[str, Any]) -> int:
    """Hand on pending deliveries (see WebhookOutbox.relay); returns how many."""
    services: Services = ctx["services"]
    return await services.webhook_outbox.relay()
