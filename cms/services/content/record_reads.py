"""Records, the read side: list (page, filter, sort, search) and view, through the read cache
(spec: Records; decisions.md: Records; issue "Fast reads"). `RecordService` (records.py) adds the
writes. How a record becomes JSON, and the cached bytes, is `cms.services.representation.records`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cms.errors import BadRequest, Forbidden, NotFound, Unauthorized
from cms.models import Collection, Page, Principal, Record, SortSpec
from cms.services import access as actions
from cms.services.access import Access, acts_as_admin, check, field_view, require_admin
from cms.services.caching.catalog import Catalog
from cms.services.caching.read_cache import CachedBody, ReadCache, entry_key, stamp_epoch
from cms.services.caching.result_sets import ResultSetCache
from cms.services.caching.single_flight import SingleFlight
from cms.services.content.aggregates import AggregateReads
from cms.services.content.expansion import NOTHING, Expansion, resolve
from cms.services.content.locales import localization
from cms.services.content.read_through import Prepared, ReadThrough
from cms.services.content.record_checks import permitted_record
from cms.services.content.record_pages import RecordPages, scan_client, sort_order
from cms.services.content.record_sight import RecordSight, sight
from cms.services.content.views.groups import ViewGroups
from cms.services.content.views.reads import ViewReads, view_source
from cms.services.representation import records as represent
from cms.services.representation.record_view import FULL, RecordView
from cms.store.records import RecordRepository

MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 30

# Aliases for annotations inside RecordReads, whose `list` method shadows the builtin there.
SortOrder = SortSpec
Records = list[Record]
Present = Callable[[Record], Awaitable[dict[str, Any]]]
"""How a written record is answered: its JSON as a view shows it (`RecordReads.presenter`)."""


@dataclass(frozen=True)
class Presenter:
    """How a written record is answered (`RecordReads.presenter`): `await presenter(record)` is its
    JSON; `language` the locale its localized fields answer (`Content-Language`)."""

    show: Present
    language: str

    async def __call__(self, record: Record) -> dict[str, Any]:
        """The record's JSON as the view shows it."""
        return await self.show(record)



