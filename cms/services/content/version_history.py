"""Record versions, the read side and restore (decisions.md, Drafts, versions and scheduled publishing:
Versions): `GET .../records/{id}/versions`, `GET .../versions/{n}` and `POST .../versions/{n}/restore`.
The versions are stored by `versions.RecordVersions` (the write side).

Who may read a record's versions is who may view the record now (its view rule, on the record as
stored: a hidden or missing record is 404 like a view; with drafts, on its working copy, and a record
readers do not see, never published or unpublished, is its editors' only: the update rule with the view
rule, as `?draft=true`). Field view rules apply to each version's
`data` exactly as to a record read (`Access.redact`), decided on the record as that version left it.
A restore is an update of the record (the update rule, field write rules, validation, unique fields,
relations: a relation id whose record is gone is 422 like any write to a missing relation), made
through one function, `write` (default: `RecordService.update`); with drafts that update writes the
working copy, so a restore does too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from cms.errors import NotFound
from cms.models import Collection, Page, Principal, Record, RecordVersion
from cms.services import access as actions
from cms.services.access import Access, check, draft_access
from cms.services.caching.catalog import Catalog
from cms.services.content.drafts import WorkingCopies
from cms.services.content.fields import to_json_value
from cms.services.content.locales import ALL
from cms.services.content.record_checks import permitted_record
from cms.services.content.record_reads import MAX_PER_PAGE
from cms.store.record_versions import RecordVersionRepository
from cms.store.records import RecordRepository

RestoreWrite = Callable[..., Awaitable[Record]]
"""How a restore writes: (principal, collection name, record id, partial `data` as a PATCH body's,
`locale="*"`: localized fields as objects) -> the record as written. `RecordService.update` (with drafts:
the working copy)."""
MAX_VERSION_NUMBER = 10 ** 12
"""Version numbers past this are never stored (a path's `n` beyond it is 404 without a read)."""


class VersionService:
    """Reads and restores of record versions (see the module docstring)."""

    def __init__(self, catalog: Catalog, records: RecordRepository, versions: RecordVersionRepository, *,
                 write: RestoreWrite, working: WorkingCopies | None = None) -> None:
        """`write`: the one function a restore writes through (`RestoreWrite`); `working`: the working
        copies of collections with drafts (their records are looked up there)."""
        self._catalog = catalog
        self._records = records
        self._versions = versions
        self._write = write
        self._working = working

    async def list(self, principal: Principal | None, collection_name: str, record_id: str, *,
                   page: int = 1, per_page: int = 30) -> Page[RecordVersion]:
        """One page of the record's versions, newest first, each `data` as `principal`'s field view
        rules show it, with `total` (every version kept). `page` >= 1; `per_page` is clamped to
        1..100. Raises NotFound (collection; record, or one the view rule hides), Unauthorized /
        Forbidden (the view rule refuses)."""
        collection, view, current = await self._viewed(principal, collection_name, record_id)
        per_page = max(1, min(per_page, MAX_PER_PAGE))
        items = await self._versions.page(collection.id, record_id, skip=(page - 1) * per_page, limit=per_page)
        total = await self._versions.count(collection.id, record_id)
        return Page(items=[_shown(view, current, v) for v in items], total=total, page=page, per_page=per_page)

    async def get(self, principal: Principal | None, collection_name: str, record_id: str,
                  version: int) -> RecordVersion:
        """Version `version` of the record, its `data` as `principal`'s field view rules show it.
        Raises what `list` raises, and NotFound for a version that does not exist (never stored,
        trimmed, or of a deleted record)."""
        collection, view, current = await self._viewed(principal, collection_name, record_id)
        return _shown(view, current, await self._stored(collection, record_id, version))

    async def restore(self, principal: Principal | None, collection_name: str, record_id: str,
                      version: int) -> Record:
        """Write version `version`'s data over the record: every field of the collection's schema whose
        value differs from the record's now is set to the version's value (cleared when the version has
        none), through `write` (an update: the update rule, validation, relations); fields of the
        version the schema no longer has are left out. Returns the record as written. Raises what `get`
        raises, and what the update raises: Unauthorized / Forbidden, ValidationFailed (422: a value
        the schema refuses now, a relation to a record that is gone), AlreadyExists (a unique field)."""
        collection, _, current = await self._viewed(principal, collection_name, record_id)
        stored = await self._stored(collection, record_id, version)
        data: dict[str, Any] = {}
        for spec in collection.fields:
            value = stored.data.get(spec.name)
            if value != current.data.get(spec.name):
                data[spec.name] = _json_value(value)
        return await self._write(principal, collection.name, record_id, data, locale=ALL)

    async def _viewed(self, principal: Principal | None, collection_name: str,
                      record_id: str) -> tuple[Collection, Access, Record]:
        """The collection, the caller's view rule and the record as stored, once that rule shows it. With
        drafts, a record readers do not see (never published, or unpublished) is its editors' only, as
        `?draft=true` is (the update rule with the view rule); to anyone else it is hidden like a missing
        one (404), so its versions neither leak what it published once nor say that it exists."""
        collection = await self._catalog.by_name(collection_name)
        # a version is the whole record: localized fields as objects (decisions.md, Localized fields)
        view = check(principal, collection, actions.VIEW, locale=ALL)
        if collection.drafts and self._working is not None:
            if await self._records.get(collection.id, record_id) is not None:
                return collection, view, await self._working.editable(view, None, record_id)
            view.require()
            editors = draft_access(principal, collection, locale=ALL)
            record = await self._working.current(collection, record_id)
            if record is None or editors.refused or not editors.allows(record):
                raise view.hidden()
            return collection, editors, record
        return collection, view, await permitted_record(self._records, view, None, record_id)

    async def _stored(self, collection: Collection, record_id: str, version: int) -> RecordVersion:
        found = None
        if 1 <= version <= MAX_VERSION_NUMBER:
            found = await self._versions.get(collection.id, record_id, version)
        if found is None:
            raise NotFound("Version not found")
        return found


def _shown(view: Access, current: Record, version: RecordVersion) -> RecordVersion:
    """`version` with the fields `view`'s field rules hide left out of `data`, decided on the record as
    the version left it (its values, dated by the version)."""
    as_record = Record(id=current.id, created=current.created, updated=version.created, data=version.data)
    shown = view.redact(as_record)
    if shown is as_record:
        return version
    return RecordVersion(collection_id=version.collection_id, record_id=version.record_id, version=version.version,
                         created=version.created, by=version.by, data=shown.data)


def _json_value(value: Any) -> Any:
    """A stored value as a write's `data` gives it (dates as ISO 8601 text; a localized field's object of
    such values)."""
    if isinstance(value, dict):
        return {code: _json_value(item) for code, item in value.items()}
    return [to_json_value(v) for v in value] if isinstance(value, list) else to_json_value(value)
