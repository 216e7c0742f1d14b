"""Reading form bodies: multipart/form-data streamed and bounded, one file out of a form (`read_upload`)
or every part in turn (`form_parts`), and small forms whole (`read_form`); each reads a body to its
closing boundary, or refuses it (400)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import BodyPartReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import MultiDictProxy

from cms.errors import BadRequest, PayloadTooLarge, ValidationFailed
from cms.services.content.file_parts import FormPart

CHUNK_BYTES = 64 * 1024
OTHER_PARTS_BYTES = 64 * 1024
"""Besides the file, a request may carry this much in other form fields (all are read and dropped)."""
MALFORMED = (ValueError, HttpProcessingError)
"""What aiohttp's multipart reader raises for a malformed body: ValueError (missing boundary, bad
encoding) or HttpProcessingError (a part header that does not parse, e.g. `InvalidHeader`)."""


async def read_upload(request: web.Request, field_name: str, max_bytes: int) -> bytes:
    """The bytes of the first form field `field_name` of a multipart/form-data body, once the whole
    body has been read up to its closing boundary (`form_parts`): a body cut off anywhere gives
    BadRequest, never a file cut short.

    The body is streamed (aiohttp's `client_max_size` does not apply to `request.multipart()`), and
    reading stops as soon as the file passes `max_bytes` or the other fields pass OTHER_PARTS_BYTES.
    Raises BadRequest (not multipart, malformed or truncated multipart), PayloadTooLarge (413) or
    ValidationFailed (422, `errors: {field_name: [...]}`: no such field)."""
    if request.content_type != "multipart/form-data":
        raise BadRequest(f"Send the file as multipart/form-data in the form field '{field_name}'")
    limit_mib = max_bytes / 2**20
    content: bytes | None = None
    other_bytes = 0
    async for part in form_parts(request):
        if part.name == field_name and content is None:
            chunks: list[bytes] = []
            size = 0
            async for chunk in part.chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise PayloadTooLarge(f"The file is larger than {limit_mib:g} MiB")
                chunks.append(chunk)
            content = b"".join(chunks)
            continue
        async for chunk in part.chunks:
            other_bytes += len(chunk)
            if other_bytes > OTHER_PARTS_BYTES:
                raise PayloadTooLarge(f"Form fields other than '{field_name}' are too large")
    if content is None:
        raise ValidationFailed(
            f"No form field '{field_name}' in the upload",
            errors={field_name: [f"Missing: send the file in the multipart form field '{field_name}'."]},
        )
    return content


FILE_CHUNK_BYTES = 256 * 1024
TRUNCATED = "Malformed multipart body: it ends before its closing boundary"
"""The detail of the 400 for a body cut off inside a part."""


async def form_parts(request: web.Request) -> AsyncIterator[FormPart]:
    """The parts of a multipart/form-data body, one at a time, each with its body streamed in
    chunks of at most 256 KiB (`client_max_size` does not apply). The consumer must read each
    part's chunks before asking for the next part. The iteration ends only at the body's closing
    boundary (`--<boundary>--`), so a consumer that reads every part has seen a whole body; a body
    that ends without it, inside a part or between parts, raises BadRequest (the one check of a
    truncated multipart body: every multipart endpoint reads through here). Raises BadRequest (not
    multipart, malformed, truncated or nested multipart), while iterating the parts or their chunks."""
    if request.content_type != "multipart/form-data":
        raise BadRequest("Send the upload as multipart/form-data")
    try:
        reader = await request.multipart()
    except MALFORMED as exc:
        raise _malformed(exc) from None
    while True:
        try:
            part = await reader.next()
        except MALFORMED as exc:
            raise _malformed(exc) from None
        if part is None:  # aiohttp answers None only once it has read the closing boundary
            return
        if not isinstance(part, BodyPartReader):
            raise BadRequest("Nested multipart bodies are not accepted")
        yield FormPart(name=part.name or "", filename=part.filename,
                       content_type=part.headers.get(hdrs.CONTENT_TYPE), chunks=_part_chunks(part))


async def _part_chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    try:
        while chunk := await part.read_chunk(FILE_CHUNK_BYTES):
            yield chunk
    except MALFORMED as exc:
        raise _malformed(exc) from None
    if not part.at_eof():
        # aiohttp ends a part's chunks at the end of the body as at its boundary: only a part that
        # met its boundary is at its end, so the last chunks of a cut-off part are never taken as whole
        raise BadRequest(TRUNCATED)


async def read_form(request: web.Request) -> MultiDictProxy[str | bytes | bytearray | web.FileField]:
    """The fields of a form body (urlencoded or multipart/form-data, within `client_max_size`), as
    `request.post()` reads them: aiohttp reads a multipart form to its closing boundary, and a body
    it cannot read (malformed, or cut off before that boundary) raises BadRequest (400), not a 500.
    The admin UI reads its small forms so; uploads are streamed by `form_parts`."""
    try:
        return await request.post()
    except MALFORMED as exc:
        raise _malformed(exc) from None


def _malformed(exc: Exception) -> BadRequest:
    if isinstance(exc, HttpProcessingError):  # its message quotes the raw header line: do not echo it
        return BadRequest("Malformed multipart body: a part's headers do not parse")
    return BadRequest(f"Malformed multipart body: {exc}")
