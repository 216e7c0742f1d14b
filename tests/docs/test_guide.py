"""The built docs site at /docs/guide/ (cms.api.guide): served from the directory the app is given when it
holds a site, as plain files (a directory answers its index.html, no listing, nothing outside it), and
absent (404) without one. The API explorer at /docs is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from cms.api.guide import guide_file
from cms.app import create_app


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A tiny built site, and beside it a file that must never be served."""
    root = tmp_path / "guide"
    (root / "concepts" / "records").mkdir(parents=True)
    (root / "assets").mkdir()
    (root / "index.html").write_text("<!doctype html><title>cms docs</title><h1>Home of the guide</h1>")
    (root / "concepts" / "records" / "index.html").write_text("<!doctype html><h1>Records and queries</h1>")
    (root / "assets" / "app.js").write_text("console.log('docs');")
    (tmp_path / "secret.txt").write_text("outside the site")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    (root / "linked").symlink_to(tmp_path, target_is_directory=True)
    return root


async def guide_client(aiohttp_client, config, services, guide_dir: Path | None):
    return await aiohttp_client(create_app(config, services=services, guide_dir=guide_dir))


async def test_the_site_is_served_with_index_pages(aiohttp_client, config, services, site):
    client = await guide_client(aiohttp_client, config, services, site)
    response = await client.get("/docs/guide/")
    assert response.status == 200
    assert response.content_type == "text/html"
    assert "Home of the guide" in await response.text()
    response = await client.get("/docs/guide/concepts/records/")
    assert response.status == 200 and "Records and queries" in await response.text()
    response = await client.get("/docs/guide/assets/app.js")
    assert response.status == 200 and await response.text() == "console.log('docs');"
    assert "Content-Security-Policy" not in response.headers  # the admin UI's policy is its own


async def test_directories_without_a_slash_are_redirected(aiohttp_client, config, services, site):
    client = await guide_client(aiohttp_client, config, services, site)
    for path, location in [("/docs/guide", "/docs/guide/"),
                           ("/docs/guide/concepts/records", "/docs/guide/concepts/records/")]:
        response = await client.get(path, allow_redirects=False)
        assert (response.status, response.headers["Location"]) == (301, location)


@pytest.mark.parametrize("path", [
    "/docs/guide/missing.html",
    "/docs/guide/assets/",            # a directory without index.html is not listed
    "/docs/guide/concepts/",
    "/docs/guide/link.txt",           # a symbolic link out of the site
    "/docs/guide/linked/secret.txt",
    "/docs/guide/%2e%2e/secret.txt",  # traversal, percent-encoded so the client keeps it
    "/docs/guide/assets/%2e%2e/%2e%2e/secret.txt",
    "/docs/guide/..%2fsecret.txt",
    "/docs/guide/..%5csecret.txt",
], ids=["missing", "directory", "directory-2", "symlink", "symlinked-dir", "dotdot", "dotdot-deep",
        "encoded-slash", "backslash"])
async def test_anything_else_is_a_404_in_the_error_model(aiohttp_client, config, services, site, path):
    client = await guide_client(aiohttp_client, config, services, site)
    response = await client.get(path, allow_redirects=False)
    assert response.status == 404
    body = await response.json()
    assert body["code"] == "not_found" and set(body) == {"detail", "code"}
    assert "outside the site" not in await response.text()


async def test_without_a_built_site_there_is_no_guide(aiohttp_client, config, services, tmp_path):
    client = await guide_client(aiohttp_client, config, services, tmp_path / "absent")
    for path in ("/docs/guide/", "/docs/guide/index.html"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 404
        assert (await response.json())["code"] == "not_found"
    response = await client.get("/docs")  # the API explorer stays
    assert response.status == 200 and response.content_type == "text/html"


@pytest.mark.parametrize("path, expected", [
    ("", "index.html"),
    ("concepts/records/", "concepts/records/index.html"),
    ("concepts/records", "concepts/records/index.html"),
    ("assets/app.js", "assets/app.js"),
    ("assets", None),
    ("../secret.txt", None),
    ("./index.html", None),
    ("link.txt", None),
    ("linked/secret.txt", None),
    ("a\\..\\secret.txt", None),
], ids=["root", "dir-slash", "dir", "file", "dir-without-index", "dotdot", "dot", "symlink", "symlinked-dir",
        "backslash"])
def test_guide_file(site, path, expected):
    found = guide_file(site.resolve(), path)
    assert (None if found is None else found.relative_to(site.resolve()).as_posix()) == expected
