"""The embedded server's envelope (issue 31, item 4): which collections are past the size at which a
cold list page takes more than COLD_PAGE_BUDGET_MS on the embedded server.

The embedded SecantusDB reads every record of a collection for a list query no cache holds, so its
cost grows with the collection; `Config.embedded_cold_page_records` is the measured size at which it
passes the budget (`scripts/bench/bench_envelope.py`). `cms serve` logs one warning per collection
past it at start-up, and the admin UI's records page shows a notice, both pointing to `MONGODB_URL`.
Only in embedded mode: on MongoDB the indexes serve these queries.

Sizes come from the server's count estimate (`estimated_document_count`: metadata on MongoDB, no
query run; SecantusDB has no such metadata and walks the collection's documents table without
decoding them, about 0.2 s at 20,000 records and 0.8 s at 50,000 on a busy 2-core machine, bounded
here by ESTIMATE_TIMEOUT_MS), or from an unfiltered list's `total` when the caller has one, and kept
ESTIMATE_TTL_S seconds per collection, so most page views cost no query.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cms.clock import Clock, utcnow
from cms.models import Collection
from cms.services.caching.catalog import Catalog
from cms.store.records import RecordRepository

COLD_PAGE_BUDGET_MS = 250
"""The latency a cold list page should stay under (issue 31)."""
ESTIMATE_TTL_S = 300.0
"""Seconds a collection's count estimate is reused by `Envelope.check` (a size notice needs no
fresher figure, and on the embedded server an estimate walks the collection)."""
ESTIMATE_TIMEOUT_MS = 2_000
"""At most this long for one count estimate (server-side `maxTimeMS`); past it, no notice."""


@dataclass(frozen=True)
class LargeCollection:
    """A collection past the embedded server's envelope: its name, the server's estimate of its
    records, and the envelope (records)."""

    name: str
    records: int
    threshold: int

    @property
    def message(self) -> str:
        """One line saying so and what to do (the start-up warning and the admin UI's notice)."""
        return (f"collection {self.name} has about {self.records:,} records; on the embedded server a cold "
                f"list page takes more than {COLD_PAGE_BUDGET_MS} ms from about {self.threshold:,} records: "
                f"set MONGODB_URL to a MongoDB server")


class Envelope:
    """Which collections are large for the embedded server.

    `embedded` is `Config.embedded` (when False, every answer is "none" and no query is made);
    `threshold` is `Config.embedded_cold_page_records` (records); `clock` times the estimates' reuse."""

    def __init__(self, catalog: Catalog, records: RecordRepository, *, embedded: bool, threshold: int,
                 clock: Clock = utcnow, ttl_s: float = ESTIMATE_TTL_S) -> None:
        self._catalog = catalog
        self._records = records
        self._embedded = embedded
        self._threshold = threshold
        self._clock = clock
        self._ttl = timedelta(seconds=ttl_s)
        self._estimates: dict[str, tuple[datetime, int | None]] = {}  # collection id -> (when, records)

    @property
    def threshold(self) -> int:
        """The envelope, in records per collection."""
        return self._threshold

    async def check(self, collection: Collection, *, known_records: int | None = None) -> LargeCollection | None:
        """`collection` as a LargeCollection when the database is embedded and its records are above
        the envelope; else None (also when the server gives no estimate). The records are
        `known_records` when the caller has just counted them all (an unfiltered list's `total`),
        else the server's estimate; either is reused for ESTIMATE_TTL_S seconds."""
        if not self._embedded:
            return None
        now = self._clock()
        kept = self._estimates.get(collection.id)
        if known_records is not None:
            records: int | None = known_records
            self._estimates[collection.id] = (now, records)
        elif kept is not None and now - kept[0] < self._ttl:
            records = kept[1]
        else:
            records = await self._records.estimated_count(collection.id, timeout_ms=ESTIMATE_TIMEOUT_MS)
            self._estimates[collection.id] = (now, records)
        if records is None or records <= self._threshold:
            return None
        return LargeCollection(collection.name, records, self._threshold)

    async def large_collections(self) -> list[LargeCollection]:
        """Every collection past the envelope, by name (empty when the database is not embedded):
        one catalog query and one count estimate per collection."""
        if not self._embedded:
            return []
        found = [await self.check(collection) for collection in await self._catalog.all()]
        return [large for large in found if large is not None]
