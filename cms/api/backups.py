"""Handlers of `/api/v1/backups` (decisions.md, Backups): admin only. Each request waits until
its backup or restore is complete."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.services import representation as represent
from cms.web.context import services
from cms.web.files import backup_file_response


async def create_backup(request: web.Request) -> web.Response:
    """POST /backups: 201 `{filename, size, created}` once the archive is written. 401/403 unless admin."""
    principal = signed_in_principal(request)
    backup = await services(request).backups.create(principal)
    return json_response(represent.backup(backup), status=201)


async def list_backups(request: web.Request) -> web.Response:
    """GET /backups: `[{filename, size, created}]`, newest first. 401/403 unless admin."""
    principal = signed_in_principal(request)
    backups = await services(request).backups.list(principal)
    return json_response(represent.backups(backups))


async def restore_backup(request: web.Request) -> web.Response:
    """POST /backups/{filename}/restore: `{message}` once restored. 400 (bad archive or name), 404, 401/403."""
    principal = signed_in_principal(request)
    result = await services(request).backups.restore(principal, request.match_info["filename"])
    return json_response(represent.message(result.message))


async def download_backup(request: web.Request) -> web.StreamResponse:
    """GET /backups/{filename}: the archive (`application/gzip`, as an attachment). 400 (malformed
    name), 404, 401/403 unless admin. Audited."""
    principal = signed_in_principal(request)
    backup, path = await services(request).backups.download(principal, request.match_info["filename"])
    return backup_file_response(backup.filename, path)


async def delete_backup(request: web.Request) -> web.Response:
    """DELETE /backups/{filename}: 204. 400 (malformed name), 404 (no such backup), 401/403 unless admin."""
    principal = signed_in_principal(request)
    await services(request).backups.delete(principal, request.match_info["filename"])
    return web.Response(status=204)
