"""Handlers of `/api/v1/releases` (decisions.md, Drafts, versions and scheduled publishing: Releases;
docs/concepts/releases.md): admins only (the route policy, and the service checks the principal)."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.api.schemas import ReleaseCreateSchema, ReleaseListQuerySchema, ReleasePublishSchema, ReleaseUpdateSchema
from cms.services import representation as represent
from cms.web.context import parse_body, parse_query, services

CREATE, UPDATE, PUBLISH = ReleaseCreateSchema(), ReleaseUpdateSchema(), ReleasePublishSchema()
LIST = ReleaseListQuerySchema()


def _release_id(request: web.Request) -> str:
    return request.match_info["release_id"]


async def create_release(request: web.Request) -> web.Response:
    """POST /releases: 201 the release (`pending`). 422 naming `items.N` for a bad item."""
    body = await parse_body(request, CREATE, required=True)
    release = await services(request).drafts.releases.create(signed_in_principal(request), body["name"], body["items"])
    return json_response(represent.release(release), status=201)


async def list_releases(request: web.Request) -> web.Response:
    """GET /releases: one page of releases, newest first (`page`, `per_page`)."""
    query = parse_query(request, LIST)
    page = await services(request).drafts.releases.list_releases(signed_in_principal(request), page=query["page"],
                                                        per_page=query["per_page"])
    return json_response(represent.release_page(page))


async def get_release(request: web.Request) -> web.Response:
    """GET /releases/{release_id}: the release. 404 when unknown."""
    release = await services(request).drafts.releases.get(signed_in_principal(request), _release_id(request))
    return json_response(represent.release(release))


async def update_release(request: web.Request) -> web.Response:
    """PATCH /releases/{release_id}: rename it and/or replace its items. 404, 409 (published), 422."""
    body = await parse_body(request, UPDATE, required=True)
    release = await services(request).drafts.releases.update(signed_in_principal(request), _release_id(request),
                                                             name=body["name"], items=body["items"])
    return json_response(represent.release(release))


async def delete_release(request: web.Request) -> web.Response:
    """DELETE /releases/{release_id}: 204 (its schedule goes; published records stay). 404."""
    await services(request).drafts.releases.delete(signed_in_principal(request), _release_id(request))
    return web.Response(status=204)


async def publish_release(request: web.Request) -> web.Response:
    """POST /releases/{release_id}/publish: 200 the release, published now, all or nothing (422
    naming `items.N`); with `{"at"}`, the publish scheduled (`scheduled`)."""
    principal = signed_in_principal(request)
    body = await parse_body(request, PUBLISH)
    releases = services(request).drafts.releases
    if body["at"] is None:
        release = await releases.publish(principal, _release_id(request))
    else:
        release = await releases.schedule(principal, _release_id(request), body["at"])
    return json_response(represent.release(release))


async def cancel_release_schedule(request: web.Request) -> web.Response:
    """DELETE /releases/{release_id}/schedule: 204, its scheduled publish cancelled (404 if none)."""
    await services(request).drafts.releases.cancel(signed_in_principal(request), _release_id(request))
    return web.Response(status=204)
