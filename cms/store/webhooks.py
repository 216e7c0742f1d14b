"""Repositories of webhooks (`webhooks`), their delivery outbox (`webhook_outbox`) and their
delivery log (`webhook_deliveries`, expiring after 30 days).

Every read and write of the delivery path filters on `_id` alone (`$in` lists of at most ID_CHUNK
ids; a condition on another field goes into a pipeline update's `$cond`): the embedded server
looks those up directly, and answers any other filter, even `_id` plus one more field, by reading
the whole collection. Inserts cost about 0.15 ms a document there, plus as much again per
secondary index; updates about 0.5-1 ms a document, so the outbox is written once per batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError

from cms.errors import AlreadyExists
from cms.models import DeliveryAttempt, Webhook, WebhookDelivery
from cms.store.bulk import DUPLICATE_KEY, chunks
from cms.store.client import Database
from cms.store.documents import from_document, to_document
from cms.store.errors import translate_errors
from cms.store.repository import Repository
from cms.store.transactions import current_session

DELIVERY_LOG_TTL_S = 30 * 24 * 3600
"""Delivery log entries expire this many seconds after they are written."""
PENDING, ENQUEUED, DONE = "pending", "enqueued", "done"
LEGACY_ATTEMPT_INDEX = "delivery_id_1_attempt_1"


@dataclass(frozen=True)
class OutboxBatch:
    """One outbox document: deliveries handed to one `deliver_webhooks` job together, all making
    attempt `attempt` (1-based). `status` is "pending" (written with the change, not yet queued),
    "enqueued" (queued, or due at `enqueued_at` for a retry batch) or "done" (every delivery in it
    finished or handed to a retry batch). `resume`: an earlier run may have made some of the
    attempts, so the log is read before sending."""

    id: str
    deliveries: tuple[WebhookDelivery, ...]
    created: datetime
    attempt: int = 1
    status: str = PENDING
    enqueued_at: datetime | None = None
    done_at: datetime | None = None
    resume: bool = False


_DELIVERY_KEYS = ("id", "webhook_id", "event", "collection", "record_id", "body", "created")


def _batch_document(batch: OutboxBatch) -> dict[str, Any]:
    return {"_id": batch.id, "created": batch.created, "attempt": batch.attempt, "status": batch.status,
            "enqueued_at": batch.enqueued_at, "done_at": batch.done_at, "resume": batch.resume,
            "size": len(batch.deliveries),
            "deliveries": [{k: getattr(d, k) for k in _DELIVERY_KEYS} for d in batch.deliveries]}


def _batch(doc: dict[str, Any]) -> OutboxBatch:
    if "deliveries" in doc:
        deliveries = tuple(WebhookDelivery(**{k: d[k] for k in _DELIVERY_KEYS}) for d in doc["deliveries"])
    else:  # one delivery per document, as versions before batching wrote them
        deliveries = (from_document(WebhookDelivery, doc),)
    return OutboxBatch(id=doc["_id"], deliveries=deliveries, created=doc["created"], attempt=int(doc.get("attempt", 1)),
                       status=doc.get("status", PENDING), enqueued_at=doc.get("enqueued_at"),
                       done_at=doc.get("done_at"), resume=bool(doc.get("resume", False)))


def _webhook(doc: dict[str, Any]) -> Webhook:
    webhook = from_document(Webhook, doc)
    return Webhook(**{**webhook.__dict__, "events": tuple(webhook.events)})


class WebhookRepository(Repository[Webhook]):
    """Webhook definitions, with their secrets (never returned by the API)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db["webhooks"], _webhook, unique="webhook")

    async def ensure_indexes(self) -> None:
        """The index of the delivery path's look-up (idempotent)."""
        await self._mongo_coll.create_index([("collection_id", 1), ("active", 1)])

    async def get(self, webhook_id: str) -> Webhook | None:
        """The webhook, or None."""
        return await self._find_one({"_id": webhook_id})

    async def get_many(self, webhook_ids: Sequence[str]) -> dict[str, Webhook]:
        """The webhooks among `webhook_ids` that exist, by id."""
        found: dict[str, Webhook] = {}
        for chunk in chunks(sorted(set(webhook_ids))):
            async for doc in self._mongo_coll.find({"_id": {"$in": chunk}}):
                found[doc["_id"]] = _webhook(doc)
        return found

    async def find(self, *, collection_name: str | None = None, created_by: str | None = None) -> list[Webhook]:
        """Webhooks, oldest first, optionally of one collection and/or one creator."""
        query: dict[str, Any] = {}
        if collection_name is not None:
            query["collection_name"] = collection_name
        if created_by is not None:
            query["created_by"] = created_by
        return await self._find(query, [("created", 1), ("_id", 1)])

    async def active_for(self, collection_id: str) -> list[Webhook]:
        """The active webhooks of a collection."""
        return await self._find({"collection_id": collection_id, "active": True})

    async def update(self, webhook_id: str, changes: dict[str, Any]) -> Webhook | None:
        """Set `changes` (field -> value) on the webhook; returns it after the change, or None."""
        doc = await self._mongo_coll.find_one_and_update({"_id": webhook_id}, {"$set": changes},
                                                         return_document=ReturnDocument.AFTER)
        return _webhook(doc) if doc else None

    async def rename_collection(self, collection_id: str, name: str) -> None:
        """Follow a collection's new name."""
        await self._mongo_coll.update_many({"collection_id": collection_id}, {"$set": {"collection_name": name}})

    async def delete(self, webhook_id: str) -> bool:
        """Remove the webhook. Returns False if it did not exist."""
        return await self._delete_one({"_id": webhook_id})

    async def delete_for_collection(self, collection_id: str) -> list[str]:
        """Remove every webhook of a collection; returns their ids."""
        ids = [d["_id"] async for d in self._mongo_coll.find({"collection_id": collection_id}, projection={"_id": 1})]
        if ids:
            await self._mongo_coll.delete_many({"_id": {"$in": ids}})
        return ids


