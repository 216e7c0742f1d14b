"""What comes from the client with a file, made safe (spec: Files; decisions.md, Files in records,
thumbnails and file tokens): form parts as the API hands them over, small form values, the filename,
the content type, and which stored types a browser may show in the page.

Nothing from the client is trusted as is: the filename loses path parts and control characters and
is cut to 255 characters; the content type must be `type/subtype` (else `application/octet-stream`)
and is replaced by the type of the bytes' signature where they have one (`file_intake.py`); only
types in INLINE_TYPES may be shown inline (the API adds `nosniff` and a sandboxing CSP to every file
response).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass

from cms.errors import NotFound, PayloadTooLarge, ValidationFailed
from cms.models import StoredFile

MAX_FIELD_BYTES = 1024
"""Largest small form value (`collection`, `record_id`, `field`), in bytes."""
MAX_FILENAME_CHARS = 255
DEFAULT_FILENAME = "file"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
MIB = 2**20

_TOKEN = r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}"
_MEDIA_TYPE = re.compile(rf"({_TOKEN})/({_TOKEN})")
_CHARSET = re.compile(r"""charset\s*=\s*"?([a-z0-9][a-z0-9_.:-]{0,39})"?\s*$""")

INLINE_TYPES = frozenset({
    "image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp",
    "audio/mpeg", "audio/ogg", "audio/wav", "audio/webm", "audio/aac", "audio/flac",
    "video/mp4", "video/webm", "video/ogg",
    "application/pdf", "text/plain",
})
"""Types a browser may render in the page (`Content-Disposition: inline`): none of them runs script.
Everything else, `text/html`, `application/xhtml+xml` and `image/svg+xml` above all, is an attachment."""


@dataclass(frozen=True)
class FormPart:
    """One part of a multipart/form-data body, as the API hands it over: the form field `name`,
    the part's `filename` and `content_type` headers (None when absent) and its body, streamed
    in `chunks` (bytes; the API turns malformed multipart into BadRequest while iterating)."""

    name: str
    filename: str | None
    content_type: str | None
    chunks: AsyncIterator[bytes]


def file_not_found() -> NotFound:
    """The one answer for a file that does not exist or whose record the caller may not see."""
    return NotFound("File not found")


def safe_filename(name: str | None) -> str:
    """The client's filename made safe to store and echo: the last path part (`/` and `\\` both
    separate), NFC-normalized, without control or format characters (bidi overrides included),
    trimmed, at most 255 characters (the extension kept when it is short). `file` when nothing is left."""
    text = unicodedata.normalize("NFC", name or "")
    text = re.split(r"[/\\]", text)[-1]
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Zl", "Zp"))
    text = text.strip()
    if text in ("", ".", ".."):
        return DEFAULT_FILENAME
    if len(text) > MAX_FILENAME_CHARS:
        stem, dot, extension = text.rpartition(".")
        if dot and stem and 0 < len(extension) <= 16:
            text = stem[:MAX_FILENAME_CHARS - len(extension) - 1].rstrip() + "." + extension
        else:
            text = text[:MAX_FILENAME_CHARS].rstrip()
    return text


def clean_content_type(value: str | None) -> str:
    """The part's `Content-Type` as stored and served: lower-case `type/subtype`, plus
    `; charset=...` when the client gave a well-formed one; `application/octet-stream` when the
    value is missing or not of that form."""
    if not value:
        return DEFAULT_CONTENT_TYPE
    media, _, params = value.strip().lower().partition(";")
    match = _MEDIA_TYPE.fullmatch(media.strip())
    if match is None:
        return DEFAULT_CONTENT_TYPE
    cleaned = f"{match.group(1)}/{match.group(2)}"
    charset = _CHARSET.search(params.strip()) if params.strip().startswith("charset") else None
    return f"{cleaned}; charset={charset.group(1)}" if charset else cleaned


def media_type(content_type: str) -> str:
    """`type/subtype` of a cleaned content type (its parameters dropped)."""
    return content_type.partition(";")[0].strip()


def served_inline(content_type: str) -> bool:
    """Whether a file of this (cleaned) type may be shown inline; everything else is an attachment."""
    return media_type(content_type) in INLINE_TYPES


def file_etag(file: StoredFile, variant: str = "") -> str:
    """The strong ETag of a file, quoted: its id and the first 128 bits of its SHA-256, plus
    `variant` (a thumbnail's size and format) when given."""
    suffix = f"-{variant}" if variant else ""
    return f'"{file.id}-{file.sha256[:32]}{suffix}"'


async def read_value(part: FormPart) -> str:
    """A small text value (`collection`, `record_id`, `field`): UTF-8, at most MAX_FIELD_BYTES.
    Raises ValidationFailed naming the part when it is longer or not UTF-8."""
    data = bytearray()
    async for chunk in part.chunks:
        data += chunk
        if len(data) > MAX_FIELD_BYTES:
            raise ValidationFailed(f"Form field '{part.name}' is too long",
                                   errors={part.name: [f"At most {MAX_FIELD_BYTES} bytes."]})
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed(f"Form field '{part.name}' is not UTF-8",
                               errors={part.name: ["Must be UTF-8 text."]}) from None


async def drain(part: FormPart, allowance: int, what: str) -> int:
    """Read and drop a part nobody uses; returns its size in bytes. Raises PayloadTooLarge (`what`
    is too large) when it passes `allowance` bytes."""
    size = 0
    async for chunk in part.chunks:
        size += len(chunk)
        if size > allowance:
            raise PayloadTooLarge(f"{what} are too large")
    return size
