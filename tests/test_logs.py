"""LOG_FORMAT=json: one JSON object per line, and the access log's fields; the process settings
(LOG_FORMAT, SHUTDOWN_TIMEOUT_S, QUEUE_NAME) read from the environment."""

from __future__ import annotations

import ipaddress
import json
import logging
import multiprocessing
import sys
import time
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cms.app import create_app, create_runner
from cms.config import QUEUE_NAME, Config, ConfigError
from cms.logs import JsonFormatter
from cms.runtime.embedded import free_port
from cms.wiring import Services

PRODUCTION = {"MONGODB_URL": "mongodb://db:27017", "REDIS_URL": "redis://redis:6379/0", "SECRET_KEY": "k" * 40}


def record(message: str, *args: Any, **attributes: Any) -> logging.LogRecord:
    made = logging.LogRecord("cms.test", logging.WARNING, __file__, 1, message, args, None)
    for name, value in attributes.items():
        setattr(made, name, value)
    return made


def test_json_lines_carry_time_level_logger_message_and_fields() -> None:
    line = JsonFormatter().format(record("two\nlines %s", "é", fields={"status": 200, "path": object()}))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "cms.test"
    assert entry["message"] == "two\nlines é"
    assert entry["time"].endswith("Z") and len(entry["time"]) == len("2026-11-23T16:00:00.000Z")
    assert entry["status"] == 200 and entry["path"].startswith("<object")  # not JSON: its str()


def test_json_lines_carry_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = record("failed", exc_info=sys.exc_info())
    entry = json.loads(JsonFormatter().format(failed))
    assert "ValueError: boom" in entry["exception"]


@pytest.mark.parametrize("env, field_name, expected", [
    ({}, "log_format", "text"),
    ({"LOG_FORMAT": "JSON"}, "log_format", "json"),
    ({}, "shutdown_timeout_s", 10),
    ({"SHUTDOWN_TIMEOUT_S": "3"}, "shutdown_timeout_s", 3),
    ({}, "queue_name", QUEUE_NAME),
    ({"QUEUE_NAME": "cms:ci-1234"}, "queue_name", "cms:ci-1234"),
], ids=["format-default", "format-json", "timeout-default", "timeout", "queue-default", "queue"])
def test_process_settings(env: dict[str, str], field_name: str, expected: Any) -> None:
    assert getattr(Config.from_env({**PRODUCTION, **env}), field_name) == expected


@pytest.mark.parametrize("env, variable", [
    ({"LOG_FORMAT": "xml"}, "LOG_FORMAT"),
    ({"SHUTDOWN_TIMEOUT_S": "0"}, "SHUTDOWN_TIMEOUT_S"),
    ({"SHUTDOWN_TIMEOUT_S": "soon"}, "SHUTDOWN_TIMEOUT_S"),
    ({"QUEUE_NAME": "has space"}, "QUEUE_NAME"),
    ({"QUEUE_NAME": "q" * 101}, "QUEUE_NAME"),
], ids=["format", "timeout-zero", "timeout-text", "queue-space", "queue-long"])
def test_bad_process_settings_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        Config.from_env({**PRODUCTION, **env})


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def config(config: Config) -> Config:
    """The suite's config, trusting 127.0.0.1 as a proxy."""
    return replace(config, trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),))


async def test_the_access_log_carries_request_fields(config: Config, services: Services) -> None:
    logger = logging.getLogger("cms.access.test")
    logger.setLevel(logging.INFO)
    captured = Captured()
    logger.addHandler(captured)
    runner = create_runner(create_app(config, services=services), access_log=logger)
    await runner.setup()
    port = free_port()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        async with aiohttp.ClientSession() as http, http.get(
                f"http://127.0.0.1:{port}/api/v1/collections?token=secret",
                headers={"X-Request-Id": "req-1", "X-Forwarded-For": "203.0.113.9",
                         "Referer": "http://cms.test/_/verify-email?token=secret"}) as response:
            assert response.status == 200
    finally:
        await runner.cleanup()
        logger.removeHandler(captured)
    (access,) = captured.records
    entry = json.loads(JsonFormatter().format(access))
    assert entry["message"].startswith("127.0.0.1 [") and '"GET /api/v1/collections HTTP/1.1" 200' in entry["message"]
    assert '"http://cms.test/_/verify-email"' in entry["message"]
    assert "secret" not in entry["message"]  # query strings may carry tokens
    assert {k: entry[k] for k in ("request_id", "method", "path", "status", "client_ip")} == {
        "request_id": "req-1", "method": "GET", "path": "/api/v1/collections", "status": 200,
        "client_ip": "203.0.113.9"}
    assert isinstance(entry["duration_ms"], float) and entry["duration_ms"] >= 0


# --- the text format (the access log writes a line per request) ---------------------------------


def info(message: str) -> logging.LogRecord:
    return logging.LogRecord("cms.access", logging.INFO, __file__, 1, message, None, None)


class Stream:
    """A stream that records each write (the handler's batches)."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass


def written(stream: Stream, lines: int) -> list[str]:
    """The stream's writes once `lines` lines are there (polled; the writer thread writes them)."""
    deadline = time.monotonic() + 5
    while "".join(stream.writes).count("\n") < lines and time.monotonic() < deadline:
        time.sleep(0.01)
    return stream.writes


def test_info_lines_are_written_together_by_the_writer() -> None:
    from cms.logs import BatchedStreamHandler

    stream = Stream()
    handler = BatchedStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for n in range(3):
        handler.handle(info(f"line {n}"))
    assert written(stream, 3) == ["line 0\nline 1\nline 2\n"]  # one write, in order


def test_a_warning_is_written_after_the_lines_before_it() -> None:
    from cms.logs import BatchedStreamHandler

    stream = Stream()
    handler = BatchedStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.handle(info("first"))
    handler.handle(record("trouble"))
    assert "".join(written(stream, 2)) == "INFO first\nWARNING trouble\n"


def test_flush_writes_what_waits() -> None:
    from cms.logs import BatchedStreamHandler

    stream = Stream()
    handler = BatchedStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.handle(info("last words"))
    handler.flush()  # as logging.shutdown does at exit
    assert "".join(stream.writes) == "last words\n"
    handler.flush()
    assert "".join(stream.writes) == "last words\n"  # written once
    handler.handle(info("replaced"))
    handler.close()  # as basicConfig(force=True) does to the handler it replaces
    assert "".join(stream.writes) == "last words\nreplaced\n"


@pytest.mark.parametrize("created", [1795491362.0, 1795491362.5, 1795491362.999, 1795491363.25, 1700000000.123])
def test_the_text_format_is_loggings_default_one(created: float) -> None:
    from cms.logs import TEXT_FORMAT, TextFormatter

    made = info("GET / 200")
    made.created, made.msecs = created, (created - int(created)) * 1000
    ours = TextFormatter()
    assert ours.format(made) == logging.Formatter(TEXT_FORMAT).format(made)
    made.created, made.msecs = created + 1, made.msecs  # the next second: not the cached one
    assert ours.format(made) == logging.Formatter(TEXT_FORMAT).format(made)


def test_request_ids_are_unique_hex_and_differ_between_processes() -> None:
    from cms.api import middlewares

    ids = [middlewares.new_request_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    here = middlewares.new_request_id()[:20]
    forked = multiprocessing.get_context("fork")  # a child as `cms serve --workers N` forks it
    with forked.Pool(1) as pool:
        there = pool.apply(middlewares.new_request_id)[:20]
    assert there != here and middlewares.new_request_id()[:20] == here
