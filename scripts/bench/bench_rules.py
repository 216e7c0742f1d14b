"""Measure what a list rule costs: the same list request against a collection without a rule and
one whose list rule is `owner = @request.auth.id`, as the same (non-admin) user.

Usage:

    python scripts/bench/bench_rules.py [CSV] [--records 10000] [--requests 200] [--warmup 20] \\
        [--sequential-max-s 45] [--duration 10] [--connections 16] [--threads 2] [--rounds 1] \\
        [--no-concurrent] [--keep]

CSV defaults to `../shared/data/pypi-packages.csv` (columns name, version, released, popular,
summary). The concurrent step uses `wrk` when it is on PATH (Debian's `wrk`), else an aiohttp
client with the same number of connections. It needs `psutil` (the `bench` extra) for CPU times.

What it does:

1. Starts `cms serve` in embedded mode (SecantusDB and redis-server as its child processes) on a
   free port with a fresh data directory in a temp dir; `ADMIN_EMAIL` / `ADMIN_PASSWORD` create the
   admin. Switches rate limiting off (`POST /api/v1/settings rate_limit_enabled=false`).
2. Creates the auth collection `users` and two users in it, A and B (register, then log in; A's
   access token is used for every measured request).
3. Creates two base collections with the schema of `scripts/load_packages.py` plus a text field
   `owner`: `open_list` (list_rule "") and `owned_list` (list_rule `owner = @request.auth.id`, and
   the same view_rule). Imports the same `--records` rows (first rows with distinct names) into each
   as admin through `POST .../records/import/csv`, with an `owner` column alternating A, B, A, ...
   (so A's half is spread evenly over the creation order), and checks what A and B see.
4. Sequential step (one keep-alive connection): per scenario, `--warmup` rounds (stopped after
   10 s) then `--requests` rounds (stopped at a round's end after `--sequential-max-s`, so a slow
   server keeps the run to a few minutes; the table gives the n done), each round one request per
   arm in the fixed order open, owned, open+filter (interleaved, so drift of the machine hits every
   arm alike). Wall clock per request, from sending it to having read the whole body; the CPU time
   of `cms serve` and its children is read around each request, outside its timing. Every
   response is checked: HTTP 200, `total` as expected, 30 items, and on the owned and open+filter
   arms every item owned by A.
5. Concurrent step (unless `--no-concurrent`): per scenario, the open and the owned arm in turn,
   each `wrk -tTHREADS -cCONNECTIONS -dDURATIONs --latency` with A's bearer token, or the aiohttp
   fallback (CONNECTIONS clients back to back for DURATION s; requests started in the window finish
   and count; one body in 50 is checked). After each run it waits until `cms serve` and its
   children are idle (wrk abandons the requests in flight, which the server still works off),
   and reads their CPU time (user + system) from the run's start to then.
6. Stops the server (SIGTERM, waits), then prints a Markdown table and notes (response sizes,
   anomalies: non-200 answers, unexpected bodies, transport errors, ERROR/Traceback/5xx lines of
   the server log; load average, since other processes on the machine skew every figure).

Arms (every arm is page 1, per_page 30, as user A): `open` = GET open_list records (all 10,000
match, total 10,000); `owned` = GET owned_list records (the rule leaves A's 5,000, total 5,000);
`open+filter` = GET open_list records with `filter=owner="<A's id>"`, the same 5,000 records
selected by a client filter instead of a rule, a control that separates the cost of the rule
machinery from the cost of the query it adds. Scenarios: the default sort (`created`), and
`sort=-created`.

Rule cost = (owned - open) / owned, of the mean and of the p50 latency (for the concurrent step
also 1 - owned req/s / open req/s): the share of an owned request's time that the rule adds. The
owned request also counts 5,000 matching records instead of 10,000, so the figure is the rule's
whole effect on the request (binding, the extra query term, the different count), not the
binding alone: compare owned with open+filter for that.

Exit status: 0 on success; 1 when the server does not start, a set-up step fails, or a measured
request got an answer other than HTTP 200 or an unexpected body (the table is printed first);
2 for bad arguments; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from common import remove_work  # noqa: E402 - a sibling script, not a package
from bench_records import percentile  # sibling scripts
from bench_vs_pocketbase import (
    take_rows,
)
from common import (  # sibling scripts, not a package
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    Server,
    start_cms,
    to_ms,
    wait_healthy,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import (  # a sibling script, not a package
    DEFAULT_CSV,
    REQUIRED_COLUMNS,
    SCHEMA,
    Api,
    Fatal,
    describe,
    run_cli,
)

AUTH_COLLECTION = "users"
OPEN = "open_list"
OWNED = "owned_list"
OWNER_RULE = "owner = @request.auth.id"
USERS = (("bench-rules-a@example.com", "bench-rules-a-password-1"),
         ("bench-rules-b@example.com", "bench-rules-b-password-1"))
PER_PAGE = 30
HTTP_TIMEOUT_S = 120.0
WRK_TIMEOUT = "10s"
CHECK_EVERY_UNDER_LOAD = 50  # aiohttp fallback: parse and check one body in this many
WARMUP_MAX_S = 10.0  # the sequential warm-up stops after this long (at least one round)
SETTLE_WINDOW_S = 0.5
SETTLE_CPU_SHARE = 0.2  # of one core: the server counts as idle below this
SETTLE_MAX_S = 60.0
LOADED_ARMS = ("open", "owned")  # the concurrent step leaves out the open+filter control
SCENARIOS: tuple[tuple[str, dict[str, str]], ...] = (
    ("default sort (created)", {}),
    ("sort=-created", {"sort": "-created"}),
)


# --- set-up ----------------------------------------------------------------------------------------


def owned_csv(rows: list[dict[str, Any]], owners: tuple[str, str]) -> bytes:
    """The rows as an import CSV with an `owner` column: owners[0] on even rows, owners[1] on odd."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*REQUIRED_COLUMNS, "owner"])
    writer.writeheader()
    for number, row in enumerate(rows):
        cells = {k: str(v).lower() if isinstance(v, bool) else v for k, v in row.items()}
        writer.writerow({**cells, "owner": owners[number % 2]})
    return out.getvalue().encode()


