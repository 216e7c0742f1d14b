"""API tests of CSV export and import (spec: Records export/csv, import/csv; decisions.md: Limits,
Response shapes)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from typing import Any

import aiohttp
import pytest

from cms.models import Principal
from cms.services.content.csv_io import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS
from tests.conftest import bearer, create_collection, create_record, error_of, records_path, seed_collection

FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True}},
    {"name": "slug", "type": "text", "validation": {"unique": True}},
    {"name": "body", "type": "editor"},
    {"name": "published", "type": "bool"},
    {"name": "contact", "type": "email"},
    {"name": "site", "type": "url"},
    {"name": "views", "type": "number"},
    {"name": "released", "type": "date"},
    {"name": "status", "type": "select", "values": ["draft", "live"]},
    {"name": "tags", "type": "select", "values": ["a", "b", "c"], "max_select": 3},
    {"name": "meta", "type": "json"},
    {"name": "cover", "type": "file"},
]
HEADER = ["id", "created", "updated", *(f["name"] for f in FIELDS)]
SYSTEM = ("id", "created", "updated")
FILENAME = re.compile(r'^attachment; filename="posts-\d{8}-\d{6}\.csv"$')

ROWS: list[dict[str, Any]] = [
    {"title": "Hello, world", "slug": "hello", "body": 'He said "hi"\nthen left', "published": True,
     "contact": "ann@example.com", "site": "https://example.com/a?b=1", "views": 12, "released": "2024-03-01",
     "status": "live", "tags": ["a", "c"], "meta": {"k": [1, None, "é"], "ok": True}},
    {"title": "=HYPERLINK(\"http://evil\")", "slug": "-minus", "published": False, "views": -2.5,
     "released": "2024-03-01T10:30:00.123+02:00", "tags": [], "meta": "just text"},
    {"title": "@user +1 'q", "body": "'=already quoted", "views": 2**63 - 1, "meta": -7, "status": "draft"},
    {"title": "漢字 🙂 ü", "meta": [1, 2.5, {"nested": {"deep": [True]}}], "views": 1e16},
]


def export_path(collection: str = "posts") -> str:
    return records_path(collection) + "/export/csv"


def import_path(collection: str = "posts") -> str:
    return records_path(collection) + "/import/csv"


def csv_bytes(rows: Sequence[Sequence[Any]], *, bom: bool = False) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return (b"\xef\xbb\xbf" if bom else b"") + buffer.getvalue().encode()


def form(content: bytes, field_name: str = "file", filename: str = "data.csv") -> aiohttp.FormData:
    data = aiohttp.FormData()
    data.add_field(field_name, content, filename=filename, content_type="text/csv")
    return data


async def import_csv(client: Any, token: str, content: bytes, collection: str = "posts") -> dict[str, Any]:
    response = await client.post(import_path(collection), headers=bearer(token), data=form(content))
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    assert set(body) == {"imported", "failed"}
    return body


async def export_rows(client: Any, token: str, collection: str = "posts", **params: Any) -> list[list[str]]:
    response = await client.get(export_path(collection), headers=bearer(token), params=params)
    assert response.status == 200, await response.text()
    return list(csv.reader(io.StringIO((await response.read()).decode(), newline="")))


async def all_records(client: Any, collection: str = "posts") -> list[dict[str, Any]]:
    page = await (await client.get(records_path(collection), params={"per_page": 100})).json()
    items: list[dict[str, Any]] = page["items"]
    return items


def values(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in SYSTEM}


@pytest.fixture
async def posts(client: Any, admin_token: str, clock: Any) -> list[dict[str, Any]]:
    """The `posts` collection with ROWS, created one second apart."""
    return await seed_collection(client, admin_token, "posts", FIELDS, ROWS, clock)


# --- export -------------------------------------------------------------------------------------------


async def test_export_header_values_and_headers(client, user_token, posts):
    response = await client.get(export_path(), headers=bearer(user_token))
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert FILENAME.match(response.headers["Content-Disposition"]), response.headers["Content-Disposition"]
    assert response.headers.get("X-Request-Id")
    text = (await response.read()).decode()
    assert text.startswith(",".join(HEADER) + "\r\n")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == HEADER and len(rows) == 1 + len(ROWS)
    first = dict(zip(HEADER, rows[1], strict=True))
    assert first["id"] == posts[0]["id"] and first["created"] == posts[0]["created"]
    assert first["published"] == "true" and first["views"] == "12"
    assert first["released"] == "2024-03-01T00:00:00.000Z"
    assert first["tags"] == '["a","c"]' and first["meta"] == '{"k":[1,null,"é"],"ok":true}'
    assert first["body"] == 'He said "hi"\nthen left' and first["status"] == "live"
    second = dict(zip(HEADER, rows[2], strict=True))
    assert second["published"] == "false" and second["views"] == "-2.5"  # numbers are never prefixed
    assert second["released"] == "2024-03-01T08:30:00.123Z" and second["tags"] == "[]"
    assert second["meta"] == '"just text"' and second["body"] == "" and second["contact"] == ""


async def test_export_guards_against_formula_injection(client, admin_token, posts):
    rows = await export_rows(client, admin_token)
    cells = {cell for row in rows[1:] for cell in row}
    assert "'=HYPERLINK(\"http://evil\")" in cells and "'-minus" in cells and "'@user +1 'q" in cells
    assert "''=already quoted" in cells
    for row in rows[1:]:
        for name, cell in zip(HEADER, row, strict=True):
            if name != "views" and name != "meta":
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (name, cell)


async def test_export_honours_filter_sort_and_search(client, admin_token, posts):
    rows = await export_rows(client, admin_token, filter="published=false || status=draft", sort="-views")
    assert [r[HEADER.index("title")] for r in rows[1:]] == ["'@user +1 'q", "'=HYPERLINK(\"http://evil\")"]
    rows = await export_rows(client, admin_token, search="hello world")
    assert [r[0] for r in rows[1:]] == [posts[0]["id"]]
    rows = await export_rows(client, admin_token, filter="views>1e20")
    assert rows == [HEADER]


async def test_export_of_an_empty_collection_is_the_header(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    assert await export_rows(client, admin_token) == [HEADER]
    await create_collection(client, admin_token, "bare", [])
    assert await export_rows(client, admin_token, "bare") == [["id", "created", "updated"]]


async def test_export_errors_come_before_any_byte(client, admin_token, posts):
    await error_of(await client.get(export_path()), 401, "unauthorized")
    await error_of(await client.get(export_path("nope"), headers=bearer(admin_token)), 404, "not_found")
    response = await client.get(export_path(), headers=bearer(admin_token), params={"filter": "nope=1"})
    await error_of(response, 400, "invalid_filter")
    response = await client.get(export_path(), headers=bearer(admin_token), params={"sort": "nope"})
    await error_of(response, 400, "invalid_filter")


async def test_export_streams_in_chunks(client, admin_token, services):
    """The service hands the CSV on in pieces while reading the cursor in batches."""
    await create_collection(client, admin_token, "posts", FIELDS)
    principal = Principal("admin_user", "u")
    content = csv_bytes([["title", "body"], *([f"t{i}", "x" * 200] for i in range(1500))])
    assert (await services.records.import_csv(principal, "posts", content)).imported == 1500
    export = await services.records.export_csv(principal, "posts")
    chunks = [chunk async for chunk in export.chunks]
    assert len(chunks) >= 4 and max(len(c) for c in chunks) < 80 * 1024
    rows = list(csv.reader(io.StringIO("".join(chunks), newline="")))
    assert len(rows) == 1501 and {r[HEADER.index("title")] for r in rows[1:]} == {f"t{i}" for i in range(1500)}
    # stopping early closes the cursor
    export = await services.records.export_csv(principal, "posts")
    assert await export.chunks.__anext__()
    await export.chunks.aclose()
    response = await client.get(export_path(), headers=bearer(admin_token))
    assert len((await response.read()).decode().splitlines()) == 1501


# --- round trip ---------------------------------------------------------------------------------------


async def test_export_then_import_reproduces_every_value(client, admin_token, posts):
    exported = await client.get(export_path(), headers=bearer(admin_token))
    content = await exported.read()
    await create_collection(client, admin_token, "copy", FIELDS)
    result = await import_csv(client, admin_token, content, "copy")
    assert result == {"imported": len(ROWS), "failed": []}
    copies = await all_records(client, "copy")
    originals = {r["title"]: values(r) for r in posts}
    assert {r["title"]: values(r) for r in copies} == originals
    assert {r["id"] for r in copies}.isdisjoint({r["id"] for r in posts})  # id/created/updated columns ignored


# --- import -------------------------------------------------------------------------------------------


async def test_import_parses_values_by_type(client, admin_token, seen):
    await create_collection(client, admin_token, "posts", FIELDS)
    content = csv_bytes([
        ["title", "published", "views", "released", "tags", "meta", "status", "id", "created"],
        ["one", "TRUE", "1", "2024-03-01", '["a"]', '{"x": 1}', "live", "ignored", "not a date"],
        ["two", "no", "-0.5", "2024-03-01T10:00:00+01:00", "", "[1,2]", "", "", ""],
        ["three", "1", "1e3", "", "[]", "null", "draft", "", ""],
        ["four", "yes", "", "", "", "", "", "", ""],
        ["five", "0", "'-4", "", "", "", "", "", ""],
    ], bom=True)
    result = await import_csv(client, admin_token, content)
    assert result == {"imported": 5, "failed": []}
    stored = {r["title"]: values(r) for r in await all_records(client)}
    assert stored == {
        "one": {"title": "one", "published": True, "views": 1, "released": "2024-03-01T00:00:00.000Z",
                "tags": ["a"], "meta": {"x": 1}, "status": "live"},
        "two": {"title": "two", "published": False, "views": -0.5, "released": "2024-03-01T09:00:00.000Z",
                "meta": [1, 2]},
        "three": {"title": "three", "published": True, "views": 1000.0, "tags": [], "status": "draft"},
        "four": {"title": "four", "published": True},
        "five": {"title": "five", "published": False, "views": -4},
    }
    assert [e.event for e in seen] == ["create"] * 5
    assert sorted(e.data["title"] for e in seen) == sorted(stored)
    assert {e.record_id for e in seen} == {r["id"] for r in await all_records(client)}


async def test_import_reports_invalid_rows_and_stores_the_rest(client, admin_token, seen):
    await create_collection(client, admin_token, "posts", FIELDS)
    await create_record(client, admin_token, "posts", {"title": "existing", "slug": "taken"})
    seen.clear()
    content = csv_bytes([
        ["title", "slug", "published", "views", "contact", "status", "tags", "meta"],
        ["ok 1", "s1", "true", "1", "", "", "", ""],
        ["", "s2", "", "", "", "", "", ""],  # 2: title required
        ["bad types", "s3", "maybe", "ten", "not-an-email", "archived", '["z"]', "{bad"],  # 3
        ["ragged", "s4"],  # 4: too few cells
        ["ragged too", "s5", "", "", "", "", "", "", "extra"],  # 5: too many
        ["clash with stored", "taken", "", "", "", "", "", ""],  # 6: unique vs an existing record
        ["ok 2", "s7", "", "", "", "", "", ""],
        ["clash within file", "s7", "", "", "", "", "", ""],  # 8: unique vs row 7
        ["ok 3", "", "false", "3", "", "", "", ""],
    ])
    result = await import_csv(client, admin_token, content)
    assert result["imported"] == 3
    failed = {f["row"]: f["errors"] for f in result["failed"]}
    assert [f["row"] for f in result["failed"]] == [2, 3, 4, 5, 6, 8]
    assert set(failed[2]) == {"title"}
    assert set(failed[3]) == {"published", "views", "contact", "status", "tags.0", "meta"}  # flat, dotted
    assert set(failed[4]) == {"_row"} and set(failed[5]) == {"_row"}
    assert failed[6] == {"slug": ["Value must be unique"]} and failed[8] == {"slug": ["Value must be unique"]}
    titles = {r["title"] for r in await all_records(client)}
    assert titles == {"existing", "ok 1", "ok 2", "ok 3"}
    assert sorted(e.data["title"] for e in seen) == ["ok 1", "ok 2", "ok 3"]


async def test_import_checks_relation_targets(client, admin_token):
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    await create_collection(client, admin_token, "books", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": authors["id"]},
        {"name": "editors", "type": "relation", "collection_id": authors["id"], "max_select": 2}])
    ann = await create_record(client, admin_token, "authors", {"name": "Ann"})
    missing = "00000000-0000-0000-0000-000000000000"
    content = csv_bytes([["title", "author", "editors"], ["ok", ann["id"], f'["{ann["id"]}"]'],
                         ["bad author", missing, ""], ["bad editor", "", f'["{ann["id"]}","{missing}"]']])
    result = await import_csv(client, admin_token, content, "books")
    assert result["imported"] == 1
    assert result["failed"] == [{"row": 2, "errors": {"author": ["Unknown record id."]}},
                                {"row": 3, "errors": {"editors": ["Unknown record id."]}}]
    # export keeps relations as ids (never the labels the admin UI shows)
    rows = await export_rows(client, admin_token, "books")
    assert rows[0][3:] == ["title", "author", "editors"] and rows[1][3:] == ["ok", ann["id"], f'["{ann["id"]}"]']


@pytest.mark.parametrize("content, words", [
    (b"", "empty"),
    (b"\xef\xbb\xbf", "empty"),
    (b"title,views\nok,1\nbad \xff\xfe,2\n", "not UTF-8"),
    (b"title,views\r\nok,1\r\n\"broken\"quote,2\r\n", "Malformed CSV at data row 2"),
    (b"title,views\nok,1\n\"never closed,2\nthird,3\n", "Malformed CSV at data row 2"),
    (b"title,nope\nok,1\n", "unknown columns: nope"),
    (b"first post,12,true\n", "unknown columns"),  # a file without a header
    (b"views\n1\n", "required fields: title"),
    (b"title,title\na,b\n", "duplicate columns"),
], ids=["empty", "bom only", "non-utf8", "bad quoting", "unterminated quote", "unknown column", "no header",
        "no required column", "duplicate column"])
async def test_bad_files_store_nothing(client, admin_token, seen, content, words):
    await create_collection(client, admin_token, "posts", FIELDS)
    response = await client.post(import_path(), headers=bearer(admin_token), data=form(content))
    body = await error_of(response, 422, "validation_error")
    assert words in body["detail"] and body["errors"] == {"file": [body["detail"]]}, body
    assert await all_records(client) == [] and seen == []


async def test_header_only_imports_nothing(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    assert await import_csv(client, admin_token, b"title,views\r\n") == {"imported": 0, "failed": []}


async def test_row_and_size_limits(client, admin_token, seen):
    await create_collection(client, admin_token, "posts", FIELDS)
    too_many = b"title\n" + b"x\n" * (MAX_IMPORT_ROWS + 1)
    response = await client.post(import_path(), headers=bearer(admin_token), data=form(too_many))
    body = await error_of(response, 422, "validation_error")
    assert "50,000" in body["detail"]
    too_big = b"title,body\n" + (b"t," + b"x" * 1023 + b"\n") * (MAX_IMPORT_BYTES // 1024 + 1)
    response = await client.post(import_path(), headers=bearer(admin_token), data=form(too_big))
    body = await error_of(response, 413, "payload_too_large")
    assert "10 MiB" in body["detail"]
    assert await all_records(client) == [] and seen == []


async def test_upload_must_be_multipart_with_a_file_field(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    content = csv_bytes([["title"], ["x"]])
    response = await client.post(import_path(), headers=bearer(admin_token), data=form(content, "upload"))
    body = await error_of(response, 422, "validation_error")
    assert "file" in body["errors"]
    data = aiohttp.FormData()
    data.add_field("note", "hello")
    data.add_field("file", content, filename="x.csv")  # other fields may come first
    response = await client.post(import_path(), headers=bearer(admin_token), data=data)
    assert (await response.json()) == {"imported": 1, "failed": []}
    requests: list[dict[str, Any]] = [
        {"data": content, "headers": {**bearer(admin_token), "Content-Type": "text/csv"}},
        {"json": {"file": "title\nx\n"}, "headers": bearer(admin_token)},
        {"data": b"--x\r\nbroken", "headers": {**bearer(admin_token), "Content-Type": "multipart/form-data"}},
    ]
    for kwargs in requests:
        response = await client.post(import_path(), **kwargs)
        await error_of(response, 400, "bad_request")
    assert len(await all_records(client)) == 1


async def test_import_needs_a_token_and_a_collection(client, admin_token):
    await create_collection(client, admin_token, "posts", FIELDS)
    content = csv_bytes([["title"], ["x"]])
    await error_of(await client.post(import_path(), data=form(content)), 401, "unauthorized")
    response = await client.post(import_path("nope"), headers=bearer(admin_token), data=form(content))
    await error_of(response, 404, "not_found")
    assert await all_records(client) == []


async def test_import_in_several_batches(client, admin_token, services, seen):
    """More rows than one insert batch: every row stored once, one event each, numbers kept."""
    await create_collection(client, admin_token, "posts", FIELDS)
    rows = [["title", "slug"], *([f"t{i}", f"s{i % 2300}"] for i in range(2500))]
    result = await import_csv(client, admin_token, csv_bytes(rows))
    assert result["imported"] == 2300
    assert [f["row"] for f in result["failed"]] == list(range(2301, 2501))
    assert len(seen) == 2300 and len({e.record_id for e in seen}) == 2300
    assert (await services.records.list("posts")).total == 2300
