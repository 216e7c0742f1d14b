"""Reading one file out of a multipart/form-data request, streamed and bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import BodyPartReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from cms.errors import BadRequest, PayloadTooLarge, ValidationFailed
from cms.services.content.files import FormPart

CHUNK_BYTES = 64 * 1024
OTHER_PARTS_BYTES = 64 * 1024
"""Besides the file, a request may carry this much in other form fields (all are read and dropped)."""
MALFORMED = (ValueError, HttpProcessingError)
"""What aiohttp's multipart reader raises for a malformed body: ValueError (missing boundary, bad
encoding) or HttpProcessingError (a part header that does not parse, e.g. `InvalidHeader`)."""


async def read_upload(request: web.Request, field_name: str, max_bytes: int) -> bytes:
    """The bytes of the first form field `field_name` of a multipart/form-data body.

    The body is streamed (aiohttp's `client_max_size` does not apply to `request.multipart()`), and
    reading stops as soon as the file passes `max_bytes` or the other fields pass OTHER_PARTS_BYTES.
    Raises BadRequest (not multipart, malformed multipart), PayloadTooLarge (413) or
    ValidationFailed (422, `errors: {field_name: [...]}`: no such field)."""
    if request.content_type != "multipart/form-data":
        raise BadRequest(f"Send the file as multipart/form-data in the form field '{field_name}'")
    limit_mib = max_bytes / 2**20
    other_bytes = 0
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):  # a nested multipart: not a file field
                raise BadRequest("Nested multipart bodies are not accepted")
            is_file = part.name == field_name
            chunks: list[bytes] = []
            size = 0
            while chunk := await part.read_chunk(CHUNK_BYTES):
                size += len(chunk)
                if is_file:
                    if size > max_bytes:
                        raise PayloadTooLarge(f"The file is larger than {limit_mib:g} MiB")
                    chunks.append(chunk)
                else:
                    other_bytes += len(chunk)
                    if other_bytes > OTHER_PARTS_BYTES:
                        raise PayloadTooLarge(f"Form fields other than '{field_name}' are too large")
            if is_file:
                return b"".join(chunks)
    except MALFORMED as exc:
        raise _malformed(exc) from None
    raise ValidationFailed(
        f"No form field '{field_name}' in the upload",
        errors={field_name: [f"Missing: send the file in the multipart form field '{field_name}'."]},
    )


FILE_CHUNK_BYTES = 256 * 1024


async def form_parts(request: web.Request) -> AsyncIterator[FormPart]:
    """The parts of a multipart/form-data body, one at a time, each with its body streamed in
    chunks of at most 256 KiB (`client_max_size` does not apply). The consumer must read each
    part's chunks before asking for the next part. Raises BadRequest (not multipart, malformed or
    nested multipart), while iterating the parts or their chunks."""
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
        if part is None:
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


def _malformed(exc: Exception) -> BadRequest:
    if isinstance(exc, HttpProcessingError):  # its message quotes the raw header line: do not echo it
        return BadRequest("Malformed multipart body: a part's headers do not parse")
    return BadRequest(f"Malformed multipart body: {exc}")
