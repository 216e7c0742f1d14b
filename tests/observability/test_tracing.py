"""Traces (decisions.md, Traces; issue 30 item 2): a real request whose handler queues a job, the job
run by a real arq worker, spans read from the SDK's InMemorySpanExporter; the query strings and secrets
spans must not carry; "no cost when off" in a fresh interpreter.

Tracing, once configured, stays on in this test process (the instrumentations are global), so the
exporter is configured once for the module and emptied by each test; later tests of the session run
traced, which must change nothing they see."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from cms.app import create_app
from cms.config import ConfigError
from cms.observability import tracing
from cms.runtime.embedded import free_port
from tests.conftest import bearer, create_collection, create_record, records_path
from tests.fixtures import wait_until
from tests.test_replicas import ADMIN_EMAIL as REPLICA_ADMIN
from tests.test_replicas import Processes
from tests.test_replicas import _env as replica_env
from tests.test_replicas import _wait_healthy as wait_healthy

HOOK_SECRET = "hook-query-secret-123"
LINK_TOKEN = "link-token-secret-456"
UPDATE_ROUTE = "PATCH /api/v1/collections/{collection_name}/records/{record_id}"


@pytest.fixture(scope="module", autouse=True)
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the module (before any test's services open their clients), into memory."""
    memory = InMemorySpanExporter()
    tracing.configure(exporter=memory)
    yield memory
    tracing.flush()
    memory.shutdown()  # the spans of later tests are not kept


@pytest.fixture
def spans(exporter: InMemorySpanExporter):
    """Read the spans ended since the last read (or the test's start)."""
    tracing.flush()
    exporter.clear()

    def read() -> list[ReadableSpan]:
        assert tracing.flush()
        ended = list(exporter.get_finished_spans())
        exporter.clear()
        return ended

    return read


@pytest.fixture
def config(config):
    return replace(config, webhook_allow_private=True)


@pytest.fixture
async def receiver(aiohttp_server) -> dict[str, Any]:
    """A webhook receiver keeping each request's headers; its URL holds a secret in the query."""
    state: dict[str, Any] = {"headers": []}

    async def handle(request: web.Request) -> web.Response:
        state["headers"].append(dict(request.headers))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", handle)
    server = await aiohttp_server(app)
    state["url"] = str(server.make_url("/hook")) + f"?key={HOOK_SECRET}"
    state["origin"] = str(server.make_url("/").origin())
    return state


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[ReadableSpan]:
    """`span`'s parent, its parent, ... as far as the collected spans go."""
    chain = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        chain.append(span)
    return chain


def attribute_text(collected: Sequence[ReadableSpan]) -> str:
    return json.dumps([[s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]]
                       for s in collected], default=str)


async def test_a_job_continues_the_trace_of_the_request_that_queued_it(client, admin_token, receiver, run_jobs, spans):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    webhook = await client.post("/api/v1/webhooks", headers=bearer(admin_token),
                                json={"url": receiver["url"], "collection_name": "posts", "events": ["update"]})
    assert webhook.status == 201
    record = await create_record(client, admin_token, "posts", {"title": "a"})
    spans()  # start from here: only the update and its delivery
    patched = await client.patch(records_path("posts", record["id"]), headers=bearer(admin_token),
                                 json={"data": {"title": "b"}})
    assert patched.status == 200
    await run_jobs()
    assert len(receiver["headers"]) == 1
    collected = spans()
    by_id = {s.context.span_id: s for s in collected}
    [server] = [s for s in collected if s.kind == SpanKind.SERVER]
    assert server.name == UPDATE_ROUTE
    assert server.attributes is not None and server.attributes["http.route"] == UPDATE_ROUTE.split(" ")[1]
    trace_id = server.context.trace_id
    in_request = [s for s in collected if server in ancestors(s, by_id)]
    assert {s.attributes.get("db.system") for s in in_request if s.attributes} >= {"mongodb", "redis"}
    # the session epoch's MGET too: traced, no command takes the pipelined connection (cms.redis_pipe)
    assert "MGET" in {s.name for s in in_request}
    assert all(s.context.trace_id == trace_id for s in in_request)

    [job] = [s for s in collected if s.kind == SpanKind.CONSUMER]
    assert job.name == "deliver_webhooks"
    assert job.context.trace_id == trace_id
    assert server in ancestors(job, by_id)  # the same trace, not a link
    assert job.attributes is not None and job.attributes["messaging.system"] == "arq"
    in_job = [s for s in collected if job in ancestors(s, by_id)]
    assert any(s.attributes and s.attributes.get("db.system") == "mongodb" for s in in_job)
    [outgoing] = [s for s in in_job if s.kind == SpanKind.CLIENT and s.name == "POST"]
    assert outgoing.attributes is not None and outgoing.attributes["http.url"] == receiver["origin"]
    # the receiver was called inside the job's trace (the client instrumentation's traceparent header)
    assert receiver["headers"][0]["traceparent"].split("-")[1] == format(trace_id, "032x")

    text = attribute_text(collected)
    assert HOOK_SECRET not in text and admin_token not in text
    assert record["id"] not in " ".join(s.name for s in collected)


