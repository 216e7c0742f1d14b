"""Records (`/_/collections/{name}/records`): the records table and the record editor.

The table reads the same cached list as `GET /api/v1/collections/{name}/records`
(`services.records.list_json`: the read cache's page as records' JSON) with the admin's Principal:
the filter grammar, sort, search, page and per_page are passed through unchanged, so the page shows
exactly what the API answers (InvalidFilter messages inline). Column choice is kept in the query string (`cols`).

A collection past the embedded server's envelope (cms.services.content.envelope) gets a notice above
the table, in embedded mode only. Deleting asks first; files are served for previews. The editor is
record_editor.py. The table updates itself while the page is open (records_live.py: htmx's SSE extension re-fetches
`records/table.html`, the part of the page below the query forms, on `records-changed`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from aiohttp import web

from cms.admin_ui.common import (
    PREFIX,
    ErrorMessage,
    admin_page,
    error_message,
    flash,
    redirect,
    render,
)
from cms.admin_ui.views import record_drafts, record_versions, records_live, relations, view_as
from cms.admin_ui.views.record_editor import create, edit, new, record_json_of, update
from cms.admin_ui.views.record_files import FileShown, table_files
from cms.admin_ui.views.relations import RelationTarget, chosen, expand_view, relation_targets
from cms.errors import CmsError
from cms.models import Collection, FieldSpec, Page, Principal
from cms.services.content.fields import value_list
from cms.services.content.records import DEFAULT_PER_PAGE, MAX_PER_PAGE
from cms.services.representation.record_view import RecordView
from cms.web.context import services
from cms.web.files import file_headers

SYSTEM_COLUMNS = ("created", "updated")
DRAFT_COLUMNS = ("status", "scheduled_at")
"""The columns a collection with drafts adds (its table lists working copies)."""
MAX_SEARCH_CHARS = 500
CELL_CHARS = 120
_INT = re.compile(r"[+-]?\d+")


# --- the table ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileCell:
    """A file column's cell: the files shown (thumbnails of images, names of others) and how many more."""

    files: list[FileShown]
    more: int


@dataclass
class TableState:
    """What the table shows, as read from (and written back to) the query string."""

    filter: str = ""
    search: str = ""
    sort: str = ""
    page: int = 1
    per_page: int = DEFAULT_PER_PAGE
    cols: list[str] | None = None  # None: every column
    problems: dict[str, str] = field(default_factory=dict)

    def params(self, **changes: Any) -> list[tuple[str, str]]:
        """The query string's pairs of this state with `changes` (defaults left out)."""
        values = {"filter": self.filter, "search": self.search, "sort": self.sort,
                  "page": str(self.page), "per_page": str(self.per_page)}
        values.update({k: str(v) for k, v in changes.items() if k != "cols"})
        out = [(k, v) for k, v in values.items() if v and not (k == "page" and v == "1")
               and not (k == "per_page" and v == str(DEFAULT_PER_PAGE))]
        cols = changes.get("cols", self.cols)
        if cols is not None:
            out += [("cols", "")] + [("cols", c) for c in cols]
        return out


def _int_param(query: Any, name: str, default: int, high: int, problems: dict[str, str], *, clamp: bool) -> int:
    """A positive whole number from the query string: above `high` it is clamped (`clamp`, as the
    API clamps per_page) or reported; below 1 or not a number it is reported (the API's 422)."""
    raw = query.get(name, "").strip()
    if not raw:
        return default
    if not _INT.fullmatch(raw) or int(raw) < 1 or (int(raw) > high and not clamp):
        problems[name] = f"{name} must be a whole number from 1 to {high}."
        return default
    return min(int(raw), high)


