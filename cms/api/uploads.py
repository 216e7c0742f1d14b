"""Reading one file out of a multipart/form-data request, streamed and bounded."""

from __future__ import annotations

from aiohttp import BodyPartReader, web

from cms.errors import BadRequest, PayloadTooLarge, ValidationFailed

CHUNK_BYTES = 64 * 1024
OTHER_PARTS_BYTES = 64 * 1024
"""Besides the file, a request may carry this much in other form fields (all are read and dropped)."""


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
    except ValueError as exc:  # aiohttp's malformed-multipart errors (missing boundary, bad headers)
        raise BadRequest(f"Malformed multipart body: {exc}") from None
    raise ValidationFailed(
        f"No form field '{field_name}' in the upload",
        errors={field_name: [f"Missing: send the file in the multipart form field '{field_name}'."]},
    )
