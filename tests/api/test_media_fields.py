"""File fields and multipart record writes (decisions.md, Files in records, thumbnails and file
tokens; issue 41): the field's keys, values that are files of their record and field only, creates
and changes that carry their files all or nothing, and the bad input of the issue (a wrong type under
an image extension, a zip bomb renamed `.png`, a 30,000 x 30,000 PNG, a truncated JPEG, a body cut
off). Images are real ones, made with Pillow here."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import zipfile
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from PIL import Image

from cms.store.documents import records_mongo_name
from tests.api.test_files import FILES, uploaded
from tests.api.test_record_writes import poll, stored
from tests.conftest import bearer, create_collection, create_record, error_of, records_path

PHOTOS = [
    {"name": "title", "type": "text", "validation": {"required": True}},
    {"name": "cover", "type": "file", "mime_types": ["image/*"], "max_size": 2_000_000, "thumbs": ["640x0", "50x50f"]},
    {"name": "scans", "type": "file", "max_select": 3, "mime_types": ["image/png", "application/pdf"]},
    {"name": "notes", "type": "file", "max_select": 5},
]
BOUNDARY = "media-boundary"


def photo(size: tuple[int, int] = (640, 480), fmt: str = "JPEG", **save: Any) -> bytes:
    """A photo-like image (gradients and noise) of `size` in `fmt`."""
    width, height = size
    red = Image.linear_gradient("L").resize(size)
    green = Image.radial_gradient("L").resize(size)
    blue = Image.effect_noise(size, 40)
    image = Image.merge("RGB", (red, green, blue))
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


def huge_png(width: int, height: int) -> bytes:
    """A PNG whose header says `width` x `height` (1-bit grey) with a tiny, empty image body: what a
    decompression bomb's header looks like, without its gigabytes."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def zip_bomb() -> bytes:
    """A zip holding 100 MiB of zeros in about 100 KiB."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", b"\0" * (100 * 2**20))
    return out.getvalue()


def record_form(data: dict[str, Any] | None, *files: tuple[str, str, bytes, str]) -> aiohttp.FormData:
    """A record's multipart form: `data` as JSON, then each (part name, filename, bytes, content type)."""
    form = aiohttp.FormData(quote_fields=False, default_to_multipart=True)
    if data is not None:
        form.add_field("data", json.dumps(data), content_type="application/json")
    for name, filename, content, content_type in files:
        form.add_field(name, content, filename=filename, content_type=content_type)
    return form


async def create_with_files(client: Any, token: str, collection: str, data: dict[str, Any] | None,
                            *files: tuple[str, str, bytes, str]) -> Any:
    return await client.post(records_path(collection), headers=bearer(token), data=record_form(data, *files))


async def created_with_files(client: Any, token: str, collection: str, data: dict[str, Any] | None,
                             *files: tuple[str, str, bytes, str]) -> dict[str, Any]:
    response = await create_with_files(client, token, collection, data, *files)
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def change_with_files(client: Any, token: str, collection: str, record_id: str, data: dict[str, Any] | None,
                            *files: tuple[str, str, bytes, str]) -> Any:
    return await client.patch(records_path(collection, record_id), headers=bearer(token),
                              data=record_form(data, *files))


async def download(client: Any, file_id: str, **params: str) -> bytes:
    response = await client.get(f"{FILES}/{file_id}", params=params)
    assert response.status == 200, await response.text()
    return bytes(await response.read())


async def nothing_stored(config: Any, collection_id: str, records: int = 0) -> None:
    """No file (nor chunk) in GridFS, and `records` records in the collection."""
    left = await stored(config)
    assert "fs.files" not in left and "fs.chunks" not in left, left
    assert left.get(records_mongo_name(collection_id), 0) == records, left


async def photos(client: Any, admin_token: str) -> dict[str, Any]:
    return await create_collection(client, admin_token, "photos", PHOTOS)


# --- the field's keys --------------------------------------------------------------------------------


async def test_a_file_fields_keys_are_stored_and_shown(client, admin_token):
    created = await photos(client, admin_token)
    cover = created["schema"]["fields"][1]
    assert (cover["max_size"], cover["mime_types"], cover["thumbs"], cover["protected"]) == (
        2_000_000, ["image/*"], ["640x0", "50x50f"], False)
    title = created["schema"]["fields"][0]
    assert (title["max_size"], title["mime_types"], title["thumbs"], title["protected"]) == (None, None, None, False)


