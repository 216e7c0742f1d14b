"""Schema as code (`/_/schema`; decisions.md, Schema as code): download the instance's snapshot as a file,
upload one to see its diff as a table (collection, field, from, to; changes that lose data highlighted),
and apply it against the hash of that diff. The same SchemaService calls as `GET /api/v1/schema`,
`POST /schema/diff` and `POST /schema/apply` (audited alike).

The diff page carries the uploaded snapshot in its apply form, so the apply may reach any replica; both
forms are multipart bodies read as streams, up to MAX_SNAPSHOT_BYTES (the app's `client_max_size` is
smaller), their CSRF token first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from cms.admin_ui.common import (
    PREFIX,
    PageRefused,
    admin_page,
    error_message,
    flash_redirect,
    render,
    streamed_admin_page,
)
from cms.admin_ui.session import CSRF_FIELD, CSRF_HEADER, csrf_token_matches
from cms.errors import BadRequest, CmsError, PayloadTooLarge
from cms.models import Principal
from cms.security.json_input import JsonInputError, decode_json
from cms.services.content.schema_diff import differences
from cms.web.context import services
from cms.web.schema_snapshot import HASH_LENGTH, MAX_SNAPSHOT_BYTES, load_snapshot
from cms.web.uploads import form_parts

FORM_FIELDS = {"snapshot": MAX_SNAPSHOT_BYTES, "hash": HASH_LENGTH, "allow_data_loss": 8, CSRF_FIELD: 256}
"""The parts the schema forms carry, each with the most bytes it may hold (others are refused)."""
CSRF_REFUSED = ("The form has expired or did not come from this site (CSRF check failed). "
                "Reload the page and try again.")
EXPORT_FILENAME = "schema.json"


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/schema: the current hash, the download link and the upload form."""
    snapshot = await services(request).schema.export(principal)
    return await render(request, "schema/index.html", snapshot=snapshot)


@admin_page
async def download(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/schema/export: the snapshot as a file (indented JSON, keys sorted, as `cms schema export`)."""
    snapshot = await services(request).schema.export(principal)
    body = json.dumps(snapshot, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return web.Response(text=body, content_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="{EXPORT_FILENAME}"'})


@streamed_admin_page
async def diff(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/schema/diff (multipart: csrf_token, then the file `snapshot`): the diff page."""
    form = await _form(request, principal)
    text = form.get("snapshot", "")
    try:
        wanted = load_snapshot(_decoded(text))
        result = await services(request).schema.diff(principal, wanted)
    except CmsError as exc:
        snapshot = await services(request).schema.export(principal)
        return await render(request, "schema/index.html", snapshot=snapshot, error=error_message(exc),
                            status=exc.status)
    return await _diff_page(request, result, text)


@streamed_admin_page
async def apply(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/schema/apply (multipart: csrf_token, hash, allow_data_loss, snapshot): apply it against the
    diff's hash; back to /_/schema, or the diff page again with the refusal (409: diffed against another
    schema; 422: data loss not accepted, stored values refused)."""
    form = await _form(request, principal)
    text = form.get("snapshot", "")
    schema = services(request).schema
    try:
        wanted = load_snapshot(_decoded(text))
        applied = await schema.apply(principal, wanted, expected_hash=form.get("hash", ""),
                                     allow_data_loss=form.get("allow_data_loss") == "true")
    except CmsError as exc:
        try:
            result = await schema.diff(principal, load_snapshot(_decoded(text)))
        except CmsError:
            snapshot = await schema.export(principal)
            return await render(request, "schema/index.html", snapshot=snapshot, error=error_message(exc),
                                status=exc.status)
        return await _diff_page(request, result, text, error=error_message(exc), status=exc.status)
    return flash_redirect(request, PREFIX + "/schema", f"Schema applied: its hash is now {applied['hash']}")


async def _diff_page(request: web.Request, result: dict[str, Any], text: str, *, status: int = 200,
                     **context: Any) -> web.Response:
    rows = [{"change": change, "differences": differences(change)} for change in result["changes"]]
    return await render(request, "schema/diff.html", status=status, hash=result["hash"], rows=rows, snapshot_text=text,
                        data_loss=any(change["data_loss"] for change in result["changes"]), **context)


def _decoded(text: str) -> Any:
    try:
        return decode_json(text)
    except JsonInputError as exc:
        raise BadRequest(f"The file is not JSON: {exc}") from None


async def _form(request: web.Request, principal: Principal) -> dict[str, str]:
    """The text parts of a schema form (FORM_FIELDS), its CSRF token checked before anything else is read."""
    if request.content_type != "multipart/form-data":
        raise PageRefused(400, "The schema forms are sent as multipart/form-data.")
    parts = form_parts(request).__aiter__()
    form: dict[str, str] = {}
    checked = csrf_token_matches(request, principal, request.headers.get(CSRF_HEADER))
    async for part in parts:
        limit = FORM_FIELDS.get(part.name)
        if limit is None:
            raise PageRefused(400, f"Unexpected form field '{part.name}'.")
        value = await _text(part.chunks, limit)
        if not checked:
            if part.name != CSRF_FIELD or not csrf_token_matches(request, principal, value):
                raise PageRefused(403, CSRF_REFUSED)
            checked = True
        form[part.name] = value
    if not checked:
        raise PageRefused(403, CSRF_REFUSED)
    return form


async def _text(chunks: AsyncIterator[bytes], limit: int) -> str:
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > limit:
            raise PayloadTooLarge(f"The snapshot is over {limit:,} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise BadRequest("The file is not UTF-8 text") from None


def routes() -> list[web.RouteDef]:
    """The schema screen's routes."""
    return [web.get(PREFIX + "/schema", index), web.get(PREFIX + "/schema/export", download),
            web.post(PREFIX + "/schema/diff", diff), web.post(PREFIX + "/schema/apply", apply)]
