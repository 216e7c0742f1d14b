"""Records (`/_/collections/{name}/records`): the records table and the record editor.

The table reads the same cached list body as `GET /api/v1/collections/{name}/records`
(`services.records.list_body`, the read cache) with the admin's Principal: the filter grammar, sort,
search, page and per_page are passed through unchanged, so the page shows exactly what the API
answers (InvalidFilter messages inline). Column choice is kept in the query string (`cols`).

The editor (create, edit) is one multipart form, read as a stream (with cms/web/uploads.py, so
`client_max_size` does not limit the files): the CSRF token first, then the field values, then the
file inputs. Values go to `records.create` / `records.update` (the service validates and reports
per field); files go to `files.upload` (the same service as `POST /api/v1/files`) once the record
exists, and their ids are then set on the record's file fields. A refused record changes nothing:
a record created for its files is deleted again when an upload fails, and files uploaded while
editing are deleted when the record's update is refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

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
from cms.errors import CmsError, PayloadTooLarge
from cms.models import Collection, FieldSpec, Principal
from cms.services.content.fields import is_multi
from cms.services.content.files import FormPart
from cms.services.content.records import DEFAULT_PER_PAGE, MAX_PER_PAGE
from cms.web.context import services
from cms.web.files import file_headers
from cms.web.uploads import form_parts

SYSTEM_COLUMNS = ("created", "updated")
MAX_SEARCH_CHARS = 500
MAX_FORM_TEXT_BYTES = 1024 * 1024
"""The field values of one editor form (files aside) may total this many bytes."""
CELL_CHARS = 120
FILE_INPUT_PREFIX = "upload__"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp")
_INT = re.compile(r"[+-]?\d+")


# --- the table ---------------------------------------------------------------------------------------


@dataclass
class TableState:
    """What the table shows, as read from (and written back to) the query string."""

    filter: str = ""
    search: str = ""
    sort: str = ""
    page: int = 1
    per_page: int = DEFAULT_PER_PAGE
    cols: list[str] | None = None  # None: every column
    problems: dict[str, str] = field(default_factory=dict)

    def params(self, **changes: Any) -> list[tuple[str, str]]:
        """The query string's pairs of this state with `changes` (defaults left out)."""
        values = {"filter": self.filter, "search": self.search, "sort": self.sort,
                  "page": str(self.page), "per_page": str(self.per_page)}
        values.update({k: str(v) for k, v in changes.items() if k != "cols"})
        out = [(k, v) for k, v in values.items() if v and not (k == "page" and v == "1")
               and not (k == "per_page" and v == str(DEFAULT_PER_PAGE))]
        cols = changes.get("cols", self.cols)
        if cols is not None:
            out += [("cols", "")] + [("cols", c) for c in cols]
        return out


def _int_param(query: Any, name: str, default: int, high: int, problems: dict[str, str], *, clamp: bool) -> int:
    """A positive whole number from the query string: above `high` it is clamped (`clamp`, as the
    API clamps per_page) or reported; below 1 or not a number it is reported (the API's 422)."""
    raw = query.get(name, "").strip()
    if not raw:
        return default
    if not _INT.fullmatch(raw) or int(raw) < 1 or (int(raw) > high and not clamp):
        problems[name] = f"{name} must be a whole number from 1 to {high}."
        return default
    return min(int(raw), high)


def table_state(request: web.Request, collection: Collection) -> TableState:
    """The table's state from the query string (bad page or per_page values are reported, not used)."""
    query = request.query
    problems: dict[str, str] = {}
    state = TableState(
        filter=query.get("filter", ""), search=query.get("search", ""), sort=query.get("sort", "").strip(),
        page=_int_param(query, "page", 1, 1_000_000, problems, clamp=False),
        per_page=_int_param(query, "per_page", DEFAULT_PER_PAGE, MAX_PER_PAGE, problems, clamp=True),
        problems=problems,
    )
    if len(state.search) > MAX_SEARCH_CHARS:
        problems["search"] = f"search may have at most {MAX_SEARCH_CHARS} characters."
        state.search = state.search[:MAX_SEARCH_CHARS]
    if "cols" in query:
        known = [f.name for f in collection.fields] + list(SYSTEM_COLUMNS)
        chosen = set(query.getall("cols"))
        state.cols = [c for c in known if c in chosen]
    return state


