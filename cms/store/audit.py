"""Repository of audit log entries (Mongo collection `audit_log`).

Entries are append-only: nothing here updates or deletes one. Old entries leave through the TTL
index on `created` (`RETENTION_INDEX`), whose `expireAfterSeconds` follows the
`audit_retention_days` setting (`ensure_retention`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo.errors import OperationFailure

from cms.models import AuditEntry
from cms.store.client import Database
from cms.store.documents import from_document, to_document

log = logging.getLogger("cms.store")

RETENTION_INDEX = "created_-1"
"""The name of the TTL index on `created` (descending, so it also serves newest-first lists)."""
NEWEST_FIRST = [("created", -1), ("_id", -1)]


@dataclass(frozen=True)
class AuditFilter:
    """Validated filters of an audit query; None means "any". `severities` matches any of them;
    `from_date` is inclusive and `to_date` exclusive (aware datetimes)."""

    event_type: str | None = None
    severities: tuple[str, ...] | None = None
    user_id: str | None = None
    ip_address: str | None = None
    from_date: datetime | None = None
    to_date: datetime | None = None

    def query(self) -> dict[str, Any]:
        """The MongoDB query: built from these typed values only, never from client keys."""
        query: dict[str, Any] = {}
        if self.event_type is not None:
            query["event_type"] = self.event_type
        if self.severities is not None:
            query["severity"] = {"$in": list(self.severities)}
        if self.user_id is not None:
            query["user_id"] = self.user_id
        if self.ip_address is not None:
            query["ip_address"] = self.ip_address
        created: dict[str, datetime] = {}
        if self.from_date is not None:
            created["$gte"] = self.from_date
        if self.to_date is not None:
            created["$lt"] = self.to_date
        if created:
            query["created"] = created
        return query


@dataclass(frozen=True)
class AuditStatistics:
    """Counts over the whole log: `total`, per event type, per severity, and entries created at or
    after the `since` given to `statistics` (`last_24h`)."""

    total: int = 0
    by_event_type: dict[str, int] = field(default_factory=dict)
    by_severity: dict[str, int] = field(default_factory=dict)
    last_24h: int = 0


class AuditRepository:
    """Append-only audit entries, indexed for the audit API's filters (newest first)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._mongo_coll = db["audit_log"]

    async def insert(self, entry: AuditEntry) -> None:
        """Append one entry."""
        await self._mongo_coll.insert_one(to_document(entry))

    async def count(self, **equals: str) -> int:
        """How many entries have these field values (e.g. event_type="login_failed")."""
        return await self._mongo_coll.count_documents(dict(equals))

    async def find(self, audit_filter: AuditFilter, *, offset: int, limit: int) -> tuple[list[AuditEntry], int]:
        """(entries matching the filter, newest first, skipping `offset` and at most `limit`;
        how many match in all)."""
        query = audit_filter.query()
        cursor = self._mongo_coll.find(query).sort(NEWEST_FIRST).skip(offset).limit(limit)
        entries = [from_document(AuditEntry, doc) async for doc in cursor]
        total = await self._mongo_coll.count_documents(query)
        return entries, total

    async def statistics(self, since: datetime) -> AuditStatistics:
        """Every figure of AuditStatistics from one `$facet` aggregation (one round trip, one scan)."""
        pipeline: list[dict[str, Any]] = [{"$facet": {
            "total": [{"$count": "n"}],
            "by_event_type": [{"$group": {"_id": "$event_type", "n": {"$sum": 1}}}],
            "by_severity": [{"$group": {"_id": "$severity", "n": {"$sum": 1}}}],
            "last_24h": [{"$match": {"created": {"$gte": since}}}, {"$count": "n"}],
        }}]
        cursor = await self._mongo_coll.aggregate(pipeline)
        results = await cursor.to_list()
        if not results:
            return AuditStatistics()
        facets = results[0]

        def single(name: str) -> int:
            return int(facets[name][0]["n"]) if facets.get(name) else 0

        def groups(name: str) -> dict[str, int]:
            return {str(g["_id"]): int(g["n"]) for g in facets.get(name, [])}

        return AuditStatistics(total=single("total"), by_event_type=groups("by_event_type"),
                               by_severity=groups("by_severity"), last_24h=single("last_24h"))

    async def ensure_retention(self, retention_s: int) -> None:
        """Make the TTL index on `created` expire entries `retention_s` seconds old.

        Creates the index if missing; changes `expireAfterSeconds` in place with `collMod` (which
        also turns a plain index into a TTL one); if the server refuses `collMod`, drops and
        recreates the index. Idempotent; raises pymongo errors the fallback cannot handle."""
        indexes = await self._mongo_coll.index_information()
        current = indexes.get(RETENTION_INDEX)
        if current is not None and current.get("expireAfterSeconds") == retention_s:
            return
        if current is None:
            await self._create_retention_index(retention_s)
            return
        try:
            await self._db.command(
                "collMod", self._mongo_coll.name,
                index={"name": RETENTION_INDEX, "expireAfterSeconds": retention_s},
            )
        except OperationFailure as exc:
            log.info("collMod refused (%s); recreating the audit TTL index", exc.code)
            await self._mongo_coll.drop_index(RETENTION_INDEX)
            await self._create_retention_index(retention_s)

    async def _create_retention_index(self, retention_s: int) -> None:
        await self._mongo_coll.create_index([("created", -1)], name=RETENTION_INDEX, expireAfterSeconds=retention_s)

    async def retention_s(self) -> int | None:
        """The TTL index's `expireAfterSeconds`, or None if there is no TTL index on `created`."""
        index = (await self._mongo_coll.index_information()).get(RETENTION_INDEX)
        return None if index is None else index.get("expireAfterSeconds")
