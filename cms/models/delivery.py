"""Webhooks and their deliveries (spec: Webhook, Webhook delivery log entry).

Frozen dataclasses, no I/O; re-exported by `cms.models`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from cms.models.identity import ROLE_USER


@dataclass(frozen=True)
class Webhook:
    """A webhook (spec: Webhook): POSTs the record events `events` (create/update/delete) of the
    collection `collection_name` (id `collection_id`) to `url`, signed when `secret` is set, retried
    up to `retry_count` times. `created_by` / `created_by_role` are the admin-table user who made it
    (deliveries carry only records that user may view)."""

    id: str
    url: str
    collection_name: str
    collection_id: str
    events: tuple[str, ...]
    active: bool
    retry_count: int
    created: datetime
    updated: datetime
    created_by: str = ""
    created_by_role: str = ROLE_USER
    secret: str | None = field(default=None, repr=False)

    @property
    def signed(self) -> bool:
        """Whether deliveries are signed (a secret is set)."""
        return bool(self.secret)


@dataclass(frozen=True)
class WebhookDelivery:
    """One delivery of one event to one webhook: `body` is the exact JSON text sent on every
    attempt; `id` is the delivery id (`X-Webhook-Delivery`, `webhook-id`), stable across retries.
    Deliveries travel in outbox batches (`cms.store.webhooks.OutboxBatch`), which carry the status;
    `status`, `enqueued_at` and `done_at` here are read only from outbox entries written before
    batching (one delivery per document)."""

    id: str
    webhook_id: str
    event: str
    collection: str
    record_id: str
    body: str
    created: datetime
    status: str = "pending"
    enqueued_at: datetime | None = None
    done_at: datetime | None = None


@dataclass(frozen=True)
class DeliveryAttempt:
    """A delivery log entry (spec: Webhook delivery log entry): one attempt of a delivery.
    `attempt` is 1 for the first; `response_body` holds at most 2 KiB; `error` says why an attempt
    failed without a status (time-out, connection, refused address)."""

    id: str
    webhook_id: str
    delivery_id: str
    event_type: str
    record_id: str
    url: str
    status_code: int | None
    response_body: str
    attempt: int
    success: bool
    duration_ms: int
    error: str | None
    created: datetime