def _cell(spec: FieldSpec | None, value: Any) -> str:
    """A value as the table's text (escaped by the template): lists joined, JSON compact, cut short."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and spec is not None and spec.type != "json":
        text = ", ".join(str(v) for v in value)
    elif isinstance(value, dict | list):
        text = orjson.dumps(value).decode()
    else:
        text = str(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records: one page of the records table, from the same cached
    list body as the REST list."""
    svc = services(request)
    collection = await svc.collections.get_by_name(request.match_info["collection_name"])
    state = table_state(request, collection)
    error: ErrorMessage | None = None
    status = 200
    listing: dict[str, Any] = {"items": [], "total": 0, "page": state.page, "per_page": state.per_page}
    if state.problems:
        error, status = ErrorMessage(detail="Invalid table parameters", code="validation_error",
                                     fields={k: [v] for k, v in state.problems.items()}), 422
    else:
        try:
            cached = await svc.records.list_body(
                collection.name, page=state.page, per_page=state.per_page, sort=state.sort or None,
                filter_expr=state.filter or None, search=state.search or None, principal=principal)
            listing = orjson.loads(cached.body)
        except CmsError as exc:
            if exc.status == 404:
                raise
            error, status = error_message(exc), exc.status
    specs = {f.name: f for f in collection.fields}
    columns = state.cols if state.cols is not None else [*specs, *SYSTEM_COLUMNS]
    total = int(listing["total"])
    pages = max(1, math.ceil(total / state.per_page)) if total > 0 else 1
    rows = [(item["id"], [(c, _cell(specs.get(c), item.get(c))) for c in columns]) for item in listing["items"]]

    def url(**changes: Any) -> str:
        return f"{PREFIX}/collections/{collection.name}/records?{urlencode(state.params(**changes))}"

    def sort_link(column: str) -> tuple[str, str]:
        """(url, current direction '', 'asc' or 'desc') of a column header."""
        current = state.sort.split(",")[0] if state.sort else ""
        if current == column:
            return url(sort="-" + column, page=1), "asc"
        if current == "-" + column:
            return url(sort=column, page=1), "desc"
        return url(sort=column, page=1), ""

    return await render(
        request, "records/index.html", status=status, collection=collection, state=state, error=error,
        columns=columns, all_columns=[*specs, *SYSTEM_COLUMNS], rows=rows, total=total, pages=pages,
        url=url, sort_link=sort_link, per_page_choices=(10, 30, 50, 100),
    )


# --- the editor --------------------------------------------------------------------------------------


@dataclass
class EditorField:
    """One field of the editor: its spec, the widget, the value as the form shows it, its errors."""

    spec: FieldSpec
    widget: str
    value: Any
    errors: list[str]
    files: list[dict[str, Any]] = field(default_factory=list)
    multi: bool = False


def widget_of(spec: FieldSpec) -> str:
    """The input used for a field type."""
    if spec.type in ("editor", "json"):
        return "textarea"
    if spec.type == "bool":
        return "checkbox"
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
        return "ids"
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


def parse_field(spec: FieldSpec, raw: list[str], *, creating: bool) -> tuple[bool, Any]:
    """(present, value) of one field from the form's strings. Empty means "leave out" when creating
    and "clear" (None) when editing; what does not parse is passed on as given, for the service to
    refuse with its own message (a number field's `abc`). Raises ValueError for invalid JSON."""
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
    if spec.type in ("relation", "file"):
        ids = [p for p in re.split(r"[\s,]+", text) if p]
        return True, ids if is_multi(spec) else (ids[-1] if ids else None)
    return True, text


