"""Webhooks (`/_/webhooks`): the webhooks (an admin sees all), a form to create one (url,
collection, events, retry count, secret), enable/disable, delete after a confirmation page, and
each webhook's delivery log (status, HTTP status, duration, attempt, the response excerpt, shown
as text) with "Send again". The same `WebhookService` calls, with the same principal, as
`/api/v1/webhooks` (send again: `POST /api/v1/webhooks/deliveries/{id}/redeliver`)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, confirmed_action, error_message, flash_redirect, page_number, render
from cms.errors import CmsError
from cms.models import Principal
from cms.services.delivery.webhooks import DEFAULT_RETRY_COUNT, EVENT_KINDS, MAX_RETRY_COUNT
from cms.web.context import services
from cms.web.uploads import read_form

BASE = PREFIX + "/webhooks"
LOG_PAGE = 50


def _retry_count(raw: str) -> Any:
    """The form's retry count as an int; text that is not one goes to the service as it is (422)."""
    try:
        return int(raw)
    except ValueError:
        return raw


async def _index(request: web.Request, principal: Principal, *, status: int = 200, **context: Any) -> web.Response:
    webhooks = await services(request).webhooks.list_webhooks(principal)
    context.setdefault("error", None)
    context.setdefault("form", {"url": "", "collection_name": "", "events": list(EVENT_KINDS),
                                "retry_count": str(DEFAULT_RETRY_COUNT)})
    return await render(request, "webhooks/index.html", status=status, webhooks=webhooks, event_kinds=EVENT_KINDS,
                        max_retry_count=MAX_RETRY_COUNT, **context)


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/webhooks: the webhooks and the create form."""
    return await _index(request, principal)


@admin_page
async def create(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/webhooks: a new active webhook; field errors are shown inline (422)."""
    data = await read_form(request)
    url, collection_name = str(data.get("url", "")).strip(), str(data.get("collection_name", ""))
    events = [str(e) for e in data.getall("events", [])]
    retry_count = str(data.get("retry_count", DEFAULT_RETRY_COUNT)).strip()
    form: dict[str, Any] = {"url": url, "collection_name": collection_name, "events": events,
                            "retry_count": retry_count}
    try:
        webhook = await services(request).webhooks.create(
            principal, url=url, collection_name=collection_name, events=events,
            secret=str(data.get("secret", "")) or None, retry_count=_retry_count(retry_count))
    except CmsError as exc:
        return await _index(request, principal, status=exc.status, error=error_message(exc), form=form)
    return flash_redirect(request, f"{BASE}/{webhook.id}", "Webhook created")


@admin_page
async def detail(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/webhooks/{webhook_id}[?page=]: the webhook and its delivery log, newest first."""
    webhooks = services(request).webhooks
    webhook = await webhooks.get(principal, request.match_info["webhook_id"])
    page = page_number(request.query.get("page", "1"))
    entries, total = await webhooks.deliveries(principal, webhook.id, skip=(page - 1) * LOG_PAGE, limit=LOG_PAGE)
    pages = max(1, -(-total // LOG_PAGE))
    return await render(request, "webhooks/detail.html", webhook=webhook, entries=entries, total=total, page=page,
                        pages=pages)


@admin_page
async def set_active(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/webhooks/{webhook_id}/active (`active`: "true" or "false"): enable or disable."""
    form = await read_form(request)
    webhook = await services(request).webhooks.update(principal, request.match_info["webhook_id"],
                                                      {"active": form.get("active") == "true"})
    return flash_redirect(request, f"{BASE}/{webhook.id}" if form.get("back") == "detail" else BASE,
                          f"Webhook {'enabled' if webhook.active else 'disabled'}")


@admin_page
async def confirm_delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/webhooks/{webhook_id}/delete: "delete this webhook?"."""
    webhook = await services(request).webhooks.get(principal, request.match_info["webhook_id"])
    return await render(request, "webhooks/delete.html", webhook=webhook)


@admin_page
async def delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/webhooks/{webhook_id}/delete: the webhook goes; its open deliveries are dropped."""
    await services(request).webhooks.delete(principal, request.match_info["webhook_id"])
    return flash_redirect(request, BASE, "Webhook deleted")


@admin_page
async def redeliver(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/webhooks/{webhook_id}/deliveries/{entry_id}/redeliver: "send again" (the service's
    `redeliver`, as the REST endpoint): a new delivery of the same body, queued for a worker."""
    back = f"{BASE}/{request.match_info['webhook_id']}"
    try:
        delivery = await services(request).webhooks.redeliver(principal, request.match_info["entry_id"])
    except CmsError as exc:
        if exc.status not in (400, 404):
            raise
        return flash_redirect(request, back, f"Not sent again: {exc.detail}", "error")
    return flash_redirect(request, back, f"Queued again as delivery {delivery.id}")


def routes() -> list[web.RouteDef]:
    """The webhooks screen's routes."""
    return [
        web.get(BASE, index, name="admin_ui.webhooks"),
        web.post(BASE, create),
        web.get(BASE + "/{webhook_id}", detail),
        web.post(BASE + "/{webhook_id}/active", set_active),
        *confirmed_action(BASE + "/{webhook_id}/delete", confirm_delete, delete),
        web.post(BASE + "/{webhook_id}/deliveries/{entry_id}/redeliver", redeliver),
    ]
