"""`?draft=true` reads: the editors' view of a collection with drafts (decisions.md, Drafts, versions and
scheduled publishing; docs/concepts/drafts.md).

They read the working copies' store (every record of the collection has a working copy there: the
working copy where there is a pending change, else a copy of the published one), under the update rule
with the view rule (`access.draft_access`), with the same filter, sort, search, paging, `expand` and
`fields` as readers' lists. They never go through the read cache: saving a working copy emits no
record event, so no cache version would tell a cached working copy from the current one, and readers'
reads must not pay for editors'. The related records of `expand` are published copies, as readers see them.
"""

from __future__ import annotations

from typing import Any

from cms.models import Page, Principal, Record
from cms.services.access import draft_access
from cms.services.caching.catalog import Catalog
from cms.services.caching.single_flight import SingleFlight
from cms.services.content.drafts import WorkingCopies, require_drafts
from cms.services.content.expansion import Expansion, resolve
from cms.services.content.record_pages import RecordPages, scan_client, sort_order
from cms.services.representation import records as represent
from cms.services.representation.record_view import FULL, RecordView

MAX_PER_PAGE = 100
"""Largest `per_page` of a draft list (larger values are clamped), as for readers' lists."""


class DraftReads:
    """`?draft=true` list and view (see the module docstring) over `copies`' stores."""

    def __init__(self, catalog: Catalog, copies: WorkingCopies) -> None:
        self._catalog = catalog
        self._copies = copies
        self._pages = RecordPages(copies.working, None, SingleFlight())

    async def get_json(self, principal: Principal | None, collection_name: str, record_id: str, *,
                       view: RecordView = FULL) -> dict[str, Any]:
        """The working copy of `record_id` as `view` shows it, with its `status`, `published_at`,
        `scheduled_at` (and `schedule_error`). Raises NotFound (collection; record, or hidden by the
        rules), Unauthorized / Forbidden (the update rule refuses outright: 401 without credentials,
        403 otherwise), BadRequest (no drafts), InvalidFilter (an expand path that is not a relation)."""
        collection = await self._catalog.by_name(collection_name)
        require_drafts(collection)
        access = draft_access(principal, collection, locale=view.locale)
        record = access.redact(await self._copies.editable(access, None, record_id))
        expanded = await self._expand(collection_name, view, principal, [record])
        return represent.record_json(record, view, expanded)

    async def list_json(self, principal: Principal | None, collection_name: str, *, page: int = 1,
                        per_page: int = 30, sort: str | None = None, filter_expr: str | None = None,
                        search: str | None = None, skip_total: bool = False,
                        view: RecordView = FULL) -> dict[str, Any]:
        """One page of the working copies the caller may update and view, `{items, total, page,
        per_page}` as a readers' list answers; a caller whom the update rule refuses outright gets an
        empty page. Raises NotFound (collection), BadRequest (no drafts), InvalidFilter (filter,
        sort, expand) and ServiceUnavailable (the scan line is full)."""
        collection = await self._catalog.by_name(collection_name)
        require_drafts(collection)
        access = draft_access(principal, collection, locale=view.locale)
        per_page = min(per_page, MAX_PER_PAGE)
        if access.refused:
            return represent.record_page(Page(items=[], total=0, page=page, per_page=per_page), view)
        query = access.list_query(filter_expr=filter_expr, search_text=search, text_index=False)
        order = sort_order(access, sort)
        client = scan_client(principal, None)
        if access.sort_guards(order):
            items, total = await self._pages.arranged(collection, query, order, access.arrange, page, per_page,
                                                      client=client)
        else:
            items, total = await self._pages.paged_by_database(collection, query, order, page, per_page, skip_total,
                                                               client=client)
        shown = [access.redact(item) for item in items]
        expanded = await self._expand(collection_name, view, principal, shown)
        listing = Page(items=shown, total=-1 if skip_total else total, page=page, per_page=per_page)
        return represent.record_page(listing, view, expanded)

    async def _expand(self, collection_name: str, view: RecordView, principal: Principal | None,
                      records: list[Record]) -> Any:
        """The related (published) records `view.expand` asks for, as the readers' reads load them."""
        if not view.expand:
            return ()
        collection = await self._catalog.by_name(collection_name)
        expansion: Expansion = await resolve(self._catalog, collection, view, principal)
        return await expansion.load(self._copies.records, records) if expansion.segments else ()
