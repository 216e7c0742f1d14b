"""Handlers of `/api/v1/files` (spec: Files; decisions.md, Files in records, thumbnails and file
tokens): upload, download (ETag, single byte ranges, thumbnails, file tokens), delete, and file tokens.

Every file response carries `X-Content-Type-Options: nosniff` and `Content-Security-Policy:
sandbox`, and only the types of `file_parts.INLINE_TYPES` are `inline`, so an uploaded file
never runs script on the service's origin.
"""

from __future__ import annotations

import logging

from aiohttp import web

from cms.api.guards import presented_credential, principal_of, signed_in_principal
from cms.api.responses import json_response
from cms.api.schemas.files import MAX_QUERY_VALUE
from cms.errors import Unauthorized, ValidationFailed
from cms.services import representation as represent
from cms.web.context import REQUEST_ID, services
from cms.web.files import etag_matches, file_headers, if_range_holds, parse_range
from cms.web.uploads import form_parts

log = logging.getLogger("cms.api")



def _query_value(request: web.Request, name: str) -> str | None:
    """The query parameter `name` (`FileDownloadQuerySchema` documents them), or None. Raises
    ValidationFailed past MAX_QUERY_VALUE characters."""
    value = request.query.get(name)
    if value is not None and len(value) > MAX_QUERY_VALUE:
        raise ValidationFailed(f"'{name}' is too long", errors={name: [f"At most {MAX_QUERY_VALUE} characters."]})
    return value


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


async def file_token(request: web.Request) -> web.Response:
    """`POST /api/v1/files/token`: 200 `{token, expires}`, a file token of the caller's credential."""
    signed_in_principal(request)
    credential = presented_credential(request)
    if credential is None:
        raise Unauthorized("Credentials are required")
    token, expires = await services(request).files.tokens.issue(credential)
    return json_response(represent.file_token(token, expires))


async def get_file(request: web.Request) -> web.StreamResponse:
    """Stream the file, or with `thumb` its thumbnail: 200, 206 for one satisfiable `Range`, 304
    when `If-None-Match` names its ETag. A failure after the first byte cuts the download short (the
    client sees fewer bytes than `Content-Length`, never a complete-looking file)."""
    principal = principal_of(request)
    # read straight from the query (no schema load on the path of every thumbnail), bounded as documented
    thumb, fmt, token = (_query_value(request, name) for name in ("thumb", "format", "token"))
    content = await services(request).files.open(principal, request.match_info["file_id"], token=token,
                                                 thumb=thumb, fmt=fmt)
    headers = file_headers(content)
    headers["X-Request-Id"] = request[REQUEST_ID]
    if etag_matches(request.headers.get("If-None-Match"), content.etag):
        return web.Response(status=304, headers=headers)
    size = content.file.size
    byte_range = None
    if if_range_holds(request.headers.get("If-Range"), content.etag):
        byte_range = parse_range(request.headers.get("Range"), size)
    start, end = byte_range if byte_range is not None else (0, size)
    if content.data is not None:  # a thumbnail, in memory: one write
        status = 200 if byte_range is None else 206
        if byte_range is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        return web.Response(status=status, body=content.data[start:end], headers=headers)
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
