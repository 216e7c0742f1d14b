"""Handlers of `/api/v1/files` (spec: Files): upload, download (ETag, single byte ranges) and delete.

Every file response carries `X-Content-Type-Options: nosniff` and `Content-Security-Policy:
sandbox`, and only the types of `services.files.INLINE_TYPES` are `inline`, so an uploaded file
never runs script on the service's origin.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from urllib.parse import quote

from aiohttp import web

from cms.api.context import REQUEST_ID, services
from cms.api.guards import principal_of
from cms.api.responses import json_response
from cms.api.schemas import FileSchema
from cms.api.uploads import form_parts
from cms.errors import BadRequest
from cms.services.content.files import FileContent

log = logging.getLogger("cms.api")

SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"}
_RANGE = re.compile(r"\s*([0-9]{0,19})\s*-\s*([0-9]{0,19})\s*")
_ATTR_CHARS = "!#$&+-.^_`|~"  # RFC 8187 attr-char besides letters and digits


async def upload_file(request: web.Request) -> web.Response:
    """201 with the stored file (FileSchema); the multipart body is streamed into the service."""
    principal = principal_of(request)
    file = await services(request).files.upload(principal, form_parts(request))
    return json_response(FileSchema().dump(file), status=201)


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


def file_headers(content: FileContent) -> dict[str, str]:
    """The headers of every answer about a file (200, 206, 304): type, disposition, ETag, ranges,
    caching (revalidate every time; `private` for the files of auth-collection users) and the
    security headers."""
    return {
        "Content-Type": content.file.content_type,
        "Content-Disposition": content_disposition("inline" if content.inline else "attachment",
                                                   content.file.filename),
        "ETag": content.etag,
        "Accept-Ranges": "bytes",
        "Cache-Control": "private, no-cache" if content.private else "no-cache",
        **SECURITY_HEADERS,
    }


def content_disposition(kind: str, filename: str) -> str:
    """`inline` or `attachment` with the name twice (RFC 6266): an ASCII `filename="..."` fallback
    (accents dropped, other characters `_`) and the exact name as `filename*=UTF-8''<percent-encoded>`."""
    fallback = unicodedata.normalize("NFKD", filename).encode("ascii", "ignore").decode("ascii")
    fallback = re.sub(r'[^\x20-\x7e]|["\\%]', "_", fallback).strip()
    stem, dot, extension = fallback.rpartition(".") if "." in fallback else (fallback, "", "")
    if not any(c.isalnum() for c in stem):  # nothing readable left of the name (`文件.pdf` -> `.pdf`)
        fallback = "file" + (f".{extension}" if dot and extension.isalnum() else "")
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe=_ATTR_CHARS)}"


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an `If-None-Match` value (`*` or a list of ETags, weak or strong) names `etag`
    (weak comparison, RFC 9110 13.1.2)."""
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or any(t.removeprefix("W/") == etag for t in tags)


def if_range_holds(if_range: str | None, etag: str) -> bool:
    """Whether a `Range` may be honoured: no `If-Range`, or one naming this strong ETag (a date or
    another tag means the client's copy is stale: send the whole file)."""
    return if_range is None or if_range.strip() == etag


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The byte range asked for by a `Range` header, as (start, end) with `end` exclusive, for a
    file of `size` bytes; None to send the whole file (no header, another unit, or several ranges,
    which are not supported). Forms: `bytes=a-b`, `bytes=a-`, `bytes=-n` (the last n bytes).
    Raises BadRequest for a malformed single range (`b < a`, not numbers) or one that cannot be
    satisfied (`a` at or past the end, `-0`, any range of an empty file)."""
    if header is None:
        return None
    unit, equals, spec = header.partition("=")
    if not equals or unit.strip().lower() != "bytes" or "," in spec:
        return None
    match = _RANGE.fullmatch(spec)
    if match is None or not (match.group(1) or match.group(2)):
        raise BadRequest(f"Malformed Range header {header[:100]!r}: expected bytes=first-last, first- or -suffix")
    first, last = match.group(1), match.group(2)
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise BadRequest(f"Range {header[:100]!r} cannot be satisfied: the file has {size} bytes")
        return max(0, size - suffix), size
    start = int(first)
    if last and int(last) < start:
        raise BadRequest(f"Malformed Range header {header[:100]!r}: the last byte is before the first")
    if start >= size:
        raise BadRequest(f"Range {header[:100]!r} cannot be satisfied: the file has {size} bytes")
    return start, (min(int(last), size - 1) + 1 if last else size)
