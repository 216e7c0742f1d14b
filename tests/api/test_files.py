"""Files (spec: Files): upload into GridFS, download with ETag and ranges, delete, limits, the
record's access rules, clean-up with the record and the collection, and safe serving."""

from __future__ import annotations

import asyncio
import hashlib
import io
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from PIL import Image

from cms.store.client import open_client
from tests.conftest import (
    COLLECTIONS,
    USER_PASSWORD,
    bearer,
    create_collection,
    create_record,
    error_of,
    records_path,
)

FILES = "/api/v1/files"
POSTS = [{"name": "title", "type": "text"}]
MIB = 2**20


def binary_content(size: int) -> bytes:
    """`size` bytes cycling through all 256 byte values."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def upload_form(content: bytes, collection: str | None, record_id: str | None, *, filename: str = "data.bin",
                content_type: str = "application/octet-stream", file_first: bool = False,
                field: str | None = None) -> aiohttp.FormData:
    form = aiohttp.FormData(quote_fields=False)
    fields = [("collection", collection), ("record_id", record_id), ("field", field)]
    if file_first:
        form.add_field("file", content, filename=filename, content_type=content_type)
    for name, value in fields:
        if value is not None:
            form.add_field(name, value)
    if not file_first:
        form.add_field("file", content, filename=filename, content_type=content_type)
    return form


async def upload(client: Any, token: str | None, content: bytes, collection: str | None, record_id: str | None,
                 **kwargs: Any) -> Any:
    headers = bearer(token) if token else {}
    return await client.post(FILES, headers=headers, data=upload_form(content, collection, record_id, **kwargs))


async def uploaded(client: Any, token: str, content: bytes, collection: str, record_id: str,
                   **kwargs: Any) -> dict[str, Any]:
    response = await upload(client, token, content, collection, record_id, **kwargs)
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def stored_counts(config: Any) -> tuple[int, int]:
    """(documents in fs.files, documents in fs.chunks), read with a client of our own."""
    mongo = open_client(config.mongodb_url)
    try:
        db = mongo[config.mongodb_db]
        return await db["fs.files"].count_documents({}), await db["fs.chunks"].count_documents({})
    finally:
        await mongo.close()


@pytest.fixture
async def post(client, admin_token) -> dict[str, Any]:
    await create_collection(client, admin_token, "posts", POSTS)
    return await create_record(client, admin_token, "posts", {"title": "hello"})


async def auth_user(client: Any, collection: str, email: str) -> tuple[str, str]:
    """Register and log in a user of an auth collection: (access token, user record id)."""
    credentials = {"email": email, "password": USER_PASSWORD}
    response = await client.post(f"{COLLECTIONS}/{collection}/auth/register", json=credentials)
    assert response.status == 201, await response.text()
    response = await client.post(f"{COLLECTIONS}/{collection}/auth/login", json=credentials)
    assert response.status == 200, await response.text()
    body = await response.json()
    return str(body["token"]["access_token"]), str(body["user"]["id"])


# --- round trip ------------------------------------------------------------------------------------


async def test_binary_round_trip_is_byte_identical(client, user_token, post, config):
    content = binary_content(3 * MIB + 12_345)
    body = await uploaded(client, user_token, content, "posts", post["id"], filename="blob.bin")
    assert set(body) == {"id", "filename", "content_type", "size", "collection", "record_id", "field", "created"}
    assert body["filename"] == "blob.bin"
    assert body["content_type"] == "application/octet-stream"
    assert body["size"] == len(content)
    assert (body["collection"], body["record_id"]) == ("posts", post["id"])
    assert body["created"].endswith("Z")

    response = await client.get(f"{FILES}/{body['id']}")
    assert response.status == 200
    assert await response.read() == content
    assert response.headers["Content-Length"] == str(len(content))
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert response.headers["Accept-Ranges"] == "bytes"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Security-Policy"] == "sandbox"
    assert response.headers["Content-Disposition"].startswith("attachment;")
    assert hashlib.sha256(content).hexdigest()[:32] in response.headers["ETag"]
    files, chunks = await stored_counts(config)
    assert files == 1 and chunks == -(-len(content) // (255 * 1024))


async def test_an_empty_file_round_trips(client, user_token, post):
    body = await uploaded(client, user_token, b"", "posts", post["id"], filename="empty.txt", content_type="text/plain")
    assert body["size"] == 0
    response = await client.get(f"{FILES}/{body['id']}")
    assert response.status == 200 and await response.read() == b""
    assert response.headers["Content-Length"] == "0"


async def test_etag_and_if_none_match(client, admin_token, post):
    body = await uploaded(client, admin_token, b"version one", "posts", post["id"])
    response = await client.get(f"{FILES}/{body['id']}")
    etag = response.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert body["id"] in etag

    again = await client.get(f"{FILES}/{body['id']}", headers={"If-None-Match": etag})
    assert again.status == 304
    assert await again.read() == b""
    assert again.headers["ETag"] == etag
    assert again.headers["X-Content-Type-Options"] == "nosniff"
    listed = await client.get(f"{FILES}/{body['id']}", headers={"If-None-Match": f'"other", W/{etag}'})
    assert listed.status == 304
    stale = await client.get(f"{FILES}/{body['id']}", headers={"If-None-Match": '"stale"'})
    assert stale.status == 200 and await stale.read() == b"version one"

    other = await uploaded(client, admin_token, b"version one", "posts", post["id"])
    response = await client.get(f"{FILES}/{other['id']}", headers={"If-None-Match": etag})
    assert response.status == 200, "another file with the same bytes has its own ETag"


# --- ranges ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("header, start, end", [
    ("bytes=0-99", 0, 100),
    ("bytes=300000-300999", 300_000, 301_000),  # crosses a 255 KiB chunk boundary
    ("bytes=-500", 600_000 - 500, 600_000),
    ("bytes=599000-", 599_000, 600_000),
    ("bytes=10-99999999", 10, 600_000),
    ("bytes=-999999", 0, 600_000),
], ids=["first-bytes", "middle", "suffix", "open-ended", "past-the-end", "suffix-longer-than-file"])
async def test_single_ranges_are_206(client, admin_token, post, header, start, end):
    content = binary_content(600_000)[::-1]
    body = await uploaded(client, admin_token, content, "posts", post["id"])
    response = await client.get(f"{FILES}/{body['id']}", headers={"Range": header})
    assert response.status == 206, await response.text()
    assert await response.read() == content[start:end]
    assert response.headers["Content-Range"] == f"bytes {start}-{end - 1}/{len(content)}"
    assert response.headers["Content-Length"] == str(end - start)
    assert response.headers["Accept-Ranges"] == "bytes"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("header", ["bytes=0-1,5-9", "items=0-9"], ids=["multi-range", "other-unit"])
async def test_ranges_we_do_not_serve_get_the_whole_file(client, admin_token, post, header):
    body = await uploaded(client, admin_token, b"0123456789abcdef", "posts", post["id"])
    response = await client.get(f"{FILES}/{body['id']}", headers={"Range": header})
    assert response.status == 200
    assert await response.read() == b"0123456789abcdef"
    assert "Content-Range" not in response.headers


async def test_if_range_with_another_etag_sends_the_whole_file(client, admin_token, post):
    body = await uploaded(client, admin_token, b"0123456789", "posts", post["id"])
    response = await client.get(f"{FILES}/{body['id']}", headers={"Range": "bytes=0-1", "If-Range": '"old"'})
    assert response.status == 200 and await response.read() == b"0123456789"
    etag = response.headers["ETag"]
    response = await client.get(f"{FILES}/{body['id']}", headers={"Range": "bytes=0-1", "If-Range": etag})
    assert response.status == 206 and await response.read() == b"01"


@pytest.mark.parametrize("header", ["bytes=10-", "bytes=10-20", "bytes=-0", "bytes=5-2", "bytes=x-3", "bytes=-"],
                         ids=["start-at-end", "start-past-end", "empty-suffix", "backwards", "not-a-number",
                              "no-numbers"])
async def test_unsatisfiable_or_malformed_ranges_are_400(client, admin_token, post, header):
    body = await uploaded(client, admin_token, b"0123456789", "posts", post["id"])
    response = await client.get(f"{FILES}/{body['id']}", headers={"Range": header})
    error = await error_of(response, 400, "bad_request")
    assert "Range" in error["detail"]


# --- limits ----------------------------------------------------------------------------------------


async def test_an_oversized_upload_is_413_and_nothing_is_stored(client, services, user_token, post, config):
    await services.settings.set("max_upload_mb", 1)
    # about 1 MiB of chunks is written before the limit is passed; they must go too
    response = await upload(client, user_token, binary_content(MIB + 1), "posts", post["id"])
    error = await error_of(response, 413, "payload_too_large")
    assert "1 MiB" in error["detail"]
    assert await stored_counts(config) == (0, 0)
    ok = await upload(client, user_token, binary_content(MIB), "posts", post["id"])
    assert ok.status == 201, "exactly the limit is accepted"


async def test_the_413_comes_before_the_rest_of_the_body_is_sent(client, services, user_token, post, config):
    """The client holds back the end of its body until it has the answer: only an answer given
    while the body is still being read can arrive."""
    await services.settings.set("max_upload_mb", 1)
    boundary = "b0undary"
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="collection"\r\n\r\nposts\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="record_id"\r\n\r\n{post["id"]}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    release = asyncio.Event()

    async def body():
        yield head
        for _ in range(24):  # 1.5 MiB
            yield b"x" * 65536
        await release.wait()
        yield f"\r\n--{boundary}--\r\n".encode()

    try:
        response = await asyncio.wait_for(client.post(
            FILES, data=body(),
            headers={**bearer(user_token), "Content-Type": f"multipart/form-data; boundary={boundary}"}), 20)
        await error_of(response, 413, "payload_too_large")
    finally:
        release.set()
    assert await stored_counts(config) == (0, 0)


# --- what is served how ------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/html", "image/svg+xml", "application/xhtml+xml",
                                          "application/javascript", "text/html; charset=utf-8"])
async def test_active_content_is_an_attachment_with_nosniff(client, admin_token, post, content_type):
    payload = b"<html><script>alert(document.cookie)</script></html>"
    body = await uploaded(client, admin_token, payload, "posts", post["id"], filename="page.html",
                          content_type=content_type)
    assert body["content_type"] == content_type
    response = await client.get(f"{FILES}/{body['id']}")
    assert response.status == 200
    assert response.headers["Content-Type"] == content_type
    assert response.headers["Content-Disposition"].startswith("attachment;")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Security-Policy"] == "sandbox"
    assert await response.read() == payload


async def test_images_are_inline(client, admin_token, post):
    picture = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 10, 10)).save(picture, "PNG")
    body = await uploaded(client, admin_token, picture.getvalue(), "posts", post["id"], filename="a.png",
                          content_type="image/png")
    response = await client.get(f"{FILES}/{body['id']}")
    assert response.headers["Content-Type"] == "image/png"
    assert response.headers["Content-Disposition"] == "inline; filename=\"a.png\"; filename*=UTF-8''a.png"
    assert response.headers["Content-Security-Policy"] == "sandbox"


@pytest.mark.parametrize("sent, stored", [
    ("not a type", "application/octet-stream"),
    ("text/", "application/octet-stream"),
    ("TEXT/CSV", "text/csv"),
    ("text/plain; charset=\"UTF-8\"; x=1", "text/plain"),
    ("text/plain; charset=utf-8", "text/plain; charset=utf-8"),
], ids=["words", "no-subtype", "upper-case", "charset-not-last", "charset"])
async def test_content_type_is_validated(client, admin_token, post, sent, stored):
    body = await uploaded(client, admin_token, b"x", "posts", post["id"], content_type=sent)
    assert body["content_type"] == stored


async def test_filenames_lose_paths_and_control_characters(client, admin_token, post):
    # control characters cannot be sent raw in a header; RFC 5987 encoding carries them
    evil = quote("..\\..\\etc/\u202epasswd\r\nX-Injected: 1\x00.txt", safe="")
    boundary = "b0undary"
    raw = (f'--{boundary}\r\nContent-Disposition: form-data; name="collection"\r\n\r\nposts\r\n'
           f'--{boundary}\r\nContent-Disposition: form-data; name="record_id"\r\n\r\n{post["id"]}\r\n'
           f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''{evil}\r\n\r\n"
           f"x\r\n--{boundary}--\r\n").encode()
    response = await client.post(FILES, data=raw, headers={
        **bearer(admin_token), "Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert response.status == 201, await response.text()
    body = await response.json()
    assert body["filename"] == "passwdX-Injected: 1.txt"
    response = await client.get(f"{FILES}/{body['id']}")
    assert "X-Injected" not in {k for k in response.headers}

    long_name = "é" * 300 + ".pdf"
    body = await uploaded(client, admin_token, b"%PDF", "posts", post["id"], filename=long_name)
    assert len(body["filename"]) == 255 and body["filename"].endswith(".pdf")

    body = await uploaded(client, admin_token, b"x", "posts", post["id"], filename="naïve résumé \"1\".txt",
                          content_type="text/plain")
    response = await client.get(f"{FILES}/{body['id']}")
    disposition = response.headers["Content-Disposition"]
    assert disposition.startswith('inline; filename="naive resume _1_.txt"; ')
    assert disposition.endswith("filename*=UTF-8''" + quote("naïve résumé \"1\".txt", safe="!#$&+-.^_`|~"))


# --- who may do what -------------------------------------------------------------------------------------


async def test_anonymous_callers_may_not_upload_or_delete(client, admin_token, post, config):
    response = await upload(client, None, b"x", "posts", post["id"])
    await error_of(response, 401, "unauthorized")
    body = await uploaded(client, admin_token, b"x", "posts", post["id"])
    await error_of(await client.delete(f"{FILES}/{body['id']}"), 401, "unauthorized")
    assert (await client.get(f"{FILES}/{body['id']}")).status == 200, "base-collection files are public"
    assert (await stored_counts(config))[0] == 1


async def test_the_record_must_exist(client, user_token, post, config):
    response = await upload(client, user_token, b"x", "posts", "00000000-0000-4000-8000-000000000000")
    error = await error_of(response, 422, "validation_error")
    assert list(error["errors"]) == ["record_id"]
    response = await upload(client, user_token, b"x", "nope", post["id"])
    assert list((await error_of(response, 422, "validation_error"))["errors"]) == ["collection"]
    response = await upload(client, user_token, b"x", None, None)
    assert set((await error_of(response, 422, "validation_error"))["errors"]) == {"collection", "record_id"}
    fields_only = {"collection": "posts", "record_id": post["id"]}
    response = await client.post(FILES, headers=bearer(user_token),
                                 data=aiohttp.FormData(fields_only, default_to_multipart=True))
    assert list((await error_of(response, 422, "validation_error"))["errors"]) == ["file"]
    response = await client.post(FILES, headers=bearer(user_token), data=fields_only)  # urlencoded
    await error_of(response, 400, "bad_request")
    # the file part before the fields: stored while the record is unknown, then removed
    response = await upload(client, user_token, b"x" * 1000, "posts", "missing", file_first=True)
    await error_of(response, 422, "validation_error")
    assert await stored_counts(config) == (0, 0)


async def test_one_file_per_request(client, user_token, post, config):
    form = upload_form(b"one", "posts", post["id"])
    form.add_field("file", b"two", filename="two.bin")
    response = await client.post(FILES, headers=bearer(user_token), data=form)
    assert "one file" in (await error_of(response, 400, "bad_request"))["detail"]
    assert await stored_counts(config) == (0, 0)


@pytest.mark.parametrize("path", [FILES, records_path("posts") + "/import/csv"], ids=["upload", "csv-import"])
async def test_a_part_header_that_does_not_parse_is_400(client, admin_token, post, config, path):
    # found by the contract check: aiohttp raises InvalidHeader (not a ValueError) for this part
    boundary = "c9b898f16f99e3fc5ad7639f37a0ead4"
    headers = {**bearer(admin_token), "Content-Type": f"multipart/form-data; boundary={boundary}"}
    body = f"--{boundary}\r\n-192099--{boundary}--\r\n".encode()
    response = await client.post(path, headers=headers, data=body)
    detail = (await error_of(response, 400, "bad_request"))["detail"]
    assert "192099" not in detail  # the raw header line is not echoed
    assert await stored_counts(config) == (0, 0)


async def test_file_part_first_still_works(client, user_token, post):
    body = await uploaded(client, user_token, b"first", "posts", post["id"], file_first=True)
    assert (await (await client.get(f"{FILES}/{body['id']}")).read()) == b"first"


@pytest.mark.parametrize("headers", [{}, {"Range": "bytes=200000-400000"}], ids=["whole", "range"])
async def test_a_missing_chunk_cuts_the_download_short(client, admin_token, post, config, headers):
    body = await uploaded(client, admin_token, binary_content(600_000), "posts", post["id"])
    mongo = open_client(config.mongodb_url)
    try:
        await mongo[config.mongodb_db]["fs.chunks"].delete_one({"files_id": body["id"], "n": 1})
    finally:
        await mongo.close()
    response = await client.get(f"{FILES}/{body['id']}", headers=headers)
    assert response.status in (200, 206)
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()


async def test_unknown_file_is_404(client):
    await error_of(await client.get(f"{FILES}/nope"), 404, "not_found")


async def test_delete_removes_the_bytes(client, user_token, post, config):
    body = await uploaded(client, user_token, binary_content(600_000), "posts", post["id"])
    response = await client.delete(f"{FILES}/{body['id']}", headers=bearer(user_token))
    assert response.status == 204
    await error_of(await client.get(f"{FILES}/{body['id']}"), 404, "not_found")
    await error_of(await client.delete(f"{FILES}/{body['id']}", headers=bearer(user_token)), 404, "not_found")
    assert await stored_counts(config) == (0, 0)


async def test_auth_collection_users_reach_only_their_own_files(client, admin_token, config):
    await create_collection(client, admin_token, "people", [], type="auth")
    alice_token, alice_id = await auth_user(client, "people", "alice@example.com")
    bob_token, bob_id = await auth_user(client, "people", "bob@example.com")

    response = await upload(client, bob_token, b"not yours", "people", alice_id)
    assert list((await error_of(response, 422, "validation_error"))["errors"]) == ["record_id"]
    assert await stored_counts(config) == (0, 0)

    body = await uploaded(client, alice_token, b"alice's avatar", "people", alice_id)
    path = f"{FILES}/{body['id']}"
    await error_of(await client.delete(path, headers=bearer(bob_token)), 404, "not_found")
    await error_of(await client.get(path, headers=bearer(bob_token)), 404, "not_found")
    await error_of(await client.get(path), 404, "not_found")  # anonymous: as a missing file (tests/security)
    response = await client.get(path, headers=bearer(alice_token))
    assert response.status == 200 and await response.read() == b"alice's avatar"
    assert response.headers["Cache-Control"] == "private, no-cache"
    assert (await client.get(path, headers=bearer(admin_token))).status == 200
    assert (await stored_counts(config))[0] == 1

    assert (await client.delete(path, headers=bearer(alice_token))).status == 204
    assert await stored_counts(config) == (0, 0)
    assert (await uploaded(client, admin_token, b"by an admin", "people", bob_id))["record_id"] == bob_id


# --- clean-up ----------------------------------------------------------------------------------------


async def test_deleting_the_record_deletes_its_files(client, admin_token, post, config):
    other = await create_record(client, admin_token, "posts", {"title": "other"})
    doomed = [await uploaded(client, admin_token, binary_content(300_000), "posts", post["id"]) for _ in range(2)]
    kept = await uploaded(client, admin_token, b"kept", "posts", other["id"])
    response = await client.delete(records_path("posts", post["id"]), headers=bearer(admin_token))
    assert response.status == 204
    for body in doomed:
        await error_of(await client.get(f"{FILES}/{body['id']}"), 404, "not_found")
    assert (await client.get(f"{FILES}/{kept['id']}")).status == 200
    assert await stored_counts(config) == (1, 1)


async def test_bulk_delete_deletes_the_files(client, admin_token, post, config):
    other = await create_record(client, admin_token, "posts", {"title": "other"})
    for record in (post, other):
        await uploaded(client, admin_token, b"x", "posts", record["id"])
    response = await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                                 json={"record_ids": [post["id"], other["id"]]})
    assert response.status == 200, await response.text()
    assert await stored_counts(config) == (0, 0)


async def test_deleting_a_user_record_deletes_the_users_files(client, admin_token, config):
    await create_collection(client, admin_token, "people", [], type="auth")
    token, user_id = await auth_user(client, "people", "carol@example.com")
    await uploaded(client, token, b"carol", "people", user_id)
    response = await client.delete(records_path("people", user_id), headers=bearer(token))
    assert response.status == 204
    assert await stored_counts(config) == (0, 0)


async def test_deleting_the_collection_deletes_its_files(client, services, admin_token, post, config):
    await create_collection(client, admin_token, "pages", POSTS)
    page = await create_record(client, admin_token, "pages", {"title": "kept"})
    gone = await uploaded(client, admin_token, binary_content(400_000), "posts", post["id"])
    kept = await uploaded(client, admin_token, b"page", "pages", page["id"])
    collection = await services.catalog.by_name("posts")
    response = await client.delete(f"{COLLECTIONS}/{collection.id}", headers=bearer(admin_token))
    assert response.status == 204
    await error_of(await client.get(f"{FILES}/{gone['id']}"), 404, "not_found")
    assert (await client.get(f"{FILES}/{kept['id']}")).status == 200
    assert await stored_counts(config) == (1, 1)
