"""The one record write path (record_writer.RecordWriter) seen from each entry point: REST create,
register, CSV import and the admin UI's editor. A write into a collection deleted while it runs is
refused the same way everywhere (404 `not_found`, "Collection '<name>' not found") and leaves
nothing behind; an editor save whose record is refused keeps none of the files it stored.

REST create and register read their whole body before the collection is looked up, so over HTTP
nothing can happen between the look-up and the insert; they are driven through their public
service seams instead (`RecordService.writable_for_new_records` + `create_in`, `UserSystems.collection`
+ `Registration.register`), with the collection deleted between the look-up and the write. CSV
import and the editor are driven over HTTP while their body is still being stored."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from cms.admin_ui.session import SESSION_COOKIE
from cms.errors import NotFound
from cms.services.content.file_parts import FormPart
from cms.store.client import open_client
from cms.store.documents import records_mongo_name
from cms.wiring import Services
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, bearer, create_collection, login, records_path

TITLE = [{"name": "title", "type": "text", "validation": {"required": True}}]
POLL_TIMEOUT_S = 30.0
BOUNDARY = "record-writes-boundary"


async def poll(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until `condition()` holds (every 20 ms, at most POLL_TIMEOUT_S)."""
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def stored(config: Any) -> dict[str, int]:
    """How many documents each MongoDB collection of the test database holds (empty ones left out)."""
    mongo = open_client(config.mongodb_url)
    try:
        db = mongo[config.mongodb_db]
        counts = {name: await db[name].count_documents({}) for name in await db.list_collection_names()}
    finally:
        await mongo.close()
    return {name: count for name, count in counts.items() if count}


async def delete_collection(client: Any, token: str, collection_id: str) -> None:
    response = await client.delete(f"/api/v1/collections/{collection_id}", headers=bearer(token))
    assert response.status == 204, await response.text()


def refused_as_gone(name: str) -> dict[str, str]:
    return {"detail": f"Collection '{name}' not found", "code": "not_found"}


# --- the admin UI's editor, over HTTP -----------------------------------------------------------------


async def editor_session(client: Any, name: str) -> tuple[dict[str, str], str]:
    """The admin UI's session cookie of the admin (`admin_token` made it) and the CSRF token of the
    editor of `name` (read off the page)."""
    token = (await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]
    cookies = {SESSION_COOKIE: f"{token['access_token']}~{token['refresh_token']}"}
    page = await client.get(f"/_/collections/{name}/records/new", cookies=cookies)
    assert page.status == 200, await page.text()
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', await page.text())
    assert match is not None
    return cookies, match.group(1)


def part_head(name: str, filename: str | None = None) -> bytes:
    """The boundary and headers of one form part, up to its body."""
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    content_type = "Content-Type: application/octet-stream\r\n" if filename else ""
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n{content_type}\r\n".encode()


def part(name: str, value: bytes, filename: str | None = None) -> bytes:
    return part_head(name, filename) + value + b"\r\n"


def editor_form(csrf: str, title: str, file_bytes: bytes) -> bytes:
    return (part("csrf_token", csrf.encode()) + part("title", title.encode())
            + part("upload__picture", file_bytes, "picture.bin") + f"--{BOUNDARY}--\r\n".encode())