class DeliveryOutbox:
    """Batches of deliveries written with the record change and handed to workers from here
    (transactional outbox): pending -> enqueued -> done, one document per batch, so a batch's state
    costs one write however many deliveries it holds."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["webhook_outbox"]

    async def ensure_indexes(self) -> None:
        """The relay's index (status, then age), and expiry of finished batches after 7 days."""
        await self._mongo_coll.create_index([("status", 1), ("created", 1)])
        await self._mongo_coll.create_index("done_at", expireAfterSeconds=7 * 24 * 3600)

    async def insert(self, batches: Sequence[OutboxBatch], *, exist_ok: bool = False) -> None:
        """Store new batches (inside the open transaction, if any: `current_session`). With
        `exist_ok`, a batch whose id is already stored is left as it was (a re-run handing over
        the same retry batch); otherwise the driver's duplicate-key error propagates (and aborts
        the transaction of the change)."""
        if not batches:
            return
        try:
            async with translate_errors("outbox batch"):
                await self._mongo_coll.insert_many([_batch_document(b) for b in batches], ordered=False,
                                                   session=current_session())
        except AlreadyExists:
            if not exist_ok:
                raise
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if (not exist_ok or exc.details.get("writeConcernErrors")
                    or any(e.get("code") != DUPLICATE_KEY for e in errors)):
                raise

    async def get(self, batch_id: str) -> OutboxBatch | None:
        """The batch, or None."""
        doc = await self._mongo_coll.find_one({"_id": batch_id})
        return _batch(doc) if doc else None

    async def mark_enqueued(self, batch_ids: Sequence[str], now: datetime) -> None:
        """Pending batches among `batch_ids` become enqueued (enqueued and done ones stay so). The
        filter is `_id` alone, the condition an expression: the embedded server looks `_id` up
        directly only then."""
        pending = {"$eq": ["$status", PENDING]}
        for chunk in chunks(batch_ids):
            await self._mongo_coll.update_many({"_id": {"$in": chunk}}, [{"$set": {
                "status": {"$cond": [pending, ENQUEUED, "$status"]},
                "enqueued_at": {"$cond": [pending, now, "$enqueued_at"]}}}])

    async def mark_resumed(self, batch_ids: Sequence[str], now: datetime) -> None:
        """Batches handed on again by the relay: their next run reads the log first; `enqueued_at`
        restarts the relay's count."""
        for chunk in chunks(batch_ids):
            await self._mongo_coll.update_many({"_id": {"$in": chunk}},
                                               {"$set": {"resume": True, "enqueued_at": now}})

    async def mark_done(self, batch_id: str, now: datetime) -> None:
        """The batch is finished (each delivery delivered, failed for good, dropped or handed over)."""
        await self._mongo_coll.update_one({"_id": batch_id}, {"$set": {"status": DONE, "done_at": now}})

    async def waiting(self, status: str, before: datetime, limit: int) -> list[OutboxBatch]:
        """Up to `limit` batches of `status` written (pending) or enqueued before `before`, oldest first."""
        key = "created" if status == PENDING else "enqueued_at"
        cursor = self._mongo_coll.find({"status": status, key: {"$lt": before}}).sort(key, 1).limit(limit)
        return [_batch(d) async for d in cursor]

    async def backlog(self) -> int:
        """How many deliveries are in unfinished batches."""
        cursor = self._mongo_coll.find({"status": {"$in": [PENDING, ENQUEUED]}}, projection={"size": 1})
        return sum([int(d.get("size", 1)) async for d in cursor])

    async def find_delivery(self, delivery_id: str) -> WebhookDelivery | None:
        """The delivery `delivery_id` (with the body it sent) from any batch still kept (finished
        batches expire after 7 days), or None. For "send again", an admin's occasional action: the
        filter is not on `_id` alone, so the embedded server reads the whole outbox."""
        doc = await self._mongo_coll.find_one({"$or": [{"_id": delivery_id}, {"deliveries.id": delivery_id}]})
        if doc is None:
            return None
        return next((d for d in _batch(doc).deliveries if d.id == delivery_id), None)


