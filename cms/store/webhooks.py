"""Repositories of webhooks (`webhooks`), their delivery outbox (`webhook_outbox`) and their
delivery log (`webhook_deliveries`, expiring after 30 days)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument

from cms.errors import AlreadyExists
from cms.models import DeliveryAttempt, Webhook, WebhookDelivery
from cms.store.client import Database
from cms.store.documents import from_document, to_document
from cms.store.errors import translate_errors
from cms.store.records import ID_CHUNK
from cms.store.transactions import current_session

DELIVERY_LOG_TTL_S = 30 * 24 * 3600
"""Delivery log entries expire this many seconds after they are written."""
PENDING, ENQUEUED, DONE = "pending", "enqueued", "done"


def _webhook(doc: dict[str, Any]) -> Webhook:
    webhook = from_document(Webhook, doc)
    return Webhook(**{**webhook.__dict__, "events": tuple(webhook.events)})


class WebhookRepository:
    """Webhook definitions, with their secrets (never returned by the API)."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["webhooks"]

    async def ensure_indexes(self) -> None:
        """The index of the delivery path's look-up (idempotent)."""
        await self._mongo_coll.create_index([("collection_id", 1), ("active", 1)])

    async def insert(self, webhook: Webhook) -> None:
        """Store a new webhook."""
        async with translate_errors("webhook"):
            await self._mongo_coll.insert_one(to_document(webhook))

    async def get(self, webhook_id: str) -> Webhook | None:
        """The webhook, or None."""
        doc = await self._mongo_coll.find_one({"_id": webhook_id})
        return _webhook(doc) if doc else None

    async def find(self, *, collection_name: str | None = None, created_by: str | None = None) -> list[Webhook]:
        """Webhooks, oldest first, optionally of one collection and/or one creator."""
        query: dict[str, Any] = {}
        if collection_name is not None:
            query["collection_name"] = collection_name
        if created_by is not None:
            query["created_by"] = created_by
        return [_webhook(d) async for d in self._mongo_coll.find(query).sort([("created", 1), ("_id", 1)])]

    async def active_for(self, collection_id: str) -> list[Webhook]:
        """The active webhooks of a collection."""
        return [_webhook(d) async for d in self._mongo_coll.find({"collection_id": collection_id, "active": True})]

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
        return (await self._mongo_coll.delete_one({"_id": webhook_id})).deleted_count == 1

    async def delete_for_collection(self, collection_id: str) -> list[str]:
        """Remove every webhook of a collection; returns their ids."""
        ids = [d["_id"] async for d in self._mongo_coll.find({"collection_id": collection_id}, projection={"_id": 1})]
        if ids:
            await self._mongo_coll.delete_many({"_id": {"$in": ids}})
        return ids


class DeliveryOutbox:
    """Deliveries written with the record change and handed to workers from here (transactional
    outbox): pending -> enqueued -> done."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["webhook_outbox"]

    async def ensure_indexes(self) -> None:
        """The relay's index (status, then age), and expiry of finished entries after 7 days."""
        await self._mongo_coll.create_index([("status", 1), ("created", 1)])
        await self._mongo_coll.create_index("done_at", expireAfterSeconds=7 * 24 * 3600)

    async def insert_many(self, deliveries: Sequence[WebhookDelivery]) -> None:
        """Store new pending deliveries (inside the open transaction, if any: `current_session`)."""
        if deliveries:
            await self._mongo_coll.insert_many([to_document(d) for d in deliveries], ordered=False,
                                               session=current_session())

    async def get(self, delivery_id: str) -> WebhookDelivery | None:
        """The delivery, or None."""
        doc = await self._mongo_coll.find_one({"_id": delivery_id})
        return from_document(WebhookDelivery, doc) if doc else None

    async def mark_enqueued(self, delivery_ids: Sequence[str], now: datetime) -> None:
        """Pending deliveries among `delivery_ids` become enqueued (done ones stay done)."""
        ids = list(delivery_ids)
        for start in range(0, len(ids), ID_CHUNK):  # long `$in` lists are slow on the embedded server
            await self._mongo_coll.update_many({"_id": {"$in": ids[start:start + ID_CHUNK]}, "status": PENDING},
                                               {"$set": {"status": ENQUEUED, "enqueued_at": now}})

    async def mark_done(self, delivery_id: str, now: datetime) -> None:
        """The delivery is finished (delivered, failed for good or dropped)."""
        await self._mongo_coll.update_one({"_id": delivery_id}, {"$set": {"status": DONE, "done_at": now}})

    async def waiting(self, status: str, before: datetime, limit: int) -> list[WebhookDelivery]:
        """Up to `limit` deliveries of `status` written (pending) or enqueued before `before`, oldest first."""
        key = "created" if status == PENDING else "enqueued_at"
        cursor = self._mongo_coll.find({"status": status, key: {"$lt": before}}).sort(key, 1).limit(limit)
        return [from_document(WebhookDelivery, d) async for d in cursor]

    async def backlog(self) -> int:
        """How many deliveries are not finished."""
        return await self._mongo_coll.count_documents({"status": {"$in": [PENDING, ENQUEUED]}})

    async def drop_for_webhooks(self, webhook_ids: Sequence[str], now: datetime) -> None:
        """Finish the open deliveries of deleted webhooks."""
        if webhook_ids:
            await self._mongo_coll.update_many({"webhook_id": {"$in": list(webhook_ids)}, "status": {"$ne": DONE}},
                                               {"$set": {"status": DONE, "done_at": now}})


class DeliveryLog:
    """Every delivery attempt; one entry per (delivery, attempt), so a re-run job cannot log an
    attempt twice."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["webhook_deliveries"]

    async def ensure_indexes(self) -> None:
        """Newest-first listing per webhook and overall, and the 30-day expiry."""
        await self._mongo_coll.create_index([("webhook_id", 1), ("created", -1)])
        await self._mongo_coll.create_index("created", expireAfterSeconds=DELIVERY_LOG_TTL_S)
        await self._mongo_coll.create_index([("delivery_id", 1), ("attempt", 1)], unique=True)

    async def insert(self, entry: DeliveryAttempt) -> bool:
        """Append one attempt; False when this (delivery, attempt) is already logged."""
        try:
            async with translate_errors("delivery attempt"):
                await self._mongo_coll.insert_one(to_document(entry))
        except AlreadyExists:  # a re-run of the same attempt
            return False
        return True

    async def succeeded(self, delivery_id: str) -> bool:
        """Whether some attempt of the delivery succeeded."""
        return await self._mongo_coll.find_one({"delivery_id": delivery_id, "success": True},
                                               projection={"_id": 1}) is not None

    async def page(self, *, webhook_ids: Sequence[str] | None, skip: int, limit: int
                   ) -> tuple[list[DeliveryAttempt], int]:
        """Attempts newest first (of `webhook_ids`, or of every webhook when None) and their total."""
        query: dict[str, Any] = {} if webhook_ids is None else {"webhook_id": {"$in": list(webhook_ids)}}
        cursor = self._mongo_coll.find(query).sort([("created", -1), ("attempt", -1)]).skip(skip).limit(limit)
        items = [from_document(DeliveryAttempt, d) async for d in cursor]
        return items, await self._mongo_coll.count_documents(query)
