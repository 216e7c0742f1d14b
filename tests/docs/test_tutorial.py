"""The "Build a front end" tutorial (docs/tutorial/build-a-front-end.md), every step, in Chromium (issue 44).

A `cms serve` (embedded: its worker publishes scheduled drafts) allows one origin, `http://localhost:<port>`;
the page's set-up (its first `bash` blocks) runs against it; docs/tutorial/frontend/app.js is bundled with
the client by `clients/js/node_modules/.bin/esbuild` and served with `python3 -m http.server` on that
port, as the page says. Chromium opens it at that origin (the API is at `127.0.0.1`: another origin)
and signs Ann in; the list shows her post's German title, its author through `expand` and its cover as a
100x100 WebP thumbnail through a file token; Bob's post, published "in another terminal" (the page's
last `bash` block), appears live; a post the page schedules appears once the worker publishes it. The
same page opened at `http://127.0.0.1:<port>`, an origin not allowed, is refused, and the service logs
the refused origin. Without Chromium, Playwright or esbuild the browser test is skipped (failed with
CMS_REQUIRE_BROWSER=1); the set-up and the listings are checked in any case."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cms.runtime.embedded import free_port
from tests.browser import chromium, require
from tests.docs.test_examples import (
    DOCS,
    DOCUMENTED_BASE,
    EXECUTED,
    OWN_TEST,
    ROOT,
    LiveServer,
    live_server,
    page_blocks,
    run_bash,
)

PAGE = "tutorial/build-a-front-end.md"
FRONTEND = DOCS / "tutorial" / "frontend"
ESBUILD = ROOT / "clients" / "js" / "node_modules" / ".bin" / "esbuild"
CLIENT_ENTRY = ROOT / "clients" / "js" / "src" / "index.ts"
SCHEDULE_DELAY_S = 6
"""The page's post is scheduled this far ahead: long enough to see that it is not shown before."""
WAIT_MS = 20_000
"""How long the browser steps wait for what the page shows (a scheduled publish: its delay, then up to 2 s)."""


def bash_blocks() -> list[str]:
    """The page's `bash` blocks, in order."""
    return [b.text for b in page_blocks(PAGE) if b.language in EXECUTED]


def test_the_page_is_run_here_and_shows_the_files_in_full():
    assert OWN_TEST[PAGE] == "tests/docs/test_tutorial.py"
    blocks = page_blocks(PAGE)
    assert [b.text for b in blocks if b.language == "html"] == [(FRONTEND / "index.html").read_text()]
    assert [b.text for b in blocks if b.language == "js"] == [(FRONTEND / "app.js").read_text()]
    set_up, elsewhere = bash_blocks()  # the set-up, and what Bob does "in another terminal" while the page is open
    assert "localhost" not in set_up and "BOB_LOGIN" in elsewhere
    assert DOCUMENTED_BASE in (FRONTEND / "app.js").read_text()


@pytest.fixture(scope="module")
def page_port() -> int:
    """The port the page is served on: its origin is `http://localhost:<page_port>`."""
    return free_port()


@pytest.fixture(scope="module")
def cms(tmp_path_factory: pytest.TempPathFactory, page_port: int) -> Iterator[LiveServer]:
    """The service, allowing the page's origin only, set up as the page's first `bash` block says."""
    data_dir = tmp_path_factory.mktemp("tutorial")
    with live_server(data_dir, CORS_ORIGINS=f"http://localhost:{page_port}") as server:
        out = run_bash(bash_blocks()[0].replace(DOCUMENTED_BASE, server.base), data_dir, f"docs/{PAGE} (set-up)")
        assert out.split() == ["posts", "published"]
        yield server


def test_the_set_up_runs(cms):
    assert cms.process.poll() is None


@pytest.fixture(scope="module")
def site(cms: LiveServer, page_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """index.html and app.js (its API address made the live server's) bundled with esbuild, served by
    `python3 -m http.server` on `page_port`, as the page says."""
    require(ESBUILD.exists(), f"{ESBUILD} is missing (cd clients/js && npm ci)")
    root = tmp_path_factory.mktemp("tutorial-site")
    shutil.copy(FRONTEND / "index.html", root / "index.html")
    (root / "app.js").write_text((FRONTEND / "app.js").read_text().replace(DOCUMENTED_BASE, cms.base))
    # the client from this checkout's source (the tutorial installs it with npm from the same folder)
    subprocess.run([str(ESBUILD), "app.js", "--bundle", "--format=esm", "--outfile=app.bundle.js",
                    "--log-level=warning", f"--alias:cms-client={CLIENT_ENTRY}"], cwd=root, check=True, timeout=120)
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(page_port), "--bind", "127.0.0.1"],
                              cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{page_port}/app.bundle.js", timeout=2) as answer:
                    assert answer.status == 200
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the page's server did not start"
                time.sleep(0.1)
        yield root
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def browser(site: Path) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