class DeliveryLog:
    """Every delivery attempt; one entry per (delivery, attempt), so a re-run job cannot log an
    attempt twice (the caller derives the entry's id from both)."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["webhook_deliveries"]

    async def ensure_indexes(self) -> None:
        """Newest-first listing per webhook and overall, and the 30-day expiry. One entry per
        (delivery, attempt) needs no index of its own: the entry's `_id` is derived from both
        (`attempt_id`), so the `_id` index refuses a second one. The unique (delivery_id, attempt)
        index of earlier versions is dropped: it made each logged attempt cost about twice as much
        on the embedded server."""
        await self._mongo_coll.create_index([("webhook_id", 1), ("created", -1)])
        await self._mongo_coll.create_index("created", expireAfterSeconds=DELIVERY_LOG_TTL_S)
        if LEGACY_ATTEMPT_INDEX in await self._mongo_coll.index_information():
            await self._mongo_coll.drop_index(LEGACY_ATTEMPT_INDEX)

    async def insert_many(self, entries: Sequence[DeliveryAttempt]) -> int:
        """Append attempts in one unordered write per ID_CHUNK entries; an attempt already logged
        (same delivery and attempt number: a re-run) is left as it was. Returns how many were new."""
        inserted = 0
        for chunk in chunks(entries):
            try:
                inserted += len((await self._mongo_coll.insert_many(
                    [to_document(e) for e in chunk], ordered=False)).inserted_ids)
            except BulkWriteError as exc:
                errors = exc.details.get("writeErrors", [])
                if exc.details.get("writeConcernErrors") or any(e.get("code") != DUPLICATE_KEY for e in errors):
                    raise
                inserted += len(chunk) - len(errors)
        return inserted

    async def get_many(self, attempt_ids: Sequence[str]) -> dict[str, DeliveryAttempt]:
        """The logged attempts among `attempt_ids` (log entry ids), by id."""
        found: dict[str, DeliveryAttempt] = {}
        for chunk in chunks(attempt_ids):
            async for doc in self._mongo_coll.find({"_id": {"$in": chunk}}):
                found[doc["_id"]] = from_document(DeliveryAttempt, doc)
        return found

    async def page(self, *, webhook_ids: Sequence[str] | None, skip: int, limit: int
                   ) -> tuple[list[DeliveryAttempt], int]:
        """Attempts newest first (of `webhook_ids`, or of every webhook when None) and their total."""
        query: dict[str, Any] = {} if webhook_ids is None else {"webhook_id": {"$in": list(webhook_ids)}}
        cursor = self._mongo_coll.find(query).sort([("created", -1), ("attempt", -1)]).skip(skip).limit(limit)
        items = [from_document(DeliveryAttempt, d) async for d in cursor]
        return items, await self._mongo_coll.count_documents(query)
