"""How webhooks and their deliveries become JSON (decisions.md, Response shapes: webhook,
deliveries; Webhook deliveries). A webhook's secret is never shown, only whether it has one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marshmallow import fields

from cms.models import DeliveryAttempt, Webhook, WebhookDelivery
from cms.services.representation.base import Representation, Timestamp, dump_many, dump_one


class WebhookSchema(Representation):
    """A webhook; its secret is never shown, only `signed`."""

    id = fields.String()
    url = fields.String()
    collection_name = fields.String()
    events = fields.List(fields.String())
    active = fields.Boolean()
    signed = fields.Boolean(metadata={"description": "whether deliveries are signed (the secret is never shown)"})
    retry_count = fields.Integer()
    created = Timestamp()
    updated = Timestamp()


class DeliveryAttemptSchema(Representation):
    """One attempt of a webhook delivery, as logged."""

    id = fields.String()
    webhook_id = fields.String()
    event_type = fields.String()
    record_id = fields.String()
    url = fields.String()
    status_code = fields.Integer(allow_none=True)
    response_body = fields.String()
    attempt = fields.Integer()
    success = fields.Boolean()
    duration_ms = fields.Integer()
    error = fields.String(allow_none=True)
    created = Timestamp()


class DeliveryPageSchema(Representation):
    """One page of the delivery log: `{items, total}`."""

    items = fields.List(fields.Nested(DeliveryAttemptSchema), metadata={"description": "newest first"})
    total = fields.Integer()


class RedeliverySchema(Representation):
    """The delivery "send again" queued (spec addition, issue 15)."""

    delivery_id = fields.String(attribute="id", metadata={"description": "the new delivery's id "
                                                          "(`X-Webhook-Delivery`, the id of its first log entry)"})
    webhook_id = fields.String()
    event = fields.String()
    collection = fields.String()
    record_id = fields.String()
    created = Timestamp()


_WEBHOOK = WebhookSchema()
_DELIVERY_PAGE = DeliveryPageSchema()
_REDELIVERY = RedeliverySchema()


def webhook(w: Webhook) -> dict[str, Any]:
    """`{id, url, collection_name, events, active, signed, retry_count, created, updated}`."""
    return dump_one(_WEBHOOK, w)


def webhooks(items: Sequence[Webhook]) -> list[dict[str, Any]]:
    """Each webhook as `webhook` shows it, in order."""
    return dump_many(_WEBHOOK, items)


def deliveries(items: Sequence[DeliveryAttempt], total: int) -> dict[str, Any]:
    """One page of the delivery log: `{items: [attempt, ...], total}` (`total` counts every match)."""
    return dump_one(_DELIVERY_PAGE, {"items": items, "total": total})


def redelivery(delivery: WebhookDelivery) -> dict[str, Any]:
    """The queued "send again": `{delivery_id, webhook_id, event, collection, record_id, created}`."""
    return dump_one(_REDELIVERY, delivery)
