"""The record editor (`/_/collections/{name}/records/new` and `.../{record_id}`): create and edit
one record, with its files.

The editor is one multipart form, read as a stream (like cms/web/uploads.py, so `client_max_size`
does not limit the files): the CSRF token first, then the field values and file inputs in form
order. The handler only parses the form; writing is one service operation (`RecordService.draft`,
record_uploads.py): each file is stored as it arrives, the values are saved last through the one
record writer, and a refused save leaves neither file nor record behind.

A collection with localized fields (decisions.md, Localized fields) is edited one locale at a time:
a switcher names each configured locale and how many localized fields it fills (`?locale=<code>`,
default: the default locale); the localized inputs show that locale's values, and an empty one shows,
greyed, the value its fallback chain answers instead. Saving writes that locale's values only (an
emptied input removes the locale's value, so the fallback shows again).
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from cms.admin_ui.common import (
    PREFIX,
    ErrorMessage,
    PageRefused,
    admin_page,
    error_message,
    flash,
    redirect,
    render,
    streamed_admin_page,
)
from cms.admin_ui.session import CSRF_FIELD, CSRF_HEADER, csrf_token_matches
from cms.admin_ui.views.record_drafts import draft_panel
from cms.admin_ui.views.record_files import REMOVE_PREFIX, FileShown, file_form_value, shown_files
from cms.admin_ui.views.record_locales import editor_locale, fallback_of, locale_tabs
from cms.admin_ui.views.relations import (
    MAX_PICK_QUERY_CHARS,
    Chosen,
    RelationTarget,
    chosen,
    expand_view,
    relation_targets,
)
from cms.errors import CmsError, PayloadTooLarge, ValidationFailed
from cms.models import Collection, FieldSpec, Principal
from cms.services.content.fields import is_multi, value_list
from cms.services.content.file_parts import FormPart
from cms.services.content.locales import ALL, Localization, localization
from cms.services.representation.record_view import FULL, RecordView
from cms.web.context import services
from cms.web.uploads import form_parts

MAX_FORM_TEXT_BYTES = 1024 * 1024
"""The field values of one editor form (files aside) may total this many bytes."""
FILE_INPUT_PREFIX = "upload__"
_INT = re.compile(r"[+-]?\d+")


@dataclass
class EditorField:
    """One field of the editor: its spec, the widget, the value as the form shows it, its errors;
    a relation's `target` (None: its collection is gone) and the (id, label) of its `chosen` records."""

    spec: FieldSpec
    widget: str
    value: Any
    errors: list[str]
    files: list[FileShown] = field(default_factory=list)
    multi: bool = False
    target: RelationTarget | None = None
    chosen: list[Chosen] = field(default_factory=list)
    localized: bool = False
    fallback: str | None = None
    """A localized field: the value its fallback chain answers, as text (None: none)."""
    fallback_locale: str | None = None


def widget_of(spec: FieldSpec) -> str:
    """The input used for a field type (a localized bool: a choice of true, false or unset, so a locale
    can fall back)."""
    if spec.type in ("editor", "json"):
        return "textarea"
    if spec.type == "bool":
        return "boolselect" if spec.localized else "checkbox"
    if spec.type == "select":
        return "select"
    if spec.type == "number":
        return "number"
    if spec.type == "date":
        return "datetime"
    if spec.type in ("email", "url"):
        return spec.type
    if spec.type == "file":
        return "file"
    if spec.type == "relation":
        return "relation"
    return "text"


def shown_value(spec: FieldSpec, value: Any) -> Any:
    """A stored (API JSON) value as the editor's input shows it."""
    if value is None:
        return [] if spec.type == "select" else ("" if spec.type != "bool" else False)
    if spec.type == "json":
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    if spec.type == "date" and isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        if parsed.microsecond:
            return parsed.replace(tzinfo=None).isoformat(timespec="milliseconds")
        return parsed.strftime("%Y-%m-%dT%H:%M:%S")
    if spec.type == "select":
        return value if isinstance(value, list) else [value]
    if spec.type in ("relation", "file"):
        return ", ".join(value) if isinstance(value, list) else str(value)
    if spec.type == "number":
        return str(value)
    return value


