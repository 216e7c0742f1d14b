"""Browser tests of the admin UI (issue 15): the app served on a real port with the session's real
MongoDB and Redis, driven by Debian's Chromium through Playwright (never a downloaded browser).

- `ui_server`: the app (create_app, its own services) in a thread with its own event loop, once per
  session, on a fresh database with one bootstrapped admin (ADMIN_EMAIL / ADMIN_PASSWORD).
- `browser`: one headless Chromium per session (`/usr/bin/chromium`). Without it the tests are
  skipped, unless CMS_REQUIRE_BROWSER=1 (CI), which makes them fail.
- `page`: a fresh context and page per test, signed out; `admin_page`: the same signed in as the
  admin (the sign-in is done once per session and its cookies reused). Both watch the page: each
  test ends with `watch.assert_clean()` (no console error, page error, failed request or request
  to another origin) and a screenshot is saved under tests/ui/screenshots/<test>.png.
- `api`: a small REST client for arranging data and asserting end states through the API.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from cms.app import create_app, create_runner
from cms.config import Config
from cms.runtime.embedded import free_port
from tests.browser import chromium

SCREENSHOTS = Path(__file__).parent / "screenshots"
ADMIN_EMAIL = "ui-admin@example.com"
ADMIN_PASSWORD = "ui-admin-password-1"
START_TIMEOUT_S = 30.0


class ServerThread(threading.Thread):
    """`create_app(config)` served by `create_runner` on 127.0.0.1:`port` in a thread of its own."""

    def __init__(self, config: Config, port: int) -> None:
        super().__init__(name="ui-server", daemon=True)
        self.config, self.port = config, port
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        runner = create_runner(create_app(self.config))
        try:
            self.loop.run_until_complete(runner.setup())
            self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        except BaseException as exc:  # surfaced by the fixture
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        self.loop.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(timeout=15)


@dataclass(frozen=True)
class UiServer:
    """The served app: its base URL and its config (database, secret)."""

    url: str
    config: Config


@pytest.fixture(scope="package")
def ui_server(mongodb_url: str, redis_url: str, smtp_server: Any,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    smtp_port, _ = smtp_server
    config = Config(
        secret_key="ui-test-secret-key-" + "x" * 32,
        mongodb_url=mongodb_url, mongodb_db=f"ui_{uuid.uuid4().hex[:12]}", redis_url=redis_url,
        data_dir=tmp_path_factory.mktemp("ui-data"), public_url="http://cms.test",
        smtp_host="127.0.0.1", smtp_port=smtp_port, smtp_starttls=False, smtp_timeout_s=5.0,
        queue_name=f"cms:ui:{uuid.uuid4().hex[:12]}", admin_email=ADMIN_EMAIL, admin_password=ADMIN_PASSWORD,
    )
    server = ServerThread(config, free_port())
    server.start()
    assert server.ready.wait(START_TIMEOUT_S), "the UI test server did not start"
    if server.error is not None:
        raise server.error
    # One server serves every UI test from one address: the general per-IP limit (600 a minute) is
    # not what these tests exercise, and a busy minute of them (htmx searches, redirects) passes it.
    admin = Api(f"http://127.0.0.1:{server.port}")
    admin.token = admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)["access_token"]
    assert admin.call("POST", "/api/v1/settings", {"key": "rate_limit_per_minute", "value": 1_000_000})[0] == 200
    yield UiServer(url=f"http://127.0.0.1:{server.port}", config=config)
    server.stop()


# --- REST ------------------------------------------------------------------------------------------


@dataclass
class Api:
    """A REST client of the served app (urllib; JSON in and out)."""

    base: str
    token: str | None = None

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> tuple[int, Any]:
        """(status, decoded JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token or self.token:
            request.add_header("Authorization", f"Bearer {token or self.token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        return status, (json.loads(raw) if raw.strip() else None)

    def login(self, email: str, password: str) -> dict[str, Any]:
        """The token object of a password login (asserting 200)."""
        status, body = self.call("POST", "/api/v1/auth/login", {"email": email, "password": password})
        assert status == 200, body
        token: dict[str, Any] = body["token"]
        return token


@pytest.fixture(scope="package")
def api(ui_server: UiServer) -> Api:
    client = Api(ui_server.url)
    client.token = client.login(ADMIN_EMAIL, ADMIN_PASSWORD)["access_token"]
    return client


# --- browser -----------------------------------------------------------------------------------------


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One Chromium for the UI tests. Package-scoped: Playwright's sync API keeps an event loop
    running while it is open, so it must be closed before any other package's async tests run."""
    with chromium() as launched:
        yield launched


FAVICON_CUT_SHORT = re.compile(r"^failed: GET \S+/_/static/favicon\.svg net::ERR_ABORTED$")
"""Chromium fetches the favicon after the page has loaded; a form submitted at once navigates away
mid-fetch and the favicon request is aborted: not a failure of the page."""
LIVE_STREAM_LEFT = re.compile(r"^failed: GET \S+/_/collections/[^/\s]+/records/live\S* net::ERR_ABORTED$")
"""The records page keeps its live stream open (records_live.py): leaving the page aborts it."""


@dataclass
class Watch:
    """What went wrong in a page: console errors, page errors, failed and cross-origin requests."""

    origin: str
    problems: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=lambda: [FAVICON_CUT_SHORT, LIVE_STREAM_LEFT])

    def allow(self, pattern: str) -> None:
        """Tolerate console errors matching `pattern` (e.g. the log line of an expected 403)."""
        self.allowed.append(re.compile(pattern))

    def attach(self, page: Any) -> None:
        """Listen to `page`."""
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"failed: {r.method} {r.url} {r.failure}"))
        page.on("request", self._check_origin)
        page.on("dialog", self._dialog)

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problems.append(f"console: {message.text}")

    def _dialog(self, dialog: Any) -> None:
        self.problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    def _check_origin(self, request: Any) -> None:
        if not request.url.startswith(self.origin + "/"):
            self.problems.append(f"other origin: {request.method} {request.url}")

    def assert_clean(self) -> None:
        """No problem but the allowed ones."""
        left = [p for p in self.problems if not any(a.search(p) for a in self.allowed)]
        assert not left, left