class RecordReads:
    """Reads of the records of user collections, under the collection's list and view rules
    (`access.check`); the base of `RecordService`."""

    def __init__(self, catalog: Catalog, records: RecordRepository, *,
                 cache: ReadCache | None = None, result_sets: ResultSetCache | None = None) -> None:
        """`result_sets`: the result-set cache beside `cache` (lists then page through it)."""
        self._catalog = catalog
        self._records = records
        self._cache = cache
        self._flights = SingleFlight()
        self._pages = RecordPages(records, result_sets if cache is not None else None, self._flights)
        self.reads = ReadThrough(catalog, cache, self._flights)
        """The read-through of the read cache these reads share with views and aggregations."""
        self.views = ViewReads(catalog, ViewGroups(records, cache.changes if cache is not None else None))
        """The reads of view collections' records, which the records endpoints answer too."""
        self.aggregates = AggregateReads(records, self.reads)
        """Aggregations of a collection's records (`GET .../aggregate`)."""

    async def list_body(
        self,
        collection_name: str,
        *,
        page: int = 1,
        per_page: int = DEFAULT_PER_PAGE,
        sort: str | None = None,
        filter_expr: str | None = None,
        search: str | None = None,
        skip_total: bool = False,
        principal: Principal | None = None,
        view: RecordView = FULL,
        client_ip: str | None = None,
    ) -> CachedBody:
        """`list` as the API sends it: the JSON body `{items, total, page, per_page}` (`total` -1 with
        `skip_total`), each record as `view` shows it (`expand`, `fields`), served from the read cache
        when an entry computed under the same stamp, query, view and access decisions exists, else
        computed once for all identical concurrent reads (`SingleFlight`) and stored; computed from
        the query's result set (`RecordPages`: one scan for every page of a query). Its scans take
        the share of the scan line of `principal`, or without one of `client_ip` (the client's
        address as the rate limit sees it; `scan_client`). Raises what `list` raises, InvalidFilter
        for an expand path that is not a relation, and ServiceUnavailable (503, `Retry-After`) when
        the process's scan line, or the client's share of it, is full."""
        per_page = min(per_page, MAX_PER_PAGE)
        client = scan_client(principal, client_ip)

        def prepare(collection: Collection, expansion: Expansion = NOTHING) -> Prepared:
            if collection.view is not None:
                return self.views.prepare_list(collection, principal, page=page, per_page=per_page, sort=sort,
                                               filter_expr=filter_expr, search=search, skip_total=skip_total,
                                               shown=view, client=client)
            access = check(principal, collection, actions.LIST, locale=view.locale)
            query = self.query(collection, filter_expr=filter_expr, search=search, access=access)
            order = self._order(access, sort)
            parts: list[Any] = [collection.id, query, order, page, per_page, skip_total, access.fields.key_parts(),
                                access.localization.key_parts()]
            if not view.full:
                parts += [view.parts(), expansion.key_parts()]
            key = entry_key(collection.name, "list", *parts)

            async def compute(stamp: str | None) -> bytes:
                items, total = await self._page(access, query, order, page, per_page, skip_total, stamp, client)
                expanded = await expansion.load(self._records, items, client=client) if expansion.segments else ()
                return represent.record_page_bytes(Page(items=items, total=total, page=page, per_page=per_page),
                                                   view, expanded)

            return key, compute, access.shared and expansion.shared, access.localization.language

        if view.expand:
            return await self._read_expanded(collection_name, view, principal, prepare)
        return await self._read_through(collection_name, prepare)

    async def get_body(self, collection_name: str, record_id: str, *, principal: Principal | None = None,
                       view: RecordView = FULL, client_ip: str | None = None) -> CachedBody:
        """`get` as the API sends it: the record's JSON as `view` shows it, through the read cache like
        `list_body` (a hidden or missing record is never cached; `expand`'s queries take the scan line
        like `list_body`'s). Raises what `get` raises, InvalidFilter for an expand path that is not a
        relation, and ServiceUnavailable (the scan line, or the client's share of it, is full)."""
        client = scan_client(principal, client_ip)

        def prepare(collection: Collection, expansion: Expansion = NOTHING) -> Prepared:
            if collection.view is not None:
                return self.views.prepare_get(collection, record_id, principal, shown=view, client=client)
            access = check(principal, collection, actions.VIEW, locale=view.locale)
            access.require()
            parts: list[Any] = [collection.id, record_id, *access.key_parts()]
            if not view.full:
                parts += [view.parts(), expansion.key_parts()]
            key = entry_key(collection.name, "get", *parts)

            async def compute(stamp: str | None) -> bytes:
                record = access.redact(await self._visible(access, record_id))
                expanded = await expansion.load(self._records, [record], client=client) if expansion.segments else ()
                return represent.record_bytes(record, view, expanded)

            return key, compute, access.shared and expansion.shared, access.localization.language

        if view.expand:
            return await self._read_expanded(collection_name, view, principal, prepare)
        return await self._read_through(collection_name, prepare)

    async def presenter(self, collection_name: str, view: RecordView, principal: Principal | None) -> Presenter:
        """How a record of `collection_name` written for `principal` is answered under `view`: ask
        before the write, so a bad expand path or locale refuses it before anything changes. The answer
        leaves out what the caller's field rules hide, and answers localized fields in `view.locale`.
        Raises NotFound (collection), InvalidFilter (an expand path that is not a relation) or
        BadRequest (a locale that is not configured)."""
        collection = await self._catalog.by_name(collection_name)
        fields = field_view(principal, collection)
        asked = localization(collection, view.locale)
        if view.full:
            async def full(record: Record) -> dict[str, Any]:
                shown = asked.localize(fields.redact(record))
                if shown is record:  # rendered once, for its event and this answer
                    return represent.written_record_json(record)
                return represent.record_json(shown)
            return Presenter(full, asked.language)
        expansion = await resolve(self._catalog, collection, view, principal)

        async def present(record: Record) -> dict[str, Any]:
            shown = fields.redact(record)
            expanded = await expansion.load(self._records, [shown]) if expansion.segments else ()
            return represent.record_json(asked.localize(shown), view, expanded)

        return Presenter(present, asked.language)

    async def list_json(
        self,
        collection_name: str,
        *,
        page: int = 1,
        per_page: int = DEFAULT_PER_PAGE,
        sort: str | None = None,
        filter_expr: str | None = None,
        search: str | None = None,
        principal: Principal | None = None,
        view: RecordView = FULL,
    ) -> Page[dict[str, Any]]:
        """`list_body` read back: the same cached page, each record as `represent.record_json`
        shows it under `view` (for callers that render records other than as the API's bytes: the
        admin UI). Raises what `list_body` raises."""
        cached = await self.list_body(collection_name, page=page, per_page=per_page, sort=sort,
                                      filter_expr=filter_expr, search=search, principal=principal, view=view)
        return represent.read_record_page(cached.body)

    async def get_json(self, collection_name: str, record_id: str, *, principal: Principal | None = None,
                       view: RecordView = FULL) -> dict[str, Any]:
        """`get_body` read back: the same cached record as `represent.record_json` shows it under
        `view`. Raises what `get_body` raises."""
        cached = await self.get_body(collection_name, record_id, principal=principal, view=view)
        return represent.read_record(cached.body)

    async def _read_expanded(self, collection_name: str, view: RecordView, principal: Principal | None,
                             prepare: Callable[[Collection, Expansion], Prepared]) -> CachedBody:
        """The body of a read with `expand`: the definitions of every collection it reaches as of this
        request's catalog epoch, and the read cache's stamp covering their versions too (one `MGET`),
        so a write to any of them, or a rule change (the epoch), makes the entry stale. When the
        epoch moved between the two, the body is served and not kept."""
        collection, epoch = await self._catalog.by_name_and_epoch(collection_name)
        expansion = await resolve(self._catalog, collection, view, principal)
        prepared = prepare(collection, expansion)
        if self._cache is None:
            return await self.reads.serve(prepared, None, None)
        stamp, cached = await self._cache.lookup(collection.name, prepared[0], expansion.collections())
        if stamp is not None and stamp_epoch(stamp) != epoch:
            stamp, cached = None, None
        return await self.reads.serve(prepared, stamp, cached)

    async def _read_through(self, collection_name: str, prepare: Callable[[Collection], Prepared]) -> CachedBody:
        """The body of a read of `collection_name` through the read cache (`ReadThrough.read`; a view's
        stamp covers its source's version too)."""
        return await self.reads.read(collection_name, prepare, view_source)

    async def list(
        self,
        collection_name: str,
        *,
        page: int = 1,
        per_page: int = DEFAULT_PER_PAGE,
        sort: str | None = None,
        filter_expr: str | None = None,
        search: str | None = None,
        principal: Principal | None = None,
    ) -> Page[Record]:
        """One page of the records of the collection that the list rule lets `principal` (None: no
        credentials) see, and the total for the same query.

        `page` >= 1, `per_page` 1..100 (larger values are clamped). `sort` is `a,-b`; `filter_expr`
        follows decisions.md's grammar; `search` requires every word in some text, editor, email or
        url field. Its scans take `principal`'s share of the scan line (`scan_client`). Raises
        NotFound (collection), InvalidFilter (syntax, unknown field, bad value), Unauthorized /
        Forbidden (the list rule refuses outright), ServiceUnavailable (the scan line is full)."""
        collection = await self._catalog.by_name(collection_name)
        access = check(principal, collection, actions.LIST)
        query = self.query(collection, filter_expr=filter_expr, search=search, access=access)
        order = self._order(access, sort)
        per_page = min(per_page, MAX_PER_PAGE)
        items, total = await self._page(access, query, order, page, per_page, False, None,
                                        scan_client(principal, None))
        return Page(items=items, total=total, page=page, per_page=per_page)

    async def explain(self, collection_name: str, *, page: int = 1, per_page: int = DEFAULT_PER_PAGE,
                      sort: str | None = None, filter_expr: str | None = None, search: str | None = None,
                      principal: Principal | None = None, view: RecordView = FULL) -> dict[str, Any]:
        """`list_body`'s page (read by `skip` and `limit`, never from a cache) as JSON, plus `explain`:
        how the database ran that page's query (`{index, collection_scan, docs_examined, returned}`).
        Admins only. Raises Unauthorized / Forbidden, BadRequest (the server cannot explain; a view),
        and what `list_body` raises."""
        if not acts_as_admin(principal):
            raise Unauthorized() if principal is None else Forbidden("Only admins may explain a list query")
        collection = await self._catalog.by_name(collection_name)
        if collection.view is not None:
            raise BadRequest(f"'{collection.name}' is a view: its records are computed, not queried")
        access = check(principal, collection, actions.LIST, locale=view.locale)
        query, order = self.query(collection, filter_expr=filter_expr, search=search, access=access), self._order(
            access, sort)
        per_page, client = min(per_page, MAX_PER_PAGE), scan_client(principal, None)
        items, total = await self._pages.paged_by_database(collection, query, order, page, per_page, False,
                                                           client=client)
        plan = await self._records.explain_find(collection.id, query, order, (page - 1) * per_page, per_page,
                                                client=client)
        expansion = await resolve(self._catalog, collection, view, principal) if view.expand else NOTHING
        expanded = await expansion.load(self._records, items, client=client) if expansion.segments else ()
        return {**represent.record_page(Page(items=items, total=total, page=page, per_page=per_page), view, expanded),
                "explain": represent.query_plan(plan)}

    async def _page(self, access: Access, query: dict[str, Any], order: SortOrder, page: int, per_page: int,
                    skip_total: bool, stamp: str | None, client: str | None) -> tuple[Records, int]:
        """One page of a list and its total, each record as the caller may see it, its scans in
        `client`'s share of the scan line. A sort on a field the caller sees on some records only is
        done in memory over at most MAX_ARRANGED_RECORDS matching records (hidden values sort as
        null). Raises what `RecordPages.page` raises, and InvalidFilter past that bound."""
        if access.sort_guards(order):
            items, total = await self._pages.arranged(access.collection, query, order, access.arrange,
                                                      page, per_page, client=client)
        else:
            items, total = await self._pages.page(access.collection, query, order, page, per_page, skip_total, stamp,
                                                  client=client)
        return [access.redact(item) for item in items], (-1 if skip_total else total)

    def query(self, collection: Collection, *, filter_expr: str | None, search: str | None,
              access: Access) -> dict[str, Any]:
        """The MongoDB query for a filter and a search over `collection` (both optional), limited to
        the records the list rule (`access`) permits, each term on a field with a view rule joined to
        it (`Access.list_query`). Raises InvalidFilter, or `access.refusal()` when the list rule
        refuses outright."""
        return access.list_query(filter_expr=filter_expr, search_text=search,
                                 text_index=self._records.capabilities.text_index)

    def _order(self, access: Access, sort: str | None) -> SortOrder:
        """The sort of a list or export: `sort` (default `created`), then `id` in the direction of
        the first key, so the order is total and `created` / `-created` are the `created_id` index
        walked forward or backward (no in-memory sort, on MongoDB as on the embedded server).
        Raises InvalidFilter (unknown field)."""
        return sort_order(access, sort)

    async def get(self, collection_name: str, record_id: str, *, principal: Principal | None = None) -> Record:
        """One record that the view rule lets `principal` (None: no credentials) see. Raises
        NotFound (collection; record, or a record the rule hides), Unauthorized (no credentials,
        and the rule refuses or depends on the record) or Forbidden (refused outright)."""
        collection = await self._catalog.by_name(collection_name)
        view = check(principal, collection, actions.VIEW)
        return view.redact(await self._visible(view, record_id))

    async def sight(self, principal: Principal, collection_name: str, record_id: str,
                    viewer: Principal | None) -> RecordSight:
        """What `viewer` (None: anonymous) would see of one record (`record_sight.sight`), shown to an
        admin `principal`. Raises Forbidden (not an admin) or NotFound (collection or record)."""
        require_admin(principal)
        collection = await self._catalog.by_name(collection_name)
        record = await self._records.get(collection.id, record_id)
        if record is None:
            raise NotFound("Record not found")
        return sight(viewer, collection, record)

    async def _visible(self, view: Access, record_id: str) -> Record:
        """The record, if the view rule `view` lets its principal see it (one `_id` look-up).
        Raises `view.refusal()` (refused outright) or `view.hidden()` (missing or hidden)."""
        return await permitted_record(self._records, view, None, record_id)

    @property
    def repository(self) -> RecordRepository:
        """The record store this service writes to and reads from (shared with the collection
        service and the user systems): for maintenance code, and for tests that check what was
        stored."""
        return self._records

    def reads_waiting(self) -> int:
        """How many record reads are inside a shared computation now (`SingleFlight.waiting`: the
        caller running each one plus those that joined it). Issue "Fast reads", item 3."""
        return self._flights.waiting()
