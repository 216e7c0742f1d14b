"""Handlers of `/api/v1/api-keys` (spec: API key; decisions.md: Identity and tokens). Admin-table
users manage their own keys (an admin sees all); the service checks the principal."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.api.schemas import ApiKeyCreateSchema
from cms.services import representation as represent
from cms.web.context import parse_body, services


async def create_api_key(request: web.Request) -> web.Response:
    """POST /api-keys: 201 `{id, name, scopes, expires_at, created, last_used, key}`; `key` is shown once."""
    principal = signed_in_principal(request)
    body = await parse_body(request, ApiKeyCreateSchema())
    key, secret = await services(request).api_keys.create(
        principal, body["name"], body["scopes"], body["expires_at"])
    return json_response(represent.api_key_created(key, secret), status=201)


async def list_api_keys(request: web.Request) -> web.Response:
    """GET /api-keys: the caller's keys (an admin's: every key), without secrets. 401 without a user."""
    principal = signed_in_principal(request)
    return json_response(represent.api_keys(await services(request).api_keys.list_keys(principal)))


async def delete_api_key(request: web.Request) -> web.Response:
    """DELETE /api-keys/{key_id}: 204; the key is refused from then on. 404 (not the caller's, or unknown)."""
    principal = signed_in_principal(request)
    await services(request).api_keys.revoke(principal, request.match_info["key_id"])
    return web.Response(status=204)
