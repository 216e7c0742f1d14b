"""Handlers of the drafts endpoints of `/api/v1/collections/{collection_name}/records/{record_id}`
(decisions.md, Drafts, versions and scheduled publishing): publish (now, or scheduled with `at`),
unpublish, discard the working copy, cancel a schedule. The `?draft=true` reads are the records' list
and view (api/records.py)."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import principal_of
from cms.api.records import NO_STORE, record_view
from cms.api.responses import json_response
from cms.api.schemas import RecordPublishSchema
from cms.web.context import parse_body, services

PUBLISH = RecordPublishSchema()


def _record(request: web.Request) -> tuple[str, str]:
    return request.match_info["collection_name"], request.match_info["record_id"]


async def publish_record(request: web.Request) -> web.Response:
    """`POST .../records/{record_id}/publish`: 200 with the record, published now; with `{"at"}`, the
    publish scheduled (`scheduled_at` set); with `?locale=<code>`, either publishes only that locale's
    values of localized fields."""
    principal = principal_of(request)
    body = await parse_body(request, PUBLISH)
    name, record_id = _record(request)
    present = await services(request).records.presenter(name, record_view(request), principal)
    drafts = services(request).drafts
    locale = record_view(request).locale  # `?locale=`: that locale's values of localized fields only
    if body["at"] is None:
        record = await drafts.publisher.publish(principal, name, record_id, locale=locale)
    else:
        record = await drafts.scheduler.schedule(principal, name, record_id, body["at"], locale=locale)
    return json_response(await present(record), headers=NO_STORE)


async def unpublish_record(request: web.Request) -> web.Response:
    """`POST .../records/{record_id}/unpublish`: 200 with the record, now a draft."""
    principal = principal_of(request)
    name, record_id = _record(request)
    present = await services(request).records.presenter(name, record_view(request), principal)
    record = await services(request).drafts.publisher.unpublish(principal, name, record_id)
    return json_response(await present(record), headers=NO_STORE)


async def discard_draft(request: web.Request) -> web.Response:
    """`DELETE .../records/{record_id}/draft`: 204, the pending working copy dropped."""
    name, record_id = _record(request)
    await services(request).drafts.copies.discard(principal_of(request), name, record_id)
    return web.Response(status=204)


async def cancel_schedule(request: web.Request) -> web.Response:
    """`DELETE .../records/{record_id}/schedule`: 204, the pending scheduled publish cancelled."""
    name, record_id = _record(request)
    await services(request).drafts.scheduler.cancel(principal_of(request), name, record_id)
    return web.Response(status=204)
