"""Audit log: security-relevant events with a fixed severity per type (decisions.md, Audit events).

Recording never fails the request that caused it: a storage error is logged and swallowed.
"""

from __future__ import annotations

import logging
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.models import AuditEntry
from cms.store.audit import AuditRepository

log = logging.getLogger("cms.audit")

SEVERITIES: dict[str, str] = {
    "login_success": "info", "login_failed": "warning", "logout": "info", "register": "info",
    "email_verified": "info", "password_reset_requested": "info", "password_reset_completed": "warning",
    "password_changed": "warning", "session_revoked": "info", "refresh_token_reuse": "critical",
    "otp_failed": "warning", "rate_limited": "warning", "collection_created": "info",
    "collection_updated": "info", "collection_deleted": "info", "api_key_created": "info",
    "api_key_revoked": "info", "setting_changed": "warning", "backup_created": "info",
    "backup_restored": "critical", "backup_deleted": "warning",
}


class AuditService:
    """Writes audit entries; `event_type` must be one of SEVERITIES."""

    def __init__(self, repository: AuditRepository, *, clock: Clock = utcnow) -> None:
        self._repository = repository
        self._clock = clock

    async def record(self, event_type: str, *, user_id: str | None = None, ip_address: str = "",
                     user_agent: str = "", details: dict[str, Any] | None = None) -> None:
        """Append an entry with the type's severity. Raises KeyError for an unknown type (a bug);
        storage errors are logged, not raised."""
        entry = AuditEntry(
            id=new_id(), event_type=event_type, severity=SEVERITIES[event_type], created=self._clock(),
            user_id=user_id, ip_address=ip_address, user_agent=user_agent[:512], details=details or {},
        )
        try:
            await self._repository.insert(entry)
        except Exception:  # auditing must not break the audited request
            log.exception("could not write audit entry %s", event_type)

    async def count(self, **equals: str) -> int:
        """How many entries match the given field values."""
        return await self._repository.count(**equals)