class Problems:
    """Console errors, page errors and failed requests of a page."""

    def __init__(self, page: Any) -> None:
        self.seen: list[str] = []
        page.on("console", lambda m: self.seen.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.seen.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.seen.append(f"failed: {r.method} {r.url} {r.failure}"))


def test_the_front_end_in_a_browser(cms, page_port, browser):
    from playwright.sync_api import expect

    context = browser.new_context()
    page = context.new_page()
    problems = Problems(page)
    try:
        origin = f"http://localhost:{page_port}"
        page.goto(origin + "/")
        assert not cms.base.startswith(origin)  # another origin than the API's

        # sign in (a user of the `users` auth collection)
        page.fill("#sign-in input[name=email]", "ann@example.com")
        page.fill("#sign-in input[name=password]", "ann-password-1")
        page.click("#sign-in button")
        expect(page.locator("#who")).to_have_text("Ann", timeout=WAIT_MS)

        # the list: the German title, the author through expand, the cover's 100x100 WebP thumbnail by token
        first = page.locator("#posts li").first
        expect(first.locator("strong")).to_have_text("Hallo, Welt", timeout=WAIT_MS)
        expect(first.locator("span")).to_have_text("by Ann", timeout=WAIT_MS)
        image = first.locator("img")
        page.wait_for_function("img => img.complete && img.naturalWidth === 100 && img.naturalHeight === 100",
                               arg=image.element_handle(), timeout=WAIT_MS)
        src = image.get_attribute("src")
        assert src and src.startswith(cms.base + "/api/v1/files/")
        assert "thumb=100x100" in src and "format=webp" in src and "token=" in src
        with urllib.request.urlopen(src, timeout=10) as answer:
            assert answer.headers["Content-Type"] == "image/webp"
        bare = src.split("?")[0] + "?thumb=100x100&format=webp"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bare, timeout=10)  # protected: no token, no file
        assert refused.value.code == 404

        # live: Bob publishes a post "in another terminal"; it appears at the top, by Bob
        run_bash(bash_blocks()[1].replace(DOCUMENTED_BASE, cms.base), cms.log.parent, f"docs/{PAGE} (live)")
        expect(first.locator("strong")).to_have_text("Servus from Bob", timeout=WAIT_MS)
        expect(first.locator("span")).to_have_text("by Bob", timeout=WAIT_MS)

        # a draft published by schedule: not shown until the worker publishes it
        page.fill("#write input[name=title]", "Geplant")
        page.fill("#write input[name=delay]", str(SCHEDULE_DELAY_S))
        page.click("#write button")
        expect(page.locator("#scheduled")).to_contain_text('"Geplant" is scheduled for', timeout=WAIT_MS)
        assert "Geplant" not in page.locator("#posts").inner_text()
        expect(first.locator("strong")).to_have_text("Geplant", timeout=WAIT_MS)
        expect(first.locator("span")).to_have_text("by Ann", timeout=WAIT_MS)
        assert page.locator("#posts li").count() == 3
        assert problems.seen == []
    except AssertionError as failure:
        raise AssertionError(f"{failure}\nthe page's problems: {problems.seen}") from None
    finally:
        context.close()


def test_another_origin_is_refused_and_logged(cms, page_port, browser):
    """The same page opened at 127.0.0.1 (an origin CORS_ORIGINS does not list): the browser blocks the
    sign-in, the page says it got no answer, and the service logs the refused origin."""
    context = browser.new_context()
    page = context.new_page()
    try:
        origin = f"http://127.0.0.1:{page_port}"
        page.goto(origin + "/")
        page.fill("#sign-in input[name=email]", "ann@example.com")
        page.fill("#sign-in input[name=password]", "ann-password-1")
        page.click("#sign-in button")
        page.wait_for_function("() => document.querySelector('#sign-in-error').textContent.startsWith('No answer')",
                               timeout=WAIT_MS)
        assert page.locator("#app").is_hidden()
        deadline = time.monotonic() + 10
        while f"CORS: refused origin {origin}" not in cms.log.read_text():
            assert time.monotonic() < deadline, cms.log.read_text()[-2000:]
            time.sleep(0.1)
        assert f"allowed by CORS_ORIGINS: http://localhost:{page_port}" in cms.log.read_text()
    finally:
        context.close()

