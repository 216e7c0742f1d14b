"""Handlers of `/api/v1/webhooks` (spec: Webhooks endpoints; decisions.md: Webhook deliveries).
Admin-table users of either role; the service checks the principal."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.api.schemas import DeliveryQuerySchema, WebhookCreateSchema, WebhookListQuerySchema, WebhookUpdateSchema
from cms.services import representation as represent
from cms.services.representation.delivery import RedeliverySchema as RedeliverySchema  # routes.py names it here
from cms.web.context import parse_body, parse_query, services


async def create_webhook(request: web.Request) -> web.Response:
    """POST /webhooks: 201 the webhook (its `secret` included). 401 without a user, 422 (fields, URL)."""
    principal = signed_in_principal(request)
    body = await parse_body(request, WebhookCreateSchema())
    webhook = await services(request).webhooks.create(principal, **body)
    return json_response(represent.webhook(webhook), status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    """GET /webhooks[?collection_name=]: the webhooks the caller manages."""
    principal = signed_in_principal(request)
    query = parse_query(request, WebhookListQuerySchema())
    webhooks = await services(request).webhooks.list_webhooks(principal, collection_name=query["collection_name"])
    return json_response(represent.webhooks(webhooks))


async def get_webhook(request: web.Request) -> web.Response:
    """GET /webhooks/{webhook_id}: the webhook. 404 when unknown or not the caller's."""
    principal = signed_in_principal(request)
    webhook = await services(request).webhooks.get(principal, request.match_info["webhook_id"])
    return json_response(represent.webhook(webhook))


async def update_webhook(request: web.Request) -> web.Response:
    """PATCH /webhooks/{webhook_id}: the changed webhook. 404, 422 (fields, URL)."""
    principal = signed_in_principal(request)
    body = await parse_body(request, WebhookUpdateSchema(), required=True)
    webhook = await services(request).webhooks.update(principal, request.match_info["webhook_id"], body)
    return json_response(represent.webhook(webhook))


async def delete_webhook(request: web.Request) -> web.Response:
    """DELETE /webhooks/{webhook_id}: 204; pending deliveries are dropped. 404 when unknown."""
    principal = signed_in_principal(request)
    await services(request).webhooks.delete(principal, request.match_info["webhook_id"])
    return web.Response(status=204)


async def webhook_deliveries(request: web.Request) -> web.Response:
    """GET /webhooks/{webhook_id}/deliveries: `{items, total}`, newest first."""
    return await _deliveries(request, request.match_info["webhook_id"])


async def recent_deliveries(request: web.Request) -> web.Response:
    """GET /webhooks/deliveries/recent: every webhook's attempts the caller manages, newest first."""
    return await _deliveries(request, None)


async def _deliveries(request: web.Request, webhook_id: str | None) -> web.Response:
    principal = signed_in_principal(request)
    query = parse_query(request, DeliveryQuerySchema())
    items, total = await services(request).webhooks.deliveries(principal, webhook_id, skip=query["skip"],
                                                               limit=query["limit"])
    return json_response(represent.deliveries(items, total))


async def redeliver(request: web.Request) -> web.Response:
    """POST /webhooks/deliveries/{delivery_id}/redeliver: 202 the new delivery of the same body to
    the same webhook (`delivery_id`: the `id` of any of the delivery's log entries); it is sent by a
    worker and logged like any other. 400 (webhook disabled), 404 (unknown entry, not the caller's,
    or its body no longer kept: 7 days after it finished)."""
    principal = signed_in_principal(request)
    delivery = await services(request).webhooks.redeliver(principal, request.match_info["delivery_id"])
    return json_response(represent.redelivery(delivery), status=202)
