"""What an uploaded file goes through before it is stored (spec: Files; decisions.md, Files in
records, thumbnails and file tokens).

1. Its first 8 KiB give its type: the type of the bytes' signature (`filetype`), whatever the part's
   header claims; a claimed type that has a signature the bytes lack (a text file sent as
   `image/png`) becomes `application/octet-stream`; a type without signatures (text, JSON, SVG)
   is taken as claimed.
2. The field's `mime_types` are checked on that type, before a byte is stored.
3. The bytes are streamed into GridFS, counted and hashed, and cut off at the field's `max_size`
   (422 naming the field) or the `max_upload_mb` setting (413).
4. An image Pillow reads (`imaging.RASTER_TYPES`) is held in memory instead (at most
   MAX_IMAGE_BYTES) and checked whole before it is written (the pixel limit, a complete file: a
   JPEG or PNG of up to 4 MiB from its structure, `imaging.quick_inspect`; anything else in an image
   worker, `imaging.inspect_image`): a decompression bomb or a truncated JPEG is 422 and never
   reaches the database.

Any failure deletes what was written (`FileUpload.abort`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import filetype

from cms.clock import new_id
from cms.errors import PayloadTooLarge, ValidationFailed
from cms.models import FieldSpec
from cms.services.content import imaging
from cms.services.content.file_fields import mime_allowed
from cms.services.content.file_parts import (
    DEFAULT_CONTENT_TYPE,
    MIB,
    FormPart,
    clean_content_type,
    media_type,
    safe_filename,
)
from cms.services.content.image_pool import ImagePool
from cms.store.files import CHUNK_BYTES, FileRepository, FileUpload

HEAD_BYTES = 8192
"""Bytes read before the type is decided (what `filetype` looks at)."""
MAX_IMAGE_BYTES = 64 * MIB
"""The largest image file (a type of `imaging.RASTER_TYPES`) accepted: images are checked whole, in memory."""
SIGNATURE_TYPES = frozenset(kind.mime for kind in filetype.types) - {DEFAULT_CONTENT_TYPE}
"""Types whose files start with a signature `filetype` knows: a claim of one of them needs the bytes' proof."""
ALIASES = {"image/apng": "image/png", "audio/x-wav": "audio/wav", "audio/x-flac": "audio/flac"}
"""`filetype`'s names for types also known by a more common one."""
WRITE_SLICE_BYTES = 2 * CHUNK_BYTES
"""An image checked in memory is written to GridFS in slices of this many bytes."""


def sniffed_type(head: bytes) -> str | None:
    """The type of the signature `head` (a file's first bytes) starts with, or None."""
    kind = filetype.guess(head) if head else None
    if kind is None:
        return None
    mime = str(kind.mime)
    return ALIASES.get(mime, mime)


def effective_type(head: bytes, claimed: str | None) -> str:
    """The content type a file is stored and served as (module docstring, step 1)."""
    sniffed = sniffed_type(head)
    if sniffed is not None:
        return sniffed
    cleaned = clean_content_type(claimed)
    return DEFAULT_CONTENT_TYPE if media_type(cleaned) in SIGNATURE_TYPES else cleaned


@dataclass
class Received:
    """A file part written to GridFS but not yet visible (`upload.finish` shows it): its id, name,
    type, size (bytes) and SHA-256 (hex)."""

    upload: FileUpload
    file_id: str
    filename: str
    content_type: str
    size: int
    sha256: str


class FileIntake:
    """Receives file parts into GridFS through the checks of the module docstring; image checks run
    in `pool`."""

    def __init__(self, files: FileRepository, pool: ImagePool) -> None:
        self._files = files
        self._pool = pool

    async def receive(self, part: FormPart, *, max_bytes: int, spec: FieldSpec | None, key: str) -> Received:
        """Stream `part` into GridFS as a file of the field `spec` (None: no field), at most
        `max_bytes` (the upload limit). `key` names the part in errors (the field, or `file`).
        Raises ValidationFailed (422 `errors.<key>`: a type the field does not take, past its
        `max_size`, an image over the pixel limit, truncated or corrupt, or past MAX_IMAGE_BYTES),
        PayloadTooLarge (past `max_bytes`) or ServiceUnavailable (the image workers are busy);
        nothing stays stored then."""
        chunks = part.chunks.__aiter__()
        head = bytearray()
        async for chunk in chunks:
            head += chunk
            if len(head) >= HEAD_BYTES:
                break
        content_type = effective_type(bytes(head[:HEAD_BYTES]), part.content_type)
        if spec is not None and not mime_allowed(content_type, spec.mime_types):
            allowed = ", ".join(spec.mime_types or ())
            raise _refused(key, f"The file's type {media_type(content_type)} is not one of {allowed}.")
        image = media_type(content_type) in imaging.RASTER_TYPES
        field_limit = spec.max_size if spec is not None and spec.max_size else None
        file_id, filename = new_id(), safe_filename(part.filename)
        upload = self._files.open_upload(file_id, filename)
        digest = hashlib.sha256()
        held: list[bytes] = []
        size = 0
        try:
            pending: bytes | None = bytes(head)
            while True:
                if pending is not None:
                    chunk, pending = pending, None
                else:
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        break
                size += len(chunk)
                if field_limit is not None and size > field_limit:
                    raise _refused(key, f"The file is larger than the field's max_size of {field_limit:,} bytes.")
                if size > max_bytes:
                    raise PayloadTooLarge(f"The file is larger than the upload limit of {max_bytes // MIB} MiB")
                if image and size > MAX_IMAGE_BYTES:
                    raise _refused(key, f"Images of more than {MAX_IMAGE_BYTES // MIB} MiB are not accepted.")
                digest.update(chunk)
                if image:
                    held.append(chunk)
                elif chunk:
                    await upload.write(chunk)
            if image:
                whole = b"".join(held)
                held.clear()
                await self._check_image(whole, key)
                view = memoryview(whole)
                for start in range(0, len(view), WRITE_SLICE_BYTES):
                    await upload.write(bytes(view[start:start + WRITE_SLICE_BYTES]))
        except BaseException:
            await upload.abort()
            raise
        return Received(upload, file_id, filename, content_type, size, digest.hexdigest())

    async def _check_image(self, data: bytes, key: str) -> None:
        try:
            if imaging.quick_inspect(data) is None:
                await self._pool.run(imaging.inspect_image, data)
        except imaging.ImageRefused as exc:
            raise _refused(key, exc.reason) from None


def _refused(key: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, errors={key: [message]})
