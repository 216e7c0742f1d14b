"""Repository of audit log entries (Mongo collection `audit_log`)."""

from __future__ import annotations

from cms.models import AuditEntry
from cms.store.client import Database
from cms.store.documents import to_document


class AuditRepository:
    """Append-only audit entries, indexed for the audit API's filters (newest first)."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["audit_log"]

    async def insert(self, entry: AuditEntry) -> None:
        """Append one entry."""
        await self._mongo_coll.insert_one(to_document(entry))

    async def count(self, **equals: str) -> int:
        """How many entries have these field values (e.g. event_type="login_failed")."""
        return await self._mongo_coll.count_documents(dict(equals))