def form_data(collection: Collection, form: dict[str, list[str]], *, creating: bool
              ) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The record `data` of a submitted form and the errors found before the service is asked."""
    data: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for spec in collection.fields:
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


async def _file_info(request: web.Request, principal: Principal, file_id: str) -> dict[str, Any]:
    try:
        content = await services(request).files.open(principal, file_id)
    except CmsError:
        return {"id": file_id, "missing": True}
    f = content.file
    return {"id": f.id, "filename": f.filename, "size": f.size, "content_type": f.content_type,
            "image": f.content_type.partition(";")[0] in IMAGE_TYPES, "missing": False}


async def editor_fields(request: web.Request, principal: Principal, collection: Collection,
                        values: dict[str, Any], errors: dict[str, list[str]], *, shown: bool = False,
                        record: dict[str, Any] | None = None) -> list[EditorField]:
    """The editor's fields: `values` are API JSON values (or, with `shown`, the form's own strings);
    the files listed are those of the stored `record`."""
    out = []
    for spec in collection.fields:
        value: Any = values.get(spec.name)
        if not shown:
            shown_val = shown_value(spec, value)
        elif spec.type == "select":
            shown_val = list(value or [])
        elif spec.type == "bool":
            shown_val = bool(value) and list(value)[-1] in ("on", "true", "1")
        else:
            shown_val = list(value)[-1] if value else ""
        files: list[dict[str, Any]] = []
        stored = (record or {}).get(spec.name)
        if spec.type == "file" and stored:
            for file_id in (stored if isinstance(stored, list) else [stored])[:20]:
                files.append(await _file_info(request, principal, str(file_id)))
        out.append(EditorField(spec=spec, widget=widget_of(spec), value=shown_val,
                               errors=errors.get(spec.name, []) + errors.get(f"data.{spec.name}", []),
                               files=files, multi=is_multi(spec)))
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
    fields = await editor_fields(request, principal, collection, values,
                                 error.fields if error else {}, shown=shown, record=record)
    return await render(request, "records/editor.html", status=status, collection=collection, record=record,
                        fields=fields, error=_other_errors(collection, error),
                        file_prefix=FILE_INPUT_PREFIX)


async def _record_json(request: web.Request, principal: Principal, collection: Collection,
                       record_id: str) -> dict[str, Any]:
    cached = await services(request).records.get_body(collection.name, record_id, principal=principal)
    body: dict[str, Any] = orjson.loads(cached.body)
    return body


@admin_page
async def new(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/new: the empty editor."""
    collection = await services(request).collections.get_by_name(request.match_info["collection_name"])
    return await _editor(request, principal, collection, None, {})


