"""The audit log (decisions.md, Audit events) and the journal of a schema apply (decisions.md, Schema as
code).

Frozen dataclasses, no I/O; re-exported by `cms.models`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cms.models.content import Collection


@dataclass(frozen=True)
class AuditEntry:
    """One audit log entry (decisions.md, Audit events): `severity` info | warning | critical."""

    id: str
    event_type: str
    severity: str
    created: datetime
    user_id: str | None = None
    ip_address: str = ""
    user_agent: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RewriteBatch:
    """The write-ahead copy of one batch of a schema apply's value rewrite, stored before the batch is
    written: the collection and, per record, (record id, `updated` as read, {field: value as read}) for
    the fields `names`; a rewrite cut short puts these back before it resumes."""

    collection_id: str
    names: tuple[str, ...]
    records: tuple[tuple[str, datetime, dict[str, Any]], ...]


@dataclass(frozen=True)
class SchemaJournal:
    """The write-ahead record of a schema apply (decisions.md, Schema as code), stored before its first
    write and removed after its last, so that one cut short (a killed process) is rolled back or completed
    by the next process that takes the schema lock.

    `state` is APPLYING until every step that may still be undone is done (definitions, renames, indexes),
    then COMMITTED (what is left: rewriting values, unsetting dropped fields, dropping deleted collections,
    all of which only go forward). `before` holds the stored definitions the apply changes or deletes,
    `after` the definitions it stores (created or changed); `renames` are (collection id, old field name,
    new field name); `clearing` whether values that do not convert are cleared (`allow_data_loss`);
    `changes` the diff (for the audit entry); `progress` maps a collection id to the last record id whose
    values are rewritten; `pending` is the batch being rewritten, if any."""

    token: str
    started: datetime
    state: str
    before: tuple[Collection, ...]
    after: tuple[Collection, ...]
    renames: tuple[tuple[str, str, str], ...] = ()
    clearing: bool = False
    changes: tuple[dict[str, Any], ...] = ()
    user_id: str | None = None
    progress: dict[str, str] = field(default_factory=dict)
    pending: RewriteBatch | None = None
