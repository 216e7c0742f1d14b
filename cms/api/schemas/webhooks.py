"""Request bodies and queries of the webhook endpoints (spec: Webhooks endpoints; decisions.md,
Webhook deliveries)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

_EVENT_KINDS = ["create", "update", "delete"]


class WebhookCreateSchema(Schema):
    """Body of a webhook create: `{url, collection_name, events, secret?, retry_count?}`."""

    url = fields.String(required=True, metadata={"description": "http or https URL receiving the POSTs"})
    collection_name = fields.String(required=True)
    events = fields.List(fields.String(validate=validate.OneOf(_EVENT_KINDS)), required=True,
                         validate=validate.Length(min=1, max=3))
    secret = fields.String(load_default=None, allow_none=True, validate=validate.Length(max=256),
                           metadata={"description": "signs deliveries; never returned"})
    retry_count = fields.Integer(strict=True, load_default=3, validate=validate.Range(min=0, max=10))


class WebhookUpdateSchema(Schema):
    """Body of a webhook update: any of url, collection_name, events, secret, retry_count, active."""

    url = fields.String()
    collection_name = fields.String()
    events = fields.List(fields.String(validate=validate.OneOf(_EVENT_KINDS)), validate=validate.Length(min=1, max=3))
    secret = fields.String(allow_none=True, validate=validate.Length(max=256))
    retry_count = fields.Integer(strict=True, validate=validate.Range(min=0, max=10))
    active = fields.Boolean()


class WebhookListQuerySchema(Schema):
    """Query of the webhook list: `collection_name?`."""

    collection_name = fields.String(load_default=None)


MAX_DELIVERY_SKIP = 1_000_000_000
"""Largest `skip` of the delivery log (MongoDB's skip is a 64-bit integer: more would be a 500)."""


class DeliveryQuerySchema(Schema):
    """Query of a delivery log page: `skip` (default 0), `limit` (1..200, default 50)."""

    skip = fields.Integer(load_default=0, validate=validate.Range(min=0, max=MAX_DELIVERY_SKIP))
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=200))