@admin_page
async def edit(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/{record_id}: the editor of one record (view rule, as the API)."""
    collection = await services(request).collections.get_by_name(request.match_info["collection_name"])
    record = await _record_json(request, principal, collection, request.match_info["record_id"])
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


async def _single(values: list[tuple[str, str]], file_part: FormPart) -> AsyncIterator[FormPart]:
    """The parts of one upload to the file service: the target fields, then the file."""
    for name, value in values:
        yield FormPart(name=name, filename=None, content_type=None, chunks=_bytes(value.encode()))
    yield FormPart(name="file", filename=file_part.filename, content_type=file_part.content_type,
                   chunks=file_part.chunks)


async def _bytes(data: bytes) -> AsyncIterator[bytes]:
    yield data


CSRF_REFUSED = ("The form has expired or did not come from this site (CSRF check failed). "
                "Reload the page and try again.")


async def _save(request: web.Request, principal: Principal, record_id: str | None) -> web.StreamResponse:
    svc = services(request)
    collection = await svc.collections.get_by_name(request.match_info["collection_name"])
    creating = record_id is None
    existing = None if creating else await _record_json(request, principal, collection, record_id or "")
    if request.content_type != "multipart/form-data":
        raise PageRefused(400, "The editor form is sent as multipart/form-data.")
    parts = form_parts(request).__aiter__()
    budget = [MAX_FORM_TEXT_BYTES]
    form: dict[str, list[str]] = {}
    if not csrf_token_matches(request, principal, request.headers.get(CSRF_HEADER)):
        # the form's first part must be the token: nothing is read, nor stored, before it is checked
        first = await anext(parts, None)
        if first is None or first.name != CSRF_FIELD:
            raise PageRefused(403, CSRF_REFUSED)
        if not csrf_token_matches(request, principal, await _read_text(first, budget)):
            raise PageRefused(403, CSRF_REFUSED)

    uploaded: dict[str, list[str]] = {}
    saved_id = record_id
    created = False
    data: dict[str, Any] = {}

    async def refuse(exc: CmsError | None, errors: dict[str, list[str]] | None = None) -> web.Response:
        await _drain(parts)
        for ids in uploaded.values():  # a refused save leaves nothing behind
            for file_id in ids:
                try:
                    await svc.files.delete(principal, file_id)
                except CmsError:
                    pass
        if created and saved_id is not None:
            try:
                await svc.records.delete(principal, collection.name, saved_id)
            except CmsError:
                pass
        if exc is None:
            error = ErrorMessage(detail="Record validation failed", code="validation_error", fields=errors or {})
            status = 422
        else:
            error, status = error_message(exc), exc.status
        return await _editor(request, principal, collection, existing, form, error=error, status=status, shown=True)

    async def write_values() -> tuple[str, web.Response | None]:
        nonlocal data, created
        data, errors = form_data(collection, form, creating=creating)
        if errors:
            return "", await refuse(None, errors)
        try:
            if creating:
                record = await svc.records.create(principal, collection.name, data)
                created = True
                return record.id, None
        except CmsError as exc:
            return "", await refuse(exc)
        return record_id or "", None

    try:
        async for part in parts:
            if part.filename is None:
                form.setdefault(part.name, []).append(await _read_text(part, budget))
                continue
            name = part.name.removeprefix(FILE_INPUT_PREFIX)
            spec = collection.field(name)
            if not part.filename or spec is None or spec.type != "file":
                async for _ in part.chunks:
                    pass
                continue
            if saved_id is None:
                saved_id, refused = await write_values()
                if refused is not None:
                    return refused
            target = [("collection", collection.name), ("record_id", saved_id)]
            stored = await svc.files.upload(principal, _single(target, part))
            uploaded.setdefault(name, []).append(stored.id)
    except CmsError as exc:
        return await refuse(exc)

    if saved_id is None or not creating:
        if creating:
            saved_id, refused = await write_values()
            if refused is not None:
                return refused
        else:
            data, errors = form_data(collection, form, creating=False)
            if errors:
                return await refuse(None, errors)
    changes: dict[str, Any] = {} if creating else dict(data)
    for name, ids in uploaded.items():
        spec = collection.field(name)
        assert spec is not None
        if is_multi(spec):
            before = data.get(name) or []
            changes[name] = [*before, *ids]  # past max_select the service refuses (files deleted)
        else:
            changes[name] = ids[-1]
    if changes or not creating:
        try:
            await svc.records.update(principal, collection.name, saved_id or "", changes)
        except CmsError as exc:
            return await refuse(exc)
    response = redirect(f"{PREFIX}/collections/{collection.name}/records/{saved_id}", request)
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


@admin_page
async def confirm_delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/{record_id}/delete: asks before deleting (no script dialog)."""
    collection = await services(request).collections.get_by_name(request.match_info["collection_name"])
    record = await _record_json(request, principal, collection, request.match_info["record_id"])
    return await render(request, "records/delete.html", collection=collection, record=record)


@admin_page
async def delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/records/{record_id}/delete: delete the record (the form asks first)."""
    name = request.match_info["collection_name"]
    await services(request).records.delete(principal, name, request.match_info["record_id"])
    response = redirect(f"{PREFIX}/collections/{name}/records", request)
    flash(response, request, "Record deleted", "success")
    return response


@admin_page
async def file(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/{record_id}/files/{file_id}: the file for a preview or a
    link, through the same file service (and headers: nosniff, inline only for safe types) as
    `GET /api/v1/files/{file_id}`."""
    content = await services(request).files.open(principal, request.match_info["file_id"])
    headers = file_headers(content)
    response = web.StreamResponse(headers=headers)
    response.content_length = content.file.size
    chunks = content.chunks(0, content.file.size)
    try:
        await response.prepare(request)
        async for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
    except ConnectionResetError:
        pass
    finally:
        await chunks.aclose()
    return response


def routes() -> list[web.RouteDef]:
    """The records screen's routes."""
    base = PREFIX + "/collections/{collection_name}/records"
    return [
        web.get(base, index, name="admin_ui.records"),
        web.get(base + "/new", new),
        web.post(base + "/new", create),
        web.get(base + "/{record_id}", edit),
        web.post(base + "/{record_id}", update),
        web.get(base + "/{record_id}/delete", confirm_delete),
        web.post(base + "/{record_id}/delete", delete),
        web.get(base + "/{record_id}/files/{file_id}", file),
    ]

