"""Repository of OTP login codes (Mongo collection `otp_codes`), stored by hash."""

from __future__ import annotations

from datetime import datetime

from pymongo import ReturnDocument

from cms.models import OtpCode
from cms.store.client import Database
from cms.store.documents import from_document, to_document


class OtpCodeRepository:
    """At most one live code per (collection, user); a TTL index removes codes a day after expiry."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["otp_codes"]

    async def ensure_indexes(self) -> None:
        """Create the lookup and TTL indexes (idempotent)."""
        await self._mongo_coll.create_index([("collection_id", 1), ("user_id", 1)])
        await self._mongo_coll.create_index("expires_at", expireAfterSeconds=24 * 3600)

    async def insert(self, code: OtpCode) -> None:
        """Store a new unused code."""
        await self._mongo_coll.insert_one(to_document(code))

    async def void_unused(self, collection_id: str, user_id: str, now: datetime) -> None:
        """Mark every unused code of the user as used (a new code replaces them)."""
        await self._mongo_coll.update_many(
            {"collection_id": collection_id, "user_id": user_id, "used_at": None}, {"$set": {"used_at": now}}
        )

    async def latest_unused(self, collection_id: str, user_id: str) -> OtpCode | None:
        """The user's newest unused code (expired or not), or None."""
        cursor = self._mongo_coll.find(
            {"collection_id": collection_id, "user_id": user_id, "used_at": None},
            sort=[("created", -1)], limit=1,
        )
        docs = [d async for d in cursor]
        return from_document(OtpCode, docs[0]) if docs else None

    async def claim_attempt(self, code_id: str, max_attempts: int) -> OtpCode | None:
        """Atomically count one verification try of an unused code that has tries left; returns the
        code after the count, or None when it is used or out of tries (so parallel guesses cannot
        get past `max_attempts`)."""
        doc = await self._mongo_coll.find_one_and_update(
            {"_id": code_id, "used_at": None, "attempts": {"$lt": max_attempts}},
            {"$inc": {"attempts": 1}},
            return_document=ReturnDocument.AFTER,
        )
        return from_document(OtpCode, doc) if doc else None

    async def mark_used(self, code_id: str, now: datetime) -> bool:
        """Atomically mark an unused code used. Returns False if it already was."""
        result = await self._mongo_coll.update_one({"_id": code_id, "used_at": None},
                                                   {"$set": {"used_at": now}})
        return result.modified_count == 1
