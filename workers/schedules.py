"""The job that runs scheduled publishes (decisions.md, Drafts, versions and scheduled publishing):
every worker runs `run_due_schedules` every second (a unique cron job: one run per second across the
workers sharing a queue, and a run that takes longer overlaps the next safely, as each schedule is
claimed atomically). No business rules here: `Scheduler.run_due` decides."""

from __future__ import annotations

from typing import Any

from cms.wiring import Services

SCHEDULE_SECONDS = frozenset(range(60))
"""Seconds of the minute at which `run_due_schedules` runs (every one: a schedule runs within 2 s of its time)."""


async def run_due_schedules(ctx: dict[str, Any]) -> int:
    """Publish every scheduled record that is due (`Scheduler.run_due`); returns how many schedules ran."""
    services: Services = ctx["services"]
    return await services.drafts.scheduler.run_due()
