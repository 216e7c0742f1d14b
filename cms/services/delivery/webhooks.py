"""Webhooks (spec: Webhook, Webhook delivery log entry, Webhooks endpoints): definitions and who may
manage them (admin-table users; role `user` their own, decisions.md: Webhook deliveries), the
delivery log as callers read it, and "send again". How deliveries are staged, queued, relayed and
sent: `webhook_outbox.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from cms.clock import Clock, new_id, utcnow
from cms.errors import BadRequest, NotFound, ValidationFailed
from cms.models import Collection, DeliveryAttempt, Principal, Webhook, WebhookDelivery
from cms.services import access
from cms.services.caching.catalog import Catalog
from cms.services.caching.definition_cache import DefinitionCache
from cms.services.delivery.events import CREATE, DELETE, UPDATE, CollectionEvent
from cms.services.delivery.webhook_outbox import WebhookOutbox
from cms.services.delivery.webhook_sender import AddressCheck
from cms.store.webhooks import DeliveryLog, WebhookRepository

EVENT_KINDS = (CREATE, UPDATE, DELETE)
MAX_RETRY_COUNT = 10
DEFAULT_RETRY_COUNT = 3
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 256
MAX_LOG_PAGE = 200


class WebhookService:
    """Webhook CRUD (admin-table users), the delivery log and "send again"; changes drop the cached
    webhook lists the outbox reads."""

    def __init__(self, webhooks: WebhookRepository, delivery_log: DeliveryLog, catalog: Catalog,
                 outbox: WebhookOutbox, address_check: AddressCheck, *, clock: Clock = utcnow,
                 definitions: DefinitionCache | None = None) -> None:
        self._definitions = definitions
        self._webhooks = webhooks
        self._log = delivery_log
        self._catalog = catalog
        self._webhook_outbox = outbox
        self._address_check = address_check
        self._clock = clock

    # --- CRUD -------------------------------------------------------------------------------------

    async def create(self, principal: Principal, *, url: str, collection_name: str, events: Sequence[str],
                     secret: str | None = None, retry_count: int = DEFAULT_RETRY_COUNT) -> Webhook:
        """A new active webhook. Raises Forbidden (not an admin-table user), ValidationFailed (422:
        url not http(s) or refused by the SSRF rule, unknown collection, events not a non-empty subset
        of create/update/delete, retry_count outside 0..10, secret too long)."""
        access.require_admin_table(principal, "Webhooks")
        collection = await self._collection(collection_name)
        now = self._clock()
        webhook = Webhook(
            id=new_id(), url=await self._checked_url(url), collection_name=collection.name,
            collection_id=collection.id, events=_checked_events(events), active=True,
            retry_count=_checked_retry_count(retry_count), created=now, updated=now,
            created_by=principal.user_id, created_by_role=principal.role, secret=_checked_secret(secret),
        )
        await self._webhooks.insert(webhook)
        await self._changed()
        return webhook

    async def list_webhooks(self, principal: Principal, *, collection_name: str | None = None) -> list[Webhook]:
        """The webhooks the caller manages (an admin: all; role `user`: their own), oldest first."""
        access.require_admin_table(principal, "Webhooks")
        return await self._webhooks.find(collection_name=collection_name, created_by=access.owner_scope(principal))

    async def get(self, principal: Principal, webhook_id: str) -> Webhook:
        """One webhook the caller manages. Raises Forbidden or NotFound."""
        access.require_admin_table(principal, "Webhooks")
        webhook = await self._webhooks.get(webhook_id)
        if webhook is None or not access.manages(principal, webhook.created_by):
            raise NotFound("Webhook not found")
        return webhook

    async def update(self, principal: Principal, webhook_id: str, changes: dict[str, Any]) -> Webhook:
        """Change any of url, collection_name, events, secret (None removes it), retry_count, active.
        Raises Forbidden, NotFound or ValidationFailed as `create`. Re-enabling a webhook does not
        replay the events of the time it was disabled."""
        webhook = await self.get(principal, webhook_id)
        values: dict[str, Any] = {}
        if "url" in changes:
            values["url"] = await self._checked_url(changes["url"])
        if "collection_name" in changes:
            collection = await self._collection(changes["collection_name"])
            values.update(collection_name=collection.name, collection_id=collection.id)
        if "events" in changes:
            values["events"] = list(_checked_events(changes["events"]))
        if "secret" in changes:
            values["secret"] = _checked_secret(changes["secret"])
        if "retry_count" in changes:
            values["retry_count"] = _checked_retry_count(changes["retry_count"])
        if "active" in changes:
            values["active"] = bool(changes["active"])
        values["updated"] = self._clock()
        stored = await self._webhooks.update(webhook.id, values)
        await self._changed()
        if stored is None:
            raise NotFound("Webhook not found")
        return stored

    async def delete(self, principal: Principal, webhook_id: str) -> None:
        """Delete a webhook; its open deliveries are dropped (unsent, when their batch runs).
        Raises Forbidden or NotFound."""
        webhook = await self.get(principal, webhook_id)
        await self._webhooks.delete(webhook.id)
        await self._changed()

    async def _changed(self) -> None:
        """After a webhook change: every replica's cached webhook lists go (a catalog epoch bump)."""
        if self._definitions is not None:
            await self._definitions.invalidate()

    async def deliveries(self, principal: Principal, webhook_id: str | None, *, skip: int = 0,
                         limit: int = 50) -> tuple[list[DeliveryAttempt], int]:
        """Delivery log entries newest first, of one webhook or (None) of every webhook the caller
        manages, and their total. `limit` is clamped to 1..200. Raises Forbidden or NotFound."""
        access.require_admin_table(principal, "Webhooks")
        limit = max(1, min(limit, MAX_LOG_PAGE))
        if webhook_id is not None:
            ids: list[str] | None = [(await self.get(principal, webhook_id)).id]
        elif (owner := access.owner_scope(principal)) is None:
            ids = None
        else:
            ids = [w.id for w in await self._webhooks.find(created_by=owner)]
        return await self._log.page(webhook_ids=ids, skip=max(0, skip), limit=limit)

    async def _collection(self, name: Any) -> Collection:
        if not isinstance(name, str) or not name:
            raise _invalid("collection_name", "Must be the name of an existing collection.")
        try:
            collection = await self._catalog.by_name(name)
        except NotFound:
            raise _invalid("collection_name", f"No collection named '{name[:100]}'.") from None
        if collection.view is not None:  # its records are not written: no event would ever come
            raise _invalid("collection_name", f"'{collection.name}' is a view; watch its source "
                                              f"'{collection.view.source}'.")
        return collection

    async def _checked_url(self, url: Any) -> str:
        if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
            raise _invalid("url", f"Must be an http or https URL of at most {MAX_URL_LENGTH} characters.")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            raise _invalid("url", "Not a valid URL.") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _invalid("url", "Must be an http or https URL with a host.")
        refusal = await self._address_check(parts.hostname)
        if refusal is not None:
            raise _invalid("url", refusal)
        return url

    # --- collection events --------------------------------------------------------------------------

    async def on_collection_events(self, events: Sequence[CollectionEvent]) -> None:
        """Deleting a collection deletes its webhooks; renaming one renames theirs."""
        for event in events:
            if event.event == DELETE:
                await self._webhooks.delete_for_collection(event.collection.id)
            elif event.event == UPDATE:
                await self._webhooks.rename_collection(event.collection.id, event.collection.name)

    # --- send again -------------------------------------------------------------------------------

    async def redeliver(self, principal: Principal, log_entry_id: str) -> WebhookDelivery:
        """"Send again": the delivery of the log entry `log_entry_id` (any attempt's) as a new
        delivery (an id and log entries of its own, attempt 1, retried like any other) of the same
        body to the same webhook, queued through the outbox like a record change's (a relay hands
        it on if Redis is down). The webhook's current URL and secret are used. Raises Forbidden
        (not an admin-table user), NotFound (no such entry of a webhook the caller manages, or its
        body is no longer kept: finished outbox batches expire after 7 days) or BadRequest (the
        webhook is disabled)."""
        access.require_admin_table(principal, "Webhooks")
        entry = (await self._log.get_many([log_entry_id])).get(log_entry_id)
        if entry is None:
            raise NotFound("Delivery not found")
        webhook = await self.get(principal, entry.webhook_id)
        if not webhook.active:
            raise BadRequest("The webhook is disabled; enable it to send deliveries again")
        delivery = await self._webhook_outbox.resend(webhook, entry.delivery_id)
        if delivery is None:
            raise NotFound("The delivery's body is no longer kept (7 days after it finished)")
        return delivery


def _checked_events(events: Any) -> tuple[str, ...]:
    if (not isinstance(events, list | tuple) or not events
            or not all(isinstance(e, str) and e in EVENT_KINDS for e in events)):
        raise _invalid("events", "Must be a non-empty list of: create, update, delete.")
    return tuple(e for e in EVENT_KINDS if e in events)


def _checked_retry_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRY_COUNT:
        raise _invalid("retry_count", f"Must be an integer from 0 to {MAX_RETRY_COUNT}.")
    return value


def _checked_secret(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_SECRET_LENGTH:
        raise _invalid("secret", f"Must be text of at most {MAX_SECRET_LENGTH} characters.")
    return value


def _invalid(field_name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid {field_name}: {message}", errors={field_name: [message]})

