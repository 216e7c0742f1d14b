"""A realtime client id is a secret like a token (decisions.md, Realtime; issue 37, item 3): it never reaches
the logs (the access log of `cms serve` included: CmsAccessLogger serves this test's app), the request log,
a trace's spans or the metrics, whatever the client does: open, subscribe, be refused, resume by
`?client_id=` and by `Last-Event-ID`, lose its credential. A log line names a client by its tag
(`client_state.client_tag`). The replicas' own log files: tests/realtime/test_realtime_replicas.py.

Tracing, once configured, stays on in this test process (as in tests/observability/test_tracing.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cms.api.access_log import CmsAccessLogger
from cms.app import RECORDER, create_app
from cms.config import Config
from cms.observability import tracing
from cms.observability.request_log import read_page
from cms.services.delivery.realtime.client_state import client_tag
from cms.wiring import Services
from tests.conftest import Client, bearer, create_collection, create_record
from tests.realtime.sse import REALTIME, Stream, data

TEST_CLIENT_LOGGERS = ("httpx", "httpcore")
"""The loggers of this test's own HTTP client (it logs the URLs it calls); every other logger is the server's."""


@pytest.fixture(scope="module", autouse=True)
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the module (before any test's app is made), into memory."""
    memory = InMemorySpanExporter()
    tracing.configure(exporter=memory)
    yield memory
    tracing.flush()
    memory.shutdown()


@pytest.fixture
async def client(aiohttp_client: Any, config: Config, services: Services) -> Client:
    """The app served as `cms serve` serves it: with CmsAccessLogger (the test server's default logs queries)."""
    server = TestServer(create_app(config, services=services))
    await server.start_server(access_log_class=CmsAccessLogger)
    served: Client = await aiohttp_client(server)
    return served


async def test_a_client_id_reaches_no_log_request_log_span_or_metric(
        client: Client, admin_token: str, user_token: str, services: Services, config: Config,
        streams: Callable[[], Stream], exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    tracing.flush()
    exporter.clear()
    stream = streams()
    await stream.open()
    secret = stream.client_id
    assert (await stream.subscribe(["posts/*"], headers=bearer(user_token))).status_code == 204
    assert (await stream.subscribe(["posts/*"])).status_code == 403  # refused: anonymous
    assert (await stream.subscribe(["nope/*"], headers=bearer(user_token))).status_code == 422
    refused = await client.get(REALTIME, params={"client_id": secret}, headers=bearer(admin_token))
    assert refused.status == 403
    record = await create_record(client, admin_token, "posts", {"title": "one"})
    seen = await stream.next()
    assert data(seen)["record"] == record
    await stream.close()
    by_query = streams()
    await by_query.open(client_id=secret, last_event_id=seen.id)
    await by_query.close()
    by_header = streams()
    await by_header.open(last_event_id=seen.id)
    assert by_header.client_id == secret
    assert (await client.post("/api/v1/auth/logout", headers=bearer(user_token))).status == 200
    await create_record(client, admin_token, "posts", {"title": "after logout"})  # the hub logs the refusal
    await by_header.nothing()
    await by_header.close()

    logged = "\n".join(f"{r.name} {r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records
                       if not r.name.startswith(TEST_CLIENT_LOGGERS))
    assert f"realtime client {client_tag(secret)}" in logged  # the hub did log this client, by its tag
    assert "GET /api/v1/realtime HTTP/1.1" in logged  # and the access log the streams
    assert secret not in logged
    assert await client.app[RECORDER].flush()
    page = await read_page(services.redis, config.mongodb_db, size=1_000, per_page=1_000)
    assert any(entry.route == REALTIME for entry in page.entries)
    assert secret not in json.dumps([vars(entry) for entry in page.entries])
    assert tracing.flush()
    spans = exporter.get_finished_spans()
    assert any(REALTIME in (s.name or "") for s in spans)
    assert secret not in json.dumps([[s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]]
                                     for s in spans], default=str)
    metrics = await client.get("/metrics", headers=bearer(admin_token))
    assert metrics.status == 200
    text = await metrics.text()
    assert "cms_realtime_connections" in text and secret not in text
