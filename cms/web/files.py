"""File responses shared by the API and the admin UI: the headers of a stored file (type,
disposition, ETag, caching and the `sandbox` security headers), conditional and range requests
(RFC 9110) and the backup archive download (decisions.md, Files and Backups)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import quote

from aiohttp import web

from cms.errors import BadRequest
from cms.services.content.file_downloads import FileContent

SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"}
_RANGE = re.compile(r"\s*([0-9]{0,19})\s*-\s*([0-9]{0,19})\s*")
_ATTR_CHARS = "!#$&+-.^_`|~"  # RFC 8187 attr-char besides letters and digits


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


def backup_file_response(filename: str, path: Path) -> web.FileResponse:
    """The response sending the backup archive at `path` as the attachment `filename`
    (`application/gzip`; REST and the admin UI)."""
    return web.FileResponse(path, headers={"Content-Type": "application/gzip",
                                           "Content-Disposition": f'attachment; filename="{filename}"'})
