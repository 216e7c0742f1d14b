"""Repository of releases (Mongo collection `releases`; decisions.md, Drafts, versions and scheduled
publishing: Releases; docs/concepts/releases.md).

One document per release: `{_id, name, items: [{collection_id, collection, record_id}], status,
scheduled_at, published_at, error, errors, created, updated}`. The index (`created` descending, `_id`)
serves the admins' list, newest first. Writes join the caller's transaction (`current_session`), so a
release's publish and its new status commit together where the server has transactions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import ReturnDocument

from cms.models import Release, ReleaseItem
from cms.store.client import Database
from cms.store.repository import Repository
from cms.store.transactions import current_session

RELEASE_FIELDS = frozenset({"name", "items", "status", "scheduled_at", "published_at", "error", "errors", "updated"})
"""The attributes of a Release `update` may change (never a client's key: the service names them)."""
ANY = object()
"""`update`'s `scheduled_at` when the change holds whatever the release's schedule is."""


def _to_document(release: Release) -> dict[str, Any]:
    return {"_id": release.id, "name": release.name, "items": _items(release.items), "status": release.status,
            "scheduled_at": release.scheduled_at, "published_at": release.published_at, "error": release.error,
            "errors": dict(release.errors), "created": release.created, "updated": release.updated}


def _items(items: tuple[ReleaseItem, ...]) -> list[dict[str, str]]:
    return [{"collection_id": i.collection_id, "collection": i.collection, "record_id": i.record_id} for i in items]


def _from_document(doc: dict[str, Any]) -> Release:
    items = tuple(ReleaseItem(i["collection_id"], i["collection"], i["record_id"]) for i in doc.get("items", []))
    return Release(id=doc["_id"], name=doc["name"], items=items, status=doc["status"], created=doc["created"],
                   updated=doc["updated"], scheduled_at=doc.get("scheduled_at"), published_at=doc.get("published_at"),
                   error=doc.get("error"), errors=dict(doc.get("errors") or {}))


class ReleaseRepository(Repository[Release]):
    """Releases by id (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db["releases"], _from_document, _to_document, unique="release")

    async def ensure_indexes(self) -> None:
        """The list's index, newest first (idempotent)."""
        await self._mongo_coll.create_index([("created", -1), ("_id", -1)], name="created_id")

    async def get(self, release_id: str) -> Release | None:
        """The release `release_id`, or None."""
        doc = await self._mongo_coll.find_one({"_id": release_id}, session=current_session())
        return _from_document(doc) if doc else None

    async def page(self, skip: int, limit: int) -> tuple[list[Release], int]:
        """Releases newest first: `limit` of them after `skip`, and how many there are."""
        cursor = self._mongo_coll.find({}).sort([("created", -1), ("_id", -1)]).skip(skip).limit(limit)
        items = [_from_document(d) async for d in cursor]
        return items, await self._mongo_coll.count_documents({})

    async def update(self, release_id: str, changes: Mapping[str, Any], *, scheduled_at: Any = ANY) -> Release | None:
        """Set `changes` (attribute names of RELEASE_FIELDS to values; `items` a tuple of ReleaseItem)
        on the release, only while its `scheduled_at` is `scheduled_at` unless that is ANY. Returns the
        release as changed, or None (no such release, or its schedule changed)."""
        unknown = set(changes) - RELEASE_FIELDS
        if unknown:
            raise ValueError(f"not release fields: {sorted(unknown)}")
        values = dict(changes)
        if "items" in values:
            values["items"] = _items(values["items"])
        query: dict[str, Any] = {"_id": release_id}
        if scheduled_at is not ANY:
            query["scheduled_at"] = scheduled_at
        doc = await self._mongo_coll.find_one_and_update(query, {"$set": values}, return_document=ReturnDocument.AFTER,
                                                         session=current_session())
        return _from_document(doc) if doc else None

    async def delete(self, release_id: str) -> bool:
        """Remove the release. Returns False if there was none."""
        return await self._delete_one({"_id": release_id})

