"""Handlers of `/api/v1/collections/{collection_name}/records` (spec: Records)."""

from __future__ import annotations

import logging

from aiohttp import web

from cms.api.guards import principal_of, signed_in_principal
from cms.api.responses import json_response
from cms.api.schemas import (
    BulkDeleteSchema,
    BulkUpdateSchema,
    RecordExportQuerySchema,
    RecordGetQuerySchema,
    RecordListQuerySchema,
    RecordWriteSchema,
)
from cms.errors import BadRequest
from cms.services import representation as represent
from cms.services.caching.read_cache import CachedBody
from cms.services.content.locales import MAX_CODE_LENGTH
from cms.services.representation.record_view import RecordView, view_of
from cms.web.context import REQUEST_ID, client_ip, parse_body, parse_query, services
from cms.web.files import etag_matches
from cms.web.uploads import form_parts, read_upload

log = logging.getLogger("cms.api")

# Built once: a marshmallow schema costs 20 to 50 us to construct, and these are on the hot path of
# every list and write (loading is reentrant: the instances hold no per-call state).
LIST_QUERY = RecordListQuerySchema()
GET_QUERY = RecordGetQuerySchema()
RECORD_WRITE = RecordWriteSchema()
SHARED_CACHE_CONTROL = "public, max-age=0, must-revalidate"
PRIVATE_CACHE_CONTROL = "private, max-age=0, must-revalidate"
PRIVATE_VARY = "Authorization, X-API-Key"
MAX_LOCALE_PARAMETER = 100
"""Longest `?locale=` read, in characters (a locale code has at most 35)."""
NO_STORE = {"Cache-Control": "private, no-store"}
"""Working copies (`draft=true`) are the editors' and change without an ETag to tell: never kept by a cache."""
FORM = "multipart/form-data"


async def list_records(request: web.Request) -> web.StreamResponse:
    """`GET .../records`: one page under the list rule, through the read cache (ETag, 304); with
    `explain=true` (admins) the page and its query plan, uncached."""
    # Other parameters (cache busters, `filter[title][$ne]=x`) are ignored, never read as a query.
    query = parse_query(request, LIST_QUERY)
    principal = principal_of(request)
    if query["draft"]:
        return json_response(await services(request).drafts.reads.list_json(
            principal, request.match_info["collection_name"], page=query["page"], per_page=query["per_page"],
            sort=query["sort"], filter_expr=query["filter"], search=query["search"], skip_total=query["skip_total"],
            view=record_view(request)), headers=NO_STORE)
    if query["explain"]:
        return json_response(await services(request).records.explain(
            request.match_info["collection_name"], page=query["page"], per_page=query["per_page"], sort=query["sort"],
            filter_expr=query["filter"], search=query["search"], principal=principal, view=record_view(request)))
    cached = await services(request).records.list_body(
        request.match_info["collection_name"],
        page=query["page"],
        per_page=query["per_page"],
        sort=query["sort"],
        filter_expr=query["filter"],
        search=query["search"],
        skip_total=query["skip_total"],
        principal=principal,
        view=record_view(request),
        client_ip=client_ip(request),
    )
    return cached_response(request, cached)


async def get_record(request: web.Request) -> web.StreamResponse:
    """`GET .../records/{record_id}`: one record under the view rule, through the read cache; with
    `draft=true` its working copy (update and view rules), uncached."""
    principal = principal_of(request)
    if "draft" in request.query and parse_query(request, GET_QUERY)["draft"]:  # readers pay one dict look-up
        return json_response(await services(request).drafts.reads.get_json(
            principal, request.match_info["collection_name"], request.match_info["record_id"],
            view=record_view(request)), headers=NO_STORE)
    cached = await services(request).records.get_body(
        request.match_info["collection_name"], request.match_info["record_id"], principal=principal,
        view=record_view(request), client_ip=client_ip(request),
    )
    return cached_response(request, cached)


def record_view(request: web.Request) -> RecordView:
    """The view the `expand`, `fields` and `locale` query parameters ask for (`FULL` without them; read
    straight from the query, so a read without them costs no schema load). Raises InvalidFilter, or
    BadRequest as `query_locale` does."""
    return view_of(request.query.get("expand"), request.query.get("fields"), query_locale(request))


def query_locale(request: web.Request) -> str | None:
    """The `?locale=` asked (None: not given), for `localization` to check against the configured
    locales (decisions.md, Localized fields). Raises BadRequest (400 `bad_request`, as any unknown
    locale) for one over MAX_LOCALE_PARAMETER characters, which no configured code is."""
    locale = request.query.get("locale")
    if locale is not None and len(locale) > MAX_LOCALE_PARAMETER:
        raise BadRequest(f"Unknown locale '{locale[:MAX_CODE_LENGTH]}...' (a locale code has at most "
                         f"{MAX_CODE_LENGTH} characters)")
    return locale


