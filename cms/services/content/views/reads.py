"""Reads of a view collection's records (decisions.md, Aggregation and view collections): listed,
filtered, sorted and paged like records, under the view's own list and view rules, through the read
cache with a stamp that covers the source's version (`ReadThrough.read`'s `related`), so a write to
the source makes every cached answer of the view stale and the next read computes it from the
view's current groups (`ViewGroups`). `RecordReads` hands view reads here (`prepare_list`,
`prepare_get`), so the records endpoints serve views unchanged; writes are refused by
`access.check` (405).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from cms.errors import InvalidFilter
from cms.models import Collection, Principal
from cms.services import access as actions
from cms.services.access import check
from cms.services.access.aggregation import view_rows
from cms.services.caching.catalog import Catalog
from cms.services.caching.read_cache import entry_key, stamp_epoch
from cms.services.content.read_through import Prepared
from cms.services.content.views.definition import ViewShape, view_shape
from cms.services.content.views.groups import Row, ViewGroups
from cms.services.representation import records as represent
from cms.services.representation.record_view import RecordView

SHAPES_KEPT = 256
"""Resolved view definitions one process remembers (by view and source version)."""


def view_source(collection: Collection) -> Sequence[str]:
    """The collections a read of `collection` shows data of besides itself: a view's source."""
    return () if collection.view is None else (collection.view.source,)


class ViewReads:
    """Reads of view collections' records: definitions from `catalog`, rows from `groups`."""

    def __init__(self, catalog: Catalog, groups: ViewGroups) -> None:
        self._catalog = catalog
        self.groups = groups
        self._shapes: OrderedDict[tuple[Any, ...], tuple[Collection, ViewShape]] = OrderedDict()

    def prepare_list(self, view: Collection, principal: Principal | None, *, page: int, per_page: int,
                     sort: str | None, filter_expr: str | None, search: str | None, skip_total: bool,
                     shown: RecordView, client: str | None) -> Prepared:
        """A list of `view`'s records as `RecordReads.list_body` prepares one: its cache key, how to
        compute the page (`{items, total, page, per_page}`, each record `{id, <keys>, <aggregates>}`
        narrowed to `fields`) and whether it is shared. Raises the list rule's refusal (401/403),
        InvalidFilter (a filter or sort that does not fit the view's fields, `expand`, or `search`: a
        view's records have no text to search, filter them)."""
        access = check(principal, view, actions.LIST, locale=shown.locale)
        access.require()
        self._check_shown(shown)
        if search is not None and search.strip():
            raise InvalidFilter("search: a view's records are groups, with no text to search; use filter")
        if filter_expr is not None and filter_expr.strip():
            access.filter(filter_expr)
        if sort is not None and sort.strip():
            access.sort(sort)
        key = entry_key(view.name, "list", view.id, view.version, filter_expr, sort, page, per_page, skip_total,
                        *access.key_parts(), shown.parts())

        async def compute(stamp: str | None) -> bytes:
            rows, shape = await self._rows(view, stamp, client)
            kept = view_rows(access, rows, filter_expr=filter_expr, sort=sort, default_order=shape.default_order)
            start = (page - 1) * per_page
            return represent.view_page_bytes(kept[start:start + per_page], view.fields, shown,
                                             total=-1 if skip_total else len(kept), page=page, per_page=per_page)

        return key, compute, access.shared, access.localization.language

    def prepare_get(self, view: Collection, record_id: str, principal: Principal | None, *, shown: RecordView,
                    client: str | None) -> Prepared:
        """One record of `view` as `RecordReads.get_body` prepares a read. Raises the view rule's
        refusal, and (computing) its `hidden()` error for a missing or hidden record."""
        access = check(principal, view, actions.VIEW, locale=shown.locale)
        access.require()
        self._check_shown(shown)
        key = entry_key(view.name, "get", view.id, view.version, record_id, *access.key_parts(), shown.parts())

        async def compute(stamp: str | None) -> bytes:
            rows, _ = await self._rows(view, stamp, client)
            found = next((row for row in rows if row["_id"] == record_id), None)
            if found is None or not access.allows_document(found):
                raise access.hidden()
            return represent.view_record_bytes(found, view.fields, shown)

        return key, compute, access.shared, access.localization.language

    @staticmethod
    def _check_shown(shown: RecordView) -> None:
        if shown.expand:
            raise InvalidFilter("expand: a view's records have no relations to expand")

    async def _rows(self, view: Collection, stamp: str | None, client: str | None) -> tuple[list[Row], ViewShape]:
        source, shape = await self.resolved(view, epoch=stamp_epoch(stamp) if stamp is not None else None)
        return await self.groups.rows(view, source, shape, stamp, client=client), shape

    async def resolved(self, view: Collection, *, epoch: str | None = None) -> tuple[Collection, ViewShape]:
        """`view`'s source (as of this request, or of the catalog `epoch` the read's stamp holds) and its
        definition resolved over it. Raises NotFound (no source) or InvalidFilter (the view no longer
        fits its source: an admin must change it)."""
        assert view.view is not None
        source = await self._catalog.by_name(view.view.source, epoch=epoch)
        key = (view.id, view.version, source.id, source.version)
        hit = self._shapes.get(key)
        if hit is not None:
            self._shapes.move_to_end(key)
            return hit
        shape = view_shape(view.view, source)
        if [(f.name, f.type) for f in shape.fields] != [(f.name, f.type) for f in view.fields]:
            raise InvalidFilter(f"The view '{view.name}' no longer fits its source '{source.name}'; an admin must "
                                "update it")
        self._shapes[key] = (source, shape)
        if len(self._shapes) > SHAPES_KEPT:
            self._shapes.popitem(last=False)
        return source, shape
