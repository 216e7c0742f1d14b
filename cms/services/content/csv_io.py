"""CSV of records: cells rendered for export and parsed back on import (spec: Records,
export/csv and import/csv; decisions.md: Limits). Pure: no I/O, no clock.

Export and import agree on one rendering, so an exported file imports back to the same values:

| field type | cell |
|---|---|
| text, editor, email, url | the text |
| bool | `true` / `false` (import also takes `1/0/yes/no`, any case) |
| number | the number (`12`, `-0.5`, `1e+16`) |
| date | ISO 8601 UTC, `2024-03-01T10:30:00.000Z` (import takes any ISO 8601 date or date-time) |
| json | the value as JSON |
| select, relation, file with `max_select` > 1 | a JSON array, `["a","b"]` |
| select, relation, file holding one value | the value (as a JSON string only if it starts with `"`) |
| any, no value | empty |

Formula injection: a spreadsheet runs a cell that starts with `=`, `+`, `-`, `@`, tab or carriage return
as a formula. Such text cells are exported with a leading `'`, which spreadsheets show as text; import
removes that one quote again (`escape_formula` / `unescape_formula` are exact inverses). Number cells
are never prefixed: a number is not a formula.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from marshmallow import Schema, ValidationError

from cms.errors import ValidationFailed, flatten_errors
from cms.models import Collection, FieldSpec, Record
from cms.security.json_input import MAX_JSON_INT_DIGITS, JsonInputError, decode_json
from cms.services.content.fields import (
    ALL_LOCALES,
    SYSTEM_FIELDS,
    TEXT_TYPES,
    build_record_schema,
    is_multi,
    to_json_value,
)

MAX_IMPORT_BYTES = 10 * 1024 * 1024
MAX_IMPORT_ROWS = 50_000
MAX_FIELD_BYTES = 1024 * 1024 * 1024
"""csv's cell size limit: the largest upload the `csv_import_max_mb` setting allows (its cap)."""
SYSTEM_COLUMNS = ("id", "created", "updated")
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
FLUSH_CHARS = 64 * 1024
"""An export chunk is handed on once its buffer holds this many characters."""
ROW_ERROR_KEY = "_row"
"""`errors` key of a problem with a whole row (ragged row): `_` cannot start a field name."""
TRUE_WORDS = frozenset({"true", "1", "yes"})
FALSE_WORDS = frozenset({"false", "0", "no"})
INTEGER = re.compile(r"[+-]?\d+\Z")
DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")


# --- formula injection ------------------------------------------------------------------------


def _looks_like_formula(text: str) -> bool:
    """True for text a spreadsheet would run (`=1+1`), and for text that would read as escaped
    (`'=1`, `''=1`): escaping those too keeps `unescape_formula(escape_formula(t)) == t` for all `t`."""
    return text.lstrip("'").startswith(FORMULA_TRIGGERS)


def escape_formula(text: str) -> str:
    """`text` with one `'` in front when it starts with `=`, `+`, `-`, `@`, tab or CR (after any
    leading quotes), so a spreadsheet shows it instead of running it. Inverse: `unescape_formula`."""
    return "'" + text if _looks_like_formula(text) else text


def unescape_formula(text: str) -> str:
    """Undo `escape_formula`: drop the one leading `'` it adds; any other text is returned as is."""
    if text.startswith("'") and _looks_like_formula(text[1:]):
        return text[1:]
    return text


# --- export -----------------------------------------------------------------------------------


LOCALE_SEPARATOR = ":"
"""A column `title:de` holds the `de` value of the localized field `title` (decisions.md, Localized fields)."""


def csv_header(collection: Collection, codes: Sequence[str] = ()) -> list[str]:
    """`id, created, updated`, then the schema fields in schema order; with `codes` (an export with
    `?locale=*`) a localized field has one column per code, `title:en`, `title:de`."""
    return [*SYSTEM_COLUMNS, *(f"{spec.name}{LOCALE_SEPARATOR}{code}" if code else spec.name
                               for spec, code in _cells(collection, codes))]


def _cells(collection: Collection, codes: Sequence[str]) -> Iterator[tuple[FieldSpec, str]]:
    """(field, locale code or "") of each column after the system ones (`csv_header`)."""
    for spec in collection.fields:
        if spec.localized and codes:
            yield from ((spec, code) for code in codes)
        else:
            yield spec, ""


