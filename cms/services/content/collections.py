"""Collections: CRUD of collection definitions and their record indexes (spec: Collections)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.errors import BadRequest, NotFound, ValidationFailed
from cms.models import VIEW_TYPE, Collection, Principal, default_rules
from cms.services.access import check_rules, require_admin
from cms.services.caching.catalog import Catalog
from cms.services.content.definition_checks import (
    COLLECTION_TYPES,
    check_auth_switches,
    check_drafts,
    check_name,
)
from cms.services.content.draft_stores import DraftStores
from cms.services.content.fields import parse_schema, text_field_names, unique_field_names
from cms.services.content.indexes import check_indexes, managed_indexes, parse_indexes
from cms.services.content.orphans import ORPHAN_CONFIRM_S, sweep_orphans
from cms.services.content.schema_changes import FieldChange, apply_schema_change
from cms.services.content.schema_checks import check_schema_change
from cms.services.content.versions import check_versions
from cms.services.content.views.definition import VIEW_RULES, check_sources_kept, view_collection, view_definition
from cms.services.delivery.events import CREATE, DELETE, UPDATE, AuditEvent, CollectionEvent, EventBus
from cms.services.operations.settings import SettingsService
from cms.store.collections import CollectionRepository
from cms.store.records import RecordRepository

log = logging.getLogger("cms.collections")

RESYNC_ATTEMPTS = 3
"""Times `resync_indexes` syncs a collection whose definition keeps changing meanwhile."""


class CollectionService:
    """Writes of collection definitions (admin-only, checked by the API guard), the list of all
    of them, and the orphan sweep. Look-ups of one definition go through `catalog`, which this
    service tells about each change (`Catalog.forget`, `Catalog.move_epoch`)."""

    def __init__(
        self,
        collections: CollectionRepository,
        records: RecordRepository,
        settings: SettingsService,
        events: EventBus,
        *,
        catalog: Catalog,
        clock: Clock = utcnow,
        drafts: DraftStores | None = None,
    ) -> None:
        """`drafts`: the working copies and schedules of collections with drafts (None: drafts refused)."""
        self._catalog = catalog
        self._drafts = drafts
        self._events = events
        self._collections = collections
        self._records = records
        self._settings = settings
        self._orphans_seen: dict[str, float] = {}  # records collection -> when first found orphaned (s)
        self._clock = clock

    async def fill_default_rules(self) -> int:
        """Start-up: give collections stored before access rules existed their type's default
        rules (idempotent; replicas starting together write the same values). Returns how many
        were changed."""
        changed = 0
        for type_ in COLLECTION_TYPES:
            changed += await self._collections.fill_rules(type_, default_rules(type_))
        if changed:
            log.info("%d collections got the default access rules of their type", changed)
        return changed

    async def list(self) -> list[Collection]:
        """Every collection, by name."""
        return await self._collections.list()

    async def create(
        self, principal: Principal | None, name: str, type_: str, schema: Any, otp_enabled: bool | None = None,
        rules: dict[str, str | None] | None = None, mfa_enabled: bool | None = None,
        oauth_enabled: bool | None = None, indexes: Any = None, versions: Any = 0, drafts: bool | None = None,
        view: Any = None,
    ) -> Collection:
        """Create a collection of type `base`, `auth` or `view` (with `view`, `{source, filter,
        group_by, aggregates}`, instead of a schema and indexes: `content.views.definition`) with the
        schema (list or `{fields}`) and the declared `indexes` (`[{fields, unique}]`,
        `content.indexes.parse_indexes`; None: none); `versions`: versions kept per record (0..1000,
        `content.versions.check_versions`); `drafts` (decisions.md, Drafts, versions and scheduled
        publishing; base collections only). Auth collections copy `otp_enabled`, `mfa_enabled` and
        `oauth_enabled` from the global settings unless given. `rules` maps
        `list_rule` .. `delete_rule` to a rule (None: admins only, "": everyone); a rule not given
        takes the type's default (`models.default_rules`). Admins only.
        Raises Unauthorized / Forbidden, ValidationFailed (name, type, schema, indexes, versions, view),
        InvalidFilter (a rule, a view's filter, keys or aggregates) or AlreadyExists (name taken)."""
        principal = require_admin(principal)
        return await self._store_new(principal, await self.new_definition(
            name, type_, schema, otp_enabled=otp_enabled, rules=rules, mfa_enabled=mfa_enabled,
            oauth_enabled=oauth_enabled, indexes=indexes, versions=versions, drafts=drafts, view=view))

    async def new_definition(
        self, name: str, type_: str, schema: Any, *, otp_enabled: bool | None = None,
        rules: dict[str, str | None] | None = None, mfa_enabled: bool | None = None,
        oauth_enabled: bool | None = None, indexes: Any = None, versions: Any = 0, drafts: bool | None = None,
        view: Any = None, collection_id: str | None = None, sources: Mapping[str, Collection] | None = None,
    ) -> Collection:
        """The collection `create` would store (arguments as there; `collection_id`: its id, default a new
        one), checked but not stored: name, type, schema, switches, rules, indexes, versions, drafts, a
        view over its source (looked up by name in `sources` when given: a schema apply's collections as
        they will be, else in the catalog). Its relation targets are not looked up. Raises
        ValidationFailed or InvalidFilter (a rule, a view's filter, keys or aggregates)."""
        check_name(name)
        if type_ not in (*COLLECTION_TYPES, VIEW_TYPE):
            raise ValidationFailed("Invalid collection type", errors={"type": ["Must be one of: base, auth, view."]})
        now = self._clock()
        if type_ == VIEW_TYPE or view is not None:
            definition = view_definition(type_, view, new=True, versions=versions, otp_enabled=otp_enabled,
                                         mfa_enabled=mfa_enabled, oauth_enabled=oauth_enabled)
            assert definition is not None
            skeleton = Collection(id=collection_id or new_id(), name=name, type=VIEW_TYPE, fields=(), created=now,
                                  updated=now, rules=VIEW_RULES)
            source = sources.get(definition.source) if sources is not None else await self._source(definition.source)
            collection = view_collection(skeleton, definition, source, schema=schema, indexes=indexes, rules=rules)
            check_rules(collection.rules, collection)
            return collection
        fields = parse_schema(schema, auth=type_ == "auth")
        check_auth_switches(type_, otp_enabled=otp_enabled, mfa_enabled=mfa_enabled, oauth_enabled=oauth_enabled)
        defaults = await self._settings.auth()
        if otp_enabled is None:
            otp_enabled = defaults.otp_enabled if type_ == "auth" else False
        if mfa_enabled is None:
            mfa_enabled = defaults.mfa_enabled if type_ == "auth" else False
        if oauth_enabled is None:
            oauth_enabled = defaults.oauth_enabled if type_ == "auth" else False
        collection = Collection(
            id=collection_id or new_id(), name=name, type=type_, fields=fields, created=now, updated=now,
            otp_enabled=otp_enabled, mfa_enabled=mfa_enabled, oauth_enabled=oauth_enabled,
            rules=replace(default_rules(type_), **(rules or {})),
            indexes=parse_indexes(indexes) if indexes is not None else (),
            versions=check_versions(versions if versions is not None else 0), drafts=bool(drafts),
        )
        check_drafts(self._drafts is not None, collection)
        check_rules(collection.rules, collection)
        check_indexes(collection)
        return collection

    async def _store_new(self, principal: Principal, collection: Collection) -> Collection:
        """`create`'s last steps: store the new `collection` (checked by `new_definition`) with its indexes,
        tell of it."""
        name = collection.name
        await self._check_relations(collection)
        await self._collections.insert(collection)
        try:
            await self.sync_indexes(collection)
            await self.follow_drafts(None, collection)
        except Exception:
            await self._collections.delete(collection.id)
            try:
                await self.drop_records(collection)
            except Exception:  # the original error matters more; the sweep drops what is left
                log.warning("collection %s (%s): its records collection is left to the orphan sweep",
                            name, collection.id, exc_info=True)
            raise
        self._forget()
        log.info("collection %s (%s) created", name, collection.id)
        await self._events.emit([CollectionEvent(CREATE, collection)])
        await self._events.emit([AuditEvent("collection_created", user_id=principal.user_id,
                                            details={"collection_id": collection.id, "name": name})])
        return collection

    async def _source(self, name: str) -> Collection | None:
        try:
            return await self._catalog.by_name(name)
        except NotFound:
            return None

    async def update(
        self, principal: Principal | None, collection_id: str, *, name: str | None = None, schema: Any = None,
        otp_enabled: bool | None = None, rules: dict[str, str | None] | None = None, mfa_enabled: bool | None = None,
        oauth_enabled: bool | None = None, indexes: Any = None, versions: Any = None, drafts: bool | None = None,
        view: Any = None,
    ) -> Collection:
        """Change name, schema (a view: `view`), otp_enabled, mfa_enabled, oauth_enabled, access rules
        (`rules`: the `<action>_rule`s given; the others are kept), the declared `indexes`
        (replaced as a whole), `versions` (kept versions stay until a record's next version
        trims them, or its delete) and/or `drafts` (turned on, the records are `published`; turned
        off, nothing is published or discarded). Fields dropped from the schema
        are removed from every record; unique, text, automatic and declared indexes follow the new
        schema and rules (a declared index naming a dropped field is 422). Values of a
        changed field are converted to its new type or shape (`schema_changes`). Every rule must fit
        the new schema. Admins only.
        Raises Unauthorized / Forbidden, NotFound, ValidationFailed (including duplicates under a
        new unique rule or a new unique declared index, and stored values that do not convert; then
        nothing changes),
        InvalidFilter (a rule, or a kept rule naming a removed field), AlreadyExists (name),
        BadRequest (a concurrent update won). A collection that views read keeps its name and the fields
        they read (422 naming the views)."""
        principal = require_admin(principal)
        current = await self._catalog.by_id(collection_id)
        changed = current
        if name is not None:
            check_name(name)
            changed = replace(changed, name=name)
        if current.type == VIEW_TYPE or view is not None:
            definition = view_definition(current.type, view, versions=versions, otp_enabled=otp_enabled,
                                         mfa_enabled=mfa_enabled, oauth_enabled=oauth_enabled) or current.view
            assert definition is not None
            changed = view_collection(changed, definition, await self._source(definition.source), schema=schema,
                                      indexes=indexes, rules=rules)
            schema = indexes = None
        if schema is not None:
            changed = replace(changed, fields=parse_schema(schema, auth=current.type == "auth"))
        check_auth_switches(current.type, otp_enabled=otp_enabled, mfa_enabled=mfa_enabled,
                            oauth_enabled=oauth_enabled)
        if otp_enabled is not None:
            changed = replace(changed, otp_enabled=otp_enabled)
        if mfa_enabled is not None:
            changed = replace(changed, mfa_enabled=mfa_enabled)
        if oauth_enabled is not None:
            changed = replace(changed, oauth_enabled=oauth_enabled)
        if rules:
            changed = replace(changed, rules=replace(changed.rules, **rules))
        if indexes is not None:
            changed = replace(changed, indexes=parse_indexes(indexes))
        if versions is not None:
            changed = replace(changed, versions=check_versions(versions))
        if drafts is not None:
            changed = replace(changed, drafts=drafts)
        check_drafts(self._drafts is not None, changed)
        check_rules(changed.rules, changed)
        check_indexes(changed)
        changed = replace(changed, version=current.version + 1, updated=self._clock())
        check_sources_kept(current, changed, await self._collections.list())
        await self._check_relations(changed)
        field_changes = await check_schema_change(self._records, current, changed) if schema is not None else []
        try:
            await self.sync_indexes(changed)
            stored = await self._collections.replace(changed, expected_version=current.version)
            if stored is None:
                raise BadRequest("The collection was changed by another request; retry")
        except Exception:
            # Nothing changes on failure: the indexes go back to the rules of the stored schema.
            await self.restore_indexes(collection_id)
            raise
        kept = {f.name for f in stored.fields}
        dropped = [f.name for f in current.fields if f.name not in kept]
        if stored.type != VIEW_TYPE:
            await self._records.unset_fields(collection_id, dropped)
        await apply_schema_change(self._records, collection_id, field_changes)
        await self.follow_drafts(current, stored, dropped, field_changes)
        self._forget()
        log.info("collection %s (%s) updated to version %d", stored.name, stored.id, stored.version)
        await self._events.emit([CollectionEvent(UPDATE, stored)])
        await self._events.emit([AuditEvent(
            "collection_updated", user_id=principal.user_id,
            details={"collection_id": stored.id, "name": stored.name, "version": stored.version})])
        return stored

    async def follow_drafts(self, before: Collection | None, after: Collection | None,
                            dropped: Sequence[str] = (), field_changes: Sequence[FieldChange] = (),
                            renames: Mapping[str, str] | None = None) -> None:
        """The working copies of a collection with drafts follow a change of its definition (`before` ->
        `after`; None: created, deleted): their store made, dropped, or given the same change (drafts
        turned on or off, `renames` (old -> new), `dropped` fields, converting `field_changes`). Nothing
        without drafts. Driver errors propagate."""
        if self._drafts is None:
            return
        if before is None:
            if after is not None and after.drafts:
                await self._drafts.working.ensure_indexes(after.id)
        elif after is None:
            await self._drafts.drop(before.id)
        else:
            if renames and (before.drafts or after.drafts):
                await self._drafts.working.rename_fields(after.id, renames)
            await self._drafts.follow(before, after, dropped, field_changes)

    async def sync_indexes(self, collection: Collection) -> None:
        """Make the record indexes of `collection` follow its definition (unique, text, automatic and
        declared ones, each localized field's per locale; a view has none). Raises ValidationFailed
        (duplicates under a new unique index)."""
        if collection.type == VIEW_TYPE:  # no records of its own
            return
        collection = replace(collection, locales=await self._catalog.locales())
        await self._records.sync_indexes(collection.id, unique_field_names(collection), text_field_names(collection),
                                         managed_indexes(collection), kept_unique=[
                                             f.name for f in collection.fields if f.localized and f.validation.unique])

    async def locales_changed(self, _value: Any = None) -> None:
        """After the `locales` setting changed (a settings listener): move the catalog epoch, so every
        replica reads records with the new locales from its next request on (and the read cache's
        entries made with the old ones are stale), then give every collection with localized fields the
        indexes of each new locale (unique fields, declared indexes; decisions.md, Localized fields). An
        index that cannot be made is logged, not raised: the setting is stored."""
        await self._catalog.move_epoch()
        for collection in await self._catalog.all():
            if collection.localized_fields:
                try:
                    await self.sync_indexes(collection)
                except Exception:
                    log.exception("collection %s: the unique indexes of the new locales could not be made",
                                  collection.name)

    async def resync_indexes(self, collection_id: str) -> bool:
        """Make the record indexes of a stored collection match its stored definition (missing ones
        created, stale `unique_*`, `auto_*` and `idx_*` ones dropped: the start-up sync,
        cms.services.content.index_sync). When the definition changed while its indexes were synced (an
        update raced), it is read and synced again, at most RESYNC_ATTEMPTS times. Returns False when
        the collection no longer exists. Raises ValidationFailed (records hold duplicates of a unique
        index that is missing) and driver errors."""
        for _ in range(RESYNC_ATTEMPTS):
            stored = await self._collections.get(collection_id)
            if stored is None:
                return False
            await self.sync_indexes(stored)
            again = await self._collections.get(collection_id)
            if again is None or again.version == stored.version:
                return again is not None
        return True

    async def restore_indexes(self, collection_id: str) -> None:
        """After a failed change: the record indexes follow the stored definition again (a failure is
        logged, not raised)."""
        stored = await self._collections.get(collection_id)
        if stored is None:
            return
        try:
            await self.sync_indexes(stored)
        except Exception:
            log.exception("could not restore the record indexes of collection %s", collection_id)

    async def delete(self, principal: Principal | None, collection_id: str) -> None:
        """Delete the collection and all its records. Admins only. Raises Unauthorized / Forbidden,
        NotFound, or BadRequest while a relation field of another collection points to it (its
        records would dangle)."""
        principal = require_admin(principal)
        collection = await self._catalog.by_id(collection_id)
        check_sources_kept(collection, None, await self._collections.list())
        referrers = [
            f"{other.name}.{spec.name}"
            for other in await self._collections.list()
            if other.id != collection.id
            for spec in other.fields
            if spec.type == "relation" and spec.collection_id == collection.id
        ]
        if referrers:
            raise BadRequest(
                f"Collection '{collection.name}' is referenced by relation fields: {', '.join(referrers)}"
            )
        await self._collections.delete(collection.id)
        await self.drop_records(collection)
        await self.follow_drafts(collection, None)
        await self._events.emit([CollectionEvent(DELETE, collection)])
        log.info("collection %s (%s) deleted", collection.name, collection.id)
        await self._events.emit([AuditEvent("collection_deleted", user_id=principal.user_id,
                                            details={"collection_id": collection.id, "name": collection.name})])

    async def drop_records(self, collection: Collection) -> None:
        """Once `collection`'s definition is gone: move the catalog epoch, then drop its records.
        The order `Catalog.exists` relies on (a create whose insert lands after the drop sees the
        moved epoch and looks the collection up). When Redis does not acknowledge the bump, the
        records are not dropped here (an unmoved epoch must keep meaning "not dropped yet"): the
        collection, which has no definition any more, is left to `sweep_orphans`."""
        if not await self._catalog.move_epoch():
            log.warning("collection %s (%s): the catalog epoch could not be moved; its records are left "
                        "to the orphan sweep", collection.name, collection.id)
            return
        await self._records.drop(collection.id)

    async def sweep_orphans(self, *, confirm_after_s: float = ORPHAN_CONFIRM_S) -> tuple[str, ...]:
        """Drop the records collections whose collection is no longer defined, and return their
        MongoDB names (`orphans.sweep_orphans`, with this service's sightings). Driver errors
        propagate (the next sweep goes on)."""
        return await sweep_orphans(self._records, self._collections, self._catalog, self._orphans_seen,
                                   confirm_after_s=confirm_after_s)

    def _forget(self) -> None:
        """After a change made here: this process's cached definitions go at once (the epoch bump
        that follows, from the collection event, reaches every replica)."""
        self._catalog.forget()

    async def _check_relations(self, collection: Collection) -> None:
        for spec in collection.fields:
            if spec.type != "relation" or spec.collection_id == collection.id:
                continue
            target = None if spec.collection_id is None else await self._collections.get(spec.collection_id)
            if target is None:
                raise ValidationFailed(
                    f"Relation field '{spec.name}' points to an unknown collection",
                    errors={"schema": [f"{spec.name}: unknown collection_id"]},
                )
            if target.type == VIEW_TYPE:  # its records' ids follow its groups
                raise ValidationFailed(f"Relation field '{spec.name}' points to a view",
                                       errors={"schema": [f"{spec.name}: a relation cannot point to a view"]})
