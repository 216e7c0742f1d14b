"""Queries of `/api/v1/files` (decisions.md, Files in records, thumbnails and file tokens)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from cms.services.content.file_fields import DEFAULT_THUMB
from cms.services.content.imaging import FORMATS

MAX_QUERY_VALUE = 2048
"""Longest `thumb`, `format` or `token` value read (a file token is about 300 characters)."""


class FileDownloadQuerySchema(Schema):
    """`GET /api/v1/files/{file_id}`: a thumbnail (`thumb`, `format`) and a file token (`token`)."""

    thumb = fields.String(load_default=None, validate=validate.Length(max=MAX_QUERY_VALUE), metadata={
        "description": f"An image's thumbnail: `{DEFAULT_THUMB}` or one of the file field's `thumbs` (`WxH` crops to "
                       "the centre, `WxHt` top, `WxHb` bottom, `WxHf` fits inside, `0xH`/`Wx0` keep the ratio); "
                       "another size is 400 naming the allowed ones; a file that is not an image answers itself",
        "example": DEFAULT_THUMB})
    format = fields.String(load_default=None, validate=validate.Length(max=MAX_QUERY_VALUE), metadata={
        "description": "The thumbnail's format (default: the source's; gif, bmp and tiff give png); a format the "
                       "server cannot write is 400 naming the supported ones", "enum": list(FORMATS)})
    token = fields.String(load_default=None, validate=validate.Length(max=MAX_QUERY_VALUE), metadata={
        "description": "A file token (`POST /api/v1/files/token`): the caller, for an `<img>` that sends no header; "
                       "needed for the files of a `protected` field"})
