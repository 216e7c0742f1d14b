"""Repository of API keys (Mongo collection `api_keys`).

Documents are keyed by the SHA-256 of the secret (`_id`), so the check made on every request
that presents a key is one `_id` look-up; the key's public `id` is a field of its own."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cms.models import ApiKey
from cms.store.client import Database
from cms.store.repository import Repository


def _to_document(key: ApiKey) -> dict[str, Any]:
    return {"_id": key.key_hash, "id": key.id, "name": key.name, "scopes": list(key.scopes), "user_id": key.user_id,
            "created": key.created, "expires_at": key.expires_at, "last_used": key.last_used}


def _from_document(doc: dict[str, Any]) -> ApiKey:
    return ApiKey(id=doc["id"], name=doc["name"], scopes=tuple(doc["scopes"]), user_id=doc["user_id"],
                  created=doc["created"], key_hash=doc["_id"], expires_at=doc.get("expires_at"),
                  last_used=doc.get("last_used"))


class ApiKeyRepository(Repository[ApiKey]):
    """API keys by secret hash; listing and deletion by their public id."""

    def __init__(self, db: Database) -> None:
        super().__init__(db["api_keys"], _from_document, _to_document, unique="API key")

    async def ensure_indexes(self) -> None:
        """Unique public ids, and listing per user (idempotent)."""
        await self._mongo_coll.create_index("id", unique=True)
        await self._mongo_coll.create_index([("user_id", 1), ("created", 1)])

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        """The key whose secret hashes to `key_hash`, or None (unknown or revoked)."""
        return await self._find_one({"_id": key_hash})

    async def get(self, key_id: str) -> ApiKey | None:
        """The key with this public id, or None."""
        return await self._find_one({"id": key_id})

    async def find(self, *, user_id: str | None = None) -> list[ApiKey]:
        """Keys (of one user, or all), oldest first."""
        query = {} if user_id is None else {"user_id": user_id}
        return await self._find(query, [("created", 1), ("id", 1)])

    async def delete(self, key_id: str) -> bool:
        """Remove (revoke) a key. Returns False if it did not exist."""
        return await self._delete_one({"id": key_id})

    async def touch(self, key_hash: str, now: datetime) -> None:
        """Record use of the key (`last_used`)."""
        await self._mongo_coll.update_one({"_id": key_hash}, {"$set": {"last_used": now}})