def render_cell(spec: FieldSpec, value: Any) -> str:
    """One stored value of field `spec` as CSV cell text (see the module table); None is empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # shortest text that reads back to the same number; never a formula
    if spec.type == "json" or is_multi(spec):
        return escape_formula(json.dumps(to_json_value(value), ensure_ascii=False, separators=(",", ":")))
    text = str(to_json_value(value))
    if spec.type in ("select", "relation", "file") and text.startswith('"'):
        text = json.dumps(text, ensure_ascii=False)
    return escape_formula(text)


def render_row(collection: Collection, record: Record, codes: Sequence[str] = ()) -> list[str]:
    """The cells of one record, in `csv_header(collection, codes)` order (with `codes`, a localized
    field's value is its object, one cell per code)."""
    cells = [record.id, to_json_value(record.created), to_json_value(record.updated)]
    for spec, code in _cells(collection, codes):
        value = record.data.get(spec.name)
        if code:
            value = value.get(code) if isinstance(value, dict) else None
        cells.append(render_cell(spec, value))
    return cells


class CsvChunkWriter:
    """Collects CSV rows (RFC 4180, CRLF line ends) into text chunks of about FLUSH_CHARS characters."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer)

    def write(self, cells: Sequence[str]) -> str | None:
        """Add a row; returns a chunk when the buffer is full enough, else None."""
        self._writer.writerow(cells)
        return self.take() if self._buffer.tell() >= FLUSH_CHARS else None

    def take(self) -> str:
        """Everything buffered so far (maybe empty), and a fresh buffer."""
        chunk = self._buffer.getvalue()
        self._buffer.seek(0)
        self._buffer.truncate()
        return chunk


# --- import -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowFailure:
    """A data row that was not stored: `row` is 1-based (the header is not counted); `errors` maps
    field names (or `_row`) to messages."""

    row: int
    errors: dict[str, Any]


@dataclass(frozen=True)
class ParsedRow:
    """A valid data row: its 1-based number and the record values ready to store."""

    row: int
    values: dict[str, Any]


@dataclass
class ImportResult:
    """Outcome of a CSV import: how many records were stored, and the rows that were not (by row)."""

    imported: int = 0
    failed: list[RowFailure] = field(default_factory=list)


class CellError(ValueError):
    """A cell's text cannot be read as a value of its field's type."""


def file_error(message: str) -> ValidationFailed:
    """A 422 about the file as a whole: `errors: {"file": [message]}`; nothing is stored."""
    return ValidationFailed(message, errors={"file": [message]})


def decode_csv(content: bytes) -> str:
    """The text of an upload: UTF-8, a leading byte-order mark dropped.
    Raises ValidationFailed (empty file, not UTF-8: names the byte offset and line)."""
    if not content.strip():
        raise file_error("The file is empty; its first row must be a header naming the fields")
    try:
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = content.count(b"\n", 0, exc.start) + 1
        raise file_error(f"The file is not UTF-8 text: invalid byte at offset {exc.start} (line {line})") from None


def _reader(text: str) -> Any:
    # Fields are bounded by the upload limit, not csv's default of 128 KiB (a long editor text).
    if csv.field_size_limit() < MAX_FIELD_BYTES:
        csv.field_size_limit(MAX_FIELD_BYTES)
    return csv.reader(io.StringIO(text, newline=""), strict=True)


class CsvImport:
    """An uploaded CSV checked as a whole against `collection`; `batches()` then parses its rows.

    Construction reads the file once and raises ValidationFailed (422, `errors: {"file": [...]}`),
    so nothing is stored, when: the file is empty or not UTF-8; the header has an empty, duplicate
    or unknown column (a file without a header shows up as unknown columns); a required field has
    no column; a row breaks CSV quoting; or there are more than MAX_IMPORT_ROWS data rows.
    Columns `id`, `created` and `updated` are ignored. Blank lines are skipped and not counted. A
    localized field's column `title` holds the default locale's value, `title:de` the `de` value
    (decisions.md, Localized fields)."""

    def __init__(self, collection: Collection, content: bytes, *, max_rows: int = MAX_IMPORT_ROWS,
                 working: bool = False) -> None:
        """`working`: the rows are working copies (drafts): no field is required."""
        self.collection = collection
        self.working = working
        self._text = decode_csv(content)
        reader = _reader(self._text)
        header = self._header(reader)
        self.columns: list[tuple[FieldSpec, str | None] | None] = [self._column(name) for name in header]
        self.row_count = 0
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                raise file_error(
                    f"Malformed CSV at data row {self.row_count + 1} (line {reader.line_num}): {exc}"
                ) from None
            if not cells:
                continue
            self.row_count += 1
            if self.row_count > max_rows:
                raise file_error(f"The file has more than {max_rows:,} data rows; split it into smaller files")

    def _column(self, name: str) -> tuple[FieldSpec, str | None] | None:
        """The field a header cell names and, for a localized field, the locale (`title` is the default
        locale's); None for a system column or an unknown name."""
        field_name, _, code = name.partition(LOCALE_SEPARATOR)
        spec = self.collection.field(field_name)
        if spec is None or code and (not spec.localized or code not in self.collection.locales.codes):
            return None
        return spec, (code or self.collection.locales.default) if spec.localized else None

    def _header(self, reader: Any) -> list[str]:
        try:
            first = next((cells for cells in reader if cells), None)
        except csv.Error as exc:
            raise file_error(f"Malformed CSV in the header row: {exc}") from None
        if first is None:
            raise file_error("The file is empty; its first row must be a header naming the fields")
        header = [cell.strip() for cell in first]
        problems: list[str] = []
        if any(not name for name in header):
            problems.append("every column of the header row needs a name")
        named = [self._column(name) for name in header]
        values = [(spec.name, code) for spec, code in (column for column in named if column is not None)]
        duplicates = sorted({name for name, column in zip(header, named, strict=True)
                             if name and (header.count(name) > 1 or column is not None
                                          and values.count((column[0].name, column[1])) > 1)})
        if duplicates:
            problems.append(f"duplicate columns: {', '.join(duplicates)}")
        unknown = [name for name, column in zip(header, named, strict=True)
                   if name and column is None and name not in SYSTEM_FIELDS]
        if unknown:
            expected = ", ".join([*SYSTEM_COLUMNS, *(spec.name for spec in self.collection.fields)])
            problems.append(
                f"unknown columns: {', '.join(unknown)} (the first row must be a header naming fields of "
                f"'{self.collection.name}': {expected})"
            )
        default = self.collection.locales.default
        missing = [s.name for s in self.collection.fields if s.validation.required and not self.working
                   and (s.name, default if s.localized else None) not in values]
        if missing:
            problems.append(f"no column for the required fields: {', '.join(missing)}")
        if problems:
            raise file_error("Invalid CSV header: " + "; ".join(problems))
        return header

    def batches(self, size: int) -> Iterator[tuple[list[ParsedRow], list[RowFailure]]]:
        """The data rows in file order, `size` at a time: (valid rows, failed rows) per batch.
        Each row is parsed by field type and validated against the schema."""
        # own instance: this may run in a worker thread; localized fields are read as objects
        schema = build_record_schema(self.collection, ALL_LOCALES, working=self.working)
        reader = _reader(self._text)
        next((cells for cells in reader if cells), None)  # the header, checked already
        valid: list[ParsedRow] = []
        failed: list[RowFailure] = []
        number = 0
        for cells in reader:
            if not cells:
                continue
            number += 1
            outcome = self._parse_row(schema, number, cells)
            if isinstance(outcome, ParsedRow):
                valid.append(outcome)
            else:
                failed.append(outcome)
            if len(valid) + len(failed) >= size:
                yield valid, failed
                valid, failed = [], []
        if valid or failed:
            yield valid, failed

    def _parse_row(self, schema: Schema, number: int, cells: list[str]) -> ParsedRow | RowFailure:
        if len(cells) != len(self.columns):
            return RowFailure(number, {ROW_ERROR_KEY: [
                f"The row has {len(cells)} cells; the header has {len(self.columns)}."]})
        data: dict[str, Any] = {}
        errors: dict[str, list[str]] = {}
        for column, cell in zip(self.columns, cells, strict=True):
            if column is None:  # id, created, updated
                continue
            spec, code = column
            try:
                value = parse_cell(spec, cell)
            except CellError as exc:
                errors[spec.name if code is None else f"{spec.name}.{code}"] = [str(exc)]
                continue
            if value is not None and code is not None:
                data.setdefault(spec.name, {})[code] = value
            elif value is not None:
                data[spec.name] = value
        try:
            values: dict[str, Any] = schema.load(data, partial=self.working)
        except ValidationError as exc:
            errors = {**flatten_errors(exc.messages, root_key=ROW_ERROR_KEY), **errors}
        if errors:
            return RowFailure(number, errors)
        return ParsedRow(number, {k: v for k, v in values.items() if v is not None})


def parse_cell(spec: FieldSpec, cell: str) -> Any:
    """The value of one cell for field `spec` (see the module table), before schema validation;
    None for an empty cell (no value). Raises CellError."""
    text = unescape_formula(cell)
    if spec.type in TEXT_TYPES:
        return text if text != "" else None
    stripped = text.strip()
    if not stripped:
        return None
    if spec.type == "bool":
        word = stripped.lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise CellError("Not a valid boolean (true, false, 1, 0, yes or no).")
    if spec.type == "number":
        if INTEGER.match(stripped):
            if len(stripped.lstrip("+-")) > MAX_JSON_INT_DIGITS:
                raise CellError(f"Number has more than {MAX_JSON_INT_DIGITS} digits.")
            return int(stripped)
        if DECIMAL.match(stripped):
            return float(stripped)
        raise CellError("Not a valid number.")
    if spec.type == "date":
        return stripped
    if spec.type == "json" or is_multi(spec):
        try:
            value = decode_json(stripped)
        except JsonInputError as exc:
            raise CellError(f"Not valid JSON: {exc}." if spec.type == "json" else
                            'Not a JSON array of values, e.g. ["a","b"].') from None
        if is_multi(spec) and not isinstance(value, list):
            raise CellError('Not a JSON array of values, e.g. ["a","b"].')
        return value
    # select, relation, file holding one value
    if text.startswith('"'):
        try:
            value = decode_json(text)
        except JsonInputError:
            raise CellError("A value starting with '\"' must be a JSON string.") from None
        if not isinstance(value, str):
            raise CellError("A value starting with '\"' must be a JSON string.")
        return value
    return text