async def test_bad_file_field_keys_are_422(client, admin_token):
    for key, value in [("thumbs", ["0x0"]), ("thumbs", ["99999x1"]), ("thumbs", ["100x0f"]), ("thumbs", "100x100"),
                       ("mime_types", ["Image/PNG"]), ("mime_types", ["image"]), ("max_size", 0),
                       ("max_size", "big"), ("protected", "yes"), ("localized", "maybe")]:
        response = await client.post("/api/v1/collections", headers=bearer(admin_token), json={
            "name": "bad", "schema": [{"name": "f", "type": "file", key: value}]})
        body = await error_of(response, 422, "validation_error")
        assert any(k.startswith(f"schema.0.{key}") for k in body["errors"]), (key, body)


# --- values: files of that record and field, nothing else --------------------------------------------


async def test_a_file_field_holds_files_of_its_record_and_field_only(client, admin_token):
    await photos(client, admin_token)
    first = await create_record(client, admin_token, "photos", {"title": "first"})
    second = await create_record(client, admin_token, "photos", {"title": "second"})
    mine = await uploaded(client, admin_token, photo(), "photos", first["id"], field="cover",
                          filename="a.jpg", content_type="image/jpeg")
    assert mine["field"] == "cover" and mine["content_type"] == "image/jpeg"
    loose = await uploaded(client, admin_token, b"%PDF-1.4 loose", "photos", first["id"])
    assert loose["field"] is None
    for record, data in [(first, {"cover": "not-a-file-id"}), (second, {"cover": mine["id"]}),
                         (first, {"notes": [mine["id"]]}), (first, {"notes": [loose["id"]]})]:
        response = await client.patch(records_path("photos", record["id"]), headers=bearer(admin_token),
                                      json={"data": data})
        body = await error_of(response, 422, "validation_error")
        assert list(body["errors"]) == list(data), body
    changed = await client.patch(records_path("photos", first["id"]), headers=bearer(admin_token),
                                 json={"data": {"cover": mine["id"]}})
    assert changed.status == 200, await changed.text()
    assert (await changed.json())["cover"] == mine["id"]
    bulk = await client.post(records_path("photos") + "/bulk-update", headers=bearer(admin_token),
                             json={"record_ids": [first["id"], second["id"]], "data": {"cover": mine["id"]}})
    await error_of(bulk, 422, "validation_error")


# --- multipart creates and changes ---------------------------------------------------------------------


async def test_a_record_is_created_with_its_files_in_one_request(client, admin_token):
    await photos(client, admin_token)
    cover, scan, pdf = photo(), photo((64, 48), "PNG"), b"%PDF-1.4\n%fake\n"
    record = await created_with_files(client, admin_token, "photos", {"title": "Holidays"},
                                      ("cover", "beach.jpg", cover, "image/jpeg"),
                                      ("scans", "a.png", scan, "image/png"), ("scans", "b.pdf", pdf, "application/pdf"))
    assert record["title"] == "Holidays" and isinstance(record["cover"], str) and len(record["scans"]) == 2
    assert await download(client, record["cover"]) == cover
    assert [await download(client, i) for i in record["scans"]] == [scan, pdf]
    again = await (await client.get(records_path("photos", record["id"]))).json()
    assert again == record


