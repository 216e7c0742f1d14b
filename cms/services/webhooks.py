"""Webhooks: definitions, the delivery outbox and the delivery log (spec: Webhook, Webhook delivery
log entry, Webhooks endpoints, Events; decisions.md: Webhook deliveries).

How a record change reaches a receiver, at least once:
1. The record service stores the change and emits RecordEvents through the EventBus before it
   answers. The bus's outbox is this service: `stage` writes one outbox entry (`WebhookDelivery`,
   status pending) per event and matching active webhook, with the exact body to send; for single
   and bulk record writes on a server with transactions, in the same transaction as the change
   (`RecordService._unit`); for CSV imports and auth-collection users, right after the change.
   After the commit `publish` hands each to the queue (job id = delivery id) and marks it enqueued.
   The request never waits for a receiver.
2. If the process dies after the outbox write, or Redis is down, the entry stays pending; the
   relay (`relay`, an arq cron job on every worker) enqueues pending entries older than
   RELAY_GRACE_S. The arq job id makes a delivery handed on twice run once.
3. `deliver` (the `deliver_webhook` job) POSTs the body, logs the attempt (one log entry per
   delivery and attempt number) and returns when to retry: 5xx, time-out and connection errors are
   retried after 1, 2, 4 ... s (capped at 30 s) up to the webhook's `retry_count`; 3xx and 4xx are
   final. The HTTP work lives in `webhook_sender.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from cms.clock import Clock, new_id, utcnow
from cms.errors import Forbidden, NotFound, ValidationFailed
from cms.jobs import JobQueue
from cms.models import ROLE_ADMIN, Collection, DeliveryAttempt, Principal, Webhook, WebhookDelivery
from cms.services.access import VIEW, check
from cms.services.collections import CollectionService
from cms.services.events import CREATE, DELETE, UPDATE, CollectionEvent, RecordEvent
from cms.services.fields import to_json_value
from cms.services.webhook_sender import AddressCheck, WebhookSender
from cms.store.webhooks import ENQUEUED, PENDING, DeliveryLog, DeliveryOutbox, WebhookRepository

log = logging.getLogger("cms.webhooks")

EVENT_KINDS = (CREATE, UPDATE, DELETE)
MAX_RETRY_COUNT = 10
DEFAULT_RETRY_COUNT = 3
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 256
RETRY_DELAY_CAP_S = 30
RELAY_GRACE_S = 2.0
"""A pending delivery younger than this is left to the request that wrote it."""
RELAY_STALE_S = 15 * 60
"""An enqueued delivery not finished after this long is handed on again (its job was lost)."""
RELAY_BATCH = 1_000
ENQUEUE_BATCH = 100
"""Deliveries handed to the queue concurrently at a time."""
MAX_LOG_PAGE = 200
_ATTEMPT_NAMESPACE = uuid.UUID("6f1c3c1e-8f0e-4f43-9b8e-3c9f2b7f2a10")


def retry_delay_s(attempt: int) -> int:
    """Seconds before the attempt after `attempt` (1-based): 1, 2, 4, 8, ... capped at 30."""
    return int(min(2 ** (attempt - 1), RETRY_DELAY_CAP_S))


def attempt_id(delivery_id: str, attempt: int) -> str:
    """The log entry id of an attempt: the delivery id for the first (so `X-Webhook-Delivery` names
    the log entry of the first attempt, decisions.md), a UUID derived from both after that."""
    return delivery_id if attempt == 1 else str(uuid.uuid5(_ATTEMPT_NAMESPACE, f"{delivery_id}:{attempt}"))


@dataclass(frozen=True)
class DeliveryOutcome:
    """What the job does next: nothing (`retry_after_s` None) or retry after that many seconds."""

    retry_after_s: int | None = None


class WebhookService:
    """Webhook CRUD (admin-table users), the outbox writer, the relay and the delivery step."""

    def __init__(self, webhooks: WebhookRepository, outbox: DeliveryOutbox, delivery_log: DeliveryLog,
                 collections: CollectionService, jobs: JobQueue, sender: WebhookSender,
                 address_check: AddressCheck, *, clock: Clock = utcnow,
                 creator: Callable[[str], Awaitable[Principal | None]] | None = None) -> None:
        self._creator = creator
        self._webhooks = webhooks
        self._outbox = outbox
        self._log = delivery_log
        self._collections = collections
        self._jobs = jobs
        self._sender = sender
        self._address_check = address_check
        self._clock = clock

    # --- CRUD -------------------------------------------------------------------------------------

    async def create(self, principal: Principal, *, url: str, collection_name: str, events: Sequence[str],
                     secret: str | None = None, retry_count: int = DEFAULT_RETRY_COUNT) -> Webhook:
        """A new active webhook. Raises Forbidden (not an admin-table user), ValidationFailed (422:
        url not http(s) or refused by the SSRF rule, unknown collection, events not a non-empty subset
        of create/update/delete, retry_count outside 0..10, secret too long)."""
        _require_admin_table(principal)
        collection = await self._collection(collection_name)
        now = self._clock()
        webhook = Webhook(
            id=new_id(), url=await self._checked_url(url), collection_name=collection.name,
            collection_id=collection.id, events=_checked_events(events), active=True,
            retry_count=_checked_retry_count(retry_count), created=now, updated=now,
            created_by=principal.user_id, created_by_role=principal.role, secret=_checked_secret(secret),
        )
        await self._webhooks.insert(webhook)
        return webhook

    async def list_webhooks(self, principal: Principal, *, collection_name: str | None = None) -> list[Webhook]:
        """The webhooks the caller manages (an admin: all; role `user`: their own), oldest first."""
        _require_admin_table(principal)
        return await self._webhooks.find(collection_name=collection_name, created_by=_owner_filter(principal))

    async def get(self, principal: Principal, webhook_id: str) -> Webhook:
        """One webhook the caller manages. Raises Forbidden or NotFound."""
        _require_admin_table(principal)
        webhook = await self._webhooks.get(webhook_id)
        if webhook is None or not _manages(principal, webhook):
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
        if stored is None:
            raise NotFound("Webhook not found")
        return stored

    async def delete(self, principal: Principal, webhook_id: str) -> None:
        """Delete a webhook; its open deliveries are dropped. Raises Forbidden or NotFound."""
        webhook = await self.get(principal, webhook_id)
        await self._webhooks.delete(webhook.id)
        await self._outbox.drop_for_webhooks([webhook.id], self._clock())

    async def deliveries(self, principal: Principal, webhook_id: str | None, *, skip: int = 0,
                         limit: int = 50) -> tuple[list[DeliveryAttempt], int]:
        """Delivery log entries newest first, of one webhook or (None) of every webhook the caller
        manages, and their total. `limit` is clamped to 1..200. Raises Forbidden or NotFound."""
        _require_admin_table(principal)
        limit = max(1, min(limit, MAX_LOG_PAGE))
        if webhook_id is not None:
            ids: list[str] | None = [(await self.get(principal, webhook_id)).id]
        elif principal.role == ROLE_ADMIN:
            ids = None
        else:
            ids = [w.id for w in await self._webhooks.find(created_by=principal.user_id)]
        return await self._log.page(webhook_ids=ids, skip=max(0, skip), limit=limit)

    async def backlog(self) -> int:
        """Deliveries written but not finished (pending or enqueued)."""
        return await self._outbox.backlog()

    async def _collection(self, name: Any) -> Collection:
        if not isinstance(name, str) or not name:
            raise _invalid("collection_name", "Must be the name of an existing collection.")
        try:
            return await self._collections.get_by_name(name)
        except NotFound:
            raise _invalid("collection_name", f"No collection named '{name[:100]}'.") from None

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
                ids = await self._webhooks.delete_for_collection(event.collection.id)
                await self._outbox.drop_for_webhooks(ids, self._clock())
            elif event.event == UPDATE:
                await self._webhooks.rename_collection(event.collection.id, event.collection.name)

    # --- the outbox ---------------------------------------------------------------------------------

    async def wants(self, collection_id: str) -> bool:
        """Whether the collection has an active webhook (its writes then run in a transaction with
        their outbox entries, where the server supports transactions)."""
        return bool(await self._webhooks.active_for(collection_id))

    async def stage(self, events: Sequence[RecordEvent]) -> list[WebhookDelivery]:
        """The outbox (`events.Outbox`): write one pending delivery per event and matching active
        webhook, inside the transaction of the change when one is open, before the change is
        acknowledged. Returns the deliveries for `publish`."""
        deliveries: list[WebhookDelivery] = []
        targets: dict[str, tuple[Collection | None, list[Webhook]]] = {}
        creators: dict[str, Principal | None] = {}
        now = self._clock()
        for event in events:
            if event.collection not in targets:
                targets[event.collection] = await self._webhooks_of(event.collection)
            collection, webhooks = targets[event.collection]
            for webhook in webhooks:
                if event.event not in webhook.events or collection is None:
                    continue
                if webhook.created_by not in creators:
                    creators[webhook.created_by] = await self._creator_of(webhook)
                if _creator_may_view(creators[webhook.created_by], collection, event):
                    deliveries.append(WebhookDelivery(
                        id=new_id(), webhook_id=webhook.id, event=event.event, collection=event.collection,
                        record_id=event.record_id, body=delivery_body(event), created=now,
                    ))
        if deliveries:
            await self._outbox.insert_many(deliveries)
        return deliveries

    async def _creator_of(self, webhook: Webhook) -> Principal | None:
        """The webhook's creator as a principal with its current role, email and verified flag (the
        user lookup given to the service), or None when that user is gone. Without a lookup (unit
        wiring), the role stored with the webhook."""
        if self._creator is None:
            return Principal(kind="admin_user", user_id=webhook.created_by, role=webhook.created_by_role)
        return await self._creator(webhook.created_by)

    async def publish(self, staged: Sequence[WebhookDelivery]) -> None:
        """Hand staged deliveries to the queue after the change committed; what fails here (Redis
        down, the process dies) stays pending for the relay."""
        await self._hand_on(staged)

    async def _webhooks_of(self, collection_name: str) -> tuple[Collection | None, list[Webhook]]:
        """The collection called `collection_name` and its active webhooks (none if it is gone)."""
        try:
            collection = await self._collections.get_by_name(collection_name)
        except NotFound:
            return None, []
        return collection, await self._webhooks.active_for(collection.id)

    async def _hand_on(self, deliveries: Sequence[WebhookDelivery]) -> None:
        handed: list[str] = []
        try:
            for start in range(0, len(deliveries), ENQUEUE_BATCH):  # concurrent round trips, bounded
                batch = [d.id for d in deliveries[start:start + ENQUEUE_BATCH]]
                await asyncio.gather(*(self._jobs.enqueue_webhook_delivery(i) for i in batch))
                handed.extend(batch)
        except Exception:  # Redis down: the relay hands the rest on later
            log.warning("could not enqueue %d webhook deliveries; the relay will", len(deliveries) - len(handed),
                        exc_info=True)
        await self._outbox.mark_enqueued(handed, self._clock())

    async def relay(self) -> int:
        """Hand on pending deliveries older than RELAY_GRACE_S, and enqueued ones not finished
        after RELAY_STALE_S (their job was lost with Redis); returns how many were handed on."""
        now = self._clock()
        pending = await self._outbox.waiting(PENDING, now - timedelta(seconds=RELAY_GRACE_S), RELAY_BATCH)
        stale = await self._outbox.waiting(ENQUEUED, now - timedelta(seconds=RELAY_STALE_S), RELAY_BATCH)
        if pending or stale:
            log.info("relay: handing on %d pending and %d stale webhook deliveries", len(pending), len(stale))
        await self._hand_on([*pending, *stale])
        return len(pending) + len(stale)

    # --- delivery -----------------------------------------------------------------------------------

    async def deliver(self, delivery_id: str, *, attempt: int) -> DeliveryOutcome:
        """Make attempt `attempt` (1-based) of a delivery and log it. Returns when to retry (5xx,
        time-out, connection error, while attempts remain), else finishes the delivery. A delivery
        that is finished, whose webhook is gone or disabled, or that already succeeded (a job re-run
        after a crash) is finished without sending."""
        delivery = await self._outbox.get(delivery_id)
        if delivery is None or delivery.status == "done":
            return DeliveryOutcome()
        webhook = await self._webhooks.get(delivery.webhook_id)
        # A job re-run after a crash has a higher attempt number: only then can an attempt have succeeded.
        if webhook is None or not webhook.active or (attempt > 1 and await self._log.succeeded(delivery.id)):
            await self._outbox.mark_done(delivery.id, self._clock())
            return DeliveryOutcome()
        result = await self._sender.send(webhook, delivery)
        entry = DeliveryAttempt(
            id=attempt_id(delivery.id, attempt), webhook_id=webhook.id, delivery_id=delivery.id,
            event_type=delivery.event, record_id=delivery.record_id, url=webhook.url,
            status_code=result.status_code, response_body=result.response_body, attempt=attempt,
            success=result.success, duration_ms=result.duration_ms, error=result.error, created=self._clock(),
        )
        if not await self._log.insert(entry):
            log.warning("delivery %s attempt %d was already logged; not logged again", delivery.id, attempt)
        if not result.success and result.retryable and attempt <= webhook.retry_count:
            return DeliveryOutcome(retry_after_s=retry_delay_s(attempt))
        await self._outbox.mark_done(delivery.id, self._clock())
        return DeliveryOutcome()


def delivery_body(event: RecordEvent) -> str:
    """The JSON body of a delivery (spec: Events): `{event, collection, record_id, data, timestamp}`;
    `data` is the record as the API shows it, or `{id}` for a delete."""
    return json.dumps({"event": event.event, "collection": event.collection, "record_id": event.record_id,
                       "data": event.data, "timestamp": to_json_value(event.timestamp)},
                      ensure_ascii=False, separators=(",", ":"))


def _creator_may_view(creator: Principal | None, collection: Collection, event: RecordEvent) -> bool:
    """Deliveries carry only records the webhook's creator may view under the collection's view
    rule (decisions.md, Access rules). A creator who is gone sees nothing. An event without its
    record (a delete made by relation clean-up) is delivered only when the rule shows every record."""
    if creator is None:
        return False
    view = check(creator, collection, VIEW)
    if view.everything or view.refused:
        return view.everything
    return event.record is not None and view.allows(event.record)


def _require_admin_table(principal: Principal) -> None:
    if principal.kind != "admin_user":
        raise Forbidden("Webhooks are managed by admin-table users")


def _owner_filter(principal: Principal) -> str | None:
    return None if principal.role == ROLE_ADMIN else principal.user_id


def _manages(principal: Principal, webhook: Webhook) -> bool:
    return principal.role == ROLE_ADMIN or webhook.created_by == principal.user_id


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

