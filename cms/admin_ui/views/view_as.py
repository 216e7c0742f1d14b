"""View as (`/_/collections/{name}/records/{record_id}/view-as`): which fields of one record a user
would see and which their field rules hide, and whether the view and list rules show them the record
at all (decisions.md, Field rules).

`?as=<auth collection>&user=<id or address>` picks a user of an auth collection, `?as=` (empty) an
anonymous caller; without `as` the page shows the form only. The user's principal is the one their own
requests carry (`UserSystems.stand_in`, without a session) and the decision is `access.check`'s
(`RecordService.sight`): the page evaluates no rule itself. Admins only, like every screen; the
values shown are the admin's own read of the record (`GET .../records/{id}`).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, error_message, render
from cms.admin_ui.views.record_editor import record_json_of
from cms.errors import CmsError
from cms.models import Collection, FieldSpec, Principal
from cms.services.access import AUTH_TYPE, EMAIL_FIELD
from cms.services.content.record_sight import RecordSight
from cms.web.context import services

MAX_SHOWN_VALUE_CHARS = 120
"""A value longer than this (as JSON) is cut short in the table, with an ellipsis."""


def shown(value: Any) -> str:
    """A record value as one line of the table: text as it is, anything else as JSON, cut to
    MAX_SHOWN_VALUE_CHARS."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= MAX_SHOWN_VALUE_CHARS else text[:MAX_SHOWN_VALUE_CHARS - 1] + "…"


def rule_text(collection: Collection, name: str) -> str | None:
    """The view rule of field `name` as set (`email_view_rule` for an auth collection's email)."""
    if name == EMAIL_FIELD and collection.type == AUTH_TYPE:
        return collection.rules.email_view_rule
    spec: FieldSpec | None = collection.field(name)
    return "" if spec is None else spec.view_rule


@admin_page
async def view_as(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET .../records/{record_id}/view-as: the form, and with `as` the record as that user sees it.
    An unknown user is shown beside the form; an unknown collection or record is the 404 page."""
    svc = services(request)
    collection = await svc.catalog.by_name(request.match_info["collection_name"])
    record_id = request.match_info["record_id"]
    record = await record_json_of(request, principal, collection, record_id)
    auth_collections = [c.name for c in await svc.collections.list() if c.type == AUTH_TYPE]
    chosen = request.query.get("as")
    who = request.query.get("user", "").strip()
    result: RecordSight | None = None
    error, status = None, 200
    if chosen is not None:
        try:
            viewer = await svc.identity.systems.stand_in(principal, chosen, who) if chosen else None
            result = await svc.records.sight(principal, collection.name, record_id, viewer)
        except CmsError as exc:
            if exc.status >= 500:
                raise
            error, status = error_message(exc), exc.status
    return await render(request, "records/view_as.html", status=status, collection=collection,
                        record=record, auth_collections=auth_collections, chosen=chosen, who=who, result=result,
                        error=error, rules={n: rule_text(collection, n) for n in (result.fields if result else ())},
                        values={n: shown(record.get(n)) for n in (result.fields if result else ())})


def routes() -> list[web.RouteDef]:
    """The view-as page's route (listed by the records screen, beside its record routes)."""
    return [web.get(PREFIX + "/collections/{collection_name}/records/{record_id}/view-as", view_as,
                    name="admin_ui.records.view_as")]