async def test_a_change_replaces_appends_and_removes_files_and_deletes_what_it_dropped(client, admin_token, config):
    await photos(client, admin_token)
    one, two, three = (b"%PDF-1.4 " + bytes([n]) * 10 for n in (1, 2, 3))
    record = await created_with_files(client, admin_token, "photos", {"title": "t"},
                                      ("notes", "1.pdf", one, "application/pdf"),
                                      ("notes", "2.pdf", two, "application/pdf"))
    first, second = record["notes"]
    appended = await change_with_files(client, admin_token, "photos", record["id"], None,
                                       ("notes+", "3.pdf", three, "application/pdf"))
    assert appended.status == 200, await appended.text()
    notes = (await appended.json())["notes"]
    assert notes[:2] == [first, second] and len(notes) == 3
    removed = await change_with_files(client, admin_token, "photos", record["id"], {"notes-": [first]})
    assert removed.status == 200, await removed.text()
    assert (await removed.json())["notes"] == notes[1:]
    gone = await client.get(f"{FILES}/{first}")
    assert gone.status == 404
    replaced = await change_with_files(client, admin_token, "photos", record["id"], {"title": "new"},
                                       ("notes", "4.pdf", one, "application/pdf"))
    assert replaced.status == 200, await replaced.text()
    (kept,) = (await replaced.json())["notes"]
    for dropped in notes[1:]:
        assert (await client.get(f"{FILES}/{dropped}")).status == 404
    more = await change_with_files(client, admin_token, "photos", record["id"], None,
                                   ("notes+", "5.pdf", two, "application/pdf"))
    added = (await more.json())["notes"][1]
    taken = await client.patch(records_path("photos", record["id"]), headers=bearer(admin_token),
                               json={"data": {"notes-": [added]}})  # a JSON write may take files out too
    assert taken.status == 200 and (await taken.json())["notes"] == [kept], await taken.text()
    assert (await client.get(f"{FILES}/{added}")).status == 404
    cleared = await client.patch(records_path("photos", record["id"]), headers=bearer(admin_token),
                                 json={"data": {"notes": None}})
    assert cleared.status == 200
    assert (await client.get(f"{FILES}/{kept}")).status == 404
    assert "fs.files" not in await stored(config)


async def test_a_single_file_field_takes_one_file(client, admin_token, config):
    created = await photos(client, admin_token)
    response = await create_with_files(client, admin_token, "photos", {"title": "two"},
                                       ("cover", "a.jpg", photo(), "image/jpeg"),
                                       ("cover", "b.jpg", photo(), "image/jpeg"))
    body = await error_of(response, 422, "validation_error")
    assert "cover" in body["errors"]
    await nothing_stored(config, created["id"])


async def test_a_part_that_is_neither_data_nor_a_file_field_is_422(client, admin_token, config):
    created = await photos(client, admin_token)
    for name in ("title", "nosuch", "cover-"):
        form = record_form({"title": "x"}, (name, "a.pdf", b"%PDF-1.4", "application/pdf"))
        response = await client.post(records_path("photos"), headers=bearer(admin_token), data=form)
        body = await error_of(response, 422, "validation_error")
        assert name in body["errors"], body
    await nothing_stored(config, created["id"])


async def test_data_that_is_not_json_or_not_an_object_is_refused(client, admin_token):
    await photos(client, admin_token)
    for text, status in [("{not json", 400), ("[1, 2]", 422)]:
        form = aiohttp.FormData(default_to_multipart=True)
        form.add_field("data", text)
        response = await client.post(records_path("photos"), headers=bearer(admin_token), data=form)
        assert response.status == status, await response.text()


# --- all or nothing ----------------------------------------------------------------------------------


async def test_a_refused_value_keeps_none_of_the_files(client, admin_token, config):
    created = await photos(client, admin_token)
    response = await create_with_files(client, admin_token, "photos", {"title": ""},
                                       ("notes", "a.pdf", b"%PDF-1.4" * 100_000, "application/pdf"),
                                       ("cover", "c.jpg", photo(), "image/jpeg"))
    body = await error_of(response, 422, "validation_error")
    assert "data.title" in body["errors"] or "title" in body["errors"], body
    await nothing_stored(config, created["id"])


async def test_a_create_rule_that_reads_the_values_is_checked_with_them(client, admin_token, config,
                                                                       collection_user_token):
    """A create rule reading `@request.data` is decided with the form's values, not refused before they
    come (issue 44: the tutorial's posts, whose author must be the caller); a refusal stores nothing,
    whether the values come before the files or after."""
    created = await create_collection(client, admin_token, "photos", PHOTOS,
                                      create_rule='@request.auth.collection = "people" && @request.data.title = "mine"')
    cover = ("cover", "c.jpg", photo(), "image/jpeg")
    refused = await create_with_files(client, collection_user_token, "photos", {"title": "theirs"}, cover)
    await error_of(refused, 403, "forbidden")
    files_first = aiohttp.FormData(quote_fields=False, default_to_multipart=True)
    files_first.add_field("cover", photo(), filename="c.jpg", content_type="image/jpeg")
    files_first.add_field("data", json.dumps({"title": "theirs"}), content_type="application/json")
    refused = await client.post(records_path("photos"), headers=bearer(collection_user_token), data=files_first)
    await error_of(refused, 403, "forbidden")
    await nothing_stored(config, created["id"])
    record = await created_with_files(client, collection_user_token, "photos", {"title": "mine"}, cover)
    assert record["title"] == "mine" and record["cover"]
    anonymous = await client.post(records_path("photos"), data=record_form({"title": "mine"}, cover))
    await error_of(anonymous, 401, "unauthorized")


