"""Handlers of `/api/v1/schema` (decisions.md, Schema as code): admin only. A snapshot body may be up to
MAX_SNAPSHOT_BYTES (413 above), more than the app's JSON limit."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.services import representation as represent
from cms.web.context import load_body, read_json, services
from cms.web.schema_snapshot import MAX_SNAPSHOT_BYTES, SchemaApplySchema, load_snapshot


def _snapshot_response(snapshot: dict[str, object]) -> web.Response:
    """The snapshot's canonical bytes (the same schema gives the same bytes on any instance)."""
    return web.Response(body=represent.snapshot_bytes(snapshot), content_type="application/json")


async def export_schema(request: web.Request) -> web.Response:
    """GET /schema: the snapshot `{collections, format, hash}`. 409 while an apply runs."""
    snapshot = await services(request).schema.export(signed_in_principal(request))
    return _snapshot_response(snapshot)


async def diff_schema(request: web.Request) -> web.Response:
    """POST /schema/diff with a snapshot: `{hash, changes}`. 422 for a snapshot that cannot be applied."""
    principal = signed_in_principal(request)
    wanted = load_snapshot(await read_json(request, max_bytes=MAX_SNAPSHOT_BYTES))
    diff = await services(request).schema.diff(principal, wanted)
    return json_response(represent.schema_diff(diff))


async def apply_schema(request: web.Request) -> web.Response:
    """POST /schema/apply `{hash, snapshot, allow_data_loss}`: the new snapshot. 409 (another hash, another
    apply running), 422 (invalid, data loss not allowed, stored values refused)."""
    principal = signed_in_principal(request)
    loaded = load_body(await read_json(request, max_bytes=MAX_SNAPSHOT_BYTES), SchemaApplySchema(), required=True)
    wanted = load_snapshot(loaded["snapshot"])
    snapshot = await services(request).schema.apply(principal, wanted, expected_hash=loaded["hash"],
                                                    allow_data_loss=loaded["allow_data_loss"])
    return _snapshot_response(snapshot)
