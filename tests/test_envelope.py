"""The embedded server's envelope (issue 31, item 4; cms/services/content/envelope.py): collections past
`Config.embedded_cold_page_records` are named by `cms serve`'s start-up warning (cli.add_envelope_check)
and by a notice on the admin UI's records page, in embedded mode only. The suite's real servers, with
the envelope set to 2 records so the tests stay small."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cms.admin_ui.session import SESSION_COOKIE
from cms.app import create_app
from cms.cli import add_envelope_check
from cms.config import EMBEDDED_COLD_PAGE_RECORDS, Config, ConfigError
from cms.runtime.embedded import free_port
from cms.services.content.envelope import COLD_PAGE_BUDGET_MS, ESTIMATE_TTL_S
from cms.wiring import Services
from tests.conftest import create_collection, create_record
from tests.test_admin_ui_errors import admin_cookies, assert_html
from tests.test_cli import ADMIN, _call, _env

THRESHOLD = 2
NOTICE = re.compile(r'id="envelope-notice">This collection has about ([\d,]+) records')


@pytest.fixture
def embedded() -> bool:
    """Whether the test's config says embedded (a test parametrizes it to False for external mode)."""
    return True


@pytest.fixture
def config(config: Config, embedded: bool) -> Config:
    """The suite's config with `embedded` and a small envelope."""
    return dataclasses.replace(config, embedded=embedded, embedded_cold_page_records=THRESHOLD)


EXTERNAL = pytest.mark.parametrize("embedded", [False], ids=["external"])


async def fill(client: Any, token: str, name: str, records: int) -> None:
    await create_collection(client, token, name, [{"name": "title", "type": "text"}])
    for n in range(records):
        await create_record(client, token, name, {"title": f"{name} {n}"})


def test_the_default_envelope_is_the_measured_one() -> None:
    assert Config(secret_key="k" * 40).embedded_cold_page_records == EMBEDDED_COLD_PAGE_RECORDS
    assert 100 <= EMBEDDED_COLD_PAGE_RECORDS <= 100_000


def test_the_envelope_can_be_set_for_another_machine(tmp_path: Path) -> None:
    assert Config.from_env({}, data_dir=tmp_path).embedded_cold_page_records == EMBEDDED_COLD_PAGE_RECORDS
    assert Config.from_env({"EMBEDDED_COLD_PAGE_RECORDS": "25000"},
                           data_dir=tmp_path).embedded_cold_page_records == 25_000
    for bad in ("0", "many"):
        with pytest.raises(ConfigError, match="EMBEDDED_COLD_PAGE_RECORDS"):
            Config.from_env({"EMBEDDED_COLD_PAGE_RECORDS": bad}, data_dir=tmp_path)


async def test_large_collections_are_those_past_the_envelope(client: Any, services: Services,
                                                             admin_token: str) -> None:
    await fill(client, admin_token, "big", THRESHOLD + 1)
    await fill(client, admin_token, "small", THRESHOLD)
    large = await services.envelope.large_collections()
    assert [(c.name, c.records, c.threshold) for c in large] == [("big", THRESHOLD + 1, THRESHOLD)]
    message = large[0].message
    assert message.startswith(f"collection big has about {THRESHOLD + 1:,} records")
    assert f"more than {COLD_PAGE_BUDGET_MS} ms from about {THRESHOLD:,} records" in message
    assert "MONGODB_URL" in message


async def test_the_estimate_is_reused_for_a_while_then_read_again(client: Any, services: Services, clock: Any,
                                                                  admin_token: str) -> None:
    await fill(client, admin_token, "growing", THRESHOLD)
    collection = await services.catalog.by_name("growing")
    assert await services.envelope.check(collection) is None
    await create_record(client, admin_token, "growing", {"title": "one more"})
    assert await services.envelope.check(collection) is None  # the kept estimate
    clock.advance(seconds=ESTIMATE_TTL_S + 1)
    large = await services.envelope.check(collection)
    assert large is not None and large.records == THRESHOLD + 1


@EXTERNAL
async def test_nothing_is_large_on_an_external_database(client: Any, services: Services, admin_token: str) -> None:
    await fill(client, admin_token, "big", THRESHOLD + 1)
    assert await services.envelope.large_collections() == []


async def started_with_check(aiohttp_client: Any, config: Config, services: Services) -> Any:
    app = create_app(config, services=services)
    add_envelope_check(app)
    return await aiohttp_client(app)


async def envelope_warnings(caplog: pytest.LogCaptureFixture, expected: int) -> list[str]:
    """The envelope's WARNING lines once `expected` arrived (the check runs beside the app), or after 5 s."""
    for _ in range(100):
        lines = [r.getMessage() for r in caplog.records
                 if r.levelno == logging.WARNING and "embedded server" in r.getMessage()]
        if len(lines) >= expected:
            await asyncio.sleep(0.1)  # a line too many would show up now
            break
        await asyncio.sleep(0.05)
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "embedded server" in r.getMessage()]


