"""The drafts panel of the record editor (decisions.md, Drafts, versions and scheduled publishing; issue 39,
item 6): a record of a collection with drafts shows its status, its scheduled publish (or why the last one
failed), the working copy beside the published values (the fields that differ), and the buttons Publish,
Schedule, Cancel schedule, Unpublish and Discard draft. With localized fields (decisions.md, Localized fields;
issue 40, item 7) it names the locales whose values are pending and offers "Publish <locale>" for the locale
being edited (`publish?locale=<code>`: only that locale's values of localized fields go to readers). Each
button is a small form posted here, which calls
the same service as its REST endpoint (`drafts.publisher`, `drafts.scheduler`, `drafts.copies`) with the
admin's Principal; a refusal (a working copy that does not validate, a time in the past) comes back as
the flash message on the editor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import orjson
from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, flash_redirect
from cms.errors import BadRequest, CmsError, NotFound
from cms.models import Collection, Principal
from cms.services.content.locales import ALL
from cms.services.representation.record_view import FULL
from cms.web.context import services
from cms.web.uploads import read_form

MAX_SHOWN_CHARS = 400
"""A value in the diff is cut past this many characters."""


@dataclass(frozen=True)
class FieldDiff:
    """One field whose working value differs from its published value (`published` None: never published)."""

    name: str
    published: str | None
    working: str


@dataclass(frozen=True)
class DraftPanel:
    """What the editor shows of a record's drafts: its state, whether it has a published copy, the
    fields whose working values differ from the published ones (all of its values for a record never
    published), the locale being edited (`locale`, None without localized fields) and the configured
    locales whose localized values differ between the two copies (`pending_locales`, in their order)."""

    status: str
    published_at: str | None
    scheduled_at: str | None
    schedule_error: str | None
    published: bool
    changes: list[FieldDiff]
    locale: str | None = None
    pending_locales: tuple[str, ...] = ()


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS - 1] + "…"


async def draft_panel(request: web.Request, principal: Principal, collection: Collection,
                      working: dict[str, Any], locale: str | None = None) -> DraftPanel:
    """The panel of the record whose working copy is `working` (its `?draft=true` JSON, localized fields
    as objects: `?locale=*`): the published copy is read as readers read it (`records.get_json`), with
    localized fields as objects too. `locale`: the locale the editor edits (None: no localized fields)."""
    try:
        published: dict[str, Any] | None = await services(request).records.get_json(
            collection.name, working["id"], principal=principal, view=replace(FULL, locale=ALL))
    except NotFound:
        published = None
    changes = []
    for spec in collection.fields:
        now, before = working.get(spec.name), (published or {}).get(spec.name)
        if now != before:
            changes.append(FieldDiff(spec.name, None if published is None or before is None else _shown(before),
                                     "" if now is None else _shown(now)))
    return DraftPanel(status=str(working.get("status")), published_at=working.get("published_at"),
                      scheduled_at=working.get("scheduled_at"), schedule_error=working.get("schedule_error"),
                      published=published is not None, changes=changes,
                      locale=locale if collection.localized_fields else None,
                      pending_locales=pending_locales(collection, working, published or {}))


def pending_locales(collection: Collection, working: dict[str, Any], published: dict[str, Any]) -> tuple[str, ...]:
    """The configured locales in which some localized field's working value differs from its published
    value (both records with localized fields as objects of locale to value)."""

    def value(record: dict[str, Any], name: str, code: str) -> Any:
        values = record.get(name)
        return values.get(code) if isinstance(values, dict) else None

    return tuple(code for code in collection.locales.codes
                 if any(value(working, name, code) != value(published, name, code)
                        for name in collection.localized_fields))


Action = Callable[[web.Request, Principal, str, str], Awaitable[str]]


def _action(act: Action) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A panel button's handler: runs `act(request, principal, collection name, record id)`, which
    answers the success message, and goes back to the editor with it (or with the refusal)."""

    @admin_page
    async def handler(request: web.Request, principal: Principal) -> web.StreamResponse:
        name, record_id = request.match_info["collection_name"], request.match_info["record_id"]
        editor = f"{PREFIX}/collections/{name}/records/{record_id}"
        if "locale" in request.query:  # back to the locale being edited
            editor += "?" + urlencode({"locale": request.query["locale"]})
        try:
            message = await act(request, principal, name, record_id)
        except CmsError as exc:
            details = "; ".join(f"{k}: {' '.join(v)}" for k, v in (exc.errors or {}).items())
            return flash_redirect(request, editor, exc.detail + (f" ({details})" if details else ""), "error")
        return flash_redirect(request, editor, message)

    return handler


async def _publish(request: web.Request, principal: Principal, name: str, record_id: str) -> str:
    await services(request).drafts.publisher.publish(principal, name, record_id)
    return "Published"


async def _publish_locale(request: web.Request, principal: Principal, name: str, record_id: str) -> str:
    """Publish the `?locale=` values of localized fields only (`Publisher.publish`'s `locale`)."""
    locale = request.query.get("locale", "")
    if not locale or locale == ALL:
        raise BadRequest("Choose the locale to publish")
    await services(request).drafts.publisher.publish(principal, name, record_id, locale=locale)
    return f"Published the {locale} values: the other locales keep their published values"


async def _schedule(request: web.Request, principal: Principal, name: str, record_id: str) -> str:
    """Schedule the publish at the form's `at` (UTC); with the form's `locale` (the box "only <locale>"),
    of that locale's values only."""
    form = await read_form(request)
    raw, asked = form.get("at"), form.get("locale")
    locale = asked if isinstance(asked, str) and asked else None
    try:
        at = datetime.fromisoformat(str(raw).strip())
    except ValueError:
        raise BadRequest("Choose a date and time (UTC) to publish at") from None
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    record = await services(request).drafts.scheduler.schedule(principal, name, record_id, at,
                                                               locale=locale)
    what = f"Publish of the {locale} values" if locale else "Publish"
    return f"{what} scheduled at {record.state.scheduled_at if record.state else at} (UTC)"


async def _unschedule(request: web.Request, principal: Principal, name: str, record_id: str) -> str:
    await services(request).drafts.scheduler.cancel(principal, name, record_id)
    return "Scheduled publish cancelled"


async def _unpublish(request: web.Request, principal: Principal, name: str, record_id: str) -> str:
    await services(request).drafts.publisher.unpublish(principal, name, record_id)
    return "Unpublished: the record is a draft again"


async def _discard(request: web.Request, principal: Principal, name: str, record_id: str) -> str:
    await services(request).drafts.copies.discard(principal, name, record_id)
    return "Draft discarded: the record shows its published values again"


def routes() -> list[web.RouteDef]:
    """The panel's buttons (each a POST with the CSRF token)."""
    base = PREFIX + "/collections/{collection_name}/records/{record_id}"
    return [web.post(base + "/publish", _action(_publish)),
            web.post(base + "/publish-locale", _action(_publish_locale)),
            web.post(base + "/schedule", _action(_schedule)),
            web.post(base + "/unschedule", _action(_unschedule)),
            web.post(base + "/unpublish", _action(_unpublish)),
            web.post(base + "/discard", _action(_discard))]
