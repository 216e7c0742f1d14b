"""Repository of settings (Mongo collection `settings`): `{key, value, category}` documents."""

from __future__ import annotations

from typing import Any

from cms.store.client import Database


class SettingsRepository:
    """Stored overrides of the settings defaults; values are kept as JSON-native values."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["settings"]

    async def all(self) -> dict[str, Any]:
        """Every stored setting as {key: value}."""
        return {d["key"]: d["value"] async for d in self._mongo_coll.find({}, {"key": 1, "value": 1})}

    async def put(self, key: str, value: Any, category: str) -> None:
        """Upsert one setting."""
        await self._mongo_coll.update_one(
            {"key": key}, {"$set": {"value": value, "category": category}}, upsert=True
        )

    async def get(self, key: str) -> Any:
        """The stored value of `key`, or None when it is not stored (the default applies)."""
        doc = await self._mongo_coll.find_one({"key": key}, {"value": 1})
        return None if doc is None else doc["value"]