def table_state(request: web.Request, collection: Collection) -> TableState:
    """The table's state from the query string (bad page or per_page values are reported, not used)."""
    query = request.query
    problems: dict[str, str] = {}
    state = TableState(
        filter=query.get("filter", ""), search=query.get("search", ""), sort=query.get("sort", "").strip(),
        page=_int_param(query, "page", 1, 1_000_000, problems, clamp=False),
        per_page=_int_param(query, "per_page", DEFAULT_PER_PAGE, MAX_PER_PAGE, problems, clamp=True),
        problems=problems,
    )
    if len(state.search) > MAX_SEARCH_CHARS:
        problems["search"] = f"search may have at most {MAX_SEARCH_CHARS} characters."
        state.search = state.search[:MAX_SEARCH_CHARS]
    if "cols" in query:
        known = [f.name for f in collection.fields] + ([] if collection.view is not None else list(SYSTEM_COLUMNS)) + (
            list(DRAFT_COLUMNS) if collection.drafts else [])
        chosen = set(query.getall("cols"))
        state.cols = [c for c in known if c in chosen]
    return state


def _cell(spec: FieldSpec | None, value: Any) -> str:
    """A value as the table's text (escaped by the template): lists joined, JSON compact, cut short."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and spec is not None and spec.type != "json":
        text = ", ".join(str(v) for v in value)
    elif isinstance(value, dict | list):
        text = orjson.dumps(value).decode()
    else:
        text = str(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


def _relation_cell(item: dict[str, Any], target: RelationTarget) -> list[tuple[str, str, bool]]:
    """A relation's cell: (id, text, found) of each related record, the text its label, or its id
    when it is hidden or missing (found False: shown greyed), cut like `_cell` past CELL_CHARS."""
    out: list[tuple[str, str, bool]] = []
    used = 0
    for record_id, label in chosen(value_list(item.get(target.field)), item, target):
        text = label if label is not None else record_id
        if used + len(text) > CELL_CHARS:
            out.append((record_id, text[:max(CELL_CHARS - used - 1, 0)] + "…", label is not None))
            break
        out.append((record_id, text, label is not None))
        used += len(text) + 2  # ", "
    return out


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records: one page of the records table, from the same cached
    list as the REST list (`list_json`)."""
    svc = services(request)
    collection = await svc.catalog.by_name(request.match_info["collection_name"])
    state = table_state(request, collection)
    position = await svc.realtime.watch_from()  # taken before the read: the live stream starts from it
    error: ErrorMessage | None = None
    status = 200
    listing: Page[dict[str, Any]] = Page(items=[], total=0, page=state.page, per_page=state.per_page)
    specs = {f.name: f for f in collection.fields}
    system = [] if collection.view is not None else (  # a view's records are groups
        [*SYSTEM_COLUMNS, *DRAFT_COLUMNS] if collection.drafts else list(SYSTEM_COLUMNS))
    columns = state.cols if state.cols is not None else [*specs, *system]
    targets = await relation_targets(svc, collection, columns)
    if state.problems:
        error, status = ErrorMessage(detail="Invalid table parameters", code="validation_error",
                                     fields={k: [v] for k, v in state.problems.items()}), 422
    else:
        try:
            listing = await _listing(request, collection, state, principal, expand_view(targets))
        except CmsError as exc:
            if exc.status == 404:
                raise
            error, status = error_message(exc), exc.status
    total = listing.total
    pages = max(1, math.ceil(total / state.per_page)) if total > 0 else 1
    files = await table_files(request, collection, columns, listing.items)

    def cell(item: dict[str, Any], column: str) -> Any:
        if column in targets:
            return _relation_cell(item, targets[column])
        if (item["id"], column) in files:
            return FileCell(*files[(item["id"], column)])
        return _cell(specs.get(column), item.get(column))

    rows = [(item["id"], [(c, cell(item, c)) for c in columns]) for item in listing.items]

    def url(**changes: Any) -> str:
        return f"{PREFIX}/collections/{collection.name}/records?{urlencode(state.params(**changes))}"

    def sort_link(column: str) -> tuple[str, str]:
        """(url, current direction '', 'asc' or 'desc') of a column header."""
        current = state.sort.split(",")[0] if state.sort else ""
        if current == column:
            return url(sort="-" + column, page=1), "asc"
        if current == "-" + column:
            return url(sort=column, page=1), "desc"
        return url(sort=column, page=1), ""

    # the live stream's refresh asks for the table alone (htmx targets #records-view)
    refresh = request.headers.get("HX-Request") == "true" and request.headers.get("HX-Target") == "records-view"
    # large for the embedded server: the whole page says so (not the live refresh of the table)
    # (an unfiltered page's total counts them all: an admin's list rule hides none)
    everything = error is None and not state.filter and not state.search
    envelope = None if refresh or collection.view is not None else await svc.envelope.check(
        collection, known_records=total if everything else None)
    live_url = None if error else f"{records_live.live_path(collection.name)}?after={quote(position)}"
    return await render(
        request, "records/table.html" if refresh else "records/index.html", status=status,
        collection=collection, state=state, error=error, live_url=live_url, table_url=url(),
        columns=columns, all_columns=[*specs, *system], rows=rows, total=total, pages=pages,
        url=url, sort_link=sort_link, per_page_choices=(10, 30, 50, 100),
        related={name: target.collection.name for name, target in targets.items()}, envelope=envelope,
    )


