"""Maintenance jobs run on a schedule by every (non-burst) worker: `sweep_orphaned_records`. No
business rules here: the services decide."""

from __future__ import annotations

from typing import Any

from cms.wiring import Services

ORPHAN_SWEEP_MINUTES = frozenset(range(0, 60, 10))
"""Minutes of the hour at which `sweep_orphaned_records` runs (also at a worker's start-up)."""


async def sweep_orphaned_records(ctx: dict[str, Any]) -> int:
    """Drop the records collections of collections that no longer exist
    (`CollectionService.sweep_orphans`); returns how many were dropped."""
    services: Services = ctx["services"]
    return len(await services.collections.sweep_orphans())
