"""The webhook outbox and delivery (spec: Webhook delivery log entry, Events; decisions.md: Webhook
deliveries): staging deliveries with the change, handing them to the queue, the relay, and the
`deliver_webhooks` job's step. Webhook definitions and who may manage them: `webhooks.py`.

How a record change reaches a receiver, at least once:
1. The record service stores the change and emits RecordEvents through the EventBus before it
   answers. The bus's outbox is this service: `stage` writes one delivery (`WebhookDelivery`, with
   the exact body to send) per event and matching active webhook, grouped in outbox batches of up
   to DELIVERY_BATCH (`OutboxBatch`, one document each, status pending); for single and bulk record
   writes on a server with transactions, in the same transaction as the change
   (`RecordService._unit`); for CSV imports and auth-collection users, right after the change.
   After the commit `publish` queues one `deliver_webhooks` job per batch and marks the batches
   enqueued. The request never waits for a receiver.
2. If the process dies after the outbox write, or Redis is down, the batches stay pending; the
   relay (`relay`, an arq cron job on every worker) queues pending batches older than
   RELAY_GRACE_S, and again enqueued ones not finished after RELAY_STALE_S. A batch's job id is
   derived from the batch id, so a batch queued twice (by the request and a relay, or by two
   relays) runs once, on one worker.
3. `deliver_batch` (the job) POSTs the batch's deliveries concurrently (`WebhookSender.send_all`),
   logs the attempts with one write (one log entry per delivery and attempt number, whose id is
   derived from both, so a re-run cannot log an attempt twice), hands what needs a retry (5xx,
   time-out, connection error, while the webhook's `retry_count` allows) to one retry batch, a job
   deferred 1, 2, 4 ... s (capped at 30 s), never a sleep, and marks the batch done: three writes
   per batch, whatever its size. 3xx and 4xx are final. A re-run (a worker died mid-batch) reads
   the log first and does not send what was already sent. The HTTP work lives in
   `webhook_sender.py`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cms.clock import Clock, new_id, utcnow
from cms.errors import NotFound
from cms.jobs import JobQueue
from cms.models import Collection, DeliveryAttempt, Principal, Webhook, WebhookDelivery
from cms.observability.signals import Signals
from cms.services.access import VIEW, check, field_view
from cms.services.caching.catalog import Catalog
from cms.services.caching.definition_cache import DefinitionCache
from cms.services.content.locales import ALL, localization
from cms.services.delivery.events import DELETE, RecordEvent
from cms.services.delivery.webhook_sender import SendResult, WebhookSender
from cms.services.representation import records as represent
from cms.store.webhooks import DONE, ENQUEUED, PENDING, DeliveryLog, DeliveryOutbox, OutboxBatch, WebhookRepository

log = logging.getLogger("cms.webhooks")

RETRY_DELAY_CAP_S = 30
RELAY_GRACE_S = 2.0
"""A pending batch younger than this (seconds) is left to the request that wrote it."""
RELAY_STALE_S = 15 * 60
"""An enqueued batch not finished this many seconds after it was queued or fell due is handed on
again (its job was lost, or failed for good)."""
RELAY_BATCH = 100
"""Batches of each kind (pending, stale) one relay run hands on."""
DELIVERY_BATCH = 100
"""Deliveries per outbox batch, i.e. per `deliver_webhooks` job."""
MAX_BATCH_BODY_BYTES = 4 * 1024 * 1024
"""Bodies per outbox batch, in bytes, well under MongoDB's 16 MiB document limit."""
BATCH_START_WITHIN_S = 60.0
"""Seconds a batch's requests may wait for a free slot (slow receivers of other batches hold
them): what has not started by then goes to a continuation batch, so a job ends well within
arq's job time-out (JOB_TIMEOUT_S, 120 s; each request takes at most its 10 s time-out)."""
MAX_ENQUEUES_AT_ONCE = 20
"""Batch jobs handed to Redis concurrently at a time."""
_ATTEMPT_NAMESPACE = uuid.UUID("6f1c3c1e-8f0e-4f43-9b8e-3c9f2b7f2a10")


def retry_delay_s(attempt: int) -> int:
    """Seconds before the attempt after `attempt` (1-based): 1, 2, 4, 8, ... capped at 30."""
    return int(min(2 ** (attempt - 1), RETRY_DELAY_CAP_S))


def retry_batch_id(batch_id: str, attempt: int) -> str:
    """The id of the batch that makes attempt `attempt` of the deliveries batch `batch_id` hands
    over for a retry: derived from both, so a re-run of `batch_id` hands them to the same batch."""
    return f"{batch_id}>{attempt}"