async def test_serve_warns_at_start_up_once_per_large_collection(aiohttp_client: Any, client: Any, config: Config,
                                                                 services: Services, admin_token: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    await fill(client, admin_token, "big", THRESHOLD + 3)
    await fill(client, admin_token, "bigger", THRESHOLD + 4)
    await fill(client, admin_token, "small", THRESHOLD)
    with caplog.at_level(logging.WARNING, logger="cms"):
        served = await started_with_check(aiohttp_client, config, services)
        assert (await served.get("/health")).status == 200  # serving while (or after) it checks
        lines = await envelope_warnings(caplog, 2)
    assert lines == [
        f"collection big has about {THRESHOLD + 3} records; on the embedded server a cold list page takes more "
        f"than {COLD_PAGE_BUDGET_MS} ms from about {THRESHOLD} records: set MONGODB_URL to a MongoDB server",
        f"collection bigger has about {THRESHOLD + 4} records; on the embedded server a cold list page takes more "
        f"than {COLD_PAGE_BUDGET_MS} ms from about {THRESHOLD} records: set MONGODB_URL to a MongoDB server",
    ]


@EXTERNAL
async def test_serve_says_nothing_on_an_external_database(aiohttp_client: Any, client: Any, config: Config,
                                                           services: Services, admin_token: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    await fill(client, admin_token, "big", THRESHOLD + 3)
    with caplog.at_level(logging.WARNING, logger="cms"):
        await started_with_check(aiohttp_client, config, services)
        assert await envelope_warnings(caplog, 1) == []


async def records_page(client: Any, cookies: dict[str, str], name: str, **query: str) -> str:
    response = await client.get(f"/_/collections/{name}/records", params=query, cookies=cookies)
    assert_html(response, 200)
    return str(await response.text())


async def test_the_records_page_of_a_large_collection_says_so(client: Any, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    token = cookies[SESSION_COOKIE].split("~")[0]
    await fill(client, token, "big", THRESHOLD + 1)
    await fill(client, token, "small", THRESHOLD)
    text = await records_page(client, cookies, "big")
    assert NOTICE.findall(text) == [f"{THRESHOLD + 1}"]
    assert "MONGODB_URL" in text and f"from about {THRESHOLD} records" in text
    assert NOTICE.findall(await records_page(client, cookies, "small")) == []
    # a filtered page (its total is not the collection's) still says so, from the estimate
    assert NOTICE.findall(await records_page(client, cookies, "big", filter='title="nothing"')) == [
        f"{THRESHOLD + 1}"]
    # the live refresh of the table alone carries no notice
    refresh = await client.get("/_/collections/big/records", cookies=cookies,
                               headers={"HX-Request": "true", "HX-Target": "records-view"})
    assert_html(refresh, 200)
    assert NOTICE.findall(await refresh.text()) == []
    # an unfiltered page counts the records itself: one more shows at once
    await create_record(client, token, "small", {"title": "one more"})
    assert NOTICE.findall(await records_page(client, cookies, "small")) == [f"{THRESHOLD + 1}"]


@EXTERNAL
async def test_the_records_page_says_nothing_on_an_external_database(client: Any, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    token = cookies[SESSION_COOKIE].split("~")[0]
    await fill(client, token, "big", THRESHOLD + 1)
    assert NOTICE.findall(await records_page(client, cookies, "big")) == []


def serve(data_dir: Path, log_path: Path, *extra_args: str, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real `cms serve` (embedded) writing its log to `log_path`; returns it and its base URL once healthy."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cms", "serve", "--port", str(port), "--data-dir", str(data_dir), *extra_args],
            env=_env(**env), stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log_path.read_text()
        try:
            if _call(base, "GET", "/health")[0] == 200:
                return process, base
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("cms serve did not become healthy")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


def warnings_in(log_path: Path) -> list[str]:
    return [line.split(" WARNING ", 1)[1] for line in log_path.read_text().splitlines()
            if " WARNING " in line and "embedded server" in line]


def test_cms_serve_warns_at_start_up_once_per_large_collection(tmp_path: Path) -> None:
    data_dir, first_log, second_log = tmp_path / "data", tmp_path / "first.log", tmp_path / "second.log"
    process, base = serve(data_dir, first_log, ADMIN_EMAIL=ADMIN["email"], ADMIN_PASSWORD=ADMIN["password"],
                          EMBEDDED_COLD_PAGE_RECORDS="2")
    try:
        status, login = _call(base, "POST", "/api/v1/auth/login", ADMIN)
        assert status == 200, login
        token = login["token"]["access_token"]
        for name, records in (("big", 3), ("small", 2)):
            status, _ = _call(base, "POST", "/api/v1/collections",
                              {"name": name, "schema": [{"name": "text", "type": "text"}]}, token)
            assert status == 201
            for n in range(records):
                assert _call(base, "POST", f"/api/v1/collections/{name}/records",
                             {"data": {"text": str(n)}}, token)[0] == 201
    finally:
        stop(process)
    assert warnings_in(first_log) == []  # nothing was large when it started

    # two web processes: one warns
    process, _ = serve(data_dir, second_log, "--workers", "2", EMBEDDED_COLD_PAGE_RECORDS="2")
    try:
        deadline = time.monotonic() + 20
        while not warnings_in(second_log) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # a second process's line would show up by now
    finally:
        stop(process)
    assert warnings_in(second_log) == [
        "cms: collection big has about 3 records; on the embedded server a cold list page takes more than "
        f"{COLD_PAGE_BUDGET_MS} ms from about 2 records: set MONGODB_URL to a MongoDB server"]
