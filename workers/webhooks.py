"""Webhook jobs: `deliver_webhook` (one attempt of one delivery) and `relay_webhook_outbox` (hands
on deliveries whose enqueue was lost). No business rules here: WebhookService decides."""

from __future__ import annotations

import logging
from typing import Any

from arq import Retry

from cms.services.webhooks import MAX_RETRY_COUNT
from cms.wiring import Services

log = logging.getLogger("cms.workers.webhooks")

WEBHOOK_MAX_TRIES = MAX_RETRY_COUNT + 1
"""arq tries of a delivery job: the first attempt and up to MAX_RETRY_COUNT retries."""
RELAY_EVERY_S = 5
"""The relay runs at start-up and every this many seconds on every (non-burst) worker."""


async def deliver_webhook(ctx: dict[str, Any], delivery_id: str) -> None:
    """Make the next attempt of a delivery; a retry is a deferred re-run of this job (arq Retry),
    never a sleep, so a slow receiver holds no worker slot longer than one request."""
    services: Services = ctx["services"]
    outcome = await services.webhooks.deliver(delivery_id, attempt=int(ctx.get("job_try", 1)))
    if outcome.retry_after_s is not None:
        raise Retry(defer=outcome.retry_after_s)


async def relay_webhook_outbox(ctx: dict[str, Any]) -> int:
    """Hand on pending deliveries (see WebhookService.relay); returns how many."""
    services: Services = ctx["services"]
    return await services.webhooks.relay()
