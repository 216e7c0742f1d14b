"""Processes that behave on SIGTERM (issue 11): `cms serve` lets in-flight requests finish within
SHUTDOWN_TIMEOUT_S and cuts the rest at that bound; `cms worker` finishes a running job, or puts
it back on the queue for the next worker, so no job is lost.

Real processes in production mode against the session's MongoDB and Redis (see test_replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import psutil
import pytest
import redis
from aiohttp import web

from cms.runtime.embedded import free_port
from tests.fixtures import served
from tests.test_replicas import ADMIN_EMAIL, ADMIN_PASSWORD, Processes, _env, _wait_healthy, eventually

V1 = "/api/v1"
SHUTDOWN_TIMEOUT_S = 4
IMPORT_ROWS = 3000
EXIT_MARGIN_S = 4.0
"""Seconds past SHUTDOWN_TIMEOUT_S a process may take to close its pools and exit."""


async def exit_code(process: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, float]:
    """Wait (without blocking the loop) for `process` to exit; return its code and the seconds it took."""
    start = time.monotonic()
    code = await asyncio.to_thread(process.wait, timeout_s)
    return code, time.monotonic() - start


def refuses_connections(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:`port` any more."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except (ConnectionRefusedError, ConnectionResetError):
        # reset: the listener closed with this connection still in its backlog (seen on uvloop)
        return True


def shutdown_env(mongodb_url: str, redis_url: str) -> dict[str, str]:
    return {**_env(mongodb_url, redis_url), "SHUTDOWN_TIMEOUT_S": str(SHUTDOWN_TIMEOUT_S),
            "QUEUE_NAME": f"cms:shutdown:{uuid.uuid4().hex[:12]}"}


async def slow_body(first: bytes, release: asyncio.Event, rest: bytes) -> AsyncIterator[bytes]:
    """A request body sent in two parts, the second once `release` is set (chunked encoding)."""
    yield first
    await release.wait()
    yield rest


async def test_sigterm_lets_an_in_flight_request_finish_and_cuts_a_stuck_one_at_the_bound(
        mongodb_url: str, redis_url: str, tmp_path: Path) -> None:
    """A CSV import running at SIGTERM completes with 200 and every row; a request whose body never
    ends holds the process until SHUTDOWN_TIMEOUT_S, and no longer; new connections are refused."""
    processes = Processes(tmp_path, shutdown_env(mongodb_url, redis_url))
    try:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = processes.start("serve", "serve", "--port", str(port))
        await asyncio.to_thread(_wait_healthy, base, server, processes.log("serve"))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            async def call(method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
                async with http.request(method, base + V1 + path, **kwargs) as response:
                    return response.status, await response.json()

            status, body = await call("POST", "/auth/login", json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
            assert status == 200, body
            auth = {"Authorization": "Bearer " + body["token"]["access_token"]}
            name = f"import_{uuid.uuid4().hex[:8]}"
            status, body = await call("POST", "/collections", headers=auth,
                                      json={"name": name, "schema": [{"name": "title", "type": "text"}]})
            assert status == 201, body
            form = aiohttp.FormData()
            form.add_field("file", "title\r\n" + "".join(f"row {i}\r\n" for i in range(IMPORT_ROWS)),
                           filename="rows.csv", content_type="text/csv")
            importing = asyncio.create_task(call("POST", f"/collections/{name}/records/import/csv",
                                                 headers=auth, data=form))
            login = f'{{"email": "{ADMIN_EMAIL}", "password": "{ADMIN_PASSWORD}"}}'.encode()
            stuck = asyncio.create_task(call("POST", "/auth/login", data=slow_body(login[:10], asyncio.Event(), b""),
                                             headers={"Content-Type": "application/json"}))

            async def import_storing() -> bool:  # the import validates every row before it stores one
                status, page = await call("GET", f"/collections/{name}/records?per_page=1", headers=auth)
                return status == 200 and page["total"] > 0

            await eventually(import_storing, 20.0, "the import storing rows")
            server.terminate()
            signalled_at = time.monotonic()
            await eventually(lambda: asyncio.to_thread(refuses_connections, port), 3.0, "new connections refused")
            status, body = await importing
            imported_s = time.monotonic() - signalled_at
            assert status == 200, body
            assert body == {"imported": IMPORT_ROWS, "failed": []}
            with pytest.raises(aiohttp.ClientError):
                await stuck
            code, _ = await exit_code(server, SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S + 5)
            took_s = time.monotonic() - signalled_at
        assert code == 0, processes.log("serve").read_text()
        assert imported_s < SHUTDOWN_TIMEOUT_S, imported_s
        # the stuck request held the process up to the bound, and no longer
        assert SHUTDOWN_TIMEOUT_S * 0.9 <= took_s <= SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S, took_s
    finally:
        processes.stop_all()


# --- cms serve --workers N --------------------------------------------------------------------


def listening_processes(parent_pid: int, port: int) -> set[int]:
    """Pids of `parent_pid`'s descendants that listen on TCP `port`."""
    pids = set()
    for child in psutil.Process(parent_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in child.net_connections("tcp")):
                pids.add(child.pid)
    return pids