async def call(api: Api, method: str, path: str, expected: int, what: str, **kwargs: Any) -> Any:
    """One admin request that must answer `expected`; returns the parsed body. Raises Fatal."""
    status, body, _ = await api.request(method, path, **kwargs)
    if status != expected:
        raise Fatal(f"{what} failed: HTTP {status} {describe(body)}")
    return body


@dataclass
class User:
    """A logged-in user of the auth collection: its record id and access token."""

    email: str
    user_id: str
    token: str
    expires_in_s: int


async def make_users(api: Api) -> list[User]:
    """The auth collection and its two users, registered and logged in."""
    await call(api, "POST", "/api/v1/collections", 201, "creating the auth collection",
               json={"name": AUTH_COLLECTION, "type": "auth", "schema": []})
    auth = f"/api/v1/collections/{AUTH_COLLECTION}/auth"
    users = []
    for email, password in USERS:
        await call(api, "POST", f"{auth}/register", 201, f"registering {email}",
                   json={"email": email, "password": password, "password_confirm": password})
        async with api.session.post(api.url(f"{auth}/login"), json={"email": email, "password": password}) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise Fatal(f"logging in {email} failed: HTTP {resp.status} {describe(body)}")
        users.append(User(email, body["user"]["id"], body["token"]["access_token"],
                          int(body["token"].get("expires_in", 0))))
    return users


async def make_collection(api: Api, name: str, rule: str, content: bytes) -> float:
    """A base collection with the packages schema plus `owner`, list and view rule `rule`, filled by
    one CSV import; returns the import's seconds. Raises Fatal."""
    schema = {"fields": [*SCHEMA["fields"], {"name": "owner", "type": "text", "validation": {}}]}
    body = await call(api, "POST", "/api/v1/collections", 201, f"creating {name}",
                      json={"name": name, "type": "base", "schema": schema, "list_rule": rule, "view_rule": rule})
    if body.get("list_rule") != rule:
        raise Fatal(f"{name}: the stored list_rule is {body.get('list_rule')!r}, not {rule!r}")
    form = aiohttp.FormData()
    form.add_field("file", content, filename=f"{name}.csv", content_type="text/csv")
    started = time.perf_counter()
    body = await call(api, "POST", f"/api/v1/collections/{name}/records/import/csv", 200, f"importing into {name}",
                      data=form)
    seconds = time.perf_counter() - started
    if body.get("failed"):
        raise Fatal(f"importing into {name}: {len(body['failed'])} rows failed, first {body['failed'][0]}")
    print(f"{name}: imported {body['imported']:,} rows in {seconds:.1f} s", file=sys.stderr)
    return seconds


