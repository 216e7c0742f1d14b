"""Hostile bodies never take the process down nor give a 500, and a job that raises never stops the
worker (issue 28, item 3: panic-equivalents; PocketBase's and Directus's crashes on malformed
input). Every case ends by asking the same server for `/health`: it still answers 200.

Parser-level requests (request line, header sizes) are `tests/api/test_http_errors.py`'s; here:
JSON (deep, huge, not UTF-8, duplicate keys), multipart, chunked bodies over a raw socket, the
realtime endpoints with odd headers and bodies, and a burst worker given a job that raises."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from cms.jobs import SEND_EMAIL
from tests.api.test_http_errors import assert_no_traceback, port_of, served  # noqa: F401 - the fixture
from tests.conftest import bearer, create_collection, records_path
from workers.settings import build_worker

TIMEOUT_S = 10.0
WAIT_S = 2.0

JSON_BODIES: dict[str, bytes] = {
    "deep-arrays": b"[" * 100_000 + b"]" * 100_000,
    "deep-objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "unclosed-deep": b"[" * 200_000,
    "huge-integer": b'{"data": {"n": ' + b"9" * 50_000 + b"}}",
    "huge-exponent": b'{"data": {"n": 1e999999999}}',
    "tiny-exponent": b'{"data": {"n": 1e-999999999}}',
    "nan": b'{"data": {"n": NaN}}',
    "invalid-utf8": b'{"data": {"title": "\xff\xfe\xc3\x28"}}',
    "overlong-utf8": b'{"data": {"title": "\xc0\xaf"}}',
    "lone-surrogate": b'{"data": {"title": "\\ud800"}}',
    "nul-in-key": b'{"data": {"ti\\u0000tle": "x"}}',
    "utf16": '{"data": {"title": "x"}}'.encode("utf-16"),
    "bom": b'\xef\xbb\xbf{"data": {"title": "x"}}',
    "duplicate-keys": b'{"data": {"title": "a", "title": {"$ne": ""}}, "data": {"title": "b"}}',
    "truncated": b'{"data": {"title": "x"',
    "empty": b"",
    "not-json": b"title=x&data=y",
    "top-level-string": b'"data"',
    "many-keys": b"{" + b",".join(b'"k%d": 1' % i for i in range(50_000)) + b"}",
}
JSON_PATHS = [records_path("posts"), "/api/v1/batch", "/api/v1/collections", "/api/v1/auth/login",
              "/api/v1/collections/people/auth/login", "/api/v1/realtime", "/api/v1/settings",
              "/api/v1/auth/reset-password", "/api/v1/webhooks"]


@pytest.fixture
async def posts(client, admin_token, services) -> None:
    await services.settings.set("rate_limit_enabled", False)
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"},
                                                           {"name": "n", "type": "number"}])
    await create_collection(client, admin_token, "people", [], type="auth")


async def healthy(client) -> None:
    response = await client.get("/health")
    assert response.status == 200, await response.text()


@pytest.mark.parametrize("kind", list(JSON_BODIES))
async def test_malformed_json_is_never_a_500(client, admin_token, posts, caplog, kind):
    caplog.set_level(logging.INFO)
    for path in JSON_PATHS:
        response = await client.post(path, data=JSON_BODIES[kind], headers={
            **bearer(admin_token), "Content-Type": "application/json"})
        text = await response.text()
        assert response.status < 500, (path, response.status, text[:300])
        if response.status >= 400:
            body = await response.json()
            assert set(body) >= {"detail", "code"}, body
    assert_no_traceback(caplog)
    await healthy(client)


MULTIPART: dict[str, tuple[str, bytes]] = {
    "no-boundary": ("multipart/form-data", b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n"),
    "empty-boundary": ("multipart/form-data; boundary=", b"--\r\n\r\n"),
    "wrong-boundary": ("multipart/form-data; boundary=abc", b"--xyz\r\n\r\nstuff\r\n--xyz--\r\n"),
    "no-disposition": ("multipart/form-data; boundary=b",
                       b"--b\r\nContent-Type: text/csv\r\n\r\ntitle\nx\r\n--b--\r\n"),
    "bad-disposition": ("multipart/form-data; boundary=b",
                        b"--b\r\nContent-Disposition: ;;;name\r\n\r\nx\r\n--b--\r\n"),
    "huge-part-header": ("multipart/form-data; boundary=b",
                         b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + b"a" * 100_000
                         + b"\"\r\n\r\nx\r\n--b--\r\n"),
    "nested-multipart": ("multipart/form-data; boundary=b",
                         b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n"
                         b"Content-Type: multipart/mixed; boundary=c\r\n\r\n--c\r\n\r\nx\r\n--c--\r\n--b--\r\n"),
    "traversal-name": ("multipart/form-data; boundary=b",
                       b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../etc/passwd\"\r\n"
                       b"Content-Type: text/csv\r\n\r\ntitle\nx\r\n--b--\r\n"),
    "only-closing": ("multipart/form-data; boundary=b", b"--b--\r\n"),
    "garbage": ("multipart/form-data; boundary=b", bytes(range(256)) * 100),
}


@pytest.mark.parametrize("kind", list(MULTIPART))
async def test_malformed_multipart_is_never_a_500(client, admin_token, posts, caplog, kind):
    caplog.set_level(logging.INFO)
    content_type, data = MULTIPART[kind]
    for path in (records_path("posts") + "/import/csv", "/api/v1/files", records_path("posts"), "/_/login"):
        response = await client.post(path, data=data, headers={**bearer(admin_token), "Content-Type": content_type})
        assert response.status < 500, (path, response.status, (await response.text())[:300])
    assert_no_traceback(caplog)
    await healthy(client)


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes and read what comes back until the server closes; a server still waiting for
    the body after WAIT_S sees the write side end (a client that gave up), then answers or closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(), WAIT_S)
        except TimeoutError:
            writer.write_eof()
            return await asyncio.wait_for(reader.read(), TIMEOUT_S)
    finally:
        writer.close()


CHUNKED: dict[str, bytes] = {
    "bad-size": b"zz\r\n{}\r\n0\r\n\r\n",
    "negative-size": b"-5\r\n{}\r\n0\r\n\r\n",
    "huge-size": b"ffffffffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
    "size-larger-than-data": b"100\r\n{}\r\n0\r\n\r\n",
    "no-final-chunk": b"2\r\n{}\r\n",
    "bad-extension": b"2;\x01\x02=\r\n{}\r\n0\r\n\r\n",
    "no-crlf": b"2{}0",
    "many-tiny-chunks": b"1\r\n[\r\n" * 20_000 + b"0\r\n\r\n",
}


@pytest.mark.parametrize("kind", list(CHUNKED))
async def test_malformed_chunked_bodies_are_never_a_500(served, caplog, kind):  # noqa: F811 - the fixture
    caplog.set_level(logging.INFO)
    port = port_of(served)
    for path, extra in ((records_path("posts"), ""), ("/api/v1/auth/login", ""),
                        ("/api/v1/auth/login", "Content-Length: 5\r\n")):
        head = (f"POST {path} HTTP/1.1\r\nHost: cms.test\r\nContent-Type: application/json\r\n{extra}"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
        raw = await raw_exchange(port, head + CHUNKED[kind])
        if raw or kind not in ("size-larger-than-data", "no-final-chunk"):  # a body cut off: no one to answer
            status = int(raw.split(b" ", 2)[1])
            assert 400 <= status < 500, raw[:300]
    assert_no_traceback(caplog)
    assert (await raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: cms.test\r\nConnection: close\r\n\r\n")
            ).startswith(b"HTTP/1.1 200")


ODD_STREAM_HEADERS: list[dict[str, str]] = [
    {"Last-Event-ID": "x"}, {"Last-Event-ID": ":"}, {"Last-Event-ID": "a:b:c:-1"}, {"Last-Event-ID": "c:" + "9" * 5000},
    {"Last-Event-ID": "c:-9223372036854775809"}, {"Last-Event-ID": "%00%ff"}, {"Accept": "application/json"},
    {"Accept": "*/*;q=abc"}, {"Authorization": "Bearer"}, {"Authorization": "Bearer " + "a." * 2000},
    {"Range": "bytes=0-1"}, {"Accept-Encoding": "gzip;q=x, br"}, {"If-None-Match": "*"},
]


async def test_realtime_with_odd_headers_and_bodies_is_never_a_500(client, admin_token, posts, caplog):
    caplog.set_level(logging.INFO)
    for headers in ODD_STREAM_HEADERS:
        response = await asyncio.wait_for(client.get("/api/v1/realtime", headers=headers), TIMEOUT_S)
        try:
            assert response.status < 500, (headers, response.status)
        finally:
            response.close()
    bodies: list[Any] = [None, [], 1, "x", {"clientId": {"$ne": ""}, "subscriptions": ["posts/*"]},
                         {"clientId": "x", "subscriptions": [1, None, {}, []]},
                         {"clientId": "x" * 100_000, "subscriptions": []},
                         {"clientId": "x", "subscriptions": ["posts/*?filter=" + "(" * 5000]},
                         {"clientId": "x", "subscriptions": ["posts/*?expand=" + ".".join(["a"] * 1000)]},
                         {"clientId": "x", "subscriptions": {"$ne": ""}},
                         {"clientId": "x", "subscriptions": ["../../posts/*", "posts/%00", "posts/\u0000*"]}]
    for body in bodies:
        response = await client.post("/api/v1/realtime", json=body, headers=bearer(admin_token))
        assert 400 <= response.status < 500, (body, response.status, (await response.text())[:300])
    assert_no_traceback(caplog)
    await healthy(client)


async def test_a_job_that_raises_does_not_stop_the_worker(config, services, mailbox):
    """A job whose input makes it raise fails alone: the burst worker goes on to the next job,
    which runs, and ends normally. (Email retries with backoff: `tests/workers/test_email.py`.)"""
    good = {"to": "after@example.com", "subject": "still working", "text": "hello", "html": "<p>hello</p>"}
    for bad in ({"to": "x@example.com"}, None, 42, {"to": {"$ne": ""}, "subject": [], "text": 1, "html": None}):
        await services.redis.enqueue_job(SEND_EMAIL, bad, _queue_name=config.queue_name)
    await services.redis.enqueue_job(SEND_EMAIL, good, _queue_name=config.queue_name)
    worker = build_worker(config, services=services, burst=True, handle_signals=False, poll_delay_s=0.01)
    try:
        await asyncio.wait_for(worker.main(), 60)
    finally:
        await worker.close()
    assert worker.jobs_failed == 4 and worker.jobs_complete == 1, (worker.jobs_failed, worker.jobs_complete)
    assert mailbox.last_to("after@example.com")["Subject"] == "still working"