def _as_text(shown: Any) -> str:
    """A value as `shown_value` gives it, as one line of text."""
    if isinstance(shown, list):
        return ", ".join(str(item) for item in shown)
    return str(shown).lower() if isinstance(shown, bool) else str(shown)


def parse_field(spec: FieldSpec, raw: list[str], *, creating: bool) -> tuple[bool, Any]:
    """(present, value) of one field from the form's strings. Empty means "leave out" when creating
    and "clear" (None) when editing; what does not parse is passed on as given, for the service to
    refuse with its own message (a number field's `abc`). Raises ValueError for invalid JSON."""
    if spec.type == "bool" and spec.localized:
        if not raw or raw[-1] not in ("true", "false"):
            return (False, None) if creating else (True, None)
        return True, raw[-1] == "true"
    if spec.type == "bool":
        return True, bool(raw) and raw[-1] in ("on", "true", "1")
    if spec.type == "select":
        chosen = [v for v in raw if v]
        if not chosen:
            return (False, None) if creating else (True, None)
        return True, chosen if is_multi(spec) else chosen[-1]
    text = raw[-1] if raw else ""
    if not text.strip():
        return (False, None) if creating else (True, None)
    if spec.type == "number":
        stripped = text.strip()
        if _INT.fullmatch(stripped):
            return True, int(stripped)
        try:
            number = float(stripped)
        except ValueError:
            return True, text
        return True, number if math.isfinite(number) else text
    if spec.type == "json":
        try:
            return True, orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"Not valid JSON: {exc}") from None
    if spec.type == "relation":
        ids = [p for p in re.split(r"[\s,]+", text) if p]
        return True, ids if is_multi(spec) else (ids[-1] if ids else None)
    return True, text


