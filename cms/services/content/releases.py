"""Releases: sets of records of collections with drafts published together, now or at a time
(decisions.md, Drafts, versions and scheduled publishing: Releases; docs/concepts/releases.md).

Admins only. A release stores its items (collection and record ids); creating or changing one checks
every item (the collection exists and has drafts, the record exists, no item twice) and answers 422
naming each bad item as `items.N`. Publishing goes through the one all-or-nothing publish of many
working copies (`Publisher.publish_many`), in one unit with the release's new status (one transaction
where the server has them): an item that fails publishes nothing, the release becomes `failed` with
`errors` naming the item, and the caller gets 422. Publishing at a time reuses the record schedules'
machinery (`schedules` store, claims and leases, the worker job): a release's schedule is the one of
"collection" RELEASE_SCHEDULES, run by `ReleaseService.run_schedule` (`Scheduler.add_runner`), so it runs
once within 2 s of its time however many replicas and workers, and survives restarts; a failure then
leaves `error`/`errors` on the release and an audit entry `release_publish_failed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from cms.clock import new_id
from cms.errors import CmsError, Conflict, NotFound, ValidationFailed, WriteConflict
from cms.models import (
    RELEASE_FAILED,
    RELEASE_PENDING,
    RELEASE_PUBLISHED,
    RELEASE_SCHEDULED,
    Collection,
    Page,
    Principal,
    Release,
    ReleaseItem,
)
from cms.services.access import require_admin
from cms.services.content.drafts import MAX_PUBLISH_ATTEMPTS, WorkingCopies, backoff, kept_changing
from cms.services.content.publishing import LostRace, Publisher, PublishFailed, actor
from cms.services.content.scheduling import (
    MAX_RETRY_DELAY_S,
    RETRY_DELAY_S,
    Scheduler,
    schedule_error,
    schedule_time,
)
from cms.services.delivery.events import AuditEvent, EventBus
from cms.services.origin import RequestOrigin, current_origin
from cms.store.releases import ANY, ReleaseRepository
from cms.store.schedules import Schedule

MAX_RELEASE_ITEMS = 1000
"""Items one release holds at most (1,001: 422)."""
MAX_RELEASE_NAME = 200
"""Characters of a release's name (1 at least)."""
RELEASE_SCHEDULES = "~releases"
"""The `collection_id` of releases' schedules in the schedules' store (no collection id has a `~`)."""
MAX_PER_PAGE = 100
"""Releases one page of the list holds at most (larger values are clamped)."""
NOTHING_PUBLISHED = "The release cannot be published: nothing was published"


def checked_name(name: str) -> str:
    """`name` stripped, once it is 1..MAX_RELEASE_NAME characters. Raises ValidationFailed naming `name`."""
    name = name.strip()
    if not 1 <= len(name) <= MAX_RELEASE_NAME:
        raise ValidationFailed(f"A release's name has 1 to {MAX_RELEASE_NAME} characters",
                               errors={"name": [f"Length must be between 1 and {MAX_RELEASE_NAME}."]})
    return name


def item_error(index: int, message: str) -> dict[str, list[str]]:
    """The `errors` entry naming item `index` (from 0): `{"items.3": [message]}`."""
    return {f"items.{index}": [message]}


