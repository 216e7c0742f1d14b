"""Repository of single-use emailed tokens (Mongo collection `one_time_tokens`), stored by hash."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from cms.models import OneTimeToken
from cms.store.client import Database
from cms.store.documents import from_document
from cms.store.repository import Repository


class OneTimeTokenRepository(Repository[OneTimeToken]):
    """Tokens keyed by their SHA-256 hash (`insert` stores a new unused one); a TTL index removes
    them a week after expiry."""

    def __init__(self, db: Database) -> None:
        super().__init__(db["one_time_tokens"], partial(from_document, OneTimeToken), unique="token")

    async def get(self, token_hash: str, purpose: str) -> OneTimeToken | None:
        """The token with this hash and purpose (used or not), or None."""
        return await self._find_one({"_id": token_hash, "purpose": purpose})

    async def mark_used(self, token_hash: str, now: datetime) -> bool:
        """Atomically mark an unused token used. Returns False if it was already used."""
        result = await self._mongo_coll.update_one(
            {"_id": token_hash, "used_at": None}, {"$set": {"used_at": now}}
        )
        return result.modified_count == 1

    async def void_unused(self, user_id: str, purpose: str | None, now: datetime) -> None:
        """Mark every unused token of a user and purpose (None: of every purpose) as used (e.g.
        after a new one is sent)."""
        query: dict[str, Any] = {"user_id": user_id, "used_at": None}
        if purpose is not None:
            query["purpose"] = purpose
        await self._mongo_coll.update_many(query, {"$set": {"used_at": now}})
