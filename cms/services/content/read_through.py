"""The read-through of the read cache (issue "Fast reads"): a read's body from the cache when its
stamp is current, else computed once for every identical concurrent read of that stamp
(`SingleFlight`) and stored. Record lists and views (`RecordReads`), view collections
(`content.views`) and aggregations (`content.aggregates`) read through it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from cms.errors import CmsError
from cms.models import Collection
from cms.services.caching.catalog import Catalog, Fresh
from cms.services.caching.read_cache import CachedBody, ReadCache, etag_of, stamp_epoch
from cms.services.caching.single_flight import SingleFlight

Compute = Callable[[str | None], Awaitable[bytes]]
"""How a read's body is computed, given the read cache's stamp it is computed under (None: none)."""
Prepared = tuple[str, Compute, bool, str]
"""A read prepared on a collection definition: its cache key, how to compute its body, whether
every caller gets that body (shared), and the locale its localized fields answer (`Content-Language`)."""
Related = Callable[[Collection], Sequence[str]]
"""The other collections (names) a read of a collection shows data of: their versions join its stamp."""


def _none(collection: Collection) -> Sequence[str]:
    return ()


class ReadThrough:
    """Reads through `cache` (None: every read is computed) of definitions from `catalog`; `flights`
    shares identical concurrent computations (one per process)."""

    def __init__(self, catalog: Catalog, cache: ReadCache | None, flights: SingleFlight) -> None:
        self._catalog = catalog
        self.cache = cache
        self.flights = flights

    async def read(self, collection_name: str, prepare: Callable[[Collection], Prepared],
                   related: Related = _none) -> CachedBody:
        """The body of a read of `collection_name`: `prepare(collection)` gives its cache key, how
        to compute it and whether it is shared; `related(collection)` the collections whose versions
        the stamp covers too (a view's source). From the cache if current, else computed (shared by
        identical concurrent reads of the same stamp) and stored.

        The collection's definition comes from the definition cache unchecked; the read cache's
        one `MGET` returns the catalog epoch, and only when that differs from the definition's is
        the definition loaded again (and the lookup repeated): a warm read is one Redis round trip."""
        if self.cache is None:
            return await self.serve(prepare(await self._catalog.by_name(collection_name)), None, None)
        collection, assumed_epoch = await self._catalog.by_name_and_epoch(collection_name, fresh=Fresh.PEEK)
        try:
            prepared = prepare(collection)
        except CmsError:  # refuse only on a current definition (a rule, field or locale may have just changed)
            collection, assumed_epoch = await self._catalog.by_name_and_epoch(collection_name)
            prepared = prepare(collection)
        stamp, cached = await self.cache.lookup(collection.name, prepared[0], related(collection))
        if stamp is None or stamp_epoch(stamp) != assumed_epoch:
            # the definition may be older than the epoch (or Redis cannot tell): load it again
            if stamp is None:
                collection = await self._catalog.by_name(collection_name)
            else:
                epoch = stamp_epoch(stamp)
                collection = await self._catalog.by_name(collection_name, epoch=epoch)
            prepared = prepare(collection)
            if stamp is not None:
                stamp, cached = await self.cache.lookup(collection.name, prepared[0], related(collection))
                if stamp is not None and stamp_epoch(stamp) != epoch:  # changed again: serve, keep nothing
                    stamp, cached = None, None
        return await self.serve(prepared, stamp, cached)

    async def serve(self, prepared: Prepared, stamp: str | None, cached: bytes | None) -> CachedBody:
        """The cached body when the stamp vouches for it, else `compute()`d: stored and shared by
        identical concurrent reads under a stamp, neither without one."""
        key, compute, shared, language = prepared
        if cached is not None and stamp is not None:
            return CachedBody(cached, etag_of(key, stamp, cached), shared, language)
        if stamp is None or self.cache is None:  # no stamp, no sharing: not with a read begun before a write
            body = await compute(None)
            return CachedBody(body, etag_of(key, None, body), shared, language)
        cache, current = self.cache, stamp

        async def compute_and_store() -> bytes:
            computed = await compute(current)
            await cache.store(key, current, computed)
            return computed

        body = await self.flights.run(f"{key}@{current}", compute_and_store)
        return CachedBody(body, etag_of(key, current, body), shared, language)