class ReleaseService:
    """Releases (see the module docstring) on `repository`, publishing through `publisher` and
    scheduling through `scheduler` (which runs this service's schedules from now on)."""

    def __init__(self, repository: ReleaseRepository, copies: WorkingCopies, publisher: Publisher,
                 scheduler: Scheduler, events: EventBus) -> None:
        self._releases = repository
        self._copies = copies
        self._publisher = publisher
        self._events = events
        scheduler.add_runner(RELEASE_SCHEDULES, self.run_schedule)

    async def create(self, principal: Principal | None, name: str, items: Sequence[Mapping[str, str]]) -> Release:
        """A new `pending` release called `name` (stripped, 1..MAX_RELEASE_NAME characters) of `items`
        (`{collection, record_id}` each, at most MAX_RELEASE_ITEMS). Raises Unauthorized / Forbidden (not
        an admin), ValidationFailed (`name`; `items.N`: an unknown collection, one without drafts, an
        unknown record, an item twice)."""
        require_admin(principal)
        name, resolved = checked_name(name), await self._resolve(items)
        now = self._copies.writer.clock()
        release = Release(id=new_id(), name=name, items=resolved, status=RELEASE_PENDING, created=now, updated=now)
        await self._releases.insert(release)
        return release

    async def list_releases(self, principal: Principal | None, *, page: int, per_page: int) -> Page[Release]:
        """One page (1-based; `per_page` clamped to 1..MAX_PER_PAGE) of the releases, newest first."""
        require_admin(principal)
        per_page = max(1, min(per_page, MAX_PER_PAGE))
        items, total = await self._releases.page((page - 1) * per_page, per_page)
        return Page(items=[await self._named(r) for r in items], total=total, page=page, per_page=per_page)

    async def get(self, principal: Principal | None, release_id: str) -> Release:
        """The release `release_id`. Raises Unauthorized / Forbidden, NotFound."""
        require_admin(principal)
        return await self._get(release_id)

    async def update(self, principal: Principal | None, release_id: str, *, name: str | None = None,
                     items: Sequence[Mapping[str, str]] | None = None) -> Release:
        """Rename the release and/or replace its items (checked as a create's); a `failed` release's
        errors are cleared when its items change. Raises Unauthorized / Forbidden, NotFound,
        ValidationFailed, Conflict (a published release does not change)."""
        require_admin(principal)
        release = await self._get(release_id)
        if release.status == RELEASE_PUBLISHED:
            raise Conflict("This release is published: it does not change any more")
        changes: dict[str, Any] = {"updated": self._copies.writer.clock()}
        if name is not None:
            changes["name"] = checked_name(name)
        if items is not None:
            changes["items"] = await self._resolve(items)
            if release.status == RELEASE_FAILED:
                changes.update(status=RELEASE_PENDING, error=None, errors={})
        changed = await self._releases.update(release_id, changes, unpublished=True)
        if changed is None and await self._releases.get(release_id) is not None:
            raise Conflict("This release is published: it does not change any more")
        return await self._changed(changed)

    async def delete(self, principal: Principal | None, release_id: str) -> None:
        """Delete the release and its pending schedule (its published records stay published).
        Raises Unauthorized / Forbidden, NotFound."""
        require_admin(principal)
        if not await self._releases.delete(release_id):
            raise NotFound("Release not found")
        await self._copies.schedules.cancel(RELEASE_SCHEDULES, release_id)

    async def publish(self, principal: Principal | None, release_id: str) -> Release:
        """Publish every item's working copy now, all or nothing (`Publisher.publish_many`); a pending
        schedule of the release goes. Answers the release, `published`. Raises Unauthorized /
        Forbidden, NotFound, Conflict (published already), ValidationFailed (`items.N` names the
        item that failed; nothing published, the release `failed` unless it is still scheduled),
        BadRequest (a concurrent write: retry)."""
        require_admin(principal)
        for attempt in range(MAX_PUBLISH_ATTEMPTS):
            release = await self._get(release_id)
            if release.status == RELEASE_PUBLISHED:
                if attempt:
                    return release  # a concurrent publish of it won
                raise Conflict("This release is published already")
            try:
                published = await self._publish(release, by=actor(principal), scheduled_at=ANY)
            except (LostRace, WriteConflict):  # a concurrent write: read again
                await backoff(attempt)
                continue
            await self._copies.schedules.cancel(RELEASE_SCHEDULES, release_id)
            return await self._named(published)
        raise kept_changing()

    async def schedule(self, principal: Principal | None, release_id: str, at: datetime) -> Release:
        """Publish the release at `at` (aware; in the future, at most MAX_SCHEDULE_AHEAD away),
        replacing its pending schedule. Answers the release, `scheduled`. Raises Unauthorized /
        Forbidden, NotFound, Conflict (published), ValidationFailed (422 naming `at`)."""
        principal = require_admin(principal)
        release = await self._get(release_id)
        if release.status == RELEASE_PUBLISHED:
            raise Conflict("This release is published already")
        now = self._copies.writer.clock()
        at = schedule_time(at, now)
        changed = await self._releases.update(release_id, {"status": RELEASE_SCHEDULED, "scheduled_at": at,
                                                           "error": None, "errors": {}, "updated": now})
        await self._copies.schedules.put(RELEASE_SCHEDULES, release_id, at, principal.user_id,
                                         current_origin().to_json())
        return await self._changed(changed)

    async def cancel(self, principal: Principal | None, release_id: str) -> None:
        """Cancel the release's pending scheduled publish: it is `pending` again. Raises Unauthorized /
        Forbidden, NotFound (also when none is pending)."""
        require_admin(principal)
        release = await self._get(release_id)
        cancelled = await self._copies.schedules.cancel(RELEASE_SCHEDULES, release_id)
        if release.status != RELEASE_SCHEDULED and not cancelled:
            raise NotFound("This release has no scheduled publish")
        await self._releases.update(release_id, {"status": RELEASE_PENDING, "scheduled_at": None,
                                                 "updated": self._copies.writer.clock()})

    async def run_schedule(self, schedule: Schedule) -> int:
        """Run one claimed release schedule (`Scheduler.add_runner`): publish the release if it still
        shows that schedule's time; a failure leaves `error`/`errors` on it (`failed`, `scheduled_at`
        null) and audits `release_publish_failed`. Returns 1 when the schedule is finished, 0 when it
        is left for a later claim (a concurrent transaction)."""
        schedules = self._copies.schedules
        release = await self._releases.get(schedule.record_id)
        if release is None or release.status != RELEASE_SCHEDULED or release.scheduled_at != schedule.at:
            return int(await schedules.finish(schedule))  # cancelled, replaced, deleted or already run
        try:
            await self._publish(release, by=None, scheduled_at=schedule.at)
        except ValidationFailed as exc:
            await self._events.emit([AuditEvent(
                "release_publish_failed", user_id=schedule.by, origin=RequestOrigin.from_json(schedule.origin),
                details={"release_id": release.id, "name": release.name, "scheduled_at": schedule.at.isoformat(),
                         "error": schedule_error(exc), "errors": exc.errors or {}})])
        except LostRace:  # cancelled or replaced meanwhile, or an item changed: then at once again
            current = await self._releases.get(release.id)
            if current is None or current.status != RELEASE_SCHEDULED or current.scheduled_at != schedule.at:
                return int(await schedules.finish(schedule))
            await schedules.release(schedule, self._copies.writer.clock())
            return 0
        except WriteConflict:
            delay_s = min(RETRY_DELAY_S * schedule.attempts, MAX_RETRY_DELAY_S)
            await schedules.release(schedule, self._copies.writer.clock() + timedelta(seconds=delay_s))
            return 0
        return int(await schedules.finish(schedule))

    async def _publish(self, release: Release, *, by: str | None, scheduled_at: Any) -> Release:
        """Publish `release`'s items and mark it `published` in one unit (one transaction where the
        server has them), while its `scheduled_at` is `scheduled_at` (ANY: whatever it is; else
        LostRace). On an item's failure: the release `failed` with `errors`, ValidationFailed raised.
        Raises LostRace or WriteConflict when a concurrent write got in the way (an item's working
        state changed, another publish of the release won, its schedule changed): nothing published."""
        now = self._copies.writer.clock()
        marked: list[Release] = []

        async def mark_published() -> None:  # in the publish's unit: both commit, or neither
            done = await self._releases.update(release.id, {
                "status": RELEASE_PUBLISHED, "published_at": now, "scheduled_at": None, "error": None,
                "errors": {}, "updated": now}, scheduled_at=scheduled_at, unpublished=True)
            if done is None:
                raise LostRace
            marked.append(done)

        try:
            pairs = await self._collections(release.items)
            await self._publisher.publish_many(pairs, by=by, inside=mark_published)
            return marked[-1]
        except PublishFailed as failed:
            if failed.race:
                raise LostRace from None
            errors = item_error(failed.index, schedule_error(failed.error))
            changes: dict[str, Any] = {"error": NOTHING_PUBLISHED, "errors": errors, "updated": now}
            if scheduled_at is not ANY or release.status != RELEASE_SCHEDULED:
                changes.update(status=RELEASE_FAILED, scheduled_at=None)
            if await self._releases.update(release.id, changes, scheduled_at=scheduled_at, unpublished=True) is None:
                raise LostRace from None  # published, or its schedule changed, meanwhile
            raise ValidationFailed(NOTHING_PUBLISHED, errors=errors) from None

    async def _collections(self, items: Sequence[ReleaseItem]) -> list[tuple[Collection, str]]:
        """The (collection, record id) pairs `publish_many` takes. Raises PublishFailed for an item
        whose collection is gone."""
        found: dict[str, Collection] = {}
        pairs = []
        for index, item in enumerate(items):
            if item.collection_id not in found:
                try:
                    found[item.collection_id] = await self._copies.catalog.by_id(item.collection_id)
                except NotFound:
                    raise PublishFailed(index, NotFound(f"Collection '{item.collection}' not found")) from None
            pairs.append((found[item.collection_id], item.record_id))
        return pairs

    async def _resolve(self, items: Sequence[Mapping[str, str]]) -> tuple[ReleaseItem, ...]:
        """`items` checked and named by collection id. Raises ValidationFailed naming every bad item."""
        if len(items) > MAX_RELEASE_ITEMS:
            raise ValidationFailed(f"A release holds at most {MAX_RELEASE_ITEMS} items",
                                   errors={"items": [f"At most {MAX_RELEASE_ITEMS} items."]})
        errors: dict[str, list[str]] = {}
        collections: dict[str, Collection | CmsError] = {}
        seen: dict[tuple[str, str], int] = {}
        resolved: list[ReleaseItem] = []
        for index, item in enumerate(items):
            name, record_id = item["collection"], item["record_id"]
            if name not in collections:
                try:
                    collections[name] = await self._copies.catalog.by_name(name)
                except NotFound as exc:
                    collections[name] = exc
            collection = collections[name]
            if isinstance(collection, CmsError):
                errors.update(item_error(index, collection.detail))
            elif not collection.drafts:
                errors.update(item_error(index, f"Collection '{name}' has no drafts"))
            elif (collection.id, record_id) in seen:
                errors.update(item_error(index, f"The same record as items.{seen[collection.id, record_id]}"))
            else:
                seen[collection.id, record_id] = index
                resolved.append(ReleaseItem(collection.id, collection.name, record_id))
        for index in await self._missing(resolved, list(seen.values())):
            errors.update(item_error(index, "Record not found"))
        if errors:
            raise ValidationFailed("Some items cannot be in a release", errors=dict(sorted(
                errors.items(), key=lambda kv: int(kv[0].split(".")[1]))))
        return tuple(resolved)

    async def _missing(self, items: Sequence[ReleaseItem], indexes: Sequence[int]) -> list[int]:
        """The indexes (`indexes[i]` is `items[i]`'s) of the items whose record does not exist: one
        read of the working copies per collection, then the published copies of those without one."""
        by_collection: dict[str, list[str]] = {}
        for item in items:
            by_collection.setdefault(item.collection_id, []).append(item.record_id)
        present: set[tuple[str, str]] = set()
        for collection_id, ids in by_collection.items():
            present.update((collection_id, r.id) for r in await self._copies.working.find_by_ids(collection_id, ids))
        missing = []
        for item, index in zip(items, indexes, strict=True):
            if (item.collection_id, item.record_id) in present:
                continue
            collection = await self._copies.catalog.by_id(item.collection_id)
            if await self._copies.current(collection, item.record_id) is None:
                missing.append(index)
        return missing

    async def _get(self, release_id: str) -> Release:
        return await self._changed(await self._releases.get(release_id))

    async def _changed(self, release: Release | None) -> Release:
        """`release` as answered (`_named`). Raises NotFound when it is None."""
        if release is None:
            raise NotFound("Release not found")
        return await self._named(release)

    async def _named(self, release: Release) -> Release:
        """`release` with each item's `collection` the current name of its collection (the stored one
        when the collection is gone), so a renamed collection's items still name it."""
        names: dict[str, str] = {}
        for item in release.items:
            if item.collection_id not in names:
                found = await self._copies.catalog.find_by_id(item.collection_id)
                names[item.collection_id] = found.name if found is not None else item.collection
        return replace(release, items=tuple(replace(i, collection=names[i.collection_id]) for i in release.items))
