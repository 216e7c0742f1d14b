"""Releases (`/_/releases`; decisions.md, Drafts, versions and scheduled publishing: Releases): the list
of releases with their status and a form to create one by name; a release's page shows its items (each
with the error of the last failed publish, if it named that item), a picker of the records of the
collections with drafts (their newest working copies, PICKER_RECORDS per collection, or any one by its
id) to add, a Remove
button per item, Publish now, Schedule (a UTC date and time), Cancel schedule and Delete. Every action
calls the same `drafts.releases` service, with the admin's Principal, as `/api/v1/releases`; a refusal
comes back as the flash message on the release's page."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, confirmed_action, error_message, flash_redirect, render
from cms.errors import BadRequest, CmsError
from cms.models import Principal, Release
from cms.web.context import services
from cms.web.uploads import read_form

BASE = PREFIX + "/releases"
PER_PAGE = 30
"""Releases one page of the list shows."""
PICKER_RECORDS = 50
"""Newest working copies of each collection with drafts the picker offers."""
MAX_PICKED = 100
"""Records one "Add" takes at once."""


@dataclass(frozen=True)
class Choice:
    """A record the picker offers: its `value` (`<collection>/<record id>`) and what it shows."""

    value: str
    label: str


async def _choices(request: web.Request, principal: Principal) -> dict[str, list[Choice]]:
    """The picker's records by collection: the newest working copies of each collection with drafts."""
    reads = services(request).drafts.reads
    offered: dict[str, list[Choice]] = {}
    for collection in await services(request).collections.list():
        if not collection.drafts:
            continue
        page = await reads.list_json(principal, collection.name, per_page=PICKER_RECORDS, sort="-updated")
        texts = [f.name for f in collection.fields if f.type == "text"]
        offered[collection.name] = [
            Choice(f"{collection.name}/{r['id']}",
                   f"{next((str(r[t]) for t in texts if r.get(t)), r['id'])} ({r.get('status')})")
            for r in page["items"]]
    return offered


def _items(release: Release) -> list[dict[str, str]]:
    return [{"collection": i.collection, "record_id": i.record_id} for i in release.items]


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/releases[?page=]: the releases, newest first, and the create form."""
    try:
        page_number = max(1, min(int(request.query.get("page", "1")), 1_000_000))
    except ValueError:
        page_number = 1
    page = await services(request).drafts.releases.list_releases(principal, page=page_number, per_page=PER_PAGE)
    pages = max(1, -(-page.total // PER_PAGE))
    return await render(request, "releases/index.html", releases=page.items, page=page_number, pages=pages,
                        error=None, name="")


@admin_page
async def create(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/releases: a new empty release called `name`; its page is next."""
    name = str((await read_form(request)).get("name", ""))
    releases = services(request).drafts.releases
    try:
        release = await releases.create(principal, name, [])
    except CmsError as exc:
        page = await releases.list_releases(principal, page=1, per_page=PER_PAGE)
        return await render(request, "releases/index.html", status=exc.status, releases=page.items, page=1,
                            pages=max(1, -(-page.total // PER_PAGE)), error=error_message(exc), name=name)
    return flash_redirect(request, f"{BASE}/{release.id}", "Release created: add records to it")


@admin_page
async def show(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/releases/{release_id}: the release, its items and its actions."""
    release = await services(request).drafts.releases.get(principal, request.match_info["release_id"])
    errors = {int(k.split(".")[1]): v for k, v in release.errors.items() if k.startswith("items.")}
    choices = await _choices(request, principal) if release.status != "published" else {}
    return await render(request, "releases/release.html", release=release, item_errors=errors, choices=choices)


Action = Callable[[web.Request, Principal, Release], Awaitable[str]]


def _action(act: Action) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A button of the release's page: runs `act`, which answers the success message, and goes back to
    the release's page with it (or with the refusal, its `errors` spelled out)."""

    @admin_page
    async def handler(request: web.Request, principal: Principal) -> web.StreamResponse:
        release_id = request.match_info["release_id"]
        release = await services(request).drafts.releases.get(principal, release_id)
        try:
            message = await act(request, principal, release)
        except CmsError as exc:
            details = "; ".join(f"{k}: {' '.join(v)}" for k, v in (exc.errors or {}).items())
            return flash_redirect(request, f"{BASE}/{release_id}", exc.detail + (f" ({details})" if details else ""),
                                  "error")
        return flash_redirect(request, f"{BASE}/{release_id}", message)

    return handler


async def _add(request: web.Request, principal: Principal, release: Release) -> str:
    form = await read_form(request)
    picked = [str(v) for v in form.getall("item", [])][:MAX_PICKED]
    added: list[dict[str, Any]] = []
    for value in picked:
        collection, _, record_id = value.partition("/")
        added.append({"collection": collection, "record_id": record_id})
    typed_id = str(form.get("record_id", "")).strip()
    if typed_id:  # one record by id, for those the picker does not offer
        added.append({"collection": str(form.get("collection", "")), "record_id": typed_id})
    if not added:
        raise BadRequest("Pick at least one record to add")
    known = {(i["collection"], i["record_id"]) for i in _items(release)}
    fresh = [a for a in added if (a["collection"], a["record_id"]) not in known]
    await services(request).drafts.releases.update(principal, release.id, items=[*_items(release), *fresh])
    return f"{len(fresh)} record(s) added"


async def _remove(request: web.Request, principal: Principal, release: Release) -> str:
    raw = (await read_form(request)).get("index", "")
    kept = _items(release)
    try:
        del kept[int(str(raw))]
    except (ValueError, IndexError):
        raise BadRequest("No such item") from None
    await services(request).drafts.releases.update(principal, release.id, items=kept)
    return "Item removed"


async def _publish(request: web.Request, principal: Principal, release: Release) -> str:
    await services(request).drafts.releases.publish(principal, release.id)
    return f"Release published: {len(release.items)} record(s)"


async def _schedule(request: web.Request, principal: Principal, release: Release) -> str:
    raw = (await read_form(request)).get("at")
    try:
        at = datetime.fromisoformat(str(raw).strip())
    except ValueError:
        raise BadRequest("Choose a date and time (UTC) to publish at") from None
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    scheduled = await services(request).drafts.releases.schedule(principal, release.id, at)
    return f"Publish scheduled at {scheduled.scheduled_at} (UTC)"


async def _unschedule(request: web.Request, principal: Principal, release: Release) -> str:
    await services(request).drafts.releases.cancel(principal, release.id)
    return "Scheduled publish cancelled"


@admin_page
async def confirm_delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/releases/{release_id}/delete: "delete this release?"."""
    release = await services(request).drafts.releases.get(principal, request.match_info["release_id"])
    return await render(request, "releases/delete.html", release=release)


@admin_page
async def delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/releases/{release_id}/delete: the release and its schedule go (published records stay)."""
    await services(request).drafts.releases.delete(principal, request.match_info["release_id"])
    return flash_redirect(request, BASE, "Release deleted")


def routes() -> list[web.RouteDef]:
    """The releases screen's routes."""
    one = BASE + "/{release_id}"
    return [
        web.get(BASE, index, name="admin_ui.releases"),
        web.post(BASE, create),
        web.get(one, show),
        web.post(one + "/items", _action(_add)),
        web.post(one + "/remove", _action(_remove)),
        web.post(one + "/publish", _action(_publish)),
        web.post(one + "/schedule", _action(_schedule)),
        web.post(one + "/unschedule", _action(_unschedule)),
        *confirmed_action(one + "/delete", confirm_delete, delete),
    ]
