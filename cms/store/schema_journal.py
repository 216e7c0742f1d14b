"""Repository of the schema apply journal (Mongo collection `schema_journal`): at most one document, the
write-ahead record of the schema apply in progress (`models.SchemaJournal`; decisions.md, Schema as code)."""

from __future__ import annotations

from typing import Any

from cms.errors import AlreadyExists, Conflict
from cms.models import RewriteBatch, SchemaJournal
from cms.store.client import Database
from cms.store.collections import collection_document, collection_from_document
from cms.store.errors import translate_errors

JOURNAL_ID = "apply"
"""The `_id` of the one journal document: a second apply cannot start while one is recorded."""


def _to_document(journal: SchemaJournal) -> dict[str, Any]:
    return {
        "_id": JOURNAL_ID,
        "token": journal.token,
        "started": journal.started,
        "state": journal.state,
        "before": [collection_document(c) for c in journal.before],
        "after": [collection_document(c) for c in journal.after],
        "renames": [list(r) for r in journal.renames],
        "clearing": journal.clearing,
        "changes": list(journal.changes),
        "user_id": journal.user_id,
        "progress": dict(journal.progress),
        "pending": _pending_document(journal.pending),
    }


def _pending_document(pending: RewriteBatch | None) -> dict[str, Any] | None:
    if pending is None:
        return None
    return {"collection_id": pending.collection_id, "names": list(pending.names),
            "records": [[record_id, updated, values] for record_id, updated, values in pending.records]}


def _from_document(doc: dict[str, Any]) -> SchemaJournal:
    pending = doc.get("pending")
    return SchemaJournal(
        token=doc["token"],
        started=doc["started"],
        state=doc["state"],
        before=tuple(collection_from_document(c) for c in doc.get("before", [])),
        after=tuple(collection_from_document(c) for c in doc.get("after", [])),
        renames=tuple((r[0], r[1], r[2]) for r in doc.get("renames", [])),
        clearing=bool(doc.get("clearing", False)),
        changes=tuple(doc.get("changes", [])),
        user_id=doc.get("user_id"),
        progress=dict(doc.get("progress") or {}),
        pending=None if not pending else RewriteBatch(
            collection_id=pending["collection_id"], names=tuple(pending["names"]),
            records=tuple((r[0], r[1], r[2]) for r in pending["records"])),
    )


class SchemaJournalRepository:
    """The journal document: written whole when an apply starts, updated as it goes, removed at its end."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["schema_journal"]

    async def begin(self, journal: SchemaJournal) -> None:
        """Store `journal`. Raises Conflict when a journal is stored already (an apply not finished)."""
        try:
            async with translate_errors("schema journal"):
                await self._mongo_coll.insert_one(_to_document(journal))
        except AlreadyExists:
            raise Conflict("An earlier schema apply is not finished; retry shortly") from None

    async def get(self) -> SchemaJournal | None:
        """The journal of the apply in progress, or None."""
        doc = await self._mongo_coll.find_one({"_id": JOURNAL_ID})
        return _from_document(doc) if doc else None

    async def set_state(self, token: str, state: str) -> None:
        """Move the journal of apply `token` to `state`."""
        await self._mongo_coll.update_one({"_id": JOURNAL_ID, "token": token}, {"$set": {"state": state}})

    async def stage(self, token: str, pending: RewriteBatch) -> None:
        """Record the write-ahead copy of the rewrite batch about to be written."""
        await self._mongo_coll.update_one({"_id": JOURNAL_ID, "token": token},
                                          {"$set": {"pending": _pending_document(pending)}})

    async def advance(self, token: str, collection_id: str, last_id: str) -> None:
        """The staged batch is written: its collection's rewrite is done up to record `last_id`."""
        await self._mongo_coll.update_one({"_id": JOURNAL_ID, "token": token},
                                          {"$set": {f"progress.{collection_id}": last_id, "pending": None}})

    async def end(self, token: str) -> None:
        """Remove the journal of apply `token` (the apply is over: done or undone)."""
        await self._mongo_coll.delete_one({"_id": JOURNAL_ID, "token": token})
