"""File fields (decisions.md, Files in records, thumbnails and file tokens): the keys of their
definition (`max_size`, `mime_types`, `thumbs`, `protected`), thumbnail sizes, type patterns, and
the rule for their values: the ids of files of that record and field, nothing else (`FileRefs`, the
check the one record writer runs beside its relation check).

A thumbnail size is `WxH` (crop to the centre), `WxHt` (top), `WxHb` (bottom), `WxHf` (fit inside),
`0xH` or `Wx0` (keep the ratio), as PocketBase spells them; `100x100` is allowed for every image,
the field's `thumbs` besides, matched exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from marshmallow import ValidationError

from cms.models import Collection, FieldSpec
from cms.services.content.value_fields import held_values, value_list
from cms.store.files import FileRepository

MAX_FILE_SIZE = 10 * 2**30
"""The largest `max_size` a field may declare (10 GiB); the `max_upload_mb` setting applies besides."""
MAX_MIME_TYPES = 50
"""Entries of a field's `mime_types`."""
MAX_THUMBS = 10
"""Entries of a field's `thumbs`."""
MAX_THUMB_SIDE = 4000
"""The largest width or height of a thumbnail, in pixels."""
DEFAULT_THUMB = "100x100"
"""The size every image may be asked for, whatever its field."""
MODES = {"": "center", "t": "top", "b": "bottom", "f": "fit"}
MIME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/(\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,126})\Z")
MIME_ERROR = "A lower-case media type `type/subtype` or `type/*`."
_THUMB = re.compile(r"^([0-9]{1,5})x([0-9]{1,5})([tbf]?)\Z")
UNKNOWN_FILE = ("Not a file of this record and field: send it with the record (multipart/form-data), or upload it "
                "with POST /api/v1/files naming this record and field.")


@dataclass(frozen=True)
class ThumbSize:
    """A parsed thumbnail size: `width` and `height` in pixels (one of them 0: keep the ratio) and
    `mode`, one of `center`, `top`, `bottom` (crop) or `fit` (fit inside)."""

    width: int
    height: int
    mode: str

    @property
    def spec(self) -> str:
        """The size as written (`100x100`, `640x0`, `100x100f`)."""
        letter = {v: k for k, v in MODES.items()}[self.mode]
        return f"{self.width}x{self.height}{letter}"


def parse_thumb(text: str) -> ThumbSize | None:
    """The size `text` names, or None when it is not one: not of the form, both sides 0, a side
    over MAX_THUMB_SIDE, or a mode letter with a side of 0."""
    match = _THUMB.fullmatch(text)
    if match is None:
        return None
    width, height, letter = int(match.group(1)), int(match.group(2)), match.group(3)
    if width > MAX_THUMB_SIDE or height > MAX_THUMB_SIDE or (width == 0 and height == 0):
        return None
    if letter and (width == 0 or height == 0):
        return None
    return ThumbSize(width, height, MODES[letter])


def check_thumb(value: str) -> None:
    """A marshmallow validator of one `thumbs` entry. Raises ValidationError."""
    if parse_thumb(value) is None:
        raise ValidationError(f"A thumbnail size: WxH, WxHt, WxHb, WxHf, 0xH or Wx0, each side at most "
                              f"{MAX_THUMB_SIDE}, not both 0.")


def allowed_thumbs(spec: FieldSpec | None) -> tuple[str, ...]:
    """The sizes a file of the field `spec` (None: a file of no field) may be asked for: `100x100`
    and the field's `thumbs`, in that order."""
    extra = spec.thumbs or () if spec is not None else ()
    return (DEFAULT_THUMB, *(t for t in extra if t != DEFAULT_THUMB))


def mime_allowed(content_type: str, patterns: Sequence[str] | None) -> bool:
    """Whether a (cleaned) content type matches one of `patterns` (`type/subtype` exactly, or
    `type/*`); every type does when there are none."""
    if not patterns:
        return True
    media = content_type.partition(";")[0].strip()
    kind = media.partition("/")[0]
    return any(p == media or (p.endswith("/*") and p[:-2] == kind) for p in patterns)


def file_fields(collection: Collection) -> list[FieldSpec]:
    """The file fields of `collection`, in schema order."""
    return [f for f in collection.fields if f.type == "file"]


Owner = tuple[str, str | None]
"""Whose a file is: (record id, file field or None)."""
_VOUCHED: ContextVar[Mapping[str, Owner] | None] = ContextVar("vouched_files", default=None)


@contextmanager
def vouched(files: Mapping[str, Owner]) -> Iterator[None]:
    """Within the block (this task), `FileRefs` takes `files` (file id -> owner) as stored without
    looking them up: the caller, a `RecordDraft`, has just written them for that record and field."""
    token = _VOUCHED.set(files)
    try:
        yield
    finally:
        _VOUCHED.reset(token)


class FileRefs:
    """The check of file-field values (decisions.md: "values are ids of files of that record and
    field"): one look-up of the named files in GridFS per batch of records (none for the files a
    draft vouches for, `vouched`)."""

    def __init__(self, files: FileRepository) -> None:
        self._files = files

    async def failures(self, collection: Collection, rows: Sequence[Mapping[str, Any]],
                       record_ids: Sequence[str | None] | None = None) -> dict[int, dict[str, list[str]]]:
        """Row index -> `{field: [UNKNOWN_FILE]}` for the rows whose file fields name a file that is
        not of that record (`record_ids[index]`; None, or no `record_ids`: a write of several
        records, or of records not stored yet, which no file may serve) and field. Values are as
        validated (an id or a list of ids)."""
        specs = file_fields(collection)
        if not specs:
            return {}
        wanted = {i for row in rows for spec in specs for i in row_file_ids(spec, row)}
        if not wanted:
            return {}
        owners: dict[str, Owner] = dict(_VOUCHED.get() or {})
        unknown = sorted(wanted - owners.keys())
        if unknown:
            owners.update(await self._files.owners(unknown))
        errors: dict[int, dict[str, list[str]]] = {}
        for index, row in enumerate(rows):
            record_id = record_ids[index] if record_ids is not None and index < len(record_ids) else None
            for spec in specs:
                ids = row_file_ids(spec, row)
                if not ids:
                    continue
                if record_id is None or any(owners.get(i) != (record_id, spec.name) for i in ids):
                    errors.setdefault(index, {})[spec.name] = [UNKNOWN_FILE]
        return errors


def row_file_ids(spec: FieldSpec, row: Mapping[str, Any]) -> list[str]:
    """The file ids the file field `spec` holds in `row` (record data or an update's `$set`): its
    value, every locale's of a localized field's object (`held_values`), and for a localized field
    the values of `<field>.<locale>` keys."""
    values = held_values(spec, row.get(spec.name))
    if spec.localized:
        prefix = f"{spec.name}."
        values += [v for key, value in row.items() if key.startswith(prefix) for v in value_list(value)]
    return [str(v) for v in values]
