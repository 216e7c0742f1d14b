"""File fields in the admin UI (issue 41, item 5): previews in the records table and the editor, and
what the editor's file widgets send.

Every preview and link goes through the record's file route (`/_/collections/{name}/records/{id}/files/{file_id}`,
views/records.py), which opens the file with the file service as `GET /api/v1/files/{id}` does, with
the page's file token (`?token=`, issued once per page for the session's access token): so a file of
a `protected` field is shown through a token, as an `<img>` in any page would, and a thumbnail
(`?thumb=100x100`) is asked for images only.

The editor's widget of a file field sends the ids it keeps as hidden inputs named by the field, a
`remove__<field>` checkbox per file, and a file input `upload__<field>` (several files for a
multi-file field; drag and drop fills it, app.js): new files replace the file of a single-file
field and are added after the kept ones of a multi-file field (`file_form_value`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from cms.admin_ui.common import PREFIX
from cms.admin_ui.session import access_token
from cms.errors import CmsError
from cms.models import Collection, FieldSpec
from cms.services.content.fields import is_multi
from cms.services.content.file_fields import DEFAULT_THUMB
from cms.services.content.imaging import RASTER_TYPES
from cms.web.context import services

REMOVE_PREFIX = "remove__"
"""The editor's checkbox of a file to take out of its field: `remove__<field>`, value the file id."""
MAX_EDITOR_FILES = 100
"""Files one editor field lists."""
MAX_CELL_FILES = 4
"""Files one table cell shows (a `+n` says how many more)."""
_TOKEN_KEY = "admin_ui_file_token"


@dataclass(frozen=True)
class FileShown:
    """A file as a page shows it: `missing` when no such file exists; `url` the file, `thumb_url`
    its 100x100 thumbnail (images only, else None), both through the page's file token."""

    id: str
    filename: str = ""
    content_type: str = ""
    size: int = 0
    missing: bool = False
    url: str = ""
    thumb_url: str | None = None


async def page_file_token(request: web.Request) -> str | None:
    """A file token of the session's credential, issued once per page (None when it cannot be had:
    the page then shows no protected file)."""
    if _TOKEN_KEY not in request:
        token = None
        credential = access_token(request)
        if credential is not None:
            try:
                token, _ = await services(request).files.tokens.issue(credential)
            except CmsError:
                token = None
        request[_TOKEN_KEY] = token
    value: str | None = request[_TOKEN_KEY]
    return value


def _ids(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


async def shown_files(request: web.Request, collection: Collection, record_id: str,
                      values: list[Any]) -> list[FileShown]:
    """The files `values` (a file field's value: an id or a list) of record `record_id`, as shown."""
    ids = _ids(values)[:MAX_EDITOR_FILES]
    return (await shown_in_rows(request, collection, [(record_id, record_id, ids)])).get(record_id, [])


async def shown_in_rows(request: web.Request, collection: Collection,
                        rows: list[tuple[str, str, list[str]]]) -> dict[str, list[FileShown]]:
    """Key -> files as shown, for rows of (key, record id, file ids) at once (one look-up)."""
    wanted = [file_id for _, _, ids in rows for file_id in ids]
    if not wanted:
        return {}
    described = await services(request).files.describe(wanted)
    token = await page_file_token(request)
    out: dict[str, list[FileShown]] = {}
    for key, record_id, ids in rows:
        base = f"{PREFIX}/collections/{collection.name}/records/{record_id}/files/"
        shown: list[FileShown] = []
        for file_id in ids:
            file = described.get(file_id)
            if file is None:
                shown.append(FileShown(id=file_id, missing=True))
                continue
            query = {"token": token} if token else {}
            image = file.content_type.partition(";")[0] in RASTER_TYPES
            thumb = f"{base}{file.id}?{urlencode({'thumb': DEFAULT_THUMB, **query})}" if image else None
            shown.append(FileShown(id=file.id, filename=file.filename, content_type=file.content_type, size=file.size,
                                   url=base + file.id + (f"?{urlencode(query)}" if query else ""), thumb_url=thumb))
        out[key] = shown
    return out


async def table_files(request: web.Request, collection: Collection, columns: list[str],
                      items: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[list[FileShown], int]]:
    """(record id, column) -> (the first MAX_CELL_FILES files shown, how many more) for the file
    columns of a page of records (one look-up for the page)."""
    specs = [f for f in collection.fields if f.type == "file" and f.name in columns]
    rows = [(f"{item['id']}/{spec.name}", str(item["id"]), _ids(item.get(spec.name)))
            for item in items for spec in specs]
    shown = await shown_in_rows(request, collection, [(key, rid, ids[:MAX_CELL_FILES]) for key, rid, ids in rows])
    return {(rid, key.rpartition("/")[2]): (shown.get(key, []), max(0, len(ids) - MAX_CELL_FILES))
            for key, rid, ids in rows}


def file_form_value(spec: FieldSpec, kept: list[str], removed: list[str], *, uploading: bool) -> tuple[bool, Any]:
    """(present, value) of a file field from the editor's form: the kept ids (hidden inputs, a
    comma-separated list typed by hand too) less the removed ones; absent when the form had neither.
    A single-file field that gets a new file leaves its value to the upload (it replaces the file)."""
    ids = [p for text in kept for p in re.split(r"[\s,]+", text) if p]
    if not ids and not removed:
        return False, None
    left = [i for i in dict.fromkeys(ids) if i not in set(removed)]
    if not is_multi(spec):
        if uploading:
            return False, None
        return True, left[-1] if left else None
    return True, left or None
