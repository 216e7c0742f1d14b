"""Record versions, the write side (decisions.md, Drafts, versions and scheduled publishing: Versions).

A collection's `versions` (0..MAX_VERSIONS, default 0) is how many versions of each record are kept.
`RecordVersions.record` is the one seam that stores them: the record writer calls it from one place,
where a create or an update is committed (`RecordWriter.emit_created` / `emit_updated`, inside the
write's event unit, so in its transaction when it has one: a batch, a collection with an active webhook).
Every path that changes records reaches it there: REST creates and updates, bulk updates, CSV import,
batches, a restore (an update), relation releases and auth-collection user changes. With drafts, what
counts is the published copy: a draft save must not reach it, a publish must (through those two
methods, or by calling `record` itself). A record's delete forgets its versions (`forget`, from
`RecordWriter.emit_deleted`), a collection's delete all of its records' (`on_collection_events`).

What a version holds (`versioned_data`): the record's field values as the write left them, relation
ids as they were. An auth collection's versions hold its schema fields only: its users' `email` and
`verified` are account state changed by their own flows (verification, email change), never restored,
and an old address is personal data an email change means to replace; password hashes are never in a
record, so never in a version. A write that leaves every versioned value as it was (a verification, a
PATCH of the same values) stores no version.

The numbering, the race between replicas and the trimming are the store's (`store.record_versions`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cms.errors import ValidationFailed
from cms.models import Collection, Record
from cms.services.delivery.events import DELETE, CollectionEvent
from cms.store.record_versions import NewVersion, RecordVersionRepository

MAX_VERSIONS = 1000
"""The most versions a collection may keep per record."""


def check_versions(value: Any) -> int:
    """A collection's `versions`: an integer from 0 to MAX_VERSIONS (a bool is not one). Raises
    ValidationFailed (422, `errors.versions`)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VERSIONS:
        raise ValidationFailed("Invalid versions", errors={
            "versions": [f"Must be an integer from 0 to {MAX_VERSIONS:,} (versions kept per record)."]})
    return value


def versioned_data(collection: Collection, record: Record) -> dict[str, Any]:
    """What a version of `record` holds: its field values (an auth collection's: its schema fields
    only; see the module docstring)."""
    if collection.type != "auth":
        return dict(record.data)
    names = {spec.name for spec in collection.fields}
    return {name: value for name, value in record.data.items() if name in names}


class RecordVersions:
    """The one seam that stores and forgets versions (see the module docstring)."""

    def __init__(self, repository: RecordVersionRepository) -> None:
        self._repository = repository

    @property
    def repository(self) -> RecordVersionRepository:
        """The versions' store (the reads of `version_history.VersionService` share it)."""
        return self._repository

    async def record(self, collection: Collection, records: Sequence[Record], *, by: str | None,
                     previous: Sequence[Record] = (), created: bool = False,
                     writers: Mapping[str, str | None] | None = None) -> None:
        """Store one version of each of `records` (as stored after a write to `collection`, the
        definition the write used) when the collection keeps versions; `by` is the writer's user id
        (None: the system or an anonymous caller); each version is dated by its record's `updated`.
        `previous`: the records as they were before the write (matched by id): a record whose
        versioned values did not change stores none. `created`: the records were just created (their
        first version is numbered 1 without a read). `writers`: per record id, its writer instead of `by`
        (a group commit's creates come from several requests). Then only each record's newest
        `collection.versions` are kept. Joins the transaction open in this task, if one is. Drafts
        (issue 39): a publish calls this with the published copies. Raises BadRequest (400, retry) when
        another writer took a number inside a transaction."""
        if collection.versions <= 0 or not records:
            return
        before = {r.id: versioned_data(collection, r) for r in previous}
        versions = []
        for record in records:
            data = versioned_data(collection, record)
            if before.get(record.id, None) == data:
                continue
            writer = writers.get(record.id, by) if writers is not None else by
            versions.append(NewVersion(collection_id=collection.id, record_id=record.id, created=record.updated,
                                       by=writer, data=data, first=created))
        if versions:
            await self._repository.append(versions, keep=collection.versions)

    async def forget(self, collection: Collection, record_ids: Sequence[str]) -> None:
        """Delete every version of the deleted records `record_ids` of `collection` (whatever its
        `versions` is now: a collection that stopped keeping versions keeps the ones it had until its
        records go), joining the transaction open in this task, if one is."""
        await self._repository.delete_records(collection.id, record_ids)

    async def on_collection_events(self, events: Sequence[CollectionEvent]) -> None:
        """Delete the versions of every record of a deleted collection (an event-bus subscriber)."""
        for event in events:
            if event.event == DELETE:
                await self._repository.delete_collection(event.collection.id)
