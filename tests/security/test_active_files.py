"""Uploaded files never run as pages of our origin, and their names never reach a path or break a header
(issue 28, item 3: the active-file and path-traversal classes of our peers' advisories, e.g. stored
XSS through an uploaded SVG or HTML file; Directus's and Strapi's upload name handling).

- An HTML, XHTML, SVG or JavaScript upload, whatever type it claims, is served as an attachment; every
  file answer (API and admin UI, 200, 206, 304) carries `X-Content-Type-Options: nosniff` and
  `Content-Security-Policy: sandbox`, so even a file shown inline runs no script.
- A file name with path parts (`../../etc/passwd`, `..\\`, absolute), NUL, CR/LF or quotes is kept as
  its last part, without control characters; the download's `Content-Disposition` is one well-formed
  header whose quoted fallback name holds no quote, backslash or line break.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from cms.web.files import content_disposition
from tests.api.test_files import FILES, POSTS, uploaded
from tests.conftest import bearer, create_collection, create_record

SCRIPT = b"<script>alert(document.domain)</script>"
ACTIVE = {
    "html": ("page.html", "text/html"),
    "xhtml": ("page.xhtml", "application/xhtml+xml"),
    "svg": ("image.svg", "image/svg+xml"),
    "javascript": ("app.js", "text/javascript"),
    "html-as-png": ("photo.png", "image/png"),  # a lie about the type: nosniff keeps the browser to it
    "html-as-text": ("notes.txt", "text/plain; charset=utf-8"),
}
INLINE_SAFE = {"image/png", "text/plain; charset=utf-8"}


@pytest.fixture
async def post(client: Any, admin_token: str) -> dict[str, Any]:
    await create_collection(client, admin_token, "posts", POSTS)
    return await create_record(client, admin_token, "posts", {"title": "hello"})


def assert_guarded(headers: Any) -> None:
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in headers["Content-Security-Policy"]


@pytest.mark.parametrize("name, content_type", list(ACTIVE.values()), ids=list(ACTIVE))
async def test_an_active_file_is_an_attachment_and_every_answer_is_sandboxed(client, admin_token, post, name,
                                                                              content_type):
    stored = await uploaded(client, admin_token, b"<svg xmlns='http://www.w3.org/2000/svg'>" + SCRIPT + b"</svg>",
                            "posts", post["id"], filename=name, content_type=content_type)
    path = f"{FILES}/{stored['id']}"
    full = await client.get(path, headers=bearer(admin_token))
    assert full.status == 200
    disposition = full.headers["Content-Disposition"]
    if content_type not in INLINE_SAFE:
        assert disposition.startswith("attachment;"), disposition
    assert_guarded(full.headers)
    part = await client.get(path, headers={**bearer(admin_token), "Range": "bytes=0-3"})
    assert part.status == 206
    assert_guarded(part.headers)
    same = await client.get(path, headers={**bearer(admin_token), "If-None-Match": full.headers["ETag"]})
    assert same.status == 304
    assert_guarded(same.headers)
    head = await client.head(path, headers=bearer(admin_token))
    if head.status != 405:  # HEAD is not a route of its own today
        assert_guarded(head.headers)
    # the admin UI's preview of the same file, under the same origin
    ui = await client.get(f"/_/collections/posts/records/{post['id']}/files/{stored['id']}",
                          headers=bearer(admin_token), allow_redirects=False)
    if ui.status == 200:
        assert_guarded(ui.headers)
        assert ui.headers["Content-Disposition"] == disposition


HOSTILE_NAMES = {
    "dot-dot": ("../../etc/passwd", "passwd"),
    "backslash": ("..\\..\\windows\\win.ini", "win.ini"),
    "absolute": ("/etc/shadow", "shadow"),
    "nul": ("evil\x00.html.png", "evil.html.png"),
    "crlf": ('a"\r\nSet-Cookie: x=1\r\n.txt', 'a"Set-Cookie: x=1.txt'),
    "quotes": ('say "hi"; filename=x.html', 'say "hi"; filename=x.html'),
    "only-dots": ("..", "file"),
}


@pytest.mark.parametrize("raw, kept", list(HOSTILE_NAMES.values()), ids=list(HOSTILE_NAMES))
async def test_a_hostile_file_name_keeps_its_last_part_and_cannot_break_the_header(client, admin_token, post,
                                                                                   raw, kept):
    body = multipart(raw)
    response = await client.post(FILES, headers={**bearer(admin_token),
                                                 "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
                                 data=body.replace(b"{record}", post["id"].encode()))
    if response.status in (400, 422):  # a header the multipart parser cannot read: nothing is stored
        return
    assert response.status == 201, await response.text()
    stored = await response.json()
    assert stored["filename"] == kept
    download = await client.get(f"{FILES}/{stored['id']}", headers=bearer(admin_token))
    assert download.status == 200
    assert "Set-Cookie" not in download.headers
    disposition = download.headers["Content-Disposition"]
    assert "\r" not in disposition and "\n" not in disposition and "\x00" not in disposition
    fallback = re.fullmatch(r'attachment; filename="([^"\\]*)"; filename\*=UTF-8\'\'([A-Za-z0-9%!#$&+.^_`|~-]*)',
                            disposition)
    assert fallback is not None, disposition
    assert "/" not in fallback.group(1)


BOUNDARY = "----security-boundary"


def multipart(filename: str) -> bytes:
    """A form with `collection`, `record_id` ({record}, filled in later) and a file whose header
    carries `filename` as raw bytes (a hostile client does not escape it)."""
    crlf = b"\r\n"
    escaped = filename.replace("\\", "\\\\").replace('"', '\\"').encode("utf-8", "surrogatepass")
    parts = [
        b"--" + BOUNDARY.encode(), b'Content-Disposition: form-data; name="collection"', b"", b"posts",
        b"--" + BOUNDARY.encode(), b'Content-Disposition: form-data; name="record_id"', b"", b"{record}",
        b"--" + BOUNDARY.encode(),
        b'Content-Disposition: form-data; name="file"; filename="' + escaped + b'"',
        b"Content-Type: application/octet-stream", b"", b"contents",
        b"--" + BOUNDARY.encode() + b"--", b"",
    ]
    return crlf.join(parts)


@pytest.mark.parametrize("name", ['say "hi"; filename=x.html', 'a"\r\nSet-Cookie: x=1', "back\\slash\\", "100%.txt",
                                  "файл.html", "\u202egnp.exe"],
                         ids=["quotes", "crlf", "backslash", "percent", "cyrillic", "bidi"])
def test_the_disposition_of_any_stored_name_is_one_well_formed_header(name):
    """Whatever name is stored (names written before `safe_filename` existed included), the header is
    one line whose quoted fallback holds no quote, backslash or control character."""
    disposition = content_disposition("attachment", name)
    match = re.fullmatch(r'attachment; filename="([\x20-\x7e]*)"; filename\*=UTF-8\'\'([A-Za-z0-9%!#$&+.^_`|~-]*)',
                         disposition)
    assert match is not None and not set(match.group(1)) & set('"\\'), disposition
