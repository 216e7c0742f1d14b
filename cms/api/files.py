"""Handlers of `/api/v1/files` (spec: Files): upload, download (ETag, single byte ranges) and delete.

Every file response carries `X-Content-Type-Options: nosniff` and `Content-Security-Policy:
sandbox`, and only the types of `services.files.INLINE_TYPES` are `inline`, so an uploaded file
never runs script on the service's origin.
"""

from __future__ import annotations

import logging

from aiohttp import web

from cms.api.guards import principal_of
from cms.api.responses import json_response
from cms.services import representation as represent
from cms.web.context import REQUEST_ID, services
from cms.web.files import etag_matches, file_headers, if_range_holds, parse_range
from cms.web.uploads import form_parts

log = logging.getLogger("cms.api")


async def upload_file(request: web.Request) -> web.Response:
    """201 with the stored file (FileSchema); the multipart body is streamed into the service."""
    principal = principal_of(request)
    file = await services(request).files.upload(principal, form_parts(request))
    return json_response(represent.file(file), status=201)


async def delete_file(request: web.Request) -> web.Response:
    """204, no body."""
    principal = principal_of(request)
    await services(request).files.delete(principal, request.match_info["file_id"])
    return web.Response(status=204)


async def get_file(request: web.Request) -> web.StreamResponse:
    """Stream the file: 200, 206 for one satisfiable `Range`, 304 when `If-None-Match` names its
    ETag. A failure after the first byte cuts the download short (the client sees fewer bytes
    than `Content-Length`, never a complete-looking file)."""
    principal = principal_of(request)
    content = await services(request).files.open(principal, request.match_info["file_id"])
    headers = file_headers(content)
    headers["X-Request-Id"] = request[REQUEST_ID]
    if etag_matches(request.headers.get("If-None-Match"), content.etag):
        return web.Response(status=304, headers=headers)
    size = content.file.size
    byte_range = None
    if if_range_holds(request.headers.get("If-Range"), content.etag):
        byte_range = parse_range(request.headers.get("Range"), size)
    start, end = byte_range if byte_range is not None else (0, size)
    response = web.StreamResponse(status=200 if byte_range is None else 206, headers=headers)
    if byte_range is not None:
        response.headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    response.content_length = end - start
    chunks = content.chunks(start, end)
    try:
        await response.prepare(request)
        async for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
    except ConnectionResetError:  # the client went away
        pass
    except Exception:
        log.exception("download of file %s failed mid-stream (request id %s)", content.file.id, request[REQUEST_ID])
        if request.transport is not None:
            request.transport.close()
    finally:
        await chunks.aclose()
    return response