def cached_response(request: web.Request, cached: CachedBody) -> web.Response:
    """A read's answer with HTTP caching (issue "Fast reads"): `ETag`, 304 when `If-None-Match`
    names it, and `Cache-Control` saying whether shared caches may keep it (`public` when every
    caller gets this body, `private` when the collection's rule depends on the caller); either way
    clients revalidate every time (`max-age=0, must-revalidate`), so a write is seen at once."""
    if cached.shared:
        headers = {"ETag": cached.etag, "Cache-Control": SHARED_CACHE_CONTROL}
    else:
        headers = {"ETag": cached.etag, "Cache-Control": PRIVATE_CACHE_CONTROL, "Vary": PRIVATE_VARY}
    if cached.language is not None:
        headers["Content-Language"] = cached.language
    if etag_matches(request.headers.get("If-None-Match"), cached.etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=cached.body, content_type="application/json", headers=headers)


async def create_record(request: web.Request) -> web.Response:
    """`POST .../records`: 201 with the record, if the create rule allows it; a JSON body, or a
    multipart/form-data one carrying files (`RecordService.save_form`)."""
    principal = principal_of(request)
    name = request.match_info["collection_name"]
    view = record_view(request)
    present = await services(request).records.presenter(name, view, principal)
    if request.content_type == FORM:
        record = await services(request).records.save_form(principal, name, None, form_parts(request),
                                                           locale=view.locale)
    else:
        body = await parse_body(request, RECORD_WRITE)
        record = await services(request).records.create(principal, name, body["data"], locale=view.locale)
    return json_response(await present(record), status=201, headers={"Content-Language": present.language})


async def update_record(request: web.Request) -> web.Response:
    """`PATCH .../records/{record_id}`: the changed record, under the view and update rules; a JSON
    body, or a multipart/form-data one carrying files (`RecordService.save_form`)."""
    principal = principal_of(request)
    name, record_id = request.match_info["collection_name"], request.match_info["record_id"]
    view = record_view(request)
    present = await services(request).records.presenter(name, view, principal)
    if request.content_type == FORM:
        record = await services(request).records.save_form(principal, name, record_id, form_parts(request),
                                                           locale=view.locale)
    else:
        body = await parse_body(request, RECORD_WRITE)
        record = await services(request).records.update(principal, name, record_id, body["data"],
                                                        locale=view.locale)
    return json_response(await present(record), headers={"Content-Language": present.language})


async def delete_record(request: web.Request) -> web.Response:
    """`DELETE .../records/{record_id}`: 204, under the view and delete rules."""
    principal = principal_of(request)
    await services(request).records.delete(
        principal, request.match_info["collection_name"], request.match_info["record_id"]
    )
    return web.Response(status=204)


# --- bulk and CSV ------------------------------------------------------------------------------


async def bulk_delete_records(request: web.Request) -> web.Response:
    """`POST .../records/bulk-delete`: `{deleted}`; all or nothing; credentials required."""
    principal = signed_in_principal(request)
    body = await parse_body(request, BulkDeleteSchema())
    deleted = await services(request).records.bulk_delete(
        principal, request.match_info["collection_name"], body["record_ids"]
    )
    return json_response(represent.bulk_deleted(deleted))


async def bulk_update_records(request: web.Request) -> web.Response:
    """`POST .../records/bulk-update`: `{updated}`; all or nothing; credentials required."""
    principal = signed_in_principal(request)
    body = await parse_body(request, BulkUpdateSchema())
    updated = await services(request).records.bulk_update(
        principal, request.match_info["collection_name"], body["record_ids"], body["data"],
        locale=record_view(request).locale,
    )
    return json_response(represent.bulk_updated(updated))


async def export_records_csv(request: web.Request) -> web.StreamResponse:
    """Stream the CSV; a failure after the first byte cuts the download short (the client sees an
    incomplete chunked body, never a complete-looking file)."""
    principal = signed_in_principal(request)
    query = parse_query(request, RecordExportQuerySchema())
    export = await services(request).records.export_csv(
        principal, request.match_info["collection_name"],
        sort=query["sort"], filter_expr=query["filter"], search=query["search"], locale=query["locale"],
    )
    response = web.StreamResponse(headers={
        "Content-Type": "text/csv; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{export.filename}"',
        "Cache-Control": "no-store",
        "X-Request-Id": request[REQUEST_ID],
        **({"Content-Language": export.language} if export.language else {}),
    })
    try:
        await response.prepare(request)
        async for chunk in export.chunks:
            await response.write(chunk.encode("utf-8"))
        await response.write_eof()
    except ConnectionResetError:  # the client went away
        pass
    except Exception:
        log.exception("CSV export of %s failed mid-stream (request id %s)",
                      request.match_info["collection_name"], request[REQUEST_ID])
        if request.transport is not None:
            request.transport.close()
    finally:
        await export.chunks.aclose()
    return response


async def import_records_csv(request: web.Request) -> web.Response:
    """`POST .../records/import/csv`: `{imported, failed}`; the create rule per row."""
    principal = signed_in_principal(request)
    content = await read_upload(request, "file", await services(request).records.import_max_bytes())
    result = await services(request).records.import_csv(principal, request.match_info["collection_name"], content)
    return json_response(represent.csv_import(result))