async def test_an_update_rule_that_reads_the_values_is_checked_with_them(client, admin_token, config,
                                                                         collection_user_token):
    """The same for a change: the update rule reading `@request.data` is decided with the form's values."""
    await create_collection(client, admin_token, "photos", PHOTOS,
                            update_rule='@request.auth.collection = "people" && @request.data.title = "mine"')
    record = await create_record(client, admin_token, "photos", {"title": "first"})
    cover = ("cover", "c.jpg", photo(), "image/jpeg")
    refused = await change_with_files(client, collection_user_token, "photos", record["id"], {"title": "theirs"}, cover)
    await error_of(refused, 403, "forbidden")
    assert "fs.files" not in await stored(config)
    changed = await change_with_files(client, collection_user_token, "photos", record["id"], {"title": "mine"}, cover)
    assert changed.status == 200, await changed.text()
    assert (await changed.json())["cover"]
    missing = await change_with_files(client, collection_user_token, "photos", "no-such-record", {"title": "mine"})
    await error_of(missing, 404, "not_found")


async def test_a_file_over_max_size_is_422_naming_the_field_and_nothing_is_stored(client, admin_token, config):
    created = await photos(client, admin_token)
    big = photo((1600, 1200), "PNG")
    assert len(big) > 2_000_000
    response = await create_with_files(client, admin_token, "photos", {"title": "big"},
                                       ("notes", "n.pdf", b"%PDF-1.4 kept?", "application/pdf"),
                                       ("cover", "big.png", big, "image/png"))
    body = await error_of(response, 422, "validation_error")
    assert list(body["errors"]) == ["cover"] and "max_size" in body["errors"]["cover"][0]
    await nothing_stored(config, created["id"])


async def test_a_wrong_type_under_an_image_extension_is_422(client, admin_token, config):
    created = await photos(client, admin_token)
    for filename, content in [("cat.png", b"<html><script>alert(1)</script></html>"), ("bomb.png", zip_bomb()),
                              ("scan.png", b"%PDF-1.4 not an image")]:
        response = await create_with_files(client, admin_token, "photos", {"title": "x"},
                                           ("cover", filename, content, "image/png"))
        body = await error_of(response, 422, "validation_error")
        assert "is not one of image/*" in body["errors"]["cover"][0], body
    await nothing_stored(config, created["id"])


async def test_types_come_from_the_bytes_signature(client, admin_token):
    await photos(client, admin_token)
    record = await create_record(client, admin_token, "photos", {"title": "t"})
    claims = [(zip_bomb(), "image/png", "application/zip"), (b"plain words", "image/png", "application/octet-stream"),
              (photo(fmt="PNG"), "text/plain", "image/png"), (b"a,b\n1,2\n", "text/csv", "text/csv")]
    ids = []
    for content, claimed, expected in claims:
        file = await uploaded(client, admin_token, content, "photos", record["id"], content_type=claimed)
        assert file["content_type"] == expected, (claimed, file)
        ids.append(file["id"])
    zipped = await client.get(f"{FILES}/{ids[0]}")
    assert zipped.headers["Content-Type"] == "application/zip"
    assert zipped.headers["Content-Disposition"].startswith("attachment;")