def continued_batch_id(batch_id: str) -> str:
    """The id of the batch that takes over the deliveries batch `batch_id` could not start in
    time, for the same attempt: derived from it, so a re-run hands them to the same batch."""
    return f"{batch_id}+"


def attempt_id(delivery_id: str, attempt: int) -> str:
    """The log entry id of an attempt: the delivery id for the first (so `X-Webhook-Delivery` names
    the log entry of the first attempt, decisions.md), a UUID derived from both after that."""
    return delivery_id if attempt == 1 else str(uuid.uuid5(_ATTEMPT_NAMESPACE, f"{delivery_id}:{attempt}"))


@dataclass(frozen=True)
class BatchOutcome:
    """What one run of a batch did, in deliveries: `sent` (POSTs made), `delivered` (2xx, or found
    delivered by an earlier run), `failed` (final failures), `retrying` (handed to a deferred
    retry batch), `dropped` (webhook gone or disabled), `continued` (not started in time, handed to
    a continuation batch for the same attempt)."""

    sent: int = 0
    delivered: int = 0
    failed: int = 0
    retrying: int = 0
    dropped: int = 0
    continued: int = 0


class WebhookOutbox:
    """The bus's outbox for record events (`events.Outbox`: `stage`, `publish`), the relay and the
    delivery step of the `deliver_webhooks` job; `resend` queues a delivery again for
    `WebhookService.redeliver`. No caller checks here: callers are the event bus, workers and
    `WebhookService`. `signals`: told of every delivery attempt made (`Signals.delivery`: outcome
    `delivered`, `retrying` or `failed`, and its duration)."""

    def __init__(self, webhooks: WebhookRepository, outbox: DeliveryOutbox, delivery_log: DeliveryLog,
                 catalog: Catalog, jobs: JobQueue, sender: WebhookSender, *, clock: Clock = utcnow,
                 creator: Callable[[str], Awaitable[Principal | None]] | None = None,
                 batch_start_within_s: float = BATCH_START_WITHIN_S,
                 definitions: DefinitionCache | None = None, signals: Signals | None = None) -> None:
        self._signals = signals
        self._definitions = definitions
        self._batch_start_within_s = batch_start_within_s
        self._creator = creator
        self._webhooks = webhooks
        self._outbox = outbox
        self._log = delivery_log
        self._catalog = catalog
        self._jobs = jobs
        self._sender = sender
        self._clock = clock

    async def _active_for(self, collection_id: str) -> list[Webhook]:
        """The collection's active webhooks, from the definition cache when current."""
        if self._definitions is None:
            return await self._webhooks.active_for(collection_id)
        return await self._definitions.get(("webhooks", collection_id),
                                           lambda: self._webhooks.active_for(collection_id))

    async def backlog(self) -> int:
        """Deliveries written but not finished (pending or enqueued)."""
        return await self._outbox.backlog()

    # --- the outbox ---------------------------------------------------------------------------------

    async def wants(self, collection_id: str) -> bool:
        """Whether the collection has an active webhook (its writes then run in a transaction with
        their outbox entries, where the server supports transactions)."""
        return bool(await self._active_for(collection_id))

    async def stage(self, events: Sequence[RecordEvent]) -> list[OutboxBatch]:
        """The outbox (`events.Outbox`): write one pending delivery per event and matching active
        webhook, in batches (`batches_of`), inside the transaction of the change when one is open,
        before the change is acknowledged. Returns the batches for `publish`."""
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
                creator = creators[webhook.created_by]
                if _creator_may_view(creator, collection, event):
                    deliveries.append(WebhookDelivery(
                        id=new_id(), webhook_id=webhook.id, event=event.event, collection=event.collection,
                        record_id=event.record_id, body=represent.event_body(_as_seen(creator, collection, event)),
                        created=now,
                    ))
        batches = batches_of(deliveries, now)
        await self._outbox.insert(batches)
        return batches

    async def _creator_of(self, webhook: Webhook) -> Principal | None:
        """The webhook's creator as a principal with its current role, email and verified flag (the
        user lookup given to the service), or None when that user is gone. Without a lookup (unit
        wiring), the role stored with the webhook."""
        if self._creator is None:
            return Principal(kind="admin_user", user_id=webhook.created_by, role=webhook.created_by_role)
        return await self._creator(webhook.created_by)

    async def publish(self, staged: Sequence[OutboxBatch]) -> None:
        """Hand staged deliveries to the queue after the change committed; what fails here (Redis
        down, the process dies) stays pending for the relay."""
        await self._hand_on(staged)

    async def _webhooks_of(self, collection_name: str) -> tuple[Collection | None, list[Webhook]]:
        """The collection called `collection_name` and its active webhooks (none if it is gone)."""
        try:
            collection = await self._catalog.by_name(collection_name)
        except NotFound:
            return None, []
        return collection, await self._active_for(collection.id)

    async def _hand_on(self, batches: Sequence[OutboxBatch]) -> None:
        """Queue `batches` and mark them enqueued; what cannot be queued (Redis down) stays pending
        for the relay. A batch queued twice runs once (its job id is derived from its id)."""
        handed: list[str] = []
        try:
            for start in range(0, len(batches), MAX_ENQUEUES_AT_ONCE):
                group = [b.id for b in batches[start:start + MAX_ENQUEUES_AT_ONCE]]
                await asyncio.gather(*(self._jobs.enqueue_webhook_batch(i) for i in group))
                handed.extend(group)
        except Exception:  # Redis down: the relay hands the rest on later
            log.warning("could not enqueue %d webhook delivery batches; the relay will", len(batches) - len(handed),
                        exc_info=True)
        await self._outbox.mark_enqueued(handed, self._clock())

    async def relay(self) -> int:
        """Hand on pending batches older than RELAY_GRACE_S (the process that wrote them died, or
        Redis was down), and enqueued ones not finished RELAY_STALE_S after they were queued or
        fell due (their job was lost with Redis, or failed for good): those read the log before
        sending, so what an earlier run sent is not sent again. Returns how many deliveries were
        handed on. Two relays at once queue some batches twice; the job ids make each run once."""
        now = self._clock()
        pending = await self._outbox.waiting(PENDING, now - timedelta(seconds=RELAY_GRACE_S), RELAY_BATCH)
        stale = await self._outbox.waiting(ENQUEUED, now - timedelta(seconds=RELAY_STALE_S), RELAY_BATCH)
        if pending or stale:
            log.info("relay: handing on %d pending and %d stale webhook delivery batches", len(pending), len(stale))
        await self._outbox.mark_resumed([b.id for b in stale], now)
        await self._hand_on([*pending, *stale])
        return sum(len(b.deliveries) for b in [*pending, *stale])

    # --- delivery -----------------------------------------------------------------------------------

    async def deliver_batch(self, batch_id: str, *, rerun: bool = False) -> BatchOutcome:
        """Run the outbox batch `batch_id` (the `deliver_webhooks` job): make its attempt of each
        delivery, POSTing them concurrently, log every attempt with one write, hand the deliveries
        to retry (5xx, time-out, connection error, while the webhook's `retry_count` allows) to one
        child batch (`retry_batch_id`) queued `retry_delay_s` later, those that could not start
        within the batch's time budget to a continuation batch (`continued_batch_id`) queued now,
        and mark the batch done.
        Deliveries whose webhook is gone or disabled are dropped unsent; a finished or unknown
        batch does nothing. `rerun` (arq runs the job again after a crash or an error) or a batch
        the relay handed on again reads the log first: an attempt already logged is not sent
        again, and its logged outcome is used. Every step can be repeated, so a run that dies
        anywhere is completed by the next. Raises what MongoDB or Redis raise."""
        batch = await self._outbox.get(batch_id)
        if batch is None or batch.status == DONE:
            return BatchOutcome()
        resume = rerun or batch.resume
        webhooks = await self._webhooks.get_many([d.webhook_id for d in batch.deliveries])
        logged = await self._log.get_many([attempt_id(d.id, batch.attempt) for d in batch.deliveries]) if resume else {}
        dropped = 0
        to_send: list[tuple[Webhook, WebhookDelivery]] = []
        results: list[tuple[Webhook, WebhookDelivery, SendResult]] = []
        for delivery in batch.deliveries:
            webhook = webhooks.get(delivery.webhook_id)
            earlier = logged.get(attempt_id(delivery.id, batch.attempt))
            if webhook is None or not webhook.active:
                dropped += 1
            elif earlier is not None:
                results.append((webhook, delivery, SendResult(earlier.status_code, earlier.response_body,
                                                              earlier.duration_ms, earlier.error)))
            else:
                to_send.append((webhook, delivery))
        answers = await self._sender.send_all(to_send, start_within_s=self._batch_start_within_s)
        sent = [(w, d, r) for (w, d), r in zip(to_send, answers, strict=True) if r is not None]
        await self._log.insert_many([self._attempt(batch.attempt, w, d, r) for w, d, r in sent])
        results += sent
        later = tuple(d for (_, d), r in zip(to_send, answers, strict=True) if r is None)
        if later:
            await self._hand_over(OutboxBatch(id=continued_batch_id(batch.id), deliveries=later, created=batch.created,
                                              attempt=batch.attempt, status=ENQUEUED, enqueued_at=self._clock(),
                                              resume=resume), delay_s=0)
        retry = tuple(d for w, d, r in results if not r.success and r.retryable and batch.attempt <= w.retry_count)
        if retry:
            delay_s = retry_delay_s(batch.attempt)
            due = self._clock() + timedelta(seconds=delay_s)
            await self._hand_over(OutboxBatch(id=retry_batch_id(batch.id, batch.attempt + 1), deliveries=retry,
                                              created=batch.created, attempt=batch.attempt + 1, status=ENQUEUED,
                                              enqueued_at=due, resume=resume), delay_s=delay_s)
        await self._outbox.mark_done(batch.id, self._clock())
        self._signal_attempts(sent, retry)
        delivered = sum(1 for _, _, r in results if r.success)
        return BatchOutcome(sent=len(sent), delivered=delivered, failed=len(results) - delivered - len(retry),
                            retrying=len(retry), dropped=dropped, continued=len(later))

    def _signal_attempts(self, sent: Sequence[tuple[Webhook, WebhookDelivery, SendResult]],
                         retry: Sequence[WebhookDelivery]) -> None:
        """Signal each attempt this run made: delivered, handed to a retry, or failed for good."""
        if self._signals is None:
            return
        retrying = {d.id for d in retry}
        for _, delivery, result in sent:
            outcome = "delivered" if result.success else "retrying" if delivery.id in retrying else "failed"
            self._signals.delivery(outcome, result.duration_ms / 1000)

    async def _hand_over(self, batch: OutboxBatch, *, delay_s: float) -> None:
        """Store a batch taking over deliveries of the running one and queue it `delay_s` seconds
        from now; both steps can be repeated (a re-run of the running batch)."""
        await self._outbox.insert([batch], exist_ok=True)
        await self._jobs.enqueue_webhook_batch(batch.id, defer_s=delay_s)

    def _attempt(self, attempt: int, webhook: Webhook, delivery: WebhookDelivery, result: SendResult
                 ) -> DeliveryAttempt:
        """The log entry of attempt `attempt` of `delivery`."""
        return DeliveryAttempt(
            id=attempt_id(delivery.id, attempt), webhook_id=webhook.id, delivery_id=delivery.id,
            event_type=delivery.event, record_id=delivery.record_id, url=webhook.url,
            status_code=result.status_code, response_body=result.response_body, attempt=attempt,
            success=result.success, duration_ms=result.duration_ms, error=result.error, created=self._clock())

    # --- send again -------------------------------------------------------------------------------

    async def resend(self, webhook: Webhook, delivery_id: str) -> WebhookDelivery | None:
        """The delivery `delivery_id` as a new delivery (an id and log entries of its own, attempt 1,
        retried like any other) of the same body to `webhook` (its current URL and secret), queued
        like a record change's (a relay hands it on if Redis is down). None when the delivery's
        body is no longer kept (finished outbox batches expire after 7 days)."""
        original = await self._outbox.find_delivery(delivery_id)
        if original is None:
            return None
        now = self._clock()
        delivery = WebhookDelivery(id=new_id(), webhook_id=webhook.id, event=original.event,
                                   collection=original.collection, record_id=original.record_id, body=original.body,
                                   created=now)
        batches = batches_of([delivery], now)
        await self._outbox.insert(batches)
        await self._hand_on(batches)
        return delivery


