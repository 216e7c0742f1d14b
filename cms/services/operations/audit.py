"""Audit log: security-relevant events with a fixed severity per type (decisions.md, Audit events).

Services do not write it: they emit `AuditEvent`s (and `SessionEvent`s) on the EventBus, and
`AuditService` is the one subscriber that writes them (`subscribe_to`). Each entry carries the
`user_id`, `ip_address` and `user_agent` of the request that caused it, captured when the event
was created (`cms.services.origin`; decisions.md, Audit context).

Recording never fails the request that caused it: a storage error is logged and swallowed. Admins
read the log through `list`, `security` and `statistics` (spec: Audit logs); entries are never
changed, and leave only through the TTL index set by `apply_retention` (`audit_retention_days`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.models import AuditEntry, Principal
from cms.services import access
from cms.services.delivery.events import AuditEvent, EventBus, SessionEvent
from cms.services.origin import RequestOrigin
from cms.store.audit import AuditFilter, AuditRepository, AuditStatistics

log = logging.getLogger("cms.audit")

SEVERITIES: dict[str, str] = {
    "login_success": "info", "login_failed": "warning", "logout": "info", "register": "info",
    "email_verified": "info", "password_reset_requested": "info", "password_reset_completed": "warning",
    "password_changed": "warning", "session_revoked": "info", "refresh_token_reuse": "critical",
    "otp_failed": "warning", "rate_limited": "warning", "collection_created": "info",
    "collection_updated": "info", "collection_deleted": "info", "api_key_created": "info",
    "api_key_revoked": "info", "setting_changed": "warning", "backup_created": "info",
    "backup_restored": "critical", "backup_deleted": "warning",
    "backup_downloaded": "warning", "schema_applied": "warning",
    "mfa_enabled": "info", "mfa_disabled": "warning", "mfa_failed": "warning", "mfa_recovery_used": "warning",
    "record_publish_failed": "warning", "release_publish_failed": "warning",
}
SEVERITY_LEVELS = ("info", "warning", "critical")
SECURITY_SEVERITIES = ("warning", "critical")
"""What `/audit/security` shows unless a `severity` is given."""
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
"""Audit lists: `limit` default and maximum (larger values are clamped)."""
RECENT_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class AuditPage:
    """One slice of the audit log, newest first: `total` counts every match; `offset` >= 0 and
    `limit` 1..MAX_LIMIT are the values used."""

    items: list[AuditEntry]
    total: int
    limit: int
    offset: int


class AuditService:
    """Writes audit entries (the bus's audit subscriber) and reads them for admins; `event_type`
    must be one of SEVERITIES."""

    def __init__(self, repository: AuditRepository, *, clock: Clock = utcnow) -> None:
        self._repository = repository
        self._clock = clock

    async def record(self, event_type: str, *, user_id: str | None = None, ip_address: str = "",
                     user_agent: str = "", details: dict[str, Any] | None = None) -> None:
        """Append an entry with the type's severity, as given (services emit an AuditEvent instead:
        this is the subscriber's write). Raises KeyError for an unknown type (a bug); storage errors
        are logged, not raised."""
        entry = AuditEntry(
            id=new_id(), event_type=event_type, severity=SEVERITIES[event_type], created=self._clock(),
            user_id=user_id, ip_address=ip_address, user_agent=user_agent[:512], details=details or {},
        )
        try:
            await self._repository.insert(entry)
        except Exception:  # auditing must not break the audited request
            log.exception("could not write audit entry %s", event_type)

    def subscribe_to(self, events: EventBus) -> None:
        """Write every AuditEvent and SessionEvent emitted on `events` from now on."""
        events.subscribe(self.on_audit_events, AuditEvent)
        events.subscribe(self.on_session_events, SessionEvent)

    async def on_audit_events(self, batch: Sequence[AuditEvent]) -> None:
        """Write one entry per event, with the event's origin (the subscriber of AuditEvent)."""
        for event in batch:
            await self._record_from(event.origin, event.event_type, event.user_id, event.details)

    async def on_session_events(self, batch: Sequence[SessionEvent]) -> None:
        """Write one entry per session event (`refresh_token_reuse`, critical), for the session's
        user, with the event's origin (the refresh request that presented the spent token)."""
        for event in batch:
            session = event.session
            await self._record_from(event.origin, event.event, session.user_id,
                                    {"session_id": session.id, "audience": session.audience})

    async def _record_from(self, origin: RequestOrigin, event_type: str, user_id: str | None,
                           details: dict[str, Any]) -> None:
        """An entry for `user_id` as the event names it (None: no known user, e.g. a failed login for an
        unknown address, even when the request carried someone's token), from where the origin says."""
        await self.record(event_type, user_id=user_id, ip_address=origin.ip_address,
                          user_agent=origin.user_agent, details=details)

    async def count(self, **equals: str) -> int:
        """How many entries match the given field values."""
        return await self._repository.count(**equals)

    async def list(self, principal: Principal, *, limit: int = DEFAULT_LIMIT, offset: int = 0,
                   event_type: str | None = None, severity: str | None = None, user_id: str | None = None,
                   ip_address: str | None = None, from_date: datetime | None = None,
                   to_date: datetime | None = None) -> AuditPage:
        """Entries matching every filter given, newest first. `limit` is clamped to 1..MAX_LIMIT and
        `offset` to >= 0; `from_date` is inclusive, `to_date` exclusive (aware datetimes). The API
        has validated each value (known `event_type` and `severity`). Raises Forbidden unless
        `principal` is an admin."""
        access.require_admin(principal)
        audit_filter = AuditFilter(
            event_type=event_type, severities=(severity,) if severity is not None else None, user_id=user_id,
            ip_address=ip_address, from_date=from_date, to_date=to_date,
        )
        return await self._page(audit_filter, limit, offset)

    async def security(self, principal: Principal, *, severity: str | None = None, limit: int = DEFAULT_LIMIT,
                       offset: int = 0) -> AuditPage:
        """Security-relevant entries, newest first: severity `warning` and `critical`, or only
        `severity` when given. `limit`/`offset` as in `list`. Raises Forbidden unless admin."""
        access.require_admin(principal)
        severities = (severity,) if severity is not None else SECURITY_SEVERITIES
        return await self._page(AuditFilter(severities=severities), limit, offset)

    async def statistics(self, principal: Principal) -> AuditStatistics:
        """`total`, counts `by_event_type` and `by_severity`, and `last_24h` (entries of the last 24
        hours by this service's clock), from one aggregation. Raises Forbidden unless admin."""
        access.require_admin(principal)
        return await self._repository.statistics(self._clock() - RECENT_WINDOW)

    async def apply_retention(self, days: int) -> None:
        """Make entries expire `days` days after they were written (the TTL index on `created`).
        Raises driver errors (the caller decides; a setting change reports them)."""
        await self._repository.ensure_retention(days * 86400)

    async def _page(self, audit_filter: AuditFilter, limit: int, offset: int) -> AuditPage:
        limit = max(1, min(limit, MAX_LIMIT))
        offset = max(0, offset)
        items, total = await self._repository.find(audit_filter, offset=offset, limit=limit)
        return AuditPage(items=items, total=total, limit=limit, offset=offset)
