"""Relations in the admin UI: a relation shown by its related records' labels, and the editor's
picker that finds related records by searching them.

A related record's label is the value of the first text, editor, email or url field of its
collection's schema (`label_field`), else its id. The table and the editor read the labels through
`expand` on the read they already make (`RecordView` of the relation fields shown: one query per
relation field and page, under the related collection's view rule); a related record the admin
cannot see or that is gone is shown as its bare id, greyed.

The picker (`GET /_/collections/{name}/relations/{field}?q=...`, htmx) answers an HTML list of at
most PICK_RESULTS records of the related collection: `search` as `GET
/api/v1/collections/{related}/records?search=` answers it, with the caller's Principal (the list rule,
newest first). `q` may have at most MAX_PICK_QUERY_CHARS characters. app.js puts the chosen id in
the relation's input (one value, or up to `max_select`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, PageRefused, admin_page, error_message, render
from cms.errors import CmsError
from cms.models import Collection, Principal
from cms.services.content.fields import TEXT_TYPES, value_list
from cms.services.representation.record_view import FULL, MAX_EXPAND_PATHS, RecordView
from cms.web.context import services
from cms.wiring import Services

PICK_RESULTS = 10
"""Records one picker answer lists."""
MAX_PICK_QUERY_CHARS = 100
"""Longest picker search text (longer: 422, nothing read)."""
LABEL_CHARS = 80
"""A label longer than this is cut (with `…`)."""

Chosen = tuple[str, str | None]
"""(id, label) of a related record; label None when the record is hidden or missing."""


@dataclass(frozen=True)
class RelationTarget:
    """A relation field (`field`) and the collection its records point at (`collection`), whose
    first text-like field (`label_field`, None: there is none) labels them."""

    field: str
    collection: Collection
    label_field: str | None

    def label(self, related: Mapping[str, Any]) -> str:
        """The label of a related record's JSON: its label field's value (cut to LABEL_CHARS), else its id."""
        value = related.get(self.label_field) if self.label_field else None
        text = str(value).strip() if value is not None else ""
        if not text:
            return str(related.get("id", ""))
        return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def label_field(collection: Collection) -> str | None:
    """The first field of type text, editor, email or url of `collection`, or None."""
    return next((f.name for f in collection.fields if f.type in TEXT_TYPES), None)


async def relation_targets(svc: Services, collection: Collection,
                           names: Iterable[str] | None = None) -> dict[str, RelationTarget]:
    """The relation fields of `collection` (those in `names`, default all, in schema order, at most
    MAX_EXPAND_PATHS) whose related collection exists, by field name."""
    wanted = None if names is None else set(names)
    out: dict[str, RelationTarget] = {}
    for spec in collection.fields:
        if spec.type != "relation" or not spec.collection_id or (wanted is not None and spec.name not in wanted):
            continue
        target = await svc.catalog.find_by_id(spec.collection_id)
        if target is not None and len(out) < MAX_EXPAND_PATHS:
            out[spec.name] = RelationTarget(spec.name, target, label_field(target))
    return out


def expand_view(targets: Mapping[str, RelationTarget]) -> RecordView:
    """The view expanding each relation of `targets` (FULL when there are none)."""
    return RecordView(expand=tuple((name,) for name in targets)) if targets else FULL


def chosen(ids: Iterable[Any], record: Mapping[str, Any] | None, target: RelationTarget) -> list[Chosen]:
    """(id, label) of each of `ids`, labelled from the related records `record`'s `expand` holds
    for the relation (label None for an id it does not hold: hidden, missing or not saved yet)."""
    expanded = (record or {}).get("expand") or {}
    related = {r["id"]: r for r in value_list(expanded.get(target.field)) if isinstance(r, dict) and "id" in r}
    return [(str(i), target.label(related[i]) if i in related else None) for i in ids]


@admin_page
async def options(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/relations/{field}?q=: the picker's list (an HTML fragment) of the
    records of the related collection matching `q` (all when empty), newest first, at most
    PICK_RESULTS, read as the API's list with the caller's Principal. 404 for a field that is not a
    relation (or whose related collection is gone), 422 for a `q` longer than MAX_PICK_QUERY_CHARS,
    the service's status (and message) when it refuses."""
    svc = services(request)
    collection = await svc.catalog.by_name(request.match_info["collection_name"])
    field = request.match_info["field_name"]
    target = (await relation_targets(svc, collection, [field])).get(field)
    if target is None:
        raise PageRefused(404, f"{collection.name} has no relation field {field}.")
    query = request.query.get("q", "").strip()
    if len(query) > MAX_PICK_QUERY_CHARS:
        return await render(request, "records/relation_options.html", status=422, options=[], total=0,
                            error=f"Search with at most {MAX_PICK_QUERY_CHARS} characters.")
    try:
        listing = await svc.records.list_json(target.collection.name, per_page=PICK_RESULTS, sort="-created",
                                              search=query or None, principal=principal)
    except CmsError as exc:
        return await render(request, "records/relation_options.html", status=exc.status, options=[], total=0,
                            error=error_message(exc).detail)
    found = [(str(item["id"]), target.label(item)) for item in listing.items]
    return await render(request, "records/relation_options.html", options=found, total=listing.total,
                        error=None)


def routes() -> list[web.RouteDef]:
    """The picker's route."""
    return [web.get(PREFIX + "/collections/{collection_name}/relations/{field_name}", options)]