@dataclass
class BrowserPage:
    """A page of a fresh browser context, with its watcher."""

    page: Any
    context: Any
    watch: Watch
    base: str

    def goto(self, path: str) -> Any:
        """Open `path` of the app; returns the main response."""
        return self.page.goto(self.base + path)

    def sign_in(self, email: str, password: str) -> None:
        """Submit the sign-in form."""
        self.goto("/_/login")
        self.page.fill("input[name=email]", email)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state()


def _open(browser: Any, ui_server: UiServer, request: pytest.FixtureRequest,
          storage_state: Any = None) -> Iterator[BrowserPage]:
    context = browser.new_context(base_url=ui_server.url, storage_state=storage_state)
    page = context.new_page()
    watch = Watch(ui_server.url)
    watch.attach(page)
    try:
        yield BrowserPage(page=page, context=context, watch=watch, base=ui_server.url)
    finally:
        SCREENSHOTS.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        try:
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
        finally:
            context.close()


@pytest.fixture(scope="package")
def admin_state(browser: Any, ui_server: UiServer) -> Any:
    """The cookies of one admin sign-in through the UI, reused by `admin_page`."""
    context = browser.new_context(base_url=ui_server.url)
    page = context.new_page()
    page.goto(ui_server.url + "/_/login")
    page.fill("input[name=email]", ADMIN_EMAIL)
    page.fill("input[name=password]", ADMIN_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(ui_server.url + "/_/")
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture
def page(browser: Any, ui_server: UiServer, request: pytest.FixtureRequest) -> Iterator[BrowserPage]:
    yield from _open(browser, ui_server, request)


@pytest.fixture
def admin_page(browser: Any, ui_server: UiServer, admin_state: Any,
               request: pytest.FixtureRequest) -> Iterator[BrowserPage]:
    yield from _open(browser, ui_server, request, storage_state=admin_state)