async def _listing(request: web.Request, collection: Collection, state: TableState, principal: Principal,
                   view: RecordView) -> Page[dict[str, Any]]:
    """The table's page: the REST list's (read cache), or in a collection with drafts the working copies
    (`?draft=true`, with their status), so drafts never published are listed too."""
    svc = services(request)
    if not collection.drafts:
        return await svc.records.list_json(
            collection.name, page=state.page, per_page=state.per_page, sort=state.sort or None,
            filter_expr=state.filter or None, search=state.search or None, principal=principal, view=view)
    body = await svc.drafts.reads.list_json(
        principal, collection.name, page=state.page, per_page=state.per_page, sort=state.sort or None,
        filter_expr=state.filter or None, search=state.search or None, view=view)
    return Page(items=body["items"], total=body["total"], page=body["page"], per_page=body["per_page"])


@admin_page
async def confirm_delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/{record_id}/delete: asks before deleting (no script dialog)."""
    collection = await services(request).catalog.by_name(request.match_info["collection_name"])
    record = await record_json_of(request, principal, collection, request.match_info["record_id"])
    return await render(request, "records/delete.html", collection=collection, record=record)


@admin_page
async def delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/records/{record_id}/delete: delete the record (the form asks first)."""
    name = request.match_info["collection_name"]
    await services(request).records.delete(principal, name, request.match_info["record_id"])
    response = redirect(f"{PREFIX}/collections/{name}/records", request)
    flash(response, request, "Record deleted", "success")
    return response


@admin_page
async def file(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/{record_id}/files/{file_id}: the file (or with `thumb`, its
    thumbnail; `token`, the page's file token: a protected field's files need it) for a preview or a
    link, through the same file service (and headers: nosniff, inline only for safe types) as
    `GET /api/v1/files/{file_id}`."""
    query = request.query
    content = await services(request).files.open(principal, request.match_info["file_id"],
                                                 token=query.get("token"), thumb=query.get("thumb"))
    headers = file_headers(content)
    if content.data is not None:
        return web.Response(body=content.data, headers=headers)
    response = web.StreamResponse(headers=headers)
    response.content_length = content.file.size
    chunks = content.chunks(0, content.file.size)
    try:
        await response.prepare(request)
        async for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
    except ConnectionResetError:
        pass
    finally:
        await chunks.aclose()
    return response


def routes() -> list[web.RouteDef]:
    """The records screen's routes."""
    base = PREFIX + "/collections/{collection_name}/records"
    return [
        web.get(base, index, name="admin_ui.records"),
        web.get(base + "/new", new),
        web.post(base + "/new", create),
        *records_live.routes(),  # before /{record_id}
        web.get(base + "/{record_id}", edit),
        web.post(base + "/{record_id}", update),
        web.get(base + "/{record_id}/delete", confirm_delete),
        web.post(base + "/{record_id}/delete", delete),
        web.get(base + "/{record_id}/files/{file_id}", file),
        *relations.routes(),
        *view_as.routes(),
        *record_versions.routes(),
        *record_drafts.routes(),
    ]

