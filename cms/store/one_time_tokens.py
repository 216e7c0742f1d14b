"""Repository of single-use emailed tokens (Mongo collection `one_time_tokens`), stored by hash."""

from __future__ import annotations

from datetime import datetime

from cms.models import OneTimeToken
from cms.store.client import Database
from cms.store.documents import from_document, to_document


class OneTimeTokenRepository:
    """Tokens keyed by their SHA-256 hash; a TTL index removes them a week after expiry."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["one_time_tokens"]

    async def insert(self, token: OneTimeToken) -> None:
        """Store a new unused token."""
        await self._mongo_coll.insert_one(to_document(token))

    async def get(self, token_hash: str, purpose: str) -> OneTimeToken | None:
        """The token with this hash and purpose (used or not), or None."""
        doc = await self._mongo_coll.find_one({"_id": token_hash, "purpose": purpose})
        return from_document(OneTimeToken, doc) if doc else None

    async def mark_used(self, token_hash: str, now: datetime) -> bool:
        """Atomically mark an unused token used. Returns False if it was already used."""
        result = await self._mongo_coll.update_one(
            {"_id": token_hash, "used_at": None}, {"$set": {"used_at": now}}
        )
        return result.modified_count == 1

    async def void_unused(self, user_id: str, purpose: str, now: datetime) -> None:
        """Mark every unused token of a user and purpose as used (e.g. after a new one is sent)."""
        await self._mongo_coll.update_many(
            {"user_id": user_id, "purpose": purpose, "used_at": None}, {"$set": {"used_at": now}}
        )
