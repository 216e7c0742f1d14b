"""A record's version history (decisions.md, Drafts, versions and scheduled publishing: Versions):

- `GET /_/collections/{name}/records/{record_id}/versions`: the versions, newest first, each with its
  writer and time (`?page=`); the record's page loads it into its "Version history" section (htmx), and
  it is a page of its own without htmx;
- `GET .../versions/{n}`: version n beside the record as it is now, field by field, the changed fields
  marked, and a Restore button;
- `POST .../versions/{n}/restore`: the restore, back to the record's page with a message (a refusal,
  such as a relation whose record is gone, is shown on the version's page).

Every read and the restore are the API's service calls (`VersionService`) with the admin's Principal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, ErrorMessage, admin_page, error_message, flash_redirect, render
from cms.admin_ui.views.record_editor import record_json_of
from cms.admin_ui.views.view_as import shown
from cms.errors import CmsError, NotFound
from cms.models import Collection, Principal
from cms.services.representation.versions import record_version
from cms.web.context import services

PER_PAGE = 20
"""Versions per page of the history."""
MAX_PAGE = 50_000
"""Highest `?page=` (1,000 versions kept at most: anything past is an empty page)."""


@dataclass(frozen=True)
class FieldChange:
    """One field of the comparison: its `name`, the version's value and the record's as shown (one line
    each; None: no value), and whether they differ."""

    name: str
    version: str | None
    current: str | None
    changed: bool


def compare(collection: Collection, version_data: dict[str, Any], record: dict[str, Any]) -> list[FieldChange]:
    """The version's values beside the record's (both as the API shows them), one row per schema field,
    then one per field the version holds that the schema no longer has."""
    names = [spec.name for spec in collection.fields]
    names += [name for name in version_data if name not in names]
    rows = []
    for name in names:
        old, new = version_data.get(name), record.get(name)
        rows.append(FieldChange(name=name, version=None if old is None else shown(old),
                                current=None if new is None else shown(new), changed=old != new))
    return rows


def _page_number(request: web.Request) -> int:
    text = request.query.get("page", "1")
    return min(int(text), MAX_PAGE) if text.isdigit() and int(text) >= 1 else 1


def _version_number(request: web.Request) -> int:
    text = request.match_info["version"]
    if not text.isdigit() or len(text) > 13:
        raise NotFound("Version not found")
    return int(text)


@admin_page
async def history(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET .../records/{record_id}/versions: the list (a fragment for htmx, else a page)."""
    svc = services(request)
    collection = await svc.catalog.by_name(request.match_info["collection_name"])
    record_id = request.match_info["record_id"]
    page = await svc.versions.list(principal, collection.name, record_id, page=_page_number(request),
                                   per_page=PER_PAGE)
    template = "records/versions.html" if request.headers.get("HX-Request") == "true" else "records/versions_page.html"
    return await render(request, template, collection=collection, record_id=record_id, page=page,
                        pages=max(1, math.ceil(page.total / PER_PAGE)))


@admin_page
async def version(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET .../versions/{n}: the version beside the record, and the Restore button."""
    collection = await services(request).catalog.by_name(request.match_info["collection_name"])
    return await _version_page(request, principal, collection)


async def _version_page(request: web.Request, principal: Principal, collection: Collection, *,
                        error: ErrorMessage | None = None, status: int = 200) -> web.Response:
    record_id = request.match_info["record_id"]
    found = await services(request).versions.get(principal, collection.name, record_id, _version_number(request))
    shown_version = record_version(found)
    record = await record_json_of(request, principal, collection, record_id)
    return await render(request, "records/version.html", status=status, collection=collection, record=record,
                        version=shown_version, changes=compare(collection, shown_version["data"], record), error=error)


@admin_page
async def restore(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST .../versions/{n}/restore: the version written over the record (as the API's restore)."""
    collection = await services(request).catalog.by_name(request.match_info["collection_name"])
    record_id, number = request.match_info["record_id"], _version_number(request)
    try:
        await services(request).versions.restore(principal, collection.name, record_id, number)
    except CmsError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await _version_page(request, principal, collection, error=error_message(exc), status=exc.status)
    return flash_redirect(request, f"{PREFIX}/collections/{collection.name}/records/{record_id}",
                          f"Version {number} restored")


def routes() -> list[web.RouteDef]:
    """The version history's routes (listed by the records screen, beside its record routes)."""
    path = PREFIX + "/collections/{collection_name}/records/{record_id}/versions"
    return [web.get(path, history, name="admin_ui.records.versions"),
            web.get(path + "/{version}", version),
            web.post(path + "/{version}/restore", restore)]
