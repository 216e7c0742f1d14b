"""A multipart body that ends before its closing boundary stores nothing, on every endpoint that reads
multipart: the CSV import, the file upload and the admin UI's record editor answer 400 (issue 28,
item 4: the import used to answer 200 and store the cut-off last row)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from cms.admin_ui.session import SESSION_COOKIE
from tests.api.test_files import stored_counts
from tests.conftest import (
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    bearer,
    create_collection,
    create_record,
    error_of,
    login,
    records_path,
)

BOUNDARY = "b0undary5eCreT"
CSV = b"title\nfirst\nsecond"
CUTS = {
    "inside-the-last-part": b"",
    "after-the-part": b"\r\n",
    "at-a-boundary": b"\r\n--" + BOUNDARY.encode(),
    "after-a-boundary": b"\r\n--" + BOUNDARY.encode() + b"\r\n",
}
"""How a body may end once the file's bytes are sent: each misses the closing `--boundary--`."""
WHOLE = b"\r\n--" + BOUNDARY.encode() + b"--\r\n"


def body(parts: Sequence[tuple[str, str | None, bytes]], end: bytes) -> bytes:
    """A multipart/form-data body of `parts` (field name, filename or None, content) ending in `end`
    (WHOLE, or one of CUTS)."""
    out = b""
    for index, (name, filename, content) in enumerate(parts):
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += (b"" if index == 0 else b"\r\n") + f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n".encode()
        out += (b"Content-Type: text/csv\r\n" if filename else b"") + b"\r\n" + content
    return out + end


def multipart(headers: dict[str, str] | None = None) -> dict[str, str]:
    return {**(headers or {}), "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


@pytest.fixture
async def posts(client, admin_token) -> dict[str, Any]:
    """The collection `posts` (title) with one record; returns the record."""
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    return await create_record(client, admin_token, "posts", {"title": "kept"})


async def titles(client, admin_token) -> list[str]:
    response = await client.get(records_path("posts") + "?sort=created&per_page=100", headers=bearer(admin_token))
    return [item["title"] for item in (await response.json())["items"]]


async def test_a_whole_csv_body_imports_every_row(client, admin_token, posts):
    response = await client.post(records_path("posts") + "/import/csv", headers=multipart(bearer(admin_token)),
                                 data=body([("file", "rows.csv", CSV)], WHOLE))
    assert response.status == 200, await response.text()
    assert (await response.json())["imported"] == 2
    assert sorted(await titles(client, admin_token)) == ["first", "kept", "second"]


@pytest.mark.parametrize("cut", list(CUTS))
async def test_a_truncated_csv_import_stores_nothing(client, admin_token, posts, cut):
    response = await client.post(records_path("posts") + "/import/csv", headers=multipart(bearer(admin_token)),
                                 data=body([("file", "rows.csv", CSV)], CUTS[cut]))
    await error_of(response, 400, "bad_request")
    assert await titles(client, admin_token) == ["kept"]


@pytest.mark.parametrize("cut", list(CUTS))
async def test_a_truncated_upload_stores_nothing(client, admin_token, posts, config, cut):
    parts = [("collection", None, b"posts"), ("record_id", None, posts["id"].encode()), ("file", "a.csv", CSV)]
    response = await client.post("/api/v1/files", headers=multipart(bearer(admin_token)), data=body(parts, CUTS[cut]))
    await error_of(response, 400, "bad_request")
    assert await stored_counts(config) == (0, 0)
    whole = await client.post("/api/v1/files", headers=multipart(bearer(admin_token)), data=body(parts, WHOLE))
    assert whole.status == 201, await whole.text()


async def admin_cookies(client) -> dict[str, str]:
    """The admin UI session cookie of the admin (signed in through the API)."""
    token = (await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]
    return {SESSION_COOKIE: f"{token['access_token']}~{token['refresh_token']}"}


async def page_csrf(client, path: str, cookies: dict[str, str]) -> str:
    """The CSRF token a page of the admin UI carries (in its meta tag, or its sign-in form)."""
    page = await client.get(path, cookies=cookies)
    assert page.status == 200, await page.text()
    found = re.search(r'(?:name="csrf-token" content|name="csrf_token" value)="([^"]+)"', await page.text())
    assert found, await page.text()
    return found.group(1)


@pytest.mark.parametrize("cut", list(CUTS))
async def test_a_truncated_admin_ui_editor_form_saves_nothing(client, admin_token, posts, cut):
    cookies = await admin_cookies(client)
    csrf = await page_csrf(client, "/_/collections/posts/records/new", cookies)
    parts = [("csrf_token", None, csrf.encode()), ("title", None, b"from the editor")]
    response = await client.post("/_/collections/posts/records/new", cookies=cookies, allow_redirects=False,
                                 headers=multipart(), data=body(parts, CUTS[cut]))
    assert response.status == 400, await response.text()
    assert await titles(client, admin_token) == ["kept"]
    whole = await client.post("/_/collections/posts/records/new", cookies=cookies, allow_redirects=False,
                              headers=multipart(), data=body(parts, WHOLE))
    assert whole.status == 303, await whole.text()
    assert sorted(await titles(client, admin_token)) == ["from the editor", "kept"]


@pytest.mark.parametrize("cut", list(CUTS))
async def test_a_truncated_admin_ui_form_is_400(client, admin_token, cut):
    page_csrf_token = await page_csrf(client, "/_/login", {})
    sign_in = [("csrf_token", None, page_csrf_token.encode()), ("email", None, b"a@example.test"),
               ("password", None, b"wrong-password")]
    response = await client.post("/_/login", headers=multipart(), data=body(sign_in, CUTS[cut]), allow_redirects=False)
    assert response.status == 400, await response.text()

    cookies = await admin_cookies(client)
    new_key = [("csrf_token", None, (await page_csrf(client, "/_/api-keys", cookies)).encode()),
               ("name", None, b"cut-off"), ("scopes", None, b"read")]
    response = await client.post("/_/api-keys", cookies=cookies, headers=multipart(), data=body(new_key, CUTS[cut]),
                                 allow_redirects=False)
    assert response.status == 400, await response.text()
    listed = await client.get("/api/v1/api-keys", headers=bearer(admin_token))
    assert listed.status == 200, await listed.text()
    assert "cut-off" not in await listed.text()