async def test_serve_workers_runs_processes_on_one_port_and_stops_them_together(
        mongodb_url: str, redis_url: str, tmp_path: Path) -> None:
    """Two web processes start at once on a fresh database (indexes, admin bootstrap: no race),
    both listen on the one port, and SIGTERM to the parent stops both within the bound."""
    processes = Processes(tmp_path, shutdown_env(mongodb_url, redis_url))
    try:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        parent = processes.start("serve", "serve", "--port", str(port), "--workers", "2")
        await asyncio.to_thread(_wait_healthy, base, parent, processes.log("serve"))

        async def both_listen() -> bool:
            return len(listening_processes(parent.pid, port)) == 2

        await eventually(both_listen, 20.0, "two web processes listening")
        children = psutil.Process(parent.pid).children(recursive=True)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            for _ in range(6):  # a new connection each time: the kernel spreads them
                async with http.post(base + V1 + "/auth/login", json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD},
                                     headers={"Connection": "close"}) as response:
                    assert response.status == 200, await response.text()

        parent.terminate()
        code, took_s = await exit_code(parent, SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S + 5)
        assert code == 0, processes.log("serve").read_text()
        assert took_s <= SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S, took_s

        async def all_gone() -> bool:  # the resource tracker of multiprocessing leaves just after
            return not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]

        await eventually(all_gone, 3.0, "every child process gone")
    finally:
        processes.stop_all()


# --- the worker ----------------------------------------------------------------------------------


class Receiver:
    """A webhook receiver: a `finish` record's delivery is answered once `release` is set; the
    first delivery of a `hold` record is never answered (the worker must give up on it), later
    ones at once. `arrived` and `answered` hold record titles."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.arrived: list[str] = []
        self.answered: list[str] = []

    async def hook(self, request: web.Request) -> web.Response:
        title = (await request.json())["data"]["title"]
        self.arrived.append(title)
        if title == "finish":
            await self.release.wait()
        elif self.arrived.count("hold") == 1:
            await asyncio.sleep(60)  # cut short when the worker drops the connection
        self.answered.append(title)
        return web.Response(text="ok")


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, Receiver]]:
    state = Receiver()
    app = web.Application()
    app.router.add_post("/hook", state.hook)
    async with served(app, "/hook", shutdown_timeout_s=0.5) as url:
        try:
            yield url, state
        finally:
            state.release.set()


async def test_sigterm_to_a_worker_finishes_or_requeues_its_jobs(
        mongodb_url: str, redis_url: str, tmp_path: Path, receiver: tuple[str, Receiver]) -> None:
    url, received = receiver
    env = shutdown_env(mongodb_url, redis_url)
    processes = Processes(tmp_path, env)
    try:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = processes.start("serve", "serve", "--port", str(port))
        first_worker = processes.start("worker", "worker")
        await asyncio.to_thread(_wait_healthy, base, server, processes.log("serve"))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            async def call(method: str, path: str, **kwargs: Any) -> Any:
                async with http.request(method, base + V1 + path, headers=headers, **kwargs) as response:
                    assert response.status < 300, await response.text()
                    return await response.json()

            headers: dict[str, str] = {}
            token = (await call("POST", "/auth/login", json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
            headers["Authorization"] = "Bearer " + token["token"]["access_token"]
            name = f"jobs_{uuid.uuid4().hex[:8]}"
            await call("POST", "/collections", json={"name": name, "schema": [{"name": "title", "type": "text"}]})
            webhook = await call("POST", "/webhooks", json={"url": url, "collection_name": name,
                                                            "events": ["create"]})
            for title in ("finish", "hold"):
                await call("POST", f"/collections/{name}/records", json={"data": {"title": title}})

            async def both_running() -> bool:
                return {"finish", "hold"} <= set(received.arrived)

            await eventually(both_running, 20.0, "both deliveries in flight at the worker")
            first_worker.terminate()
            signalled_at = time.monotonic()
            received.release.set()  # `finish` is answered after the signal; `hold` never is
            code, _ = await exit_code(first_worker, SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S + 5)
            took_s = time.monotonic() - signalled_at
            assert code == 0, processes.log("worker").read_text()
            assert took_s <= SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S, took_s
            assert received.answered == ["finish"]

            # the cut job is back on the queue, not lost
            queue = redis.Redis.from_url(redis_url, socket_timeout=5)
            try:
                queued = [job.decode() for job in cast(list[bytes], queue.zrange(env["QUEUE_NAME"], 0, -1))]
            finally:
                queue.close()
            assert len([job for job in queued if job.startswith("webhooks:")]) == 1, queued

            second_worker = processes.start("worker2", "worker")

            async def hold_delivered() -> bool:
                return "hold" in received.answered

            await eventually(hold_delivered, 20.0, "the re-queued delivery, by the second worker")
            assert received.answered == ["finish", "hold"]
            log = await call("GET", f"/webhooks/{webhook['id']}/deliveries")
            assert sorted(entry["success"] for entry in log["items"]) == [True, True], log
            assert second_worker.poll() is None
    finally:
        processes.stop_all()
