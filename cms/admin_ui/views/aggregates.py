"""The aggregate explorer (`/_/collections/{name}/aggregate`; decisions.md, Aggregation and view
collections): pick the fields to group by (a date field by value, year, month, day or hour) and the
aggregates (count, count_distinct, sum, avg, min, max) of a collection's records, with a filter and a
sort; see the groups as a table and one aggregate as a bar or line chart (inline SVG, `group_chart`);
and save them as a view collection.

The answer is the one `GET /api/v1/collections/{name}/aggregate` gives the admin
(`records.aggregates.aggregate_json`, the same read-through), and the page shows that request's URL. A
view's page (`{name}` is a view) explores its source with the view's definition filled in, and saves
the changed definition to the view (`PATCH /api/v1/collections/{id}` with `view`); a base or auth
collection's page creates a new view (`POST /api/v1/collections` with type `view`). Who may list and
view the view's records is chosen from three rules: admins only (the default), signed-in users, everyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, error_message, flash_redirect, render
from cms.admin_ui.group_chart import KINDS, group_chart
from cms.errors import CmsError, InvalidFilter
from cms.filters.grouping import DATE_UNITS, FUNCTIONS, parse_aggregates, parse_group_by
from cms.models import VIEW_TYPE, Collection, Principal
from cms.services.content.fields import is_multi
from cms.web.context import services
from cms.web.uploads import read_form

AGGREGATE_ROWS = 4
"""Aggregate pickers on the form."""
PER_PAGE = 100
"""Groups shown per page (the API's most)."""
ACCESS = {"admins": None, "signed-in": '@request.auth.id != ""', "everyone": ""}
"""Who may list and view a saved view's records: the choice -> its list and view rule."""
DATE_TYPES = ("date", "datetime")


@dataclass(frozen=True)
class Groupable:
    """A field the explorer offers to group by: its name and the choices of its picker ("" none,
    `value`, and the date units for a date)."""

    name: str
    choices: tuple[str, ...]


@dataclass
class Query:
    """The explorer's query as its form holds it: picks (field -> `value` or a unit), aggregate rows
    (function, field), filter, sort, chart, kind, page."""

    picks: dict[str, str]
    rows: list[tuple[str, str]]
    filter: str = ""
    sort: str = ""
    chart: str = ""
    kind: str = "bar"
    page: int = 1

    @property
    def group_by(self) -> str:
        """The `group_by` text of the picks."""
        return ",".join(name if pick == "value" else f"{name}:{pick}" for name, pick in self.picks.items() if pick)

    @property
    def aggregates(self) -> str:
        """The `aggregates` text of the rows."""
        return ",".join("count()" if fn == "count" else f"{fn}({of})" for fn, of in self.rows if fn)

    def api_url(self, name: str) -> str:
        """The REST request answering the same groups."""
        params = {"filter": self.filter, "group_by": self.group_by, "aggregates": self.aggregates, "sort": self.sort,
                  "page": str(self.page) if self.page > 1 else ""}
        return f"/api/v1/collections/{name}/aggregate?" + urlencode({k: v for k, v in params.items() if v},
                                                                   safe=":(),")


def groupables(collection: Collection) -> list[Groupable]:
    """The fields of `collection` its records may be grouped by: `created`, `updated`, then every schema
    field that holds one value and is not JSON."""
    fields = [("created", "datetime"), ("updated", "datetime")]
    fields += [(spec.name, spec.type) for spec in collection.fields if spec.type != "json" and not is_multi(spec)]
    return [Groupable(name, ("value", *DATE_UNITS) if kind in DATE_TYPES else ("value",)) for name, kind in fields]


def _query_of(request: web.Request, fields: list[Groupable]) -> Query:
    q = request.query
    picks = {f.name: q.get(f"g-{f.name}", "") for f in fields}
    picks = {name: pick for name, pick in picks.items() if pick}
    rows = [(q.get(f"fn-{i}", ""), q.get(f"of-{i}", "")) for i in range(AGGREGATE_ROWS)]
    page = q.get("page", "1")
    return Query(picks=picks, rows=rows, filter=q.get("filter", ""), sort=q.get("sort", ""), chart=q.get("chart", ""),
                 kind=q.get("kind", "bar") if q.get("kind") in KINDS else "bar",
                 page=int(page) if page.isdigit() and 0 < int(page) <= 1_000_000 else 1)


def _query_of_view(view: Collection) -> Query:
    """A view's definition as the explorer's form (keys it cannot pick are dropped)."""
    assert view.view is not None
    try:
        keys = parse_group_by(view.view.group_by)
        specs = parse_aggregates(view.view.aggregates)
    except CmsError:
        keys, specs = (), ()
    rows = [(s.function, s.field or "") for s in specs][:AGGREGATE_ROWS]
    padded = rows + [("", "")] * (AGGREGATE_ROWS - len(rows))
    return Query(picks={k.field: k.unit or "value" for k in keys}, rows=padded, filter=view.view.filter)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _number(value: Any) -> float | None:
    """A value the chart can draw: a number (a date or a text is not drawn)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


async def _page(request: web.Request, principal: Principal, collection: Collection, *, query: Query | None = None,
                error: CmsError | None = None, saving: Mapping[str, str] | None = None) -> web.Response:
    """The explorer of `collection` (a view: of its source, its definition filled in)."""
    svc = services(request)
    view = collection if collection.type == VIEW_TYPE else None
    source = await svc.catalog.by_name(view.view.source) if view is not None and view.view else collection
    fields = groupables(source)
    asked = any(key.startswith(("g-", "fn-")) for key in request.query)
    if query is None:
        query = _query_of(request, fields) if asked or view is None else _query_of_view(view)
    if not any(fn for fn, _ in query.rows):
        query.rows = [("count", ""), *query.rows[1:]]
    answer: dict[str, Any] | None = None
    problem = error_message(error) if error is not None else None
    try:
        answer = await svc.records.aggregates.aggregate_json(
            source.name, principal=principal, filter_expr=query.filter or None, group_by=query.group_by or None,
            aggregates=query.aggregates or None, sort=query.sort or None, page=query.page, per_page=PER_PAGE)
    except CmsError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        problem = problem or error_message(exc)
    keys = [name if pick == "value" else f"{name}:{pick}" for name, pick in query.picks.items()]
    names = ["count" if fn == "count" else f"{fn}_{of}" for fn, of in query.rows if fn]
    items = answer["items"] if answer else []
    chart_name = query.chart if query.chart in names else (names[0] if names else "")
    labels = [" · ".join(_text(v) for v in item["key"].values()) or "all" for item in items]
    chart = group_chart(chart_name, query.kind, labels, [_number(item.get(chart_name)) for item in items]) \
        if items and chart_name else None
    total = answer["total"] if answer else 0
    return await render(
        request, "aggregates/index.html", status=error.status if error is not None else 200,
        collection=collection, source=source, view=view, fields=fields, query=query, functions=FUNCTIONS,
        field_names=["id", *(f.name for f in fields)], keys=keys, names=names,
        rows=[([_text(item["key"].get(k)) for k in keys], [_text(item.get(n)) for n in names]) for item in items],
        total=total, pages=max(1, -(-total // PER_PAGE)), chart=chart, chart_name=chart_name, kinds=KINDS,
        api_url=query.api_url(source.name), error=problem, saving=saving or {}, access=list(ACCESS),
        page_url=lambda page: f"{request.path}?" + urlencode([*((k, v) for k, v in request.query.items()
                                                                if k != "page"), ("page", str(page))]))


@admin_page
async def explore(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/aggregate: the explorer (and its answer for the query string)."""
    collection = await services(request).catalog.by_name(request.match_info["collection_name"])
    return await _page(request, principal, collection)


@admin_page
async def save(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/aggregate/view: create a view of the explored groups (or, from a view's
    page, change its definition), then open its records."""
    svc = services(request)
    collection = await svc.catalog.by_name(request.match_info["collection_name"])
    form = await read_form(request)
    values = {key: str(form.get(key, "")) for key in ("view_name", "access", "filter", "group_by", "aggregates")}
    access = values["access"] if values["access"] in ACCESS else "admins"
    rule = ACCESS[access]
    source = collection.view.source if collection.view is not None else collection.name
    definition = {"source": source, "filter": values["filter"], "group_by": values["group_by"],
                  "aggregates": values["aggregates"]}
    try:
        if collection.type == VIEW_TYPE:
            saved = await svc.collections.update(principal, collection.id, view=definition,
                                                 rules={"list_rule": rule, "view_rule": rule})
        else:
            name = values["view_name"].strip()
            if not name:
                raise InvalidFilter("Name the view")
            saved = await svc.collections.create(principal, name, VIEW_TYPE, None, view=definition,
                                                 rules={"list_rule": rule, "view_rule": rule})
    except CmsError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        picks = dict(_picks_of(values["group_by"]))
        rows = [(s.function, s.field or "") for s in _specs_of(values["aggregates"])]
        query = Query(picks=picks, rows=(rows + [("", "")] * AGGREGATE_ROWS)[:AGGREGATE_ROWS], filter=values["filter"])
        return await _page(request, principal, collection, query=query, error=exc, saving={**values, "access": access})
    verb = "saved" if collection.type == VIEW_TYPE else "created"
    return flash_redirect(request, f"{PREFIX}/collections/{saved.name}/records", f"View {saved.name} {verb}")


def _picks_of(group_by: str) -> list[tuple[str, str]]:
    try:
        return [(k.field, k.unit or "value") for k in parse_group_by(group_by)]
    except CmsError:
        return []


def _specs_of(aggregates: str) -> list[Any]:
    try:
        return list(parse_aggregates(aggregates))
    except CmsError:
        return []


def routes() -> list[web.RouteDef]:
    """The explorer's routes."""
    path = PREFIX + "/collections/{collection_name}/aggregate"
    return [web.get(path, explore, name="admin_ui.aggregate"), web.post(path + "/view", save)]

