"""Record creates and changes sent as `multipart/form-data` (decisions.md, Files in records,
thumbnails and file tokens): one request carries the record's values and its files, all or nothing.

The form: a part `data` holding the JSON object a JSON write's `data` holds (the field values; on a
change, `<field>-` lists file ids to take out of a file field), and file parts named by file field
(`<field>`, repeated for several: they replace the field's files; on a change `<field>+` adds them
after the stored ones). Parts come in any order; sending `data` first lets a refusal of the values
come before the files are read.

`save_form` parses the form into one `RecordDraft` (record_uploads.py): the rules are checked
before a byte is stored, each file goes through the upload checks (`file_intake.py`: its field's
`mime_types` and `max_size`, images checked whole) as it arrives, and the values are written last
through the one record writer, which checks that file fields hold files of this record and field.
Any failure (a refused value or file, a body cut off before its closing boundary, the client gone)
deletes every file the request stored, and no record is written; files a change replaces or takes
out are deleted once it is committed (`FileService.on_record_events`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from cms.errors import BadRequest, PayloadTooLarge, ValidationFailed
from cms.models import Principal, Record
from cms.security.json_input import JsonInputError, decode_json
from cms.services.content.file_parts import MIB, FormPart

if TYPE_CHECKING:
    from cms.services.content.records import RecordService

DATA_PART = "data"
MAX_DATA_PART_BYTES = 1 * MIB
"""The `data` part's size, in bytes (the limit of a JSON body, MAX_JSON_BYTES's default)."""
MAX_FORM_PARTS = 101
"""Parts of one form: `data` and at most MAX_FORM_PARTS - 1 files."""
MAX_FORM_FILE_BYTES = 1024 * MIB
"""Bytes of all the files of one form together (1 GiB); each file is bounded by `max_upload_mb` besides."""
APPEND = "+"
INLINE_DATA_BYTES = 64 * 1024
"""A `data` part up to this size is decoded on the event loop (as a JSON body is, cms/web/context.py)."""


async def save_form(records: RecordService, principal: Principal | None, collection_name: str,
                    record_id: str | None, parts: AsyncIterator[FormPart], *, locale: str | None = None) -> Record:
    """Create (`record_id` None) or change record `record_id` of `collection_name` from a multipart
    form (module docstring) as `principal`, and return the record; localized fields' values are
    `locale`'s (as in a JSON write).

    Raises NotFound, BadRequest (an auth collection's users; malformed, truncated or nested
    multipart; `data` twice or not JSON; more than MAX_FORM_PARTS parts), Unauthorized /
    Forbidden (a rule refuses), ValidationFailed (422: the values, a part that is neither `data`
    nor a file field (`errors.<name>`), a file the field refuses), PayloadTooLarge (a file past
    `max_upload_mb`, the files past MAX_FORM_FILE_BYTES, `data` past MAX_DATA_PART_BYTES) or
    AlreadyExists; nothing is stored then."""
    budget = [MAX_FORM_FILE_BYTES]
    async with records.draft(principal, collection_name, record_id, locale=locale) as draft:
        data: Any = None
        count = 0
        async for part in parts:
            count += 1
            if count > MAX_FORM_PARTS:
                raise BadRequest(f"A form may have at most {MAX_FORM_PARTS} parts: 'data' and its files")
            if part.name == DATA_PART:
                if data is not None:
                    raise BadRequest(f"Form part '{DATA_PART}' is given twice")
                data = await _read_data(part)
                await draft.check_values(data)  # a rule that reads @request.data: before any file that follows
                continue
            appending = part.name.endswith(APPEND) and record_id is not None
            name = part.name[:-1] if part.name.endswith(APPEND) else part.name
            spec = draft.collection.field(name)
            if spec is None or spec.type != "file":
                raise ValidationFailed(f"Unknown form part '{part.name[:64]}'", errors={part.name[:64]: [
                    f"Not a file field; send field values as JSON in the '{DATA_PART}' part."]})
            await draft.add_file(name, _counted(part, budget), append=appending)
        return await draft.save(data if data is not None else {})


async def _read_data(part: FormPart) -> Any:
    """The JSON value of the `data` part. Raises PayloadTooLarge, BadRequest (not JSON) or
    ValidationFailed (not an object)."""
    raw = bytearray()
    async for chunk in part.chunks:
        raw += chunk
        if len(raw) > MAX_DATA_PART_BYTES:
            raise PayloadTooLarge(f"The '{DATA_PART}' part is larger than {MAX_DATA_PART_BYTES // MIB} MiB")
    text = bytes(raw)
    try:
        if not text.strip():
            value: Any = {}
        elif len(text) > INLINE_DATA_BYTES:  # a big parse runs in a thread, never stalling other requests
            value = await asyncio.to_thread(decode_json, text)
        else:
            value = decode_json(text)
    except JsonInputError as exc:
        raise BadRequest(f"Malformed JSON in the '{DATA_PART}' part: {exc}") from None
    if not isinstance(value, dict):
        raise ValidationFailed(f"'{DATA_PART}' must be an object", errors={DATA_PART: ["Must be a JSON object."]})
    return value


def _counted(part: FormPart, budget: list[int]) -> FormPart:
    """`part` with its chunks counted against the form's file budget (`budget[0]` bytes left)."""

    async def chunks() -> AsyncIterator[bytes]:
        async for chunk in part.chunks:
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise PayloadTooLarge(f"The files of one form may total at most {MAX_FORM_FILE_BYTES // MIB} MiB")
            yield chunk

    return FormPart(part.name, part.filename, part.content_type, chunks())