# --- requests --------------------------------------------------------------------------------------


@dataclass
class Arm:
    """One measured request: its URL (query string included) and what its answer must hold."""

    name: str
    url: str
    expected_total: int
    owner: str = ""  # every item must have this owner ("" = not checked)


def arms(base: str, params: dict[str, str], user_a: str, records: int) -> list[Arm]:
    """The three arms (open, owned, open+filter) of one scenario, `params` added to each query."""
    query = "&".join(f"{k}={v}" for k, v in {"page": "1", "per_page": str(PER_PAGE), **params}.items())
    open_url = f"{base}/api/v1/collections/{OPEN}/records?{query}"
    owned_url = f"{base}/api/v1/collections/{OWNED}/records?{query}"
    half = (records + 1) // 2  # user A has the even rows
    return [
        Arm("open", open_url, records),
        Arm("owned", owned_url, half, owner=user_a),
        Arm("open+filter", f"{open_url}&filter=owner%3D%22{user_a}%22", half, owner=user_a),
    ]


def body_problem(arm: Arm, body: Any) -> str:
    """What is wrong with a 200 answer of `arm` ("" when nothing is)."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        return "no items list"
    if body.get("total") != arm.expected_total:
        return f"total {body.get('total')!r}, expected {arm.expected_total}"
    if len(body["items"]) != min(PER_PAGE, arm.expected_total):
        return f"{len(body['items'])} items"
    if arm.owner and any(item.get("owner") != arm.owner for item in body["items"]):
        return "an item of another owner"
    return ""


@dataclass
class Result:
    """The timings of one arm in one step."""

    times_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the concurrent run(s)
    requests: int = 0  # completed in the concurrent run(s)
    mean_ms: float | None = None  # wrk's average (set only by wrk)
    p50_ms: float | None = None  # wrk's percentiles (set only by wrk)
    p99_ms: float | None = None
    cpu_s: float = 0.0
    body_bytes: int = 0
    problems: Counter[str] = field(default_factory=Counter)

    @property
    def mean(self) -> float:
        """Mean latency in ms."""
        return self.mean_ms if self.mean_ms is not None else statistics.fmean(self.times_ms)

    @property
    def p50(self) -> float:
        """Median latency in ms (nearest rank, or wrk's)."""
        return self.p50_ms if self.p50_ms is not None else percentile(self.times_ms, 50)

    @property
    def p99(self) -> float:
        """99th percentile latency in ms (nearest rank, or wrk's)."""
        return self.p99_ms if self.p99_ms is not None else percentile(self.times_ms, 99)

    @property
    def rps(self) -> float:
        """Requests a second: completed / wall time under load, or 1000 / mean ms when sequential."""
        if self.seconds:
            return self.requests / self.seconds
        return 1000 / self.mean if self.times_ms else 0.0


async def timed_get(session: aiohttp.ClientSession, arm: Arm, headers: dict[str, str],
                    result: Result | None, check_every: int = 1) -> None:
    """GET `arm.url`; records the wall-clock ms (to the last body byte) in `result` (None: warm-up)
    and any problem with the answer. The body of every `check_every`-th answer is checked (under
    load, parsing every body would take the client's CPU from the server on a small machine)."""
    started = time.perf_counter()
    try:
        async with session.get(arm.url, headers=headers) as resp:
            raw = await resp.read()
            status = resp.status
    except (TimeoutError, aiohttp.ClientError) as exc:
        if result is not None:
            result.problems[exc.__class__.__name__] += 1
        return
    elapsed_ms = (time.perf_counter() - started) * 1000
    if result is None:
        return
    if status != 200:
        result.problems[f"HTTP {status}"] += 1
        return
    result.times_ms.append(elapsed_ms)
    result.body_bytes = len(raw)
    if len(result.times_ms) % check_every:
        return
    try:
        problem = body_problem(arm, json.loads(raw))
    except ValueError:
        problem = "not JSON"
    if problem:
        result.problems[problem] += 1


async def sequential(server: Server, token: str, arm_list: list[Arm], warmup: int, requests: int,
                     max_s: float) -> tuple[dict[str, Result], str]:
    """`warmup` then `requests` rounds of one request per arm, in arm order, on one connection.
    The warm-up stops after WARMUP_MAX_S and the timed rounds after `max_s` seconds (at a round's
    end, at least one round each), so a slow server keeps the run short; returns the results and
    a line on the rounds done (and the slowest warm-up request). The server's CPU time is read
    before and after each timed request, outside its timing (the kernel counts it in 10 ms ticks:
    meaningful as an average)."""
    headers = {"Authorization": f"Bearer {token}"}
    results = {arm.name: Result() for arm in arm_list}
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        warmed, started, slowest = 0, time.monotonic(), (0.0, "")
        while warmed < warmup and (warmed == 0 or time.monotonic() - started < WARMUP_MAX_S):
            for arm in arm_list:
                asked = time.perf_counter()
                await timed_get(session, arm, headers, None)
                slowest = max(slowest, ((time.perf_counter() - asked) * 1000, arm.name))
            warmed += 1
        warmup_s = time.monotonic() - started
        timed, started = 0, time.monotonic()
        while timed < requests and (timed == 0 or time.monotonic() - started < max_s):
            for arm in arm_list:
                cpu_before = server.cpu_s()
                await timed_get(session, arm, headers, results[arm.name])
                results[arm.name].cpu_s += server.cpu_s() - cpu_before
            timed += 1
    line = (f"{warmed} of {warmup} warm-up rounds in {warmup_s:.1f} s (slowest: {slowest[1]}, {slowest[0]:,.0f} ms), "
            f"then {timed} of {requests} timed rounds in {time.monotonic() - started:.1f} s")
    return results, line


async def concurrent_aiohttp(arm: Arm, token: str, connections: int, duration_s: float, result: Result) -> None:
    """`connections` clients GETting `arm.url` back to back for `duration_s` seconds."""
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        stop_at = started + duration_s

        async def client() -> None:
            while time.perf_counter() < stop_at:
                await timed_get(session, arm, headers, result, check_every=CHECK_EVERY_UNDER_LOAD)

        await asyncio.gather(*(client() for _ in range(connections)))
        result.seconds += time.perf_counter() - started
    result.requests = len(result.times_ms)


def concurrent_wrk(arm: Arm, token: str, args: argparse.Namespace, result: Result) -> None:
    """`wrk -tT -cC -dDs --latency` against `arm.url`, added to `result`: counts summed, the mean
    weighted by requests, p50/p99 of the worse run."""
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s", "--timeout", WRK_TIMEOUT,
           "--latency", "-H", f"Authorization: Bearer {token}", arm.url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise Fatal(f"wrk failed ({out.returncode}): {out.stderr.strip()}")
    text = out.stdout
    before = result.requests
    match = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", text)
    if match:
        result.requests += int(match.group(1))
        result.seconds += to_ms(match.group(2) + match.group(3)) / 1000
    match = re.search(r"^\s+Latency\s+([\d.]+(?:us|ms|s|m))\s", text, re.MULTILINE)
    if match and result.requests:
        mean_ms = to_ms(match.group(1))
        previous = result.mean_ms if result.mean_ms is not None else mean_ms
        result.mean_ms = (previous * before + mean_ms * (result.requests - before)) / result.requests
    for pct, attr in (("50", "p50_ms"), ("99", "p99_ms")):
        match = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", text, re.MULTILINE)
        if match:
            value, worst = to_ms(match.group(1)), getattr(result, attr)
            setattr(result, attr, value if worst is None else max(worst, value))
    match = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if match:
        result.problems["non-2xx (wrk)"] += int(match.group(1))
    match = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if match and sum(int(g) for g in match.groups()):
        result.problems[f"socket errors (wrk: {match.group(0)})"] += sum(int(g) for g in match.groups())


async def concurrent(server: Server, token: str, arm_list: list[Arm], args: argparse.Namespace,
                     use_wrk: bool) -> dict[str, Result]:
    """Each arm under load in turn (`--rounds` times; every other round in reverse order)."""
    results = {arm.name: Result() for arm in arm_list}
    for number in range(args.rounds):
        for arm in arm_list if number % 2 == 0 else arm_list[::-1]:
            print(f"concurrent: {arm.name}", file=sys.stderr)
            result = results[arm.name]
            cpu_before = server.cpu_s()
            if use_wrk:
                await asyncio.to_thread(concurrent_wrk, arm, token, args, result)
            else:
                await concurrent_aiohttp(arm, token, args.connections, args.duration, result)
            await asyncio.to_thread(settle, server)
            result.cpu_s += server.cpu_s() - cpu_before
    return results


def settle(server: Server) -> float:
    """Wait until `cms serve` and its children use less than SETTLE_CPU_SHARE of one core over
    SETTLE_WINDOW_S (wrk abandons the requests in flight when it stops, and the server still works
    them off; other processes on the machine do not count), at most SETTLE_MAX_S; returns the wait."""
    started = time.monotonic()
    before = server.cpu_s()
    while time.monotonic() - started < SETTLE_MAX_S:
        time.sleep(SETTLE_WINDOW_S)
        now = server.cpu_s()
        if now - before < SETTLE_CPU_SHARE * SETTLE_WINDOW_S:
            break
        before = now
    return time.monotonic() - started


# --- report ----------------------------------------------------------------------------------------


def ms3(result: Result) -> str:
    """`mean / p50 / p99` in ms, or a dash when nothing was measured."""
    if result.mean_ms is None and not result.times_ms:
        return "–"
    return f"{result.mean:,.2f} / {result.p50:,.2f} / {result.p99:,.2f}"


def share(owned: float, other: float) -> str:
    """(owned - other) / owned as a signed percentage."""
    return f"{(owned - other) / owned * 100:+.1f} %" if owned else "–"


def measured(result: Result | None) -> bool:
    """Whether `result` holds a timing."""
    return result is not None and (bool(result.times_ms) or result.mean_ms is not None)


def print_report(header: list[str], rows: list[tuple[str, str, dict[str, Result]]]) -> None:
    """The header lines, then one Markdown table row per scenario and mode."""
    print("\n".join(header))
    print("\n| scenario | mode | n open / owned / open+filter | open: mean / p50 / p99 ms | "
          "owned: mean / p50 / p99 ms | rule cost (owned−open)/owned: mean; p50 | req/s open / owned | "
          "server CPU ms/req open / owned | open+filter: mean / p50 / p99 ms | (owned−open+filter)/owned: mean |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario, mode, res in rows:
        o, w, f = res["open"], res["owned"], res.get("open+filter")
        counts = " / ".join(str(r.requests or len(r.times_ms)) for r in res.values())
        cost = f"{share(w.mean, o.mean)}; {share(w.p50, o.p50)}" if measured(o) and measured(w) else "–"
        control = share(w.mean, f.mean) if f is not None and measured(f) and measured(w) else "–"
        if mode.startswith("sequential"):
            rps = f"{o.rps:,.2f} / {w.rps:,.2f} (1000/mean)" if measured(o) and measured(w) else "–"
        else:
            rps = f"{o.rps:,.2f} / {w.rps:,.2f} ({share(1 / w.rps, 1 / o.rps)})" if o.rps and w.rps else "–"
        n_o, n_w = o.requests or len(o.times_ms), w.requests or len(w.times_ms)
        cpu = f"{o.cpu_s * 1000 / n_o:,.1f} / {w.cpu_s * 1000 / n_w:,.1f}" if n_o and n_w else "–"
        filtered = ms3(f) if f is not None else "(not run)"
        print(f"| {scenario} | {mode} | {counts} | {ms3(o)} | {ms3(w)} | {cost} | {rps} | {cpu} | {filtered} | "
              f"{control} |")


def log_anomalies(log_path: Path) -> list[str]:
    """Lines of the server log that report an error (ERROR, Traceback, a 5xx access line)."""
    found = []
    pattern = re.compile(r"\bERROR\b|Traceback|\" 5\d\d ")
    for line in log_path.read_text(errors="replace").splitlines():
        if pattern.search(line):
            found.append(line[:300])
    return found


# --- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Measure the cost of a list rule (owner = @request.auth.id).")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV, help=f"packages CSV (default: {DEFAULT_CSV})")
    parser.add_argument("--records", type=int, default=10_000, help="rows per collection (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=200,
                        help="timed sequential requests per arm and scenario (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed sequential rounds first (default: %(default)s)")
    parser.add_argument("--sequential-max-s", type=float, default=45.0,
                        help="stop the timed sequential rounds of a scenario after this long, at a round's end "
                             "(default: %(default)s)")
    parser.add_argument("--duration", type=int, default=10,
                        help="seconds of load per arm, scenario and round (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=16, help="concurrent connections (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="concurrent runs per arm, alternating the arm order (default: %(default)s)")
    parser.add_argument("--no-concurrent", action="store_true", help="skip the concurrent step")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and server log)")
    args = parser.parse_args(argv)
    if min(args.records, args.requests, args.duration, args.connections, args.threads, args.rounds) < 1:
        parser.error("--records, --requests, --duration, --connections, --threads and --rounds must be at least 1")
    if args.records < 2 * PER_PAGE:
        parser.error(f"--records must be at least {2 * PER_PAGE} (each user's first page must be full)")
    if args.warmup < 0 or args.sequential_max_s <= 0:
        parser.error("--warmup must be at least 0 and --sequential-max-s above 0")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    return args


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as `a / b / c`."""
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def machine_line() -> str:
    """One header line: OS, core count and CPU model."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"- machine: {platform.system()} {platform.release()}, nproc {os.cpu_count()} ({model}); the server, "
            f"its SecantusDB and redis-server children and the client share it")


async def main_async(args: argparse.Namespace) -> int:
    """Set up, measure, report; returns the exit status (see the module docstring)."""
    rows = take_rows(args.csv, args.records)
    records = len(rows)
    use_wrk = not args.no_concurrent and shutil.which("wrk") is not None
    work = Path(tempfile.mkdtemp(prefix="bench_rules_"))
    server = start_cms(work)
    server.probe_url = server.base + "/health"
    table: list[tuple[str, str, dict[str, Result]]] = []
    notes: list[str] = []
    started = time.monotonic()
    load_at_start = load_average()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            await wait_healthy(session, server, "/health")
            async with session.get(server.base + "/health") as resp:
                version = (await resp.json()).get("version", "?")
            api = Api(session, server.base, ADMIN_EMAIL, ADMIN_PASSWORD)
            await api.login()
            await call(api, "POST", "/api/v1/settings", 200, "switching rate limiting off",
                       json={"key": "rate_limit_enabled", "value": "false"})
            user_a, user_b = await make_users(api)
            content = owned_csv(rows, (user_a.user_id, user_b.user_id))
            import_s = [await make_collection(api, OPEN, "", content),
                        await make_collection(api, OWNED, OWNER_RULE, content)]
            # what each side sees, once, before measuring
            seen: dict[str, Any] = {}
            for who, user in (("A", user_a), ("B", user_b), ("admin", None)):
                headers = {"Authorization": f"Bearer {user.token if user else api.token}"}
                async with session.get(f"{server.base}/api/v1/collections/{OWNED}/records?per_page=1",
                                       headers=headers) as resp:
                    body = await resp.json()
                    if resp.status != 200:
                        raise Fatal(f"listing {OWNED} as {who}: HTTP {resp.status} {describe(body)}")
                seen[who] = body["total"]
        header = [
            f"# List rule cost: `{OWNER_RULE}` vs no rule, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            "",
            (f"- cms {version} embedded (SecantusDB + redis-server children), `cms serve` one process; "
             f"Python {platform.python_version()}, aiohttp {aiohttp.__version__}; rate limiting off"),
            machine_line(),
            (f"- data: {records:,} rows of {args.csv.name} in each of `{OPEN}` (list_rule \"\") and `{OWNED}` "
             f"(list_rule `{OWNER_RULE}`), owner alternating A/B; CSV import {import_s[0]:.1f} s / "
             f"{import_s[1]:.1f} s; "
             f"`owner` is a plain text field (no index)"),
            (f"- {OWNED} total as user A {seen['A']:,}, as user B {seen['B']:,}, as admin (bypasses rules) "
             f"{seen['admin']:,}; access token lifetime {user_a.expires_in_s} s"),
            (f"- every arm: page 1, per_page {PER_PAGE}, as user A (bearer token); open = {OPEN} (total {records:,}); "
             f"owned = {OWNED} (total {(records + 1) // 2:,}: the rule also shrinks the count); open+filter = {OPEN} "
             f"with filter=owner=\"<A>\" (same {(records + 1) // 2:,} records, no rule)"),
            (f"- sequential: 1 keep-alive connection; up to {args.warmup} warm-up rounds (at most "
             f"{WARMUP_MAX_S:.0f} s) then up to {args.requests} rounds (at most {args.sequential_max_s:.0f} s) of "
             f"open, owned, open+filter per scenario; wall clock to the last body byte; p50/p99 nearest rank; "
             f"n = the rounds done; server CPU read around each timed request (10 ms ticks, averaged)"),
        ]
        if not args.no_concurrent:
            tool = (f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency" if use_wrk else
                    f"aiohttp, {args.connections} concurrent connections, {args.duration} s (wrk not on PATH)")
            finish = ("" if use_wrk else "; requests started in the window finish and count, req/s = completed / "
                      "time until the last one finished")
            header.append(f"- concurrent: {tool} per arm (open and owned only), {args.rounds} round(s){finish}; "
                          f"server CPU = user+system of `cms serve` and its children from the start of a run "
                          f"until it is idle again")
        for scenario, params in SCENARIOS:
            arm_list = arms(server.base, params, user_a.user_id, records)
            print(f"sequential: {scenario}", file=sys.stderr)
            results, line = await sequential(server, user_a.token, arm_list, args.warmup,
                                             args.requests, args.sequential_max_s)
            table.append((scenario, "sequential, 1 conn", results))
            notes.append(f"{scenario}, sequential: {line}")
        if not args.no_concurrent:
            mode = f"concurrent, {args.connections} conn ({'wrk' if use_wrk else 'aiohttp'})"
            for scenario, params in SCENARIOS:
                arm_list = [a for a in arms(server.base, params, user_a.user_id, records) if a.name in LOADED_ARMS]
                table.append((scenario, mode, await concurrent(server, user_a.token, arm_list, args, use_wrk)))
    finally:
        server.stop()
        print(f"server stopped (exit {server.proc.returncode})", file=sys.stderr)
        anomalies = log_anomalies(server.log_path)
        remove_work(work, args.keep)
    print_report(header, table)
    status = 0
    print("\nNotes:")
    for note in notes:
        print(f"- {note}")
    for scenario, mode, res in table:
        sizes = ", ".join(f"{name} {r.body_bytes:,} B" for name, r in res.items() if r.body_bytes)
        if sizes:
            print(f"- {scenario}, {mode}: response body size {sizes}")
    for scenario, mode, res in table:
        for name, result in res.items():
            if result.problems:
                status = 1
                listed = ", ".join(f"{n:,} × {p}" for p, n in result.problems.most_common())
                print(f"- ANOMALY {scenario}, {mode}, {name}: {listed}")
    if anomalies:
        print(f"- server log: {len(anomalies)} error line(s), first: {anomalies[0]}")
    else:
        print("- server log: no ERROR / Traceback / 5xx lines")
    if status == 0:
        print("- every measured response was HTTP 200 with the expected total, item count and owners")
    print(f"- wall time of the run: {time.monotonic() - started:,.0f} s; load average (1/5/15 min) at the start "
          f"{load_at_start}, at the end {load_average()}: anything above the core count means other processes "
          f"competed for the CPU")
    return status


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    return int(run_cli(main_async(parse_args(argv))))


if __name__ == "__main__":
    sys.exit(main())
