"""Scheduled publishing (decisions.md, Drafts, versions and scheduled publishing; docs/concepts/drafts.md,
Scheduling).

The truth is MongoDB: one pending schedule per record in `schedules` (`store.schedules`), its `due`
indexed; the working copy mirrors it as `scheduled_at`. A worker job runs every second on every worker
(workers/schedules.py) and calls `Scheduler.run_due`, which claims due schedules up to DUE_BATCH at a
time (`ScheduleRepository.claim_many`: atomic per schedule, with a lease) in a few concurrent loops and
publishes them through the one publish path (`Publisher.publish_all_in` for a collection's plain ones
in one transaction, `publish_in` for the others), whose claim of the working copy holds only while it still
shows that schedule's time and clears it: so a schedule runs once whatever the number of replicas and
workers, at or after its time (the due index never offers it before); one whose worker died is taken
over when its lease ends, and dropped without a second publish if that worker had committed it. A
working copy that fails validation then changes nothing published: the schedule goes, the record keeps
`scheduled_at` null and gains `schedule_error`, and the audit log gets `record_publish_failed`.
Other things scheduled (a release: releases.py) share the store, the claims and the job: their
schedules carry a `collection_id` no collection has, and their runner (`add_runner`) runs them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from cms.errors import AlreadyExists, BadRequest, CmsError, NotFound, ValidationFailed, WriteConflict
from cms.models import PUBLISHED, Collection, Principal, Record
from cms.services import access as actions
from cms.services.access import check
from cms.services.content.drafts import WorkingCopies, require_drafts
from cms.services.content.locales import ALL, localization
from cms.services.content.publishing import LostRace, Publisher, actor
from cms.services.delivery.events import AuditEvent, EventBus
from cms.services.origin import RequestOrigin, current_origin
from cms.store.schedules import Schedule

log = logging.getLogger("cms.schedules")

ScheduleRunner = Callable[[Schedule], Awaitable[int]]
"""Runs one claimed schedule of another kind than a record's publish (a release's: releases.py); answers 1
when it is finished (`finish` called), 0 when it is left for another claim (`release` called)."""

SCHEDULE_LEASE_S = 10.0
"""Seconds a claimed schedule stays with its worker; a worker that dies holding it loses it after this."""
RETRY_DELAY_S = 0.5
"""A schedule whose publish met a concurrent transaction is offered again after this many seconds times its
claims so far (a transaction of a worker that died holds on until the server drops it: 60 s on MongoDB)."""
MAX_RETRY_DELAY_S = 10.0
"""The longest wait between two such tries."""
DUE_LOOPS = 4
"""Chunks of claimed schedules one `run_due` runs at once."""
DUE_BATCH = 100
"""Schedules one transaction publishes (those of one collection of a chunk)."""
CLAIM_LIMIT = 1000
"""About how many due schedules one claim takes (with those due at the same time as the last)."""
MAX_SCHEDULE_AHEAD = timedelta(days=3660)
"""How far ahead a publish may be scheduled (about ten years)."""


def schedule_time(at: datetime, now: datetime) -> datetime:
    """The time a record or a release is scheduled to publish at: `at` (aware), cut to whole
    milliseconds (what BSON keeps), once it is after `now` and at most MAX_SCHEDULE_AHEAD away.
    Raises ValidationFailed (422 naming `at`) otherwise (decisions.md, Drafts: scheduled publishing)."""
    if at <= now:
        raise ValidationFailed("A scheduled publish must be in the future", errors={"at": ["Must be in the future."]})
    if at > now + MAX_SCHEDULE_AHEAD:
        raise ValidationFailed("A publish can be scheduled at most ten years ahead",
                               errors={"at": ["At most ten years ahead."]})
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def schedule_error(error: CmsError) -> str:
    """The `schedule_error` text of a failed scheduled publish: the error's detail, then each field's
    messages (`title: Missing data for required field.`)."""
    parts = [error.detail]
    for name, messages in (error.errors or {}).items():
        parts.append(f"{name}: {' '.join(str(m) for m in messages)}")
    return "; ".join(parts)


class Scheduler:
    """Scheduled publishes of working copies (see the module docstring), through `publisher`."""

    def __init__(self, copies: WorkingCopies, publisher: Publisher, events: EventBus, *, batches: bool = False) -> None:
        """`events`: the bus the audit entry of a failed scheduled publish is emitted on; `batches`: the
        server has transactions, so due schedules of one collection are published DUE_BATCH at a time
        in one (`Publisher.publish_all_in`), else one at a time."""
        self._copies = copies
        self._publisher = publisher
        self._events = events
        self._batches = batches
        self._running = False
        self._runners: dict[str, ScheduleRunner] = {}

    def add_runner(self, kind: str, runner: ScheduleRunner) -> None:
        """Run the schedules whose `collection_id` is `kind` (a name no collection id has, e.g.
        `~releases`) with `runner` instead of publishing a record: other things scheduled share the
        schedules' store, claims, leases and worker job."""
        self._runners[kind] = runner

    async def schedule(self, principal: Principal | None, collection_name: str, record_id: str,
                       at: datetime, *, locale: str | None = None) -> Record:
        """Publish the working copy of `record_id` at `at` (aware; in the future, at most
        MAX_SCHEDULE_AHEAD away), replacing its pending schedule if any, under the view and update
        rules on the working copy; clears a past `schedule_error`. `locale` (decisions.md, Localized
        fields): publish then only that locale's values of localized fields, as `Publisher.publish`
        does (None or `*`: everything). Answers the working copy with `scheduled_at`. Raises NotFound,
        BadRequest (no drafts; a locale not configured), Unauthorized / Forbidden, ValidationFailed
        (422 naming `at`)."""
        copies = self._copies
        collection = await copies.catalog.by_name(collection_name)
        require_drafts(collection)
        code = None if locale in (None, ALL) else localization(collection, locale).write_locale
        view, update = check(principal, collection, actions.VIEW), check(principal, collection, actions.UPDATE)
        await copies.editable(view, update, record_id)
        at = schedule_time(at, copies.writer.clock())
        await copies.schedules.put(collection.id, record_id, at, actor(principal), current_origin().to_json(),
                                   locale=code)
        record = await copies.working.set_schedule(collection.id, record_id, at, None)
        if record is None:  # deleted meanwhile
            await copies.schedules.cancel(collection.id, record_id)
            raise NotFound("Record not found")
        return record

    async def cancel(self, principal: Principal | None, collection_name: str, record_id: str) -> None:
        """Cancel the pending scheduled publish of `record_id`, under the view and update rules on the
        working copy. Raises NotFound (also when none is pending), BadRequest (no drafts),
        Unauthorized / Forbidden."""
        copies = self._copies
        collection = await copies.catalog.by_name(collection_name)
        require_drafts(collection)
        view, update = check(principal, collection, actions.VIEW), check(principal, collection, actions.UPDATE)
        working = await copies.editable(view, update, record_id)
        cancelled = await copies.schedules.cancel(collection.id, record_id)
        await copies.working.set_schedule(collection.id, record_id, None,
                                          working.state.schedule_error if working.state else None)
        if not cancelled:
            raise NotFound("This record has no scheduled publish")

    async def run_due(self, *, loops: int = DUE_LOOPS) -> int:
        """Run every schedule due now (by the injected clock) until none is due: claimed about
        CLAIM_LIMIT at a time (`claim_many`: schedules due together are claimed together), run in
        chunks of DUE_BATCH, `loops` chunks at once. Returns how many were finished (published,
        failed or dropped). One run at a time per process (a run still going when the next second's
        job starts answers 0 at once: it takes what became due meanwhile). Errors of one schedule are
        logged and leave it to be taken over when its lease ends."""
        if self._running:
            return 0
        self._running = True
        try:
            ran, size, gate = 0, DUE_BATCH if self._batches else 1, asyncio.Semaphore(loops)

            async def chunk(part: list[Schedule]) -> int:
                async with gate:
                    return await self._run_chunk(part)

            while True:
                claimed = await self._copies.schedules.claim_many(self._copies.writer.clock(), SCHEDULE_LEASE_S,
                                                                  CLAIM_LIMIT)
                if not claimed:
                    return ran
                ran += sum(await asyncio.gather(*(chunk(claimed[i:i + size]) for i in range(0, len(claimed), size))))
        finally:
            self._running = False

    async def _run_chunk(self, claimed: list[Schedule]) -> int:
        """Run claimed schedules: those that publish plainly together (`_run_batch`), the others one
        at a time (`_run`), those of another kind by their runner (`add_runner`). Returns how many were
        finished."""
        others = [s for s in claimed if s.collection_id in self._runners]
        records = [s for s in claimed if s.collection_id not in self._runners]
        singles = await self._run_batch(records) if self._batches else records
        ran = len(records) - len(singles)
        for schedule in [*others, *singles]:
            try:
                runner = self._runners.get(schedule.collection_id, self._run)
                ran += await runner(schedule)
            except Exception:
                log.exception("scheduled publish of %s (collection %s) failed; retried after its lease",
                              schedule.record_id, schedule.collection_id)
        return ran

    async def _run_batch(self, claimed: list[Schedule]) -> list[Schedule]:
        """Publish the claimed schedules of each collection that publish plainly (a pending working copy
        that validates, showing the schedule's time) in one transaction per collection, and drop their
        schedules; returns the others (and a whole collection's, when its transaction fails), which
        `_run` takes one at a time. Errors are logged and leave every schedule to `_run`."""
        copies = self._copies
        singles: list[Schedule] = []
        done: list[Schedule] = []
        by_collection: dict[str, list[Schedule]] = {}
        for schedule in claimed:
            by_collection.setdefault(schedule.collection_id, []).append(schedule)
        for collection_id, group in by_collection.items():
            try:
                collection = await copies.catalog.by_id(collection_id)
                found = {r.id: r for r in await copies.working.find_by_ids(collection_id, [s.record_id for s in group])}
                plain: list[tuple[Schedule, Record]] = []
                for schedule in group:
                    working = found.get(schedule.record_id)
                    state = working.state if working is not None else None
                    if (working is None or state is None or state.scheduled_at != schedule.at
                            or state.status == PUBLISHED or not collection.drafts or schedule.locale is not None):
                        singles.append(schedule)
                        continue
                    try:
                        await self._publisher.check(collection, working, None)
                    except ValidationFailed:
                        singles.append(schedule)
                        continue
                    plain.append((schedule, working))
                if plain:
                    async with copies.atomic():
                        await self._publisher.publish_all_in(collection, [w for _, w in plain], by=None,
                                                             scheduled_at=[s.at for s, _ in plain])
                    done.extend(s for s, _ in plain)
            except (CmsError, LostRace):  # a missing collection, a race, a clash: one at a time
                singles.extend(s for s in group if s not in done and s not in singles)
            except Exception:
                log.exception("a batch of scheduled publishes failed; they are run one at a time")
                singles.extend(s for s in group if s not in done and s not in singles)
        await copies.schedules.finish_many(done)
        return singles

    async def _run(self, schedule: Schedule) -> int:
        """Run one claimed schedule; returns 1 when it is finished (published, failed or dropped), 0
        when it is left for another claim.

        The publish's transaction spans the working copy, the published copy and the outbox, never
        the schedules (claims outside any transaction must not wait for one): the working copy's
        `scheduled_at`, cleared by the publish, tells a schedule already served (its worker died
        before dropping it), cancelled or replaced, which is then only dropped."""
        copies = self._copies
        try:
            collection = await copies.catalog.by_id(schedule.collection_id)
        except NotFound:
            collection = None
        working = await copies.current(collection, schedule.record_id) if collection is not None else None
        if (collection is None or not collection.drafts or working is None or working.state is None
                or working.state.scheduled_at != schedule.at):
            return int(await copies.schedules.finish(schedule))  # nothing (left) to publish
        try:
            target = await self._target(collection, working, schedule)
            if target is None:  # nothing pending
                await copies.working.end_schedule(collection.id, working.id, schedule.at, None)
            else:
                await self._publisher.check(collection, target, None)
                async with copies.atomic():
                    await self._publisher.publish_in(collection, working, by=None, scheduled_at=schedule.at,
                                                     data=None if target is working else target.data)
        except (ValidationFailed, BadRequest) as exc:  # BadRequest: its locale is no longer configured
            return await self._failed(collection, working, schedule, exc)
        except AlreadyExists as exc:  # a unique value taken meanwhile
            return await self._failed(collection, working, schedule, ValidationFailed(
                "The working copy does not validate", errors=exc.errors))
        except LostRace:  # an edit, a cancel or a replace came first: look again at once
            await copies.schedules.release(schedule, copies.writer.clock())
            return 0
        except WriteConflict:  # a concurrent transaction (maybe of a worker that died in it): later
            delay_s = min(RETRY_DELAY_S * schedule.attempts, MAX_RETRY_DELAY_S)
            await copies.schedules.release(schedule, copies.writer.clock() + timedelta(seconds=delay_s))
            return 0
        return int(await copies.schedules.finish(schedule))

    async def _target(self, collection: Collection, working: Record, schedule: Schedule) -> Record | None:
        """What `schedule` publishes of `working`: the working copy, or with the schedule's locale the
        published data with that locale's values (`Publisher.one_locale`); None when nothing is pending.
        A locale no longer configured publishes nothing (the schedule fails, BadRequest)."""
        if working.state is not None and working.state.status == PUBLISHED:
            return None
        if schedule.locale is None:
            return working
        localization(collection, schedule.locale)  # still configured (else BadRequest)
        return await self._publisher.one_locale(collection, working, schedule.locale)

    async def _failed(self, collection: Collection, working: Record, schedule: Schedule, error: CmsError) -> int:
        """A scheduled publish that does not validate: nothing published, `scheduled_at` null and
        `schedule_error` set on the working copy (unless its schedule was cancelled or replaced
        meanwhile), `record_publish_failed` audited, the schedule dropped."""
        copies = self._copies
        message = schedule_error(error)
        if await copies.working.end_schedule(collection.id, working.id, schedule.at, message):
            await self._events.emit([AuditEvent(  # the request that scheduled it is behind it
                "record_publish_failed", user_id=schedule.by, origin=RequestOrigin.from_json(schedule.origin),
                details={"collection": collection.name, "collection_id": collection.id, "record_id": working.id,
                         "scheduled_at": schedule.at.isoformat(), "error": message, "errors": error.errors or {}})])
            log.info("scheduled publish of record %s of %s failed: %s", working.id, collection.name, message)
        return int(await copies.schedules.finish(schedule))
