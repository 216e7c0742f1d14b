"""Scenario tables for cms.services.content.csv_io: formula escaping, cell rendering and parsing, and the
whole-file checks of CsvImport (pure)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.errors import ValidationFailed
from cms.models import Collection, Record
from cms.services.content.csv_io import (
    CellError,
    CsvChunkWriter,
    CsvImport,
    csv_header,
    escape_formula,
    parse_cell,
    render_cell,
    render_row,
    unescape_formula,
)
from cms.services.content.fields import parse_schema

NOW = datetime(2024, 3, 1, 10, 30, tzinfo=UTC)
FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True}},
    {"name": "body", "type": "editor"},
    {"name": "done", "type": "bool"},
    {"name": "n", "type": "number"},
    {"name": "at", "type": "date"},
    {"name": "meta", "type": "json"},
    {"name": "status", "type": "select", "values": ["draft", "=live", '"quoted"']},
    {"name": "tags", "type": "select", "values": ["a", "b", "c"], "max_select": 3},
    {"name": "owner", "type": "relation", "collection_id": "c2"},
    {"name": "cover", "type": "file"},
]
COLLECTION = Collection(id="c1", name="posts", type="base", fields=parse_schema(FIELDS), created=NOW, updated=NOW)
SPECS = {spec.name: spec for spec in COLLECTION.fields}


# --- formula injection -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, escaped", [
    ("plain", "plain"),
    ("", ""),
    ("=1+1", "'=1+1"),
    ("+33 6 12", "'+33 6 12"),
    ("-5", "'-5"),
    ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "'\tx"),
    ("\rx", "'\rx"),
    ("'quoted", "'quoted"),
    ("'=1", "''=1"),  # would read as escaped: escaped once more, so the round trip is exact
    ("''-1", "'''-1"),
    ("a=1", "a=1"),
    (" =1", " =1"),
], ids=lambda v: repr(v))
def test_formula_escaping_is_reversible(text, escaped):
    assert escape_formula(text) == escaped
    assert unescape_formula(escaped) == text


@pytest.mark.parametrize("cell, text", [("'hello", "'hello"), ("'=x", "=x"), ("=x", "=x"), ("''", "''")])
def test_unescape_of_hand_written_cells(cell, text):
    assert unescape_formula(cell) == text


# --- rendering ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("field_name, value, cell", [
    ("title", "Hello, world", "Hello, world"),
    ("title", "=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"),
    ("title", None, ""),
    ("done", True, "true"),
    ("done", False, "false"),
    ("n", 12, "12"),
    ("n", -0.5, "-0.5"),  # a number is never prefixed
    ("n", 1e16, "1e+16"),
    ("n", 2**63 - 1, "9223372036854775807"),
    ("at", NOW, "2024-03-01T10:30:00.000Z"),
    ("meta", {"k": [1, None, "é"]}, '{"k":[1,null,"é"]}'),
    ("meta", "text", '"text"'),
    ("meta", -3, "-3"),
    ("meta", True, "true"),
    ("status", "draft", "draft"),
    ("status", "=live", "'=live"),
    ("status", '"quoted"', '"\\"quoted\\""'),
    ("tags", ["a", "c"], '["a","c"]'),
    ("tags", [], "[]"),
    ("owner", "rec-1", "rec-1"),
    ("cover", "file-1", "file-1"),
], ids=lambda v: repr(v))
def test_render_cell(field_name, value, cell):
    assert render_cell(SPECS[field_name], value) == cell


def test_header_and_row_follow_schema_order():
    assert csv_header(COLLECTION) == ["id", "created", "updated", "title", "body", "done", "n", "at", "meta",
                                      "status", "tags", "owner", "cover"]
    record = Record(id="r1", created=NOW, updated=NOW, data={"n": 1, "title": "t"})
    assert render_row(COLLECTION, record) == ["r1", "2024-03-01T10:30:00.000Z", "2024-03-01T10:30:00.000Z", "t",
                                              "", "", "1", "", "", "", "", "", ""]


def test_chunk_writer_flushes_by_size():
    writer = CsvChunkWriter()
    chunks = [c for c in (writer.write(["x" * 1000, 'a "q", b']) for _ in range(200)) if c]
    chunks.append(writer.take())
    assert len(chunks) >= 3 and all(c for c in chunks[:-1])
    rows = list(csv.reader(io.StringIO("".join(chunks), newline="")))
    assert rows == [["x" * 1000, 'a "q", b']] * 200
    assert writer.take() == ""


# --- parsing --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field_name, cell, value", [
    ("title", "Hello", "Hello"),
    ("title", "  spaced  ", "  spaced  "),  # text is kept as is
    ("title", "", None),
    ("title", "'=1+1", "=1+1"),
    ("title", "line\nbreak", "line\nbreak"),
    ("done", "true", True), ("done", "TRUE", True), ("done", " yes ", True), ("done", "1", True),
    ("done", "false", False), ("done", "No", False), ("done", "0", False), ("done", "", None),
    ("n", "12", 12), ("n", "-3", -3), ("n", "+4", 4), ("n", " 1.5 ", 1.5), ("n", "1e+16", 1e16), ("n", ".5", 0.5),
    ("n", "'-5", -5), ("n", "", None),
    ("at", "2024-03-01", "2024-03-01"),  # dates are checked by the schema
    ("meta", '{"a": [1, 2]}', {"a": [1, 2]}), ("meta", '"text"', "text"), ("meta", "null", None),
    ("meta", "-3", -3), ("meta", "", None),
    ("status", "draft", "draft"), ("status", "'=live", "=live"), ("status", '"\\"quoted\\""', '"quoted"'),
    ("tags", '["a","c"]', ["a", "c"]), ("tags", "[]", []), ("tags", "", None),
    ("owner", "rec-1", "rec-1"),
], ids=lambda v: repr(v))
def test_parse_cell(field_name, cell, value):
    assert parse_cell(SPECS[field_name], cell) == value


@pytest.mark.parametrize("field_name, cell", [
    ("done", "maybe"), ("done", "t"), ("n", "1,5"), ("n", "abc"), ("n", "nan"), ("n", "inf"), ("n", "1_000"),
    ("n", "0x10"), ("meta", "{bad"), ("meta", "NaN"), ("meta", "plain text"), ("tags", "a"), ("tags", '"a"'),
    ("tags", "[a]"), ("status", '"unterminated'), ("status", '"1"x'),
], ids=lambda v: repr(v))
def test_parse_cell_refuses(field_name, cell):
    with pytest.raises(CellError):
        parse_cell(SPECS[field_name], cell)


@pytest.mark.parametrize("value", [
    "plain", "=1+1", "'=1", "-x", "@a", "\tindent", "", "comma, \"quote\"\r\nnew line", "é ü 漢字 🙂",
], ids=repr)
def test_text_round_trip(value):
    cell = render_cell(SPECS["title"], value)
    assert parse_cell(SPECS["title"], cell) == (value or None)


# --- CsvImport: the file as a whole ---------------------------------------------------------------


def upload(text: str | bytes, **kwargs: Any) -> CsvImport:
    return CsvImport(COLLECTION, text.encode() if isinstance(text, str) else text, **kwargs)


@pytest.mark.parametrize("content, words", [
    (b"", "empty"),
    (b"  \r\n\n", "empty"),
    (b"title,n\nok,\xff\xfe\n", "not UTF-8"),
    (b"title,n\nok,1\ncaf\xe9,2\n", "line 3"),
    ("title,nope,other\n", "unknown columns: nope, other"),
    ("hello,12\n", "unknown columns: hello, 12"),  # no header row
    ("title,title\n", "duplicate columns: title"),
    ("title,,n\n", "needs a name"),
    ("n,done\n", "required fields: title"),
    ('title,n\n"a"b,1\n', "Malformed CSV at data row 1"),
    ('title,n\nok,1\n"never closed,2\n', "Malformed CSV at data row 2"),
    ('"title\n', "Malformed CSV in the header"),
], ids=lambda v: repr(v)[:30])
def test_whole_file_refusals(content, words):
    with pytest.raises(ValidationFailed) as caught:
        upload(content)
    assert words in caught.value.detail
    assert caught.value.errors == {"file": [caught.value.detail]}


def test_row_limit():
    assert upload("title\n" + "x\n" * 5, max_rows=5).row_count == 5
    with pytest.raises(ValidationFailed, match="more than 5 data rows"):
        upload("title\n" + "x\n" * 6, max_rows=5)


def test_batches_number_rows_and_report_failures():
    text = ("\ufeffid, title ,n,done,created\r\n"
            "ignored,first,1,true,whatever\r\n"
            "\r\n"  # blank lines are skipped and not counted
            ",,2,no,\r\n"  # title missing
            "x,third,abc,maybe,\r\n"  # two bad cells
            "x,ragged\r\n"
            "x,fifth,,,\r\n")
    imported = upload(text)
    assert imported.row_count == 5
    batches = list(imported.batches(2))
    assert [len(valid) + len(failed) for valid, failed in batches] == [2, 2, 1]
    valid = [row for rows, _ in batches for row in rows]
    failed = [row for _, rows in batches for row in rows]
    assert [(r.row, r.values) for r in valid] == [(1, {"title": "first", "n": 1, "done": True}),
                                                  (5, {"title": "fifth"})]
    assert [(f.row, sorted(f.errors)) for f in failed] == [(2, ["title"]), (3, ["done", "n"]), (4, ["_row"])]
    assert "2 cells" in failed[2].errors["_row"][0] and "5" in failed[2].errors["_row"][0]


def test_header_only_and_long_fields():
    assert list(upload("title,body\n").batches(10)) == []
    long_text = "x" * 300_000  # over csv's default field limit of 128 KiB
    ((valid, failed),) = upload(f"title,body\nt,{long_text}\n").batches(10)
    assert failed == [] and valid[0].values["body"] == long_text