async def test_a_password_reset_job_and_the_email_it_queues_share_the_request_trace(client, mailbox, run_jobs,
                                                                                   spans):
    register = await client.post("/api/v1/auth/register", json={"email": "traced@example.com",
                                                                 "password": "traced-password-1"})
    assert register.status == 201
    spans()
    answer = await client.post("/api/v1/auth/request-password-reset", json={"email": "traced@example.com"})
    assert answer.status == 200
    await run_jobs()
    await run_jobs()  # the reset job queues the email; a second burst sends it
    assert mailbox.to("traced@example.com")
    collected = spans()
    by_id = {s.context.span_id: s for s in collected}
    [server] = [s for s in collected if s.kind == SpanKind.SERVER]
    assert server.name == "POST /api/v1/auth/request-password-reset"
    jobs = {s.name: s for s in collected if s.kind == SpanKind.CONSUMER}
    assert set(jobs) == {"send_password_reset", "send_email"}
    assert server in ancestors(jobs["send_password_reset"], by_id)
    assert jobs["send_password_reset"] in ancestors(jobs["send_email"], by_id)
    assert "traced-password-1" not in attribute_text(collected)


async def test_query_values_never_reach_span_attributes(client, spans):
    response = await client.get(f"/_/verify-email?token={LINK_TOKEN}")
    assert response.status == 200
    missing = await client.get(f"/nowhere/abc123?token={LINK_TOKEN}")
    assert missing.status == 404
    collected = spans()
    servers = [s for s in collected if s.kind == SpanKind.SERVER]
    assert [s.name for s in servers] == ["GET /_/verify-email", "GET"]  # unmatched: no path in the name
    assert servers[0].attributes is not None
    assert servers[0].attributes["http.target"] == "/_/verify-email?token=REDACTED"
    assert LINK_TOKEN not in attribute_text(collected)


async def test_apps_created_again_answer_with_one_server_span_each(aiohttp_client, config, services, spans,
                                                                   exporter):
    tracing.configure(exporter=InMemorySpanExporter())  # again: instruments nothing twice
    for _ in range(2):
        client = await aiohttp_client(create_app(config, services=services))
        assert (await client.get("/health")).status == 200
        assert (await client.get("/_/login")).status == 200  # the admin UI sub-app: no second span
    servers = [s.name for s in spans() if s.kind == SpanKind.SERVER]
    assert servers == ["GET /health", "GET /_/login"] * 2


@pytest.mark.parametrize("value, expected", [
    ("/_/verify-email?token=abc", "/_/verify-email?token=REDACTED"),
    ("http://h:1/p?a=1&b=&a=2#frag", "http://h:1/p?a=REDACTED&b=REDACTED&a=REDACTED"),
    ("/plain/path", "/plain/path"),
    ("/p?", "/p"),
], ids=["token", "repeated-and-blank", "no-query", "empty-query"])
def test_scrub_url(value, expected):
    assert tracing.scrub_url(value) == expected


@pytest.mark.parametrize("environ, on", [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_SERVICE_NAME": "cms"}, False),
], ids=["unset", "empty", "endpoint", "traces-endpoint", "other-variable"])
def test_enabled_by_an_endpoint_variable(environ, on):
    assert tracing.enabled(environ) is on


