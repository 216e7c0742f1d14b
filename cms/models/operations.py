"""The audit log (decisions.md, Audit events).

Frozen dataclasses, no I/O; re-exported by `cms.models`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
