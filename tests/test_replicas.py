"""Several replicas share all state (issue 11): two `cms serve` processes (A and B) and one
`cms worker`, in production mode against the session's MongoDB and Redis.

The processes start once for the module. Every test speaks real HTTP and claims its own client IP
through `X-Forwarded-For` (the replicas trust 127.0.0.1 as a proxy), so the per-IP rate limits of
one test never touch another. The rate-limit test lowers the general limit and restores it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cms.config import Config
from cms.runtime.embedded import free_port
from cms.wiring import open_services
from tests.fixtures import served

ADMIN_EMAIL = "replicas-admin@example.com"
ADMIN_PASSWORD = "replicas-password-1"
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
V1 = "/api/v1"


@dataclass(frozen=True)
class Replicas:
    """Base URLs of the two web replicas (`a`, `b`)."""

    a: str
    b: str


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url}/health did not answer 200 within {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


def _env(mongodb_url: str, redis_url: str) -> dict[str, str]:
    """The environment of a production-mode process on a fresh database, bootstrapping one admin."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MONGODB_", "REDIS_", "CMS_"))}
    return {
        **base,
        "MONGODB_URL": mongodb_url,
        "REDIS_URL": redis_url,
        "MONGODB_DB": f"replicas_{uuid.uuid4().hex[:12]}",
        "SECRET_KEY": "replicas-secret-key-" + uuid.uuid4().hex[:20],
        "ADMIN_EMAIL": ADMIN_EMAIL,
        "ADMIN_PASSWORD": ADMIN_PASSWORD,
        "WEBHOOK_ALLOW_PRIVATE": "true",
        "TRUSTED_PROXIES": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


class Processes:
    """`python -m cms ...` child processes, each with its own data dir and log file under `tmp`."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.env = env
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        data_dir = self.tmp / name
        data_dir.mkdir()
        with self.log(name).open("wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "cms", *args],
                                       env={**self.env, "CMS_DATA_DIR": str(data_dir)},
                                       stdout=log, stderr=subprocess.STDOUT)
        self.started.append(process)
        return process

    def serve(self, name: str) -> tuple[str, subprocess.Popen[bytes]]:
        port = free_port()
        return f"http://127.0.0.1:{port}", self.start(name, "serve", "--port", str(port), "--host", "127.0.0.1")

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def stop_all(self) -> None:
        for process in self.started:
            _stop(process)


@pytest.fixture(scope="module")
def replicas(mongodb_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    """Start serve A, then serve B and one worker (one database, Redis and queue); stop them after.

    A is healthy before B starts, so the admin bootstrap does not race (see the last test)."""
    processes = Processes(tmp_path_factory.mktemp("replicas"), _env(mongodb_url, redis_url))
    try:
        url_a, serve_a = processes.serve("a")
        _wait_healthy(url_a, serve_a, processes.log("a"))
        url_b, serve_b = processes.serve("b")
        worker = processes.start("worker", "worker")
        _wait_healthy(url_b, serve_b, processes.log("b"))
        assert worker.poll() is None, processes.log("worker").read_text()
        yield Replicas(a=url_a, b=url_b)
    finally:
        processes.stop_all()


# --- helpers -----------------------------------------------------------------------------------


class Client:
    """An HTTP client with its own client IP (`X-Forwarded-For`) and, once logged in, an admin token."""

    def __init__(self, session: aiohttp.ClientSession, replicas: Replicas) -> None:
        self.session = session
        self.replicas = replicas
        self.ip = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 1}"
        self.token = ""

    def headers(self, token: str | None = None, **extra: str) -> dict[str, str]:
        token = self.token if token is None else token
        headers = {"X-Forwarded-For": self.ip, **extra}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def call(self, replica: str, method: str, path: str, *, token: str | None = None,
                   headers: dict[str, str] | None = None, **kwargs: Any) -> tuple[int, Any]:
        """Send one request to replica `a` or `b`; return (status, JSON body or text or None)."""
        url = getattr(self.replicas, replica) + path
        async with self.session.request(method, url, headers={**self.headers(token), **(headers or {})},
                                        **kwargs) as response:
            if response.content_type == "application/json":
                return response.status, await response.json()
            body = await response.read()
            return response.status, body or None


@asynccontextmanager
async def admin_client(replicas: Replicas) -> AsyncIterator[Client]:
    """A client of `replicas` logged in as the bootstrapped admin (on replica A)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        client = Client(session, replicas)
        client.token = (await login(client, "a", ADMIN_EMAIL, ADMIN_PASSWORD))["access_token"]
        yield client


@pytest.fixture
async def http(replicas: Replicas) -> AsyncIterator[Client]:
    """A client logged in as the bootstrapped admin (on replica A)."""
    async with admin_client(replicas) as client:
        yield client


async def login(client: Client, replica: str, email: str, password: str, path: str = V1 + "/auth/login") -> Any:
    status, body = await client.call(replica, "POST", path, token="", json={"email": email, "password": password})
    assert status == 200, body
    return body["token"]


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> float:
    """Poll `check` every 50 ms until it is true; return the seconds it took. Fails after `timeout_s`."""
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def new_collection(client: Client, fields: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Create a collection with a unique name through replica A; return it."""
    status, body = await client.call("a", "POST", V1 + "/collections",
                                     json={"name": unique("c"), "schema": fields, **extra})
    assert status == 201, body
    result: dict[str, Any] = body
    return result


async def set_setting(client: Client, key: str, value: Any, *, ip: str | None = None) -> None:
    headers = {"X-Forwarded-For": ip} if ip else None
    status, body = await client.call("a", "POST", V1 + "/settings", headers=headers, json={"key": key, "value": value})
    assert status == 200, body


# --- sessions and tokens -------------------------------------------------------------------------


async def signed_out(http: Client, replica: str, tokens: dict[str, Any], auth: str = V1 + "/auth") -> None:
    """The tokens of one login under `auth` (the admin table's, or an auth collection's) are refused
    on `replica`: its access token is 401, and so is its refresh token."""
    status, body = await http.call(replica, "GET", auth + "/me", token=tokens["access_token"])
    assert status == 401, body
    status, body = await http.call(replica, "POST", auth + "/refresh", token="",
                                   json={"refresh_token": tokens["refresh_token"]})
    assert status == 401, body


async def test_a_session_revoked_through_a_is_refused_by_b_at_once(http: Client) -> None:
    name = (await new_collection(http, [], type="auth"))["name"]
    auth = f"{V1}/collections/{name}/auth"
    status, body = await http.call("a", "POST", auth + "/register", token="",
                                   json={"email": "member@example.com", "password": "member-password-1"})
    assert status == 201, body
    first = await login(http, "a", "member@example.com", "member-password-1", auth + "/login")
    second = await login(http, "b", "member@example.com", "member-password-1", auth + "/login")
    status, sessions = await http.call("b", "GET", auth + "/sessions", token=second["access_token"])
    assert status == 200, sessions
    (current,) = [s for s in sessions if s["current"]]

    status, body = await http.call("a", "DELETE", f"{auth}/sessions/{current['id']}", token=first["access_token"])
    assert status == 204, body
    await signed_out(http, "b", second, auth)
    status, body = await http.call("b", "GET", auth + "/me", token=first["access_token"])
    assert status == 200, body


async def test_logout_on_a_refuses_access_and_refresh_on_b(http: Client) -> None:
    tokens = await login(http, "b", ADMIN_EMAIL, ADMIN_PASSWORD)
    status, body = await http.call("b", "GET", V1 + "/auth/me", token=tokens["access_token"])
    assert status == 200, body

    status, body = await http.call("a", "POST", V1 + "/auth/logout", token=tokens["access_token"])
    assert status == 200, body
    await signed_out(http, "b", tokens)


async def test_an_api_key_revoked_on_a_is_refused_by_b(http: Client) -> None:
    records = f"{V1}/collections/{(await new_collection(http, [{'name': 'title', 'type': 'text'}]))['name']}/records"
    status, key = await http.call("a", "POST", V1 + "/api-keys", json={"name": "replicas", "scopes": ["write"]})
    assert status == 201, key
    as_key = {"X-API-Key": key["key"]}
    status, body = await http.call("b", "POST", records, token="", json={"data": {"title": "anonymous"}})
    assert status == 401, body  # the key, not anonymity, lets the create through
    status, body = await http.call("b", "POST", records, token="", headers=as_key, json={"data": {"title": "key"}})
    assert status == 201, body

    status, body = await http.call("a", "DELETE", f"{V1}/api-keys/{key['id']}")
    assert status == 204, body
    status, body = await http.call("b", "POST", records, token="", headers=as_key, json={"data": {"title": "key"}})
    assert status == 401, body


# --- collections, settings, files --------------------------------------------------------------


async def test_a_schema_change_through_a_validates_on_b(http: Client) -> None:
    collection = await new_collection(http, [{"name": "title", "type": "text"}])
    records = f"{V1}/collections/{collection['name']}/records"
    status, body = await http.call("b", "POST", records, json={"data": {"title": "before", "count": "x"}})
    assert status == 422, body  # unknown field

    status, body = await http.call("a", "PATCH", f"{V1}/collections/{collection['id']}", json={
        "schema": [{"name": "title", "type": "text"}, {"name": "count", "type": "number"}]})
    assert status == 200, body
    status, body = await http.call("b", "POST", records, json={"data": {"title": "after", "count": "x"}})
    assert status == 422, body
    assert "count" in body.get("errors", {}), body
    status, body = await http.call("b", "POST", records, json={"data": {"title": "after", "count": 3}})
    assert status == 201, body


async def test_a_rule_changed_through_a_holds_on_b_reads_at_once(http: Client) -> None:
    """B caches the definition (and the page) while the list and view rules are open; after A
    locks them, B's very next reads are refused: no cached definition or body outlives the change."""
    collection = await new_collection(http, [{"name": "title", "type": "text"}], list_rule="", view_rule="")
    records = f"{V1}/collections/{collection['name']}/records"
    status, record = await http.call("a", "POST", records, json={"data": {"title": "open"}})
    assert status == 201, record
    for _ in range(2):  # the second read is served from B's caches
        status, page = await http.call("b", "GET", records, token="")
        assert status == 200 and page["total"] == 1, page
        status, body = await http.call("b", "GET", f"{records}/{record['id']}", token="")
        assert status == 200, body

    status, body = await http.call("a", "PATCH", f"{V1}/collections/{collection['id']}",
                                   json={"list_rule": None, "view_rule": None})
    assert status == 200, body
    status, body = await http.call("b", "GET", records, token="")
    assert status == 401, body
    status, body = await http.call("b", "GET", f"{records}/{record['id']}", token="")
    assert status == 401, body


async def test_a_view_read_on_b_is_current_after_each_write_through_a(http: Client) -> None:
    """B keeps the view's groups (and its answers) between reads; every write through A is in B's next
    read, exactly (decisions.md, Aggregation and view collections)."""
    source = await new_collection(http, [{"name": "kind", "type": "text"}, {"name": "n", "type": "number"}])
    records = f"{V1}/collections/{source['name']}/records"
    view = unique("v")
    status, body = await http.call("a", "POST", V1 + "/collections", json={
        "name": view, "type": "view", "list_rule": "",
        "view": {"source": source["name"], "group_by": "kind", "aggregates": "count(),sum(n)"}})
    assert status == 201, body
    expected: dict[str, list[int]] = {}
    made: list[str] = []
    for step, (kind, n) in enumerate([("a", 1), ("b", 10), ("a", 100), ("c", 1000), ("b", 5)]):
        status, record = await http.call("a", "POST", records, json={"data": {"kind": kind, "n": n}})
        assert status == 201, record
        made.append(record["id"])
        expected.setdefault(kind, []).append(n)
        if step == 3:  # a change and a delete through A as well
            status, body = await http.call("a", "PATCH", f"{records}/{made[0]}", json={"data": {"kind": "c"}})
            assert status == 200, body
            expected["a"].remove(1)
            expected["c"].append(1)
            status, body = await http.call("a", "DELETE", f"{records}/{made[1]}")
            assert status == 204, body
            expected["b"].remove(10)
        for _ in range(2):  # the second read is served from B's caches
            status, page = await http.call("b", "GET", f"{V1}/collections/{view}/records", token="")
            assert status == 200, page
            assert [(i["kind"], i["count"], i["sum_n"]) for i in page["items"]] == [
                (kind, len(ns), sum(ns)) for kind, ns in sorted(expected.items()) if ns], (step, page)


async def test_a_collection_deleted_through_a_is_gone_on_b_at_once(http: Client) -> None:
    collection = await new_collection(http, [{"name": "title", "type": "text"}], list_rule="")
    records = f"{V1}/collections/{collection['name']}/records"
    for _ in range(2):
        status, body = await http.call("b", "GET", records, token="")
        assert status == 200, body
    status, body = await http.call("a", "DELETE", f"{V1}/collections/{collection['id']}")
    assert status == 204, body
    status, body = await http.call("b", "GET", records, token="")
    assert status == 404, body
    status, body = await http.call("b", "POST", records, json={"data": {"title": "late"}})
    assert status == 404, body


async def test_a_session_used_on_b_then_revoked_on_a_is_refused_by_b(http: Client) -> None:
    """B has the session cached from several requests; A's revoke-all reaches it at once."""
    tokens = await login(http, "a", ADMIN_EMAIL, ADMIN_PASSWORD)
    for _ in range(3):
        status, body = await http.call("b", "GET", V1 + "/auth/me", token=tokens["access_token"])
        assert status == 200, body
    status, sessions = await http.call("a", "GET", V1 + "/auth/sessions", token=tokens["access_token"])
    assert status == 200, sessions
    (current,) = [s for s in sessions if s["current"]]
    status, body = await http.call("a", "DELETE", f"{V1}/auth/sessions/{current['id']}",
                                   token=tokens["access_token"])
    assert status == 204, body
    status, body = await http.call("b", "GET", V1 + "/auth/me", token=tokens["access_token"])
    assert status == 401, body


async def test_a_setting_changed_through_a_applies_on_b_within_a_second(http: Client) -> None:
    async def expires_in_on_b() -> int:
        return int((await login(http, "b", ADMIN_EMAIL, ADMIN_PASSWORD))["expires_in"])

    assert await expires_in_on_b() == 24 * 3600
    await set_setting(http, "token_expiry_hours", 2)
    try:
        async def applied() -> bool:
            return await expires_in_on_b() == 2 * 3600

        took_s = await eventually(applied, 1.0, "token_expiry_hours=2 on replica B")
        assert took_s <= 1.0
    finally:
        await set_setting(http, "token_expiry_hours", 24)


async def test_a_file_uploaded_to_a_downloads_from_b(http: Client) -> None:
    name = (await new_collection(http, [{"name": "title", "type": "text"}]))["name"]
    status, record = await http.call("a", "POST", f"{V1}/collections/{name}/records", json={"data": {"title": "t"}})
    assert status == 201, record
    content = os.urandom(200_000)
    form = aiohttp.FormData()
    form.add_field("file", content, filename="blob.bin", content_type="application/octet-stream")
    form.add_field("collection", name)
    form.add_field("record_id", record["id"])
    status, uploaded = await http.call("a", "POST", V1 + "/files", data=form)
    assert status == 201, uploaded

    status, downloaded = await http.call("b", "GET", f"{V1}/files/{uploaded['id']}")
    assert status == 200
    assert downloaded == content


# --- webhooks ------------------------------------------------------------------------------------


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on loopback: (url, the JSON bodies it received)."""
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with served(app, "/hook") as url:
        yield url, received


async def test_a_record_created_on_a_is_delivered_once_by_the_worker(
        http: Client, receiver: tuple[str, list[dict[str, Any]]]) -> None:
    url, received = receiver
    name = (await new_collection(http, [{"name": "title", "type": "text"}]))["name"]
    status, webhook = await http.call("a", "POST", V1 + "/webhooks",
                                      json={"url": url, "collection_name": name, "events": ["create"]})
    assert status == 201, webhook
    status, record = await http.call("a", "POST", f"{V1}/collections/{name}/records", json={"data": {"title": "hi"}})
    assert status == 201, record

    async def delivered() -> bool:
        return len(received) >= 1

    await eventually(delivered, 20.0, "the webhook delivery")
    await asyncio.sleep(2.0)  # the one fixed wait: no second delivery may follow
    assert len(received) == 1, received
    assert record["id"] in str(received[0])
    status, deliveries = await http.call("b", "GET", f"{V1}/webhooks/{webhook['id']}/deliveries")
    assert status == 200, deliveries
    assert deliveries["total"] == 1, deliveries


async def test_a_webhook_created_on_a_gets_the_next_write_on_b(
        http: Client, receiver: tuple[str, list[dict[str, Any]]]) -> None:
    """B caches the collection's (empty) webhook list by writing first; A's new webhook must still
    receive B's next write."""
    url, received = receiver
    received.clear()
    name = (await new_collection(http, [{"name": "title", "type": "text"}]))["name"]
    records = f"{V1}/collections/{name}/records"
    for title in ("before-1", "before-2"):
        status, body = await http.call("b", "POST", records, json={"data": {"title": title}})
        assert status == 201, body
    status, webhook = await http.call("a", "POST", V1 + "/webhooks",
                                      json={"url": url, "collection_name": name, "events": ["create"]})
    assert status == 201, webhook
    status, record = await http.call("b", "POST", records, json={"data": {"title": "after"}})
    assert status == 201, record

    async def delivered() -> bool:
        return any(record["id"] in str(r) for r in received)

    await eventually(delivered, 20.0, "the delivery of B's write after A created the webhook")
    assert not any("before-" in str(r) for r in received), received


# --- rate limit (last: it lowers the shared limit) ------------------------------------------------


async def test_the_rate_limit_counts_requests_to_both_replicas(http: Client) -> None:
    limit = 20
    counted = Client(http.session, http.replicas)  # a fresh client IP: nothing counted yet
    await set_setting(http, "rate_limit_per_minute", limit)
    try:
        async def limit_on_both() -> bool:
            for replica in ("a", "b"):
                async with http.session.get(getattr(http.replicas, replica) + V1 + "/collections",
                                            headers={"X-Forwarded-For": Client(http.session, http.replicas).ip}) as r:
                    if r.headers.get("X-RateLimit-Limit") != str(limit):
                        return False
            return True

        await eventually(limit_on_both, 2.0, f"rate_limit_per_minute={limit} on both replicas")
        statuses = []
        for i in range(limit + 1):
            status, _ = await counted.call("ab"[i % 2], "GET", V1 + "/collections", token="")
            statuses.append(status)
        assert statuses == [200] * limit + [429], statuses
        assert (await counted.call("a", "GET", V1 + "/collections", token=""))[0] == 429
        assert (await counted.call("b", "GET", V1 + "/collections", token=""))[0] == 429
    finally:
        # from another fresh IP, so the restore itself is not refused
        await set_setting(http, "rate_limit_per_minute", 600, ip=Client(http.session, http.replicas).ip)


# --- start-up ------------------------------------------------------------------------------------


def test_two_replicas_started_together_both_come_up(
        mongodb_url: str, redis_url: str, tmp_path: Path) -> None:
    """Both replicas bootstrap ADMIN_EMAIL on a fresh database at the same moment: both come up,
    the admin signs in on each, and the database holds exactly one admin account."""
    env = _env(mongodb_url, redis_url)
    processes = Processes(tmp_path, env)
    try:
        started = [processes.serve("a"), processes.serve("b")]
        for (url, process), name in zip(started, ("a", "b"), strict=True):
            _wait_healthy(url, process, processes.log(name))
        signed_in = [asyncio.run(_sign_in(url)) for url, _ in started]
        assert signed_in[0]["id"] == signed_in[1]["id"] and signed_in[0]["role"] == "admin", signed_in
        admins = asyncio.run(_count_admins(env, tmp_path / "counting"))
        assert admins == 1
    finally:
        processes.stop_all()


async def _sign_in(url: str) -> Any:
    """Log in as the bootstrapped admin on the replica at `url`; return its user (`/auth/me`)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        async with session.post(url + V1 + "/auth/login",
                                json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}) as response:
            assert response.status == 200, await response.text()
            token = (await response.json())["token"]["access_token"]
        async with session.get(url + V1 + "/auth/me", headers={"Authorization": f"Bearer {token}"}) as response:
            assert response.status == 200, await response.text()
            return await response.json()


async def _count_admins(env: dict[str, str], data_dir: Path) -> int:
    """How many admin accounts the replicas' database holds (through the admin user system)."""
    config = Config.from_env({**env, "CMS_DATA_DIR": str(data_dir)})
    async with open_services(config) as services:
        return await services.identity.systems.admin.count_admins()
