"""The catalog: the one way a collection definition is looked up, by id or by name, and how current
what comes back is (issue item 5; docs/operations/scaling.md "Definitions and sessions are cached in each process" and
"A deleted collection stays deleted"). `CollectionService` keeps the writes and moves the catalog
epoch through `forget` and `move_epoch`; everything that reads a definition asks a `Catalog`.

Definitions come from the definition cache (`DefinitionCache` under the catalog epoch) when it is
current, else from one MongoDB look-up. How current a look-up by name must be is named by `Fresh`:

- `Fresh.REQUEST` (the default): as of this request's catalog epoch, read from Redis at most once
  per request (outside a request, read now). What may refuse a request looks up this way.
- `Fresh.PEEK`: the cached definition and the epoch it was loaded under, without reading the epoch
  when an entry is there (a miss is a `REQUEST` look-up). The hot read path: it compares that epoch
  with the one its read cache's `MGET` returns anyway, and looks up again with `by_name(name,
  epoch=...)` when they differ, so a warm read is one Redis round trip and no MongoDB round trip.

Each definition carries the `locales` setting as of the same epoch (`Collection.locales`, decisions.md,
Localized fields): the catalog loads the setting from MongoDB once per epoch (`locales`) and attaches it
to every definition it loads, and a change of the setting moves the epoch
(`CollectionService.locales_changed`), so every replica reads records with the new locales from its next
request on, and the read cache's entries made with the old ones are stale.

Existence is checked apart (`exists`), never from the cache: one `_id` look-up, or none at all when
the catalog epoch read now is still the one the caller looked the collection up under (every path
that drops a collection's records moves the epoch first).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from enum import Enum

from cms.errors import NotFound
from cms.models import DEFAULT_LOCALES, Collection, Locales
from cms.services.caching.definition_cache import DefinitionCache
from cms.store.collections import CollectionRepository


class Fresh(Enum):
    """How current a definition looked up by name must be (see the module docstring)."""

    REQUEST = "request"
    """As of the request's catalog epoch (read at most once per request)."""
    PEEK = "peek"
    """The cached definition with its epoch, the epoch not read: the caller must check it."""


class Catalog:
    """Look-ups of collection definitions over `collections` (the repository), through `cache`
    (the definition cache of the catalog epoch; None: every look-up reads MongoDB and no epoch is
    ever known). `locales` reads the `locales` setting from MongoDB (`SettingsService.stored_locales`;
    None: the default, `[{"code": "en"}]`)."""

    def __init__(self, collections: CollectionRepository, cache: DefinitionCache | None = None, *,
                 locales: Callable[[], Awaitable[Locales]] | None = None) -> None:
        self._collections = collections
        self._cache = cache
        self._load_locales = locales

    async def all(self) -> list[Collection]:
        """Every collection, by name (one query, never cached: for the rare paths that scan the
        catalog, such as the relations pointing at a collection), with the current locales."""
        locales = await self.locales()
        return [replace(c, locales=locales) for c in await self._collections.list()]

    async def locales(self, epoch: str | None = None) -> Locales:
        """The `locales` setting as of the request's catalog epoch (or `epoch`): loaded from MongoDB
        once per epoch and process."""
        load = self._load_locales
        if load is None:
            return DEFAULT_LOCALES
        if self._cache is None:
            return await load()
        return await self._cache.get(("locales",), load, epoch=epoch)

    async def by_id(self, collection_id: str) -> Collection:
        """The collection with this id, as of the request's catalog epoch. Raises NotFound
        ("Collection not found")."""
        collection = await self.find_by_id(collection_id)
        if collection is None:
            raise NotFound("Collection not found")
        return collection

    async def find_by_id(self, collection_id: str) -> Collection | None:
        """The collection with this id as of the request's catalog epoch, or None (the definition
        cache, else one `_id` look-up)."""
        return await self._cached(("id", collection_id), lambda: self._collections.get(collection_id))

    async def by_name(self, name: str, *, epoch: str | None = None) -> Collection:
        """The collection called `name`, as of the request's catalog epoch, or as of `epoch` when
        the caller has just read it from Redis some other way (the read cache's `MGET`; it becomes
        this request's catalog epoch). Raises NotFound ("Collection '<name>' not found")."""
        if epoch is not None and self._cache is not None:
            self._cache.remember(epoch)
        return await self._by_name(name, epoch)

    async def by_name_and_epoch(self, name: str, *, fresh: Fresh = Fresh.REQUEST) -> tuple[Collection, str | None]:
        """The collection called `name` and the catalog epoch it stands for (None when Redis failed
        or without a cache). `Fresh.REQUEST`: as of the request's epoch (read now if this request
        has not yet). `Fresh.PEEK`: a cached entry and the epoch it was loaded under, without
        reading the epoch; the caller compares it with an epoch it reads and must not refuse a
        request on this definition alone. Raises NotFound."""
        if self._cache is None:
            return await self._by_name(name), None
        if fresh is Fresh.PEEK:
            hit = self._cache.peek(("name", name))
            if hit is not None and hit[1] is not None:
                return hit[1], hit[0]
        epoch = await self._cache.epoch()
        return await self._by_name(name, epoch), epoch

    async def exists(self, collection_id: str, *, since_epoch: str | None = None) -> bool:
        """Whether the collection with this id exists, never from the cache.

        Without `since_epoch`: one `_id` look-up (the orphan sweep's last check before a drop).
        With it (the catalog epoch the caller looked the collection up under, `by_name_and_epoch`):
        the check an insert makes after it lands. True without a database look-up when the epoch
        read from Redis now is still `since_epoch`: every path that drops a collection's records
        moves the epoch first (`CollectionService.delete`, the rollback of its `create`, a restore's
        switch), so an unmoved epoch means any drop comes after the insert. Otherwise (the epoch
        moved, or Redis failed) one `_id` look-up. Should Redis lose a bump, the records left
        behind are removed by `CollectionService.sweep_orphans`."""
        if since_epoch is not None and self._cache is not None and await self._cache.current_epoch() == since_epoch:
            return True
        return await self._collections.get(collection_id) is not None

    def forget(self) -> None:
        """After a collection change made in this process: its cached definitions go at once (the
        epoch bump that follows, from the collection event, reaches every replica)."""
        if self._cache is not None:
            self._cache.forget()

    async def move_epoch(self) -> bool:
        """Bump the catalog epoch (and forget this process's definitions), before a collection's
        records are dropped. Returns whether Redis acknowledged it (True without a cache: no epoch
        then vouches for anything); a failure is logged, not raised."""
        if self._cache is None:
            return True
        return await self._cache.invalidate()

    async def _by_name(self, name: str, epoch: str | None = None) -> Collection:
        collection = await self._cached(("name", name), lambda: self._collections.get_by_name(name), epoch)
        if collection is None:
            raise NotFound(f"Collection '{name}' not found")
        return collection

    async def _cached(self, key: tuple[str, str], load: Callable[[], Awaitable[Collection | None]],
                      epoch: str | None = None) -> Collection | None:
        async def with_locales() -> Collection | None:
            collection = await load()
            return None if collection is None else replace(collection, locales=await self.locales(epoch))

        if self._cache is None:
            return await with_locales()
        return await self._cache.get(key, with_locales, epoch=epoch)