def batches_of(deliveries: Sequence[WebhookDelivery], now: datetime) -> list[OutboxBatch]:
    """`deliveries` as new pending outbox batches of at most DELIVERY_BATCH deliveries and
    MAX_BATCH_BODY_BYTES of bodies (a single larger body is a batch of its own), in order."""
    batches: list[OutboxBatch] = []
    current: list[WebhookDelivery] = []
    size = 0
    for delivery in deliveries:
        body_bytes = len(delivery.body.encode("utf-8"))
        if current and (len(current) == DELIVERY_BATCH or size + body_bytes > MAX_BATCH_BODY_BYTES):
            batches.append(OutboxBatch(id=new_id(), deliveries=tuple(current), created=now))
            current, size = [], 0
        current.append(delivery)
        size += body_bytes
    if current:
        batches.append(OutboxBatch(id=new_id(), deliveries=tuple(current), created=now))
    return batches


def _as_seen(creator: Principal | None, collection: Collection, event: RecordEvent) -> RecordEvent:
    """`event` with its record as the webhook's creator may see it: without the values the
    collection's field rules hide from them (decisions.md, Field rules)."""
    fields = field_view(creator, collection)
    if not fields.guards or event.event == DELETE:
        return event
    record = event.record if event.record is not None else represent.record_from_json(event.data, collection)
    shown = fields.redact(record)
    # localized fields as objects of the configured locales, as every event carries them
    return event if shown is record else replace(event, data=represent.record_json(
        localization(collection, ALL).localize(shown)))


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