def test_other_protocols_are_a_config_error_naming_the_variable():
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}
    tracing.check({**on, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    tracing.check({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})  # off: not looked at
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        tracing.check({**on, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        tracing.check({**on, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})


OFF_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys, uuid
    from pathlib import Path
    from aiohttp.test_utils import TestClient, TestServer
    from cms.app import create_app
    from cms.config import Config
    from cms.store.client import open_client
    from cms.wiring import open_services
    from tests.conftest import run_burst_worker

    async def main(mongodb_url, redis_url, data_dir):
        config = Config(secret_key="off-secret-key-" + "x" * 32, mongodb_url=mongodb_url, redis_url=redis_url,
                        mongodb_db=f"test_off_{uuid.uuid4().hex[:12]}", data_dir=Path(data_dir),
                        queue_name=f"cms:test:{uuid.uuid4().hex[:12]}", public_url="http://cms.test")
        async with open_services(config) as services:
            async with TestClient(TestServer(create_app(config, services=services))) as client:
                statuses = [(await client.get("/health")).status,
                            (await client.post("/api/v1/auth/request-password-reset",
                                               json={"email": "nobody@example.com"})).status]
            await run_burst_worker(config, services)
        mongo = open_client(mongodb_url)
        await mongo.drop_database(config.mongodb_db)
        await mongo.close()
        return statuses

    statuses = asyncio.run(main(*sys.argv[1:]))
    print(json.dumps({"statuses": statuses,
                      "otel": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")}))
""")


def test_off_means_opentelemetry_is_never_imported(mongodb_url, redis_url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run([sys.executable, "-c", OFF_SCRIPT, mongodb_url, redis_url, str(tmp_path)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"statuses": [200, 200], "otel": []}


# --- processes: `cms serve --workers 2` and `cms worker` export over OTLP/HTTP ---------------------


@dataclass
class Collector:
    """A real OTLP/HTTP receiver (`POST /v1/traces`, protobuf): every span it got, with its resource's
    `service.name` and `service.instance.id`."""

    url: str = ""
    spans: list[dict[str, Any]] = field(default_factory=list)

    def of_kind(self, kind: int) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["kind"] == kind]


@pytest.fixture
async def collector(aiohttp_server) -> Collector:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    state = Collector()

    async def export(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    state.spans.append({"name": span.name, "kind": span.kind, "trace_id": span.trace_id.hex(),
                                        "service": resource.get("service.name"),
                                        "instance": resource.get("service.instance.id")})
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", export)
    server = await aiohttp_server(app)
    state.url = str(server.make_url("/"))
    return state


OTLP_SERVER, OTLP_CONSUMER = 2, 5  # SpanKind values of the OTLP protobuf


def _request(url: str, body: dict[str, Any] | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


async def test_serve_children_and_the_worker_export_over_otlp(mongodb_url, redis_url, tmp_path, collector):
    env = {**replica_env(mongodb_url, redis_url), "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url.rstrip("/"),
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    processes = Processes(tmp_path, env)
    try:
        port = free_port()
        serve = processes.start("serve", "serve", "--port", str(port), "--host", "127.0.0.1", "--workers", "2")
        base = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_healthy, base, serve, processes.log("serve"))
        worker = processes.start("worker", "worker")
        assert await asyncio.to_thread(_request, base + "/api/v1/auth/request-password-reset",
                                       {"email": REPLICA_ADMIN}) == 200

        def health_instances() -> set[str]:
            return {s["instance"] for s in collector.of_kind(OTLP_SERVER) if s["name"] == "GET /health"}

        async def exported() -> bool:
            # a new connection each time: the kernel spreads them over both children (once both listen)
            assert await asyncio.to_thread(_request, base + "/health") == 200
            resets = [s for s in collector.of_kind(OTLP_SERVER) if s["name"].endswith("/request-password-reset")]
            jobs = [s for s in collector.of_kind(OTLP_CONSUMER) if s["name"] == "send_password_reset"]
            return bool(resets and jobs and len(health_instances()) == 2)

        try:
            await wait_until(exported, "spans of both web processes and of the worker", timeout_s=60)
        except BaseException:
            print(sorted({(s["name"], s["instance"]) for s in collector.spans}))
            print(processes.log("serve").read_text(), processes.log("worker").read_text())
            raise
        assert worker.poll() is None, processes.log("worker").read_text()
    finally:
        processes.stop_all()
    [reset] = [s for s in collector.of_kind(OTLP_SERVER) if s["name"].endswith("/request-password-reset")]
    [job] = [s for s in collector.of_kind(OTLP_CONSUMER) if s["name"] == "send_password_reset"]
    assert job["trace_id"] == reset["trace_id"]
    web_instances = {s["instance"] for s in collector.of_kind(OTLP_SERVER)}
    assert job["instance"] not in web_instances  # the job ran in the `cms worker` process
    assert {s["service"] for s in collector.spans} == {"cms"}