def form_data(collection: Collection, form: dict[str, list[str]], *, creating: bool,
              uploaded: frozenset[str] = frozenset()) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The record `data` of a submitted form and the errors found before the service is asked;
    `uploaded`: the file fields that got new files (record_files.file_form_value)."""
    data: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for spec in collection.fields:
        if spec.type == "file":
            present, value = file_form_value(spec, form.get(spec.name, []), form.get(REMOVE_PREFIX + spec.name, []),
                                             uploading=spec.name in uploaded)
            if present:
                data[spec.name] = value
            continue
        if spec.type not in ("bool", "select") and spec.name not in form:
            continue  # not on the form (a field added since the page was loaded); an unchecked
            # checkbox and a multiple select with nothing chosen send nothing, and mean false / none
        try:
            present, value = parse_field(spec, form.get(spec.name, []), creating=creating)
        except ValueError as exc:
            errors[spec.name] = [str(exc)]
            continue
        if present:
            data[spec.name] = value
    return data, errors


async def editor_fields(request: web.Request, principal: Principal, collection: Collection,
                        values: dict[str, Any], errors: dict[str, list[str]], *, shown: bool = False,
                        record: dict[str, Any] | None = None, editing: Localization | None = None) -> list[EditorField]:
    """The editor's fields: `values` are API JSON values (localized ones as objects; or, with `shown`,
    the form's own strings); the files listed are those of the stored `record` (its localized values as
    objects), the relations labelled from its `expand`; localized fields in the locale `editing`."""
    targets = await relation_targets(services(request), collection)
    editing = editing or localization(collection, None)
    out = []
    for spec in collection.fields:
        value: Any = values.get(spec.name)
        stored = (record or {}).get(spec.name)
        fallback, fallback_locale = fallback_of(stored, editing) if spec.localized else (None, None)
        if spec.localized:
            stored = stored.get(editing.locale) if isinstance(stored, dict) else None
            if not shown:
                value = value.get(editing.locale) if isinstance(value, dict) else None
        if not shown:
            shown_val = shown_value(spec, value)
            if spec.type == "bool" and spec.localized:
                shown_val = "" if value is None else str(bool(value)).lower()
        elif spec.type == "select":
            shown_val = list(value or [])
        elif spec.type == "bool" and not spec.localized:
            shown_val = bool(value) and list(value)[-1] in ("on", "true", "1")
        else:
            shown_val = list(value)[-1] if value else ""
        files: list[FileShown] = []
        fallback_text = None if fallback is None else _as_text(shown_value(spec, fallback))
        if spec.type == "file" and record is not None:
            if stored:  # a localized field: the edited locale's files, which an upload goes to
                files = await shown_files(request, collection, str(record["id"]), stored)
            if fallback is not None:  # the fallback's files by name
                shown_fallback = await shown_files(request, collection, str(record["id"]), fallback)
                fallback_text = ", ".join(f.filename or f.id for f in shown_fallback)
        target = targets.get(spec.name)
        labelled: list[Chosen] = []
        if target is not None:
            ids = value_list(value) if not shown else [p for p in re.split(r"[\s,]+", str(shown_val)) if p]
            labelled = chosen(ids, record, target)
        out.append(EditorField(spec=spec, widget=widget_of(spec), value=shown_val,
                               errors=errors.get(spec.name, []) + errors.get(f"data.{spec.name}", []),
                               files=files, multi=is_multi(spec), target=target,
                               chosen=labelled, localized=spec.localized, fallback_locale=fallback_locale,
                               fallback=fallback_text))
    return out


def _other_errors(collection: Collection, error: ErrorMessage | None) -> ErrorMessage | None:
    """The part of an error not shown beside a field (the detail always shows)."""
    if error is None:
        return None
    names = {f.name for f in collection.fields} | {f"data.{f.name}" for f in collection.fields}
    return ErrorMessage(detail=error.detail, code=error.code,
                        fields={k: v for k, v in error.fields.items() if k not in names})


async def _editor(request: web.Request, principal: Principal, collection: Collection, record: dict[str, Any] | None,
                  values: dict[str, Any], *, error: ErrorMessage | None = None, status: int = 200,
                  shown: bool = False) -> web.Response:
    editing = editor_locale(request, collection)
    fields = await editor_fields(request, principal, collection, values,
                                 error.fields if error else {}, shown=shown, record=record, editing=editing)
    tabs = locale_tabs(collection, editing, record)
    panel = (await draft_panel(request, principal, collection, record, editing.locale)
             if record and collection.drafts else None)
    return await render(request, "records/editor.html", status=status, collection=collection, record=record,
                        fields=fields, error=_other_errors(collection, error), drafts=panel,
                        file_prefix=FILE_INPUT_PREFIX, remove_prefix=REMOVE_PREFIX, max_pick=MAX_PICK_QUERY_CHARS,
                        locale_tabs=tabs, editing_locale=editing.locale if tabs else None,
                        fallbacks=editing.chain[1:])


async def record_json_of(request: web.Request, principal: Principal, collection: Collection,
                         record_id: str, view: RecordView = FULL) -> dict[str, Any]:
    """The record as `GET /api/v1/collections/{name}/records/{record_id}` answers it (view rule,
    read cache), as `view` shows it; in a collection with drafts, its working copy (`?draft=true`:
    what an editor edits). Raises NotFound, Unauthorized / Forbidden."""
    if collection.drafts:
        return await services(request).drafts.reads.get_json(principal, collection.name, record_id, view=view)
    return await services(request).records.get_json(collection.name, record_id, principal=principal, view=view)


async def labelled_record(request: web.Request, principal: Principal, collection: Collection,
                          record_id: str) -> dict[str, Any]:
    """`record_json_of` with its relations expanded (the editor's labels) and localized fields as objects
    (`?locale=*`). Raises like it."""
    view = replace(expand_view(await relation_targets(services(request), collection)), locale=ALL)
    return await record_json_of(request, principal, collection, record_id, view)


@admin_page
async def new(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/new: the empty editor."""
    collection = await services(request).catalog.by_name(request.match_info["collection_name"])
    return await _editor(request, principal, collection, None, {})


@admin_page
async def edit(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/{record_id}: the editor of one record (view rule, as the API)."""
    collection = await services(request).catalog.by_name(request.match_info["collection_name"])
    record = await labelled_record(request, principal, collection, request.match_info["record_id"])
    return await _editor(request, principal, collection, record, record)


# --- saving (streamed multipart) ---------------------------------------------------------------------


async def _read_text(part: FormPart, budget: list[int]) -> str:
    data = bytearray()
    async for chunk in part.chunks:
        data += chunk
        budget[0] -= len(chunk)
        if budget[0] < 0:
            raise PayloadTooLarge("The form's field values are too large")
    return bytes(data).decode("utf-8", errors="replace")


async def _drain(parts: AsyncIterator[FormPart]) -> None:
    """Read and drop the rest of the body, so the answer is not cut off by an unread upload."""
    try:
        async for part in parts:
            async for _ in part.chunks:
                pass
    except CmsError:
        pass


CSRF_REFUSED = ("The form has expired or did not come from this site (CSRF check failed). "
                "Reload the page and try again.")


async def _save(request: web.Request, principal: Principal, record_id: str | None) -> web.StreamResponse:
    """Parse the editor form and hand it to one service operation (`RecordService.draft`): file
    parts are stored as they arrive, the values saved last; on any refusal the draft has removed
    what it stored, and the editor is shown again with the error."""
    svc = services(request)
    collection = await svc.catalog.by_name(request.match_info["collection_name"])
    editing = editor_locale(request, collection)
    creating = record_id is None
    existing = None if creating else await labelled_record(request, principal, collection, record_id or "")
    if request.content_type != "multipart/form-data":
        raise PageRefused(400, "The editor form is sent as multipart/form-data.")
    parts = form_parts(request).__aiter__()
    budget = [MAX_FORM_TEXT_BYTES]
    if not csrf_token_matches(request, principal, request.headers.get(CSRF_HEADER)):
        # the form's first part must be the token: nothing is read, nor stored, before it is checked
        first = await anext(parts, None)
        if first is None or first.name != CSRF_FIELD:
            raise PageRefused(403, CSRF_REFUSED)
        if not csrf_token_matches(request, principal, await _read_text(first, budget)):
            raise PageRefused(403, CSRF_REFUSED)
    form: dict[str, list[str]] = {}
    uploaded: set[str] = set()
    try:
        async with svc.records.draft(principal, collection.name, record_id, locale=editing.locale) as draft:
            async for part in parts:
                if part.filename is None:
                    form.setdefault(part.name, []).append(await _read_text(part, budget))
                    continue
                name = part.name.removeprefix(FILE_INPUT_PREFIX)
                spec = collection.field(name)
                if part.filename and spec is not None and spec.type == "file":
                    await draft.add_file(name, part, append=is_multi(spec))
                    uploaded.add(name)
                else:
                    async for _ in part.chunks:
                        pass
            data, errors = form_data(collection, form, creating=creating, uploaded=frozenset(uploaded))
            if errors:
                raise ValidationFailed("Record validation failed", errors=errors)
            record = await draft.save(data)
    except CmsError as exc:
        await _drain(parts)
        return await _editor(request, principal, collection, existing, form, error=error_message(exc),
                             status=exc.status, shown=True)
    shown_locale = f"?locale={editing.locale}" if collection.localized_fields else ""
    response = redirect(f"{PREFIX}/collections/{collection.name}/records/{record.id}{shown_locale}", request)
    flash(response, request, "Record created" if creating else "Record saved", "success")
    return response


@streamed_admin_page
async def create(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/records/new: create a record (and upload its files)."""
    return await _save(request, principal, None)


@streamed_admin_page
async def update(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/records/{record_id}: save the record's fields (and upload files)."""
    return await _save(request, principal, request.match_info["record_id"])
