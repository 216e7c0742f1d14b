"""Metrics of real processes (issue 30, item 1): `cms serve --workers 2`, where one scrape through
either web process covers both (prometheus-client's multiprocess mode), and `cms worker`, which
serves its own metrics on METRICS_PORT. Production mode against the session's MongoDB and Redis
(see tests/test_replicas.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aiohttp
import psutil
from aiohttp import web

from cms.config import Config
from cms.models import Principal
from cms.runtime.embedded import free_port
from cms.wiring import open_services
from tests.fixtures import served
from tests.observability.metrics_text import value
from tests.test_replicas import Processes, _env, _wait_healthy, eventually

TOKEN = "metrics-token-" + uuid.uuid4().hex
COLLECTIONS = "/api/v1/collections"
REQUESTS = 24


def metrics_env(mongodb_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    return {**_env(mongodb_url, redis_url), "METRICS_TOKEN": TOKEN,
            "QUEUE_NAME": f"cms:metrics:{uuid.uuid4().hex[:12]}", **extra}


async def get(http: aiohttp.ClientSession, url: str, token: str | None = TOKEN) -> tuple[int, str, str]:
    """GET `url` on a new connection (so SO_REUSEPORT may pick any process): status, body, request id."""
    headers = {"Connection": "close", **({"Authorization": f"Bearer {token}"} if token else {})}
    async with http.get(url, headers=headers) as response:
        return response.status, await response.text(), response.headers.get("X-Request-Id", "")


def process_of(request_id: str) -> str:
    """The process part of a request id (cms.api.middlewares.new_request_id: a random prefix per process)."""
    return request_id[:20]


async def test_one_scrape_covers_every_web_process(mongodb_url: str, redis_url: str, tmp_path: Path) -> None:
    processes = Processes(tmp_path, metrics_env(mongodb_url, redis_url))
    try:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        parent = processes.start("serve", "serve", "--port", str(port), "--workers", "2")
        await asyncio.to_thread(_wait_healthy, base, parent, processes.log("serve"))
        children = [c for c in psutil.Process(parent.pid).children() if "spawn_main" in " ".join(c.cmdline())]
        assert len(children) == 2, processes.log("serve").read_text()
        directory = Path(children[0].environ()["PROMETHEUS_MULTIPROC_DIR"])
        assert directory.is_dir() and children[1].environ()["PROMETHEUS_MULTIPROC_DIR"] == str(directory)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:

            async def both_serve() -> bool:
                status, text, _ = await get(http, base + "/metrics")
                return status == 200 and value(text, "cms_processes") == 2

            await eventually(both_serve, 20.0, "two processes in a scrape")
            # A process counts itself in cms_processes before it binds the port, so under load the second
            # may not accept yet: ask until both have answered (SO_REUSEPORT spreads new connections).
            answered_by: set[str] = set()
            sent = 0

            async def both_answered() -> bool:
                nonlocal sent
                status, _, request_id = await get(http, base + COLLECTIONS, token=None)
                assert status == 200
                sent += 1
                answered_by.add(process_of(request_id))
                return len(answered_by) == 2 and sent >= REQUESTS

            await eventually(both_answered, 30.0, "requests answered by both processes")

            scraped_by = set()
            for _ in range(40):  # scrapes through each process see every process's requests
                status, text, request_id = await get(http, base + "/metrics")
                assert status == 200, text
                assert value(text, "cms_http_requests_total", route=COLLECTIONS, method="GET", status="200") \
                    == sent
                assert value(text, "cms_http_request_duration_seconds_count", route=COLLECTIONS) == sent
                assert text.count("# TYPE cms_http_requests_total ") == 1
                assert value(text, "cms_processes") == 2
                assert value(text, "process_cpu_seconds_total") > 0
                assert value(text, "process_resident_memory_bytes") > 0
                assert value(text, "process_start_time_seconds") > 0
                assert value(text, "cms_mongodb_command_duration_seconds_count", command="find") > 0
                assert "cms_job_queue_depth " in text and "cms_webhook_outbox_backlog " in text
                scraped_by.add(process_of(request_id))
                if len(scraped_by) == 2:
                    break
            assert len(scraped_by) == 2
        parent.terminate()
        assert await asyncio.to_thread(parent.wait, 30) == 0, processes.log("serve").read_text()
        assert not directory.exists()  # the parent removes the directory at exit
    finally:
        processes.stop_all()


async def test_the_worker_serves_its_own_metrics_on_metrics_port(mongodb_url: str, redis_url: str,
                                                                 tmp_path: Path) -> None:
    port = free_port()
    processes = Processes(tmp_path, metrics_env(mongodb_url, redis_url, METRICS_PORT=str(port)))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        worker = processes.start("worker", "worker")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:

            async def serving() -> bool:
                assert worker.poll() is None, processes.log("worker").read_text()
                try:
                    return (await get(http, url))[0] == 200
                except aiohttp.ClientConnectionError:
                    return False

            await eventually(serving, 30.0, "the worker's metrics")

            async def cron_job_queued() -> bool:
                # arq queues a cron job up to a second before its run (the outbox relay's: every 5 s)
                return value((await get(http, url))[1], "cms_job_queue_depth") >= 1

            await eventually(cron_job_queued, 15.0, "a cron job waiting in the queue, in the worker's metrics")
            status, text, _ = await get(http, url)
            assert value(text, "cms_webhook_outbox_backlog") == 0
            assert value(text, "cms_mongodb_command_duration_seconds_count", command="find") > 0  # the relay
            assert value(text, "process_cpu_seconds_total") > 0 and value(text, "cms_processes") == 1
            assert value(text, "cms_http_requests_total") == 0  # it serves no API
            for token in (None, "wrong-" + TOKEN):
                status, body, _ = await get(http, url, token=token)
                assert (status, '"code": "unauthorized"' in body) == (401, True), body
            status, body, _ = await get(http, f"http://127.0.0.1:{port}/other")
            assert (status, '"code": "not_found"' in body) == (404, True)
            await a_delivery_counts_on_the_worker(processes.env, tmp_path, http, url)
        worker.terminate()
        assert await asyncio.to_thread(worker.wait, 30) == 0, processes.log("worker").read_text()
    finally:
        processes.stop_all()


async def a_delivery_counts_on_the_worker(env: dict[str, str], tmp_path: Path, http: aiohttp.ClientSession,
                                          url: str) -> None:
    """A record written through services of this test (same database and queue) makes the worker
    deliver a webhook, which its own metrics count."""
    arrived: list[bytes] = []

    async def hook(request: web.Request) -> web.Response:
        arrived.append(await request.read())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with served(app, "/hook") as hook_url, \
            open_services(Config.from_env({**env, "CMS_DATA_DIR": str(tmp_path / "test")})) as services:
        admin = await services.identity.registration.create_admin("metrics-admin@example.com", "metrics-pass-1")
        principal = Principal(kind="admin_user", user_id=admin.id, role="admin")
        await services.collections.create(principal, "hooked", "base", [{"name": "title", "type": "text"}])
        await services.webhooks.create(principal, url=hook_url, collection_name="hooked", events=["create"])
        await services.records.create(principal, "hooked", {"title": "hello"})

        async def delivered() -> bool:
            text = (await get(http, url))[1]
            return bool(arrived) and value(text, "cms_webhook_deliveries_total", outcome="delivered") == 1

        await eventually(delivered, 20.0, "the worker's delivery counted")
        text = (await get(http, url))[1]
        assert value(text, "cms_webhook_delivery_duration_seconds_count") == 1
        assert "hooked" not in text and "/hook" not in text
