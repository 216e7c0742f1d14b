"""How the operational resources become JSON (decisions.md, Response shapes: audit list and
statistics, settings, backup, health) and the plain `{message}` answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from marshmallow import fields

from cms.services.operations.audit import SEVERITY_LEVELS, AuditPage
from cms.services.operations.backups import Backup
from cms.services.operations.settings import Setting
from cms.services.representation.base import Representation, Timestamp, dump_many, dump_one
from cms.store.audit import AuditStatistics


class MessageSchema(Representation):
    """The answer of an action that returns nothing else: `{message}`."""

    message = fields.String()


class AuditEntrySchema(Representation):
    """One audit log entry."""

    id = fields.String()
    event_type = fields.String()
    severity = fields.String(metadata={"enum": list(SEVERITY_LEVELS)})
    user_id = fields.String(allow_none=True)
    ip_address = fields.String()
    user_agent = fields.String()
    details = fields.Dict()
    created = Timestamp()


class AuditPageSchema(Representation):
    """One page of the audit log: `{items, total, limit, offset}`."""

    items = fields.List(fields.Nested(AuditEntrySchema), metadata={"description": "newest first"})
    total = fields.Integer()
    limit = fields.Integer()
    offset = fields.Integer()


class AuditStatisticsSchema(Representation):
    """Audit counts: `{total, by_event_type, by_severity, last_24h}`."""

    total = fields.Integer()
    by_event_type = fields.Dict(keys=fields.String(), values=fields.Integer())
    by_severity = fields.Dict(keys=fields.String(), values=fields.Integer())
    last_24h = fields.Integer(metadata={"description": "entries written in the last 24 hours"})


class SettingSchema(Representation):
    """A setting: `{key, value, category}`, `value` always a string."""

    key = fields.String()
    value = fields.String(metadata={"description": "always a string: `true`, `false`, `8`"})
    category = fields.String()


class BackupSchema(Representation):
    """A backup archive: `{filename, size, created}`."""

    filename = fields.String(metadata={"description": "`backup-YYYYmmdd-HHMMSS.tar.gz` (UTC)"})
    size = fields.Integer(metadata={"description": "bytes"})
    created = Timestamp(metadata={"description": "the time in the filename"})


class HealthSchema(Representation):
    """The health answer (200 or 503): `{status, mongodb, redis, version}`."""

    status = fields.String(metadata={"enum": ["ok", "unavailable"]})
    mongodb = fields.String(metadata={"description": "`ok` or `error: <reason>`"})
    redis = fields.String(metadata={"description": "`ok` or `error: <reason>`"})
    version = fields.String()


_MESSAGE = MessageSchema()
_AUDIT_PAGE = AuditPageSchema()
_AUDIT_STATISTICS = AuditStatisticsSchema()
_SETTING = SettingSchema()
_BACKUP = BackupSchema()
_HEALTH = HealthSchema()


def message(text: str) -> dict[str, Any]:
    """`{message}`: the answer of an action that returns nothing else."""
    return dump_one(_MESSAGE, {"message": text})


def audit_page(page: AuditPage) -> dict[str, Any]:
    """`{items: [{id, event_type, severity, user_id, ip_address, user_agent, details, created}], total,
    limit, offset}`, items newest first."""
    return dump_one(_AUDIT_PAGE, page)


def audit_statistics(statistics: AuditStatistics) -> dict[str, Any]:
    """`{total, by_event_type: {type: n}, by_severity: {severity: n}, last_24h}`."""
    return dump_one(_AUDIT_STATISTICS, statistics)


def setting(s: Setting) -> dict[str, Any]:
    """`{key, value, category}`, `value` a string."""
    return dump_one(_SETTING, s)


def settings(items: Sequence[Setting]) -> list[dict[str, Any]]:
    """Each setting as `setting` shows it, in order."""
    return dump_many(_SETTING, items)


def backup(b: Backup) -> dict[str, Any]:
    """`{filename, size (bytes), created}`."""
    return dump_one(_BACKUP, b)


def backups(items: Sequence[Backup]) -> list[dict[str, Any]]:
    """Each backup as `backup` shows it, in order."""
    return dump_many(_BACKUP, items)


def health(report: Mapping[str, str]) -> dict[str, Any]:
    """`{status, mongodb, redis, version}` from the system service's report (healthy or not)."""
    return dump_one(_HEALTH, report)
