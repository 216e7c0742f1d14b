"""One page of a list query and its `total` (issue 31, items 1 and 2): from the query's result set
when the read cache is on, else paged by the database.

- **Result set** (the read cache on, and its stamp known): the ordered ids of the whole result come
  from the result-set cache (`caching.result_sets`), or from one scan that sends back only the ids
  (`RecordRepository.find_ids`), shared by every concurrent request of the same query and stamp in
  this process (`SingleFlight`; each replica runs its own scan) and kept for the next ones. The page
  is a slice of them and one `_id $in` look-up (order restored here); `total` is their count. A cold
  query thus costs one scan, and every later page of it none.
- **Paged by the database** (the cache off or Redis not answering, or a result of more than
  RESULT_SET_MAX_IDS records): `find` with `skip` and `limit`, and a `count` for `total` (none with
  `skip_total`), as before result sets. The first request of a result found to be over the bound
  spent one more scan finding out; its entry then sends the next requests here at once.

Every scan is taken in the share of the scan line of the client it is for (`scan_client`: the
signed-in user, else the client's address; issue 37, item 4), so one client flooding cold queries
is refused past its own share while another's are still served. A scan shared by concurrent
identical misses counts in the share of the caller that started it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from cms.errors import InvalidFilter
from cms.models import Collection, Principal, Record, SortSpec
from cms.services.access import Access
from cms.services.caching.read_cache import entry_key
from cms.services.caching.result_sets import (
    OVER_BOUND,
    RESULT_SET_MAX_IDS,
    IdSlice,
    ResultSetCache,
    base_stamp,
)
from cms.services.caching.single_flight import SingleFlight
from cms.store.records import RecordRepository

MAX_ARRANGED_RECORDS = 10_000
"""Most records a sort on a field with a view rule puts in order (in memory, hidden values as null)."""
MATCH_NOTHING: dict[str, Any] = {"_id": {"$in": []}}
"""The query of a list the caller may see nothing of (answered without a database round trip)."""

SortOrder = SortSpec
DEFAULT_SORT: SortSpec = [("created", 1)]


def sort_order(access: Access, sort: str | None) -> SortOrder:
    """The sort of a list or export: `sort` (default `created`), then `id` in the direction of
    the first key, so the order is total and `created` / `-created` are the `created_id` index
    walked forward or backward (no in-memory sort, on MongoDB as on the embedded server).
    Raises InvalidFilter (unknown field)."""
    order = access.sort(sort) if sort else list(DEFAULT_SORT)
    if not any(path == "_id" for path, _ in order):
        order.append(("_id", order[0][1]))
    return order


def scan_client(principal: Principal | None, client_ip: str | None) -> str | None:
    """Whose share of the scan line a read's scans take (`ScanLine.slot`): the acting user when
    signed in (`user:<auth collection id, or "admins">:<user id>`, so an API key counts as the user who
    made it), else the client's address as the rate limit sees it (`ip:<address>`); None when the
    read is for no client (maintenance, realtime fan-out)."""
    if principal is not None:
        return f"user:{principal.collection_id or 'admins'}:{principal.user_id}"
    return None if client_ip is None else f"ip:{client_ip}"


class RecordPages:
    """Pages of list queries over `records`, through `result_sets` when given (see the module
    docstring). `flights` shares the scans of concurrent identical misses (the read cache's own)."""

    def __init__(self, records: RecordRepository, result_sets: ResultSetCache | None,
                 flights: SingleFlight) -> None:
        self._records = records
        self._result_sets = result_sets
        self._flights = flights

    async def page(self, collection: Collection, query: dict[str, Any], order: SortOrder, page: int,
                   per_page: int, skip_total: bool, stamp: str | None, *,
                   client: str | None = None) -> tuple[list[Record], int]:
        """Page `page` (1-based) of `per_page` records of `query` in `order`, and the total (-1 with
        `skip_total`). `stamp`: the read cache's stamp the answer is computed under (None: no cache, or
        Redis did not answer). `client`: whose share of the scan line its scans take (`scan_client`).
        No query at all for MATCH_NOTHING. Raises InvalidFilter (the server refused the query) and
        ServiceUnavailable (the scan line, or the client's share of it, is full)."""
        if query == MATCH_NOTHING:
            return [], 0
        result_sets = self._result_sets
        if stamp is None or result_sets is None or not await result_sets.enabled():
            return await self.paged_by_database(collection, query, order, page, per_page, skip_total, client=client)
        current = base_stamp(stamp)
        key = entry_key(collection.name, "ids", collection.id, query, order)
        start, stop = (page - 1) * per_page, page * per_page
        cached = await result_sets.slice(key, current, start, stop)
        if cached is None:  # a miss: one scan for every concurrent request of this query
            async def scan() -> list[Any] | None:
                ids = await self._records.find_ids(collection.id, query, order, RESULT_SET_MAX_IDS + 1,
                                                   client=client)
                kept = ids if len(ids) <= RESULT_SET_MAX_IDS else None
                await result_sets.store(collection.name, key, current, kept)
                return kept

            ids = await self._flights.run(f"{key}@{current}", scan)
            cached = OVER_BOUND if ids is None else IdSlice(list(ids[start:stop]), len(ids))
        if cached is OVER_BOUND:
            return await self.paged_by_database(collection, query, order, page, per_page, skip_total, client=client)
        return await self.records_in_order(collection, cached.ids), (-1 if skip_total else cached.total)

    async def arranged(self, collection: Collection, query: dict[str, Any], order: SortOrder,
                       arrange: Callable[[Sequence[Record], SortOrder], list[Record]], page: int,
                       per_page: int, *, client: str | None = None) -> tuple[list[Record], int]:
        """Page `page` of the records of `query` put in `order` by `arrange` (in memory: a sort on
        values some callers may not see), and the total. Raises InvalidFilter when more than
        MAX_ARRANGED_RECORDS records match."""
        found = await self._records.find_related(collection.id, query, order, MAX_ARRANGED_RECORDS + 1, client=client)
        if len(found) > MAX_ARRANGED_RECORDS:
            raise InvalidFilter(f"sort: a field with a view rule sorts at most {MAX_ARRANGED_RECORDS:,} matching "
                                "records; narrow the filter")
        start = (page - 1) * per_page
        return arrange(found, order)[start:start + per_page], len(found)

    async def records_in_order(self, collection: Collection, record_ids: Sequence[Any]) -> list[Record]:
        """The records of `record_ids` in that order (one `_id $in` look-up; ids of records deleted
        meanwhile are left out)."""
        if not record_ids:
            return []
        found = {record.id: record for record in await self._records.find_by_ids(collection.id, record_ids)}
        return [found[i] for i in record_ids if i in found]

    async def paged_by_database(self, collection: Collection, query: dict[str, Any], order: SortOrder, page: int,
                                per_page: int, skip_total: bool, *,
                                client: str | None = None) -> tuple[list[Record], int]:
        """One page of `query` by `skip` and `limit`, and its total by a count (-1 with `skip_total`,
        without the count); both at once, in `client`'s share of the scan line."""
        skip = (page - 1) * per_page
        if skip_total:
            return await self._records.find(collection.id, query, order, skip, per_page, client=client), -1
        items, total = await asyncio.gather(
            self._records.find(collection.id, query, order, skip, per_page, client=client),
            self._records.count(collection.id, query, client=client),
        )
        return items, total