async def test_a_decompression_bomb_and_a_truncated_jpeg_are_422_at_upload(client, admin_token, config):
    created = await photos(client, admin_token)
    record = await create_record(client, admin_token, "photos", {"title": "t"})
    jpeg = photo((1200, 900), quality=90)
    for content, message in [(huge_png(30_000, 30_000), "too many pixels (900,000,000)"),
                             (jpeg[: len(jpeg) // 2], "truncated or corrupt")]:
        response = await create_with_files(client, admin_token, "photos", {"title": "x"},
                                           ("cover", "x.png", content, "image/png"))
        body = await error_of(response, 422, "validation_error")
        assert message in body["errors"]["cover"][0], body
        plain = await client.post(FILES, headers=bearer(admin_token), data=_upload(content, record["id"]))
        body = await error_of(plain, 422, "validation_error")
        assert message in body["errors"]["file"][0], body
    await nothing_stored(config, created["id"], records=1)


def _upload(content: bytes, record_id: str) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("collection", "photos")
    form.add_field("record_id", record_id)
    form.add_field("file", content, filename="x.png", content_type="image/png")
    return form


async def test_a_body_cut_off_stores_no_file_and_no_record(client, admin_token, config):
    """The body stops inside its second file part, the first file (several GridFS chunks) already
    stored: the answer is 400 and neither file nor record stays."""
    created = await photos(client, admin_token)
    first = b"%PDF-1.4 " + bytes(range(256)) * 4096
    head = (_part("data", b'{"title": "cut"}') + _part("notes", first, "a.pdf")
            + _part_head("notes", "b.pdf") + b"%PDF-1.4 partial")
    sent = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield head
        await sent.wait()

    async def chunks_written() -> bool:
        return (await stored(config)).get("fs.chunks", 0) >= 2

    posting = asyncio.ensure_future(client.post(
        records_path("photos"), headers={**bearer(admin_token),
                                         "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
        data=body()))
    await poll(chunks_written, "the first file's chunks")
    posting.cancel()  # the client goes away mid-body
    try:
        await posting
    except asyncio.CancelledError:
        pass
    sent.set()

    async def cleaned() -> bool:
        left = await stored(config)
        return "fs.files" not in left and "fs.chunks" not in left

    await poll(cleaned, "the stored file to be deleted")
    await nothing_stored(config, created["id"])


async def test_a_truncated_body_is_400_and_stores_nothing(client, admin_token, config):
    created = await photos(client, admin_token)
    body = _part("data", b'{"title": "cut"}') + _part("notes", b"%PDF-1.4 " * 70_000, "a.pdf")  # no closing boundary
    response = await client.post(records_path("photos"), data=body, headers={
        **bearer(admin_token), "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    await error_of(response, 400, "bad_request")
    await nothing_stored(config, created["id"])


def _part_head(name: str, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    content_type = "Content-Type: application/pdf\r\n" if filename else ""
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n{content_type}\r\n".encode()


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    return _part_head(name, filename) + value + b"\r\n"


async def test_deleting_a_record_deletes_its_files_and_thumbnails(client, admin_token, config):
    await photos(client, admin_token)
    record = await created_with_files(client, admin_token, "photos", {"title": "t"},
                                      ("cover", "c.jpg", photo(), "image/jpeg"))
    await download(client, record["cover"], thumb="100x100")
    assert (await stored(config))["fs.files"] == 2  # the file and its thumbnail
    response = await client.delete(records_path("photos", record["id"]), headers=bearer(admin_token))
    assert response.status == 204
    left = await stored(config)
    assert "fs.files" not in left and "fs.chunks" not in left, left


async def test_concurrent_appends_lose_no_file_and_leave_none_behind(client, admin_token, config, clock):
    """Four changes each add a file to the same field at once: each either lands in the field or is
    refused (400, the record kept changing) with its file deleted; no file outlives its place."""
    await photos(client, admin_token)
    record = await created_with_files(client, admin_token, "photos", {"title": "t"},
                                      ("notes", "0.pdf", b"%PDF-1.4 zero", "application/pdf"))

    async def append(n: int) -> Any:
        return await change_with_files(client, admin_token, "photos", record["id"], None,
                                       ("notes+", f"{n}.pdf", b"%PDF-1.4 " + bytes([n]) * 100, "application/pdf"))

    async def ticking() -> None:  # the test's clock stands still; a write's `updated` needs time to pass
        while True:
            clock.advance(milliseconds=1)
            await asyncio.sleep(0.001)

    ticker = asyncio.create_task(ticking())
    try:
        answers = await asyncio.gather(*(append(n) for n in range(1, 5)))
    finally:
        ticker.cancel()
    statuses = sorted(a.status for a in answers)
    assert set(statuses) <= {200, 400}, statuses
    final = await (await client.get(records_path("photos", record["id"]))).json()
    assert len(final["notes"]) == 1 + statuses.count(200)
    for answer in answers:
        if answer.status == 200:
            added = (await answer.json())["notes"][-1]
            assert added in final["notes"]
    assert (await stored(config))["fs.files"] == len(final["notes"])
