"""Request-level helpers shared by every handler module: app keys, body and query parsing."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from marshmallow import Schema, ValidationError

from cms.errors import BadRequest, ValidationFailed
from cms.wiring import Services

SERVICES = web.AppKey("services", Services)
REQUEST_ID = "request_id"


def services(request: web.Request) -> Services:
    """The process's wired services."""
    return request.app[SERVICES]


async def read_json(request: web.Request) -> Any:
    """The decoded JSON body (None when empty). Raises BadRequest for malformed JSON and
    PayloadTooLarge (via aiohttp's client_max_size) for an oversized body."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"Malformed JSON body: {exc}") from None


async def parse_body(request: web.Request, schema: Schema) -> dict[str, Any]:
    """Decode the JSON body (an object) and load it with `schema`.
    Raises BadRequest (malformed, not an object) or ValidationFailed (422, per-field errors)."""
    body = await read_json(request)
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequest("JSON body must be an object")
    return load(schema, body)


def parse_query(request: web.Request, schema: Schema) -> dict[str, Any]:
    """Load the query string with `schema` (unknown parameters ignored). Raises ValidationFailed."""
    return load(schema, dict(request.query))


def load(schema: Schema, data: dict[str, Any]) -> dict[str, Any]:
    """`schema.load(data)` with marshmallow errors turned into ValidationFailed (422)."""
    try:
        loaded: dict[str, Any] = schema.load(data)
    except ValidationError as exc:
        errors = exc.messages if isinstance(exc.messages, dict) else {"_schema": exc.messages}
        raise ValidationFailed("Validation failed", errors=errors) from None
    return loaded


def client_ip(request: web.Request) -> str:
    """The socket peer address (proxy headers are not trusted here)."""
    return request.remote or ""


def user_agent(request: web.Request) -> str:
    """The User-Agent header, or empty."""
    return request.headers.get("User-Agent", "")
