"""Requests that aiohttp's HTTP parser rejects, and clients that disconnect mid-upload.

Parser errors are answered before any middleware runs, so these tests serve the app with the
runner `cms serve` uses (`create_runner`) on a real socket and speak raw HTTP to it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from cms.app import create_app, create_runner
from cms.config import Config
from cms.wiring import Services
from tests.conftest import bearer, create_collection, records_path

MARKER = "EchoMarker7f3a"  # request bytes that must come back in no response body and no log line
TIMEOUT_S = 10.0


@pytest.fixture
async def served(config: Config, services: Services) -> AsyncIterator[web.AppRunner]:
    """The app served as by `cms serve` (create_runner, no handler cancellation) on a free port."""
    runner = create_runner(create_app(config, services=services))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield runner
    await runner.cleanup()


def port_of(runner: web.AppRunner) -> int:
    return int(runner.addresses[0][1])


async def exchange(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until the server closes; return (status, headers lower-cased, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), TIMEOUT_S)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


def request(target: str = "/health", headers: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: cms.test\r\n{headers}Connection: close\r\n\r\n".encode()


def assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [f"{r.levelname} {r.name}: {r.getMessage()}" for r in bad]


@pytest.mark.parametrize("data, status, code", [
    (request("/" + MARKER + "a" * 9000), 414, "uri_too_long"),
    (request(headers=f"X-Big: {MARKER}{'b' * 9 * 1024}\r\n"), 431, "request_header_too_large"),
    (request(headers=f"X-{MARKER}{'n' * 9 * 1024}: 1\r\n"), 431, "request_header_too_large"),
    (request(headers="".join(f"X-{MARKER}-{i}: 1\r\n" for i in range(200))), 431, "request_header_too_large"),
    (f"GET /{MARKER}\x01 HTTP/1.1\r\nHost: cms.test\r\n\r\n".encode(), 400, "bad_request"),
    (f"GET /{MARKER} HTTP/9.9x\r\nHost: cms.test\r\n\r\n".encode(), 400, "bad_request"),
    (f"{MARKER} nonsense\r\n\r\n".encode(), 400, "bad_request"),
], ids=["request-line-over-8190", "9kb-header-value", "9kb-header-name", "200-headers", "bad-url-byte",
        "bad-version", "not-http"])
async def test_parser_errors_answer_in_the_error_model(served, caplog, data, status, code):
    caplog.set_level(logging.DEBUG)
    got_status, headers, body = await exchange(port_of(served), data)

    assert got_status == status, body
    assert headers["content-type"].startswith("application/json")
    assert headers["x-request-id"]
    parsed: dict[str, Any] = json.loads(body)
    assert set(parsed) == {"detail", "code"} and parsed["code"] == code, parsed
    assert MARKER.encode() not in body
    assert_no_traceback(caplog)
    lines = [r for r in caplog.records if r.name == "cms.api" and code in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO, [r.getMessage() for r in caplog.records]
    assert headers["x-request-id"] in lines[0].getMessage()
    assert not [r for r in caplog.records if MARKER in r.getMessage()]


async def test_headers_within_the_limits_are_served(served):
    headers = f"X-Big: {'b' * 8000}\r\n" + "".join(f"X-H-{i}: 1\r\n" for i in range(100))
    status, _, body = await exchange(port_of(served), request("/health?" + "q" * 8000, headers))
    assert status == 200, body


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until true; fail after TIMEOUT_S."""
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


@pytest.mark.parametrize("server", ["cms-serve-runner", "test-server-with-handler-cancellation"])
async def test_client_disconnecting_mid_upload_is_logged_at_info(served, client, admin_token, caplog, server):
    caplog.set_level(logging.INFO)
    runner = served if server == "cms-serve-runner" else client.server.runner
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    boundary = "b0undary"
    head = (f"POST {records_path('posts')}/import/csv HTTP/1.1\r\nHost: cms.test\r\n"
            f"Authorization: {bearer(admin_token)['Authorization']}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 5000000\r\n"
            f"Expect: 100-continue\r\n\r\n").encode()
    part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.csv\"\r\n"
            f"Content-Type: text/csv\r\n\r\ntitle\n").encode() + b"row\n" * 20_000

    http_server = runner.server
    assert http_server is not None
    others = set(http_server.connections)  # the test client's keep-alive connection
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(runner))
    writer.write(head)
    # the 100 Continue comes from the matched route: the request is in the app when we hang up
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT_S)).startswith(b"HTTP/1.1 100")
    [upload] = set(http_server.connections) - others
    writer.write(part)
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    def disconnect_logged() -> bool:
        return any(r.name == "cms.api" and "client disconnected" in r.getMessage() for r in caplog.records)

    await wait_for(disconnect_logged, "the disconnect log line")
    await wait_for(lambda: upload not in http_server.connections, "the request to finish")
    [line] = [r for r in caplog.records if r.name == "cms.api" and "client disconnected" in r.getMessage()]
    assert line.levelno == logging.INFO and "/import/csv" in line.getMessage()
    assert_no_traceback(caplog)
    listed = await client.get(records_path("posts"), headers=bearer(admin_token))
    assert (await listed.json())["items"] == []