async def post_editor(client: Any, cookies: dict[str, str], name: str, body: Any) -> aiohttp.ClientResponse:
    response: aiohttp.ClientResponse = await client.post(
        f"/_/collections/{name}/records/new", data=body, cookies=cookies, allow_redirects=False,
        headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    return response


async def test_an_editor_save_whose_record_is_refused_keeps_none_of_its_files(
        client: Any, admin_token: str, services: Services, config: Any) -> None:
    """The file part comes after the values and is stored as it arrives; the record it was for is
    then refused (a required field left empty): the draft deletes the file again."""
    collection = await create_collection(client, admin_token, "albums",
                                         [*TITLE, {"name": "picture", "type": "file"}])
    cookies, csrf = await editor_session(client, "albums")
    picture = bytes(range(256)) * 4096  # 1 MiB: several GridFS chunks
    refused = await post_editor(client, cookies, "albums", editor_form(csrf, "", picture))
    assert refused.status == 422
    assert "Missing data for required field." in await refused.text()
    left = await stored(config)
    assert "fs.files" not in left and "fs.chunks" not in left, left
    assert records_mongo_name(collection["id"]) not in left

    saved = await post_editor(client, cookies, "albums", editor_form(csrf, "kept", picture))
    assert saved.status == 303, await saved.text()  # the same form with a title is stored whole
    (record,) = (await (await client.get(records_path("albums"), headers=bearer(admin_token))).json())["items"]
    download = await client.get(f"/api/v1/files/{record['picture']}", headers=bearer(admin_token))
    assert download.status == 200 and await download.read() == picture


async def test_an_editor_save_into_a_collection_deleted_meanwhile_is_refused(
        client: Any, admin_token: str, services: Services, config: Any) -> None:
    """The collection is deleted while the form's file is still arriving (its first chunks are in
    GridFS): the save answers 404 and neither record nor file stays."""
    collection = await create_collection(client, admin_token, "albums",
                                         [*TITLE, {"name": "picture", "type": "file"}])
    cookies, csrf = await editor_session(client, "albums")
    head = part("csrf_token", csrf.encode()) + part("title", b"late") + part_head("upload__picture", "late.bin")
    deleted = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield head + b"x" * (600 * 1024)  # two GridFS chunks: written to the database
        await deleted.wait()
        yield b"y" * 1024 + f"\r\n--{BOUNDARY}--\r\n".encode()

    saving = asyncio.ensure_future(post_editor(client, cookies, "albums", body()))

    async def chunks_written() -> bool:
        return (await stored(config)).get("fs.chunks", 0) >= 2

    await poll(chunks_written, "the file's first chunks")
    await delete_collection(client, admin_token, collection["id"])
    deleted.set()
    response = await saving
    assert response.status == 404
    assert "Collection &#39;albums&#39; not found" in await response.text()
    left = await stored(config)
    assert not {"fs.files", "fs.chunks", records_mongo_name(collection["id"])} & set(left), left


# --- CSV import, over HTTP ---------------------------------------------------------------------------


async def test_a_csv_import_into_a_collection_deleted_meanwhile_is_refused(
        client: Any, admin_token: str, config: Any) -> None:
    """The collection is deleted once the import's first batch is stored: the import answers 404
    and none of its rows stay."""
    collection = await create_collection(client, admin_token, "posts", TITLE)
    content = ("title\n" + "".join(f"row {n}\n" for n in range(50_000))).encode()
    form = aiohttp.FormData()
    form.add_field("file", content, filename="posts.csv", content_type="text/csv")
    importing = asyncio.ensure_future(client.post(records_path("posts") + "/import/csv", data=form,
                                                  headers=bearer(admin_token)))
    mongo_name = records_mongo_name(collection["id"])

    async def first_batch_stored() -> bool:
        return (await stored(config)).get(mongo_name, 0) > 0

    await poll(first_batch_stored, "the import's first batch")
    await delete_collection(client, admin_token, collection["id"])
    response = await importing
    assert response.status == 404
    assert await response.json() == refused_as_gone("posts")
    assert mongo_name not in await stored(config)


# --- REST create and register, through their service seams -----------------------------------------


async def test_a_create_into_a_collection_deleted_meanwhile_is_refused(
        client: Any, admin_token: str, services: Services, config: Any) -> None:
    collection = await create_collection(client, admin_token, "posts", TITLE, create_rule="")
    found, epoch = await services.records.writable_for_new_records("posts")
    await delete_collection(client, admin_token, collection["id"])
    with pytest.raises(NotFound) as refused:
        await services.records.create_in(None, found, epoch, {"title": "late"})
    assert refused.value.to_body() == refused_as_gone("posts")
    assert records_mongo_name(collection["id"]) not in await stored(config)


async def test_a_registration_into_a_collection_deleted_meanwhile_is_refused(
        client: Any, admin_token: str, services: Services, config: Any) -> None:
    collection = await create_collection(client, admin_token, "members", [{"name": "nickname", "type": "text"}],
                                         type="auth")
    system = await services.identity.systems.collection("members")
    await delete_collection(client, admin_token, collection["id"])
    with pytest.raises(NotFound) as refused:
        await services.identity.registration.register(system, "late@example.com", "late-password-1",
                                                      "late-password-1", {"nickname": "late"})
    assert refused.value.to_body() == refused_as_gone("members")
    left = await stored(config)
    assert records_mongo_name(collection["id"]) not in left and "auth_credentials" not in left, left


async def test_a_save_cancelled_while_its_record_is_being_stored_keeps_record_and_files(
        client, admin_token, services: Services, mongo_commands) -> None:
    """Group commit stores a create whose caller was cancelled (server shutdown, a dropped client):
    the draft then keeps the files the stored record points at, instead of deleting them."""
    created = await create_collection(client, admin_token, "cancelled", [{"name": "att", "type": "file"}],
                                      create_rule="")
    saving: dict[str, asyncio.Task[Any]] = {}

    async def one_chunk() -> AsyncIterator[bytes]:
        yield b"kept bytes"

    async def save() -> None:
        async with services.records.draft(None, "cancelled") as draft:
            await draft.add_file("att", FormPart("att", "a.txt", "text/plain", one_chunk()))
            await draft.save({})

    # cancel the caller just before the group's insert reaches the server
    mongo_commands.before(lambda c: c.name == "insert" and c.collection == records_mongo_name(created["id"]),
                          lambda _: saving["task"].cancel())
    saving["task"] = asyncio.create_task(save())
    with pytest.raises(asyncio.CancelledError):
        await saving["task"]
    await services.records.drain()
    page = await (await client.get(records_path("cancelled"))).json()
    assert page["total"] == 1, page
    file_id = page["items"][0]["att"]
    response = await client.get(f"/api/v1/files/{file_id}")
    assert response.status == 200 and await response.read() == b"kept bytes"
