"""Handlers of `/api/v1/collections` (spec: Collections). Writes need an admin token."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.services import representation as represent
from cms.web.context import parse_body, services
from cms.web.schemas import RULE_NAMES, CollectionCreateSchema, CollectionUpdateSchema


async def list_collections(request: web.Request) -> web.Response:
    """`GET /collections`: every collection with its schema and rules (public)."""
    collections = await services(request).collections.list()
    return json_response(represent.collections(collections))


async def get_collection(request: web.Request) -> web.Response:
    """`GET /collections/{collection_id}`: one collection. 404 when unknown."""
    collection = await services(request).catalog.by_id(request.match_info["collection_id"])
    return json_response(represent.collection(collection))


def _rules(body: dict[str, Any]) -> dict[str, str | None]:
    """The `<action>_rule` keys present in a request body (absent ones are not changed)."""
    return {name: body.pop(name) for name in RULE_NAMES if name in body}


async def create_collection(request: web.Request) -> web.Response:
    """`POST /collections` (admin): 201 with the new collection; rules default by type."""
    principal = signed_in_principal(request)
    body = await parse_body(request, CollectionCreateSchema())
    collection = await services(request).collections.create(
        principal, body["name"], body["type"], body["schema"], otp_enabled=body["otp_enabled"],
        mfa_enabled=body["mfa_enabled"], oauth_enabled=body["oauth_enabled"], rules=_rules(body),
        indexes=body["indexes"], versions=body["versions"], drafts=body["drafts"], view=body["view"],
    )
    return json_response(represent.collection(collection), status=201)


async def update_collection(request: web.Request) -> web.Response:
    """`PATCH /collections/{collection_id}` (admin): change name, schema, indexes, drafts, otp_enabled,
    mfa_enabled, oauth_enabled, rules, versions; a view's `view`.
    A body is required (400 without one)."""
    principal = signed_in_principal(request)
    body = await parse_body(request, CollectionUpdateSchema(), required=True)
    rules = _rules(body)
    collection = await services(request).collections.update(
        principal, request.match_info["collection_id"], rules=rules, **body)
    return json_response(represent.collection(collection))


async def delete_collection(request: web.Request) -> web.Response:
    """`DELETE /collections/{collection_id}` (admin): 204; the records go with it."""
    principal = signed_in_principal(request)
    await services(request).collections.delete(principal, request.match_info["collection_id"])
    return web.Response(status=204)
