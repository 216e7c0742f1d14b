"""Handlers of `/api/v1/settings` (spec: System, Setting): admin tokens only (401 without, 403 otherwise)."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.api.schemas import SettingUpdateSchema
from cms.services import representation as represent
from cms.web.context import parse_body, services


async def list_settings(request: web.Request) -> web.Response:
    """GET /api/v1/settings: every setting as `{key, value, category}`, `value` a string."""
    principal = signed_in_principal(request)
    settings = await services(request).settings.list(principal)
    return json_response(represent.settings(settings))


async def update_setting(request: web.Request) -> web.Response:
    """POST /api/v1/settings `{key, value, category?}`: upsert one setting; 200 with it, 422 for an
    unknown key or a bad value. The change is audited with the request's origin."""
    principal = signed_in_principal(request)
    body = await parse_body(request, SettingUpdateSchema())
    setting = await services(request).settings.change(
        principal, body["key"], body["value"], category=body["category"],
    )
    return json_response(represent.setting(setting))
