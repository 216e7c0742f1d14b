"""The hot path of one record (issue 31, item 3): req/s of `GET .../records/{id}` and `POST .../records`
(and batches of creates) under `wrk`, the Redis commands each costs, and where the server's time goes (py-spy).

Usage:

    python scripts/bench/bench_hot_path.py [CSV] [--records 3000] [--duration 5] [--connections 32]
        [--threads 2] [--rounds 3] [--workers 1] [--baseline PATH] [--profile DIR] [--keep]

Needs the `bench` extra (`psutil`, `py-spy` for `--profile`) and Debian's `wrk` on PATH. CSV defaults
to `../shared/data/pypi-packages.csv`.

What it does:

1. Starts `cms serve --workers N` in embedded mode (SecantusDB and redis-server as its child processes)
   on a free port, with a fresh data directory under a temp dir.
2. Switches rate limiting off (as the side-by-side bench does), creates the collection `packages`,
   imports `--records` rows by CSV, registers a user of an auth collection `users` and logs it in
   (its token signs the creates; the gets are anonymous, as the side-by-side bench's).
3. Counts the Redis commands of one warm get and one create: `INFO commandstats` of the embedded
   Redis before and after 50 sequential requests of each, divided by 50.
4. Runs `wrk` for get by id (`get`: one id, a read-cache hit), first-touch gets (`touch`: rotating over
   every loaded id, after one create that makes every cached read of the collection stale, so each
   read of a run shorter than one cycle is a miss), create and, when asked (`--scenarios ...,batch`),
   `batch` (`POST /api/v1/batch` of BATCH_SIZE creates; its req/s are batches), interleaved (get, touch,
   create, get, ...) `--rounds` times (`--scenarios` picks some), and prints each run and the median req/s, p50
   and p99 of each scenario; a touch run lasts `--touch-duration` seconds (2), and its line says how
   many times each id was read on average (above 1, the later reads were cache hits). With `--baseline PATH` (a
   checkout of other code, e.g. `git worktree add /tmp/base <commit>`), a second server runs that code
   beside this one, and each round runs both (baseline, then this), so both see the same noise.
5. With `--profile DIR`: one more run of each under `py-spy record --format raw` attached to the
   serving process, writing `DIR/<this|baseline>-<scenario>.txt` (folded stacks) and
   `DIR/<this|baseline>-<scenario>.svg` (a flame graph), and prints the top 15 functions by self time
   of each (`--workers 1` only: with more, the serving processes are its children).

Exit status: 0 on success; 1 when the server does not start or a set-up step fails.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import csv
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import DEFAULT_CSV, Api, Fatal, LoadStats, describe, ensure_collection, produce_rows  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_relations import batch_script  # noqa: E402  # a sibling script, not a package
from common import free_port, ids_script  # noqa: E402  # a sibling script, not a package

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "packages"
AUTH_COLLECTION = "users"
ADMIN_EMAIL = "hot-admin@example.com"
ADMIN_PASSWORD = "hot-admin-password-1"
USER_EMAIL = "hot-user@example.com"
USER_PASSWORD = "hot-user-password-1"
COUNTED_REQUESTS = 50
BATCH_SIZE = 10
"""Creates per request of the `batch` scenario (`POST /api/v1/batch`); its req/s are batches a second."""
START_TIMEOUT_S = 90.0

LUA_CREATE = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "{token}"
counter = 0
thread_no = 0
run_stamp = os.time()
function setup(thread)
  thread_no = thread_no + 1
  thread:set("thread_no", thread_no)
end
function request()
  counter = counter + 1
  return wrk.format(nil, nil, nil, string.format(
    '{{"data":{{"name":"hot-%d-%d-%d","version":"1.0","released":"2026-01-01","popular":false,'
    .. '"summary":"created by the benchmark"}}}}', run_stamp, thread_no, counter))
end
"""


def rows_csv(path: Path, limit: int) -> bytes:
    """The first `limit` loadable rows of the CSV at `path`, as the CSV import takes them."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["name", "version", "released", "popular", "summary"])
    for _, data in produce_rows(path, limit, LoadStats()):
        writer.writerow([data["name"], data.get("version", ""), data.get("released", ""),
                         "true" if data.get("popular") else "false", data.get("summary", "")])
    return out.getvalue().encode()


async def set_up(base: str, csv_path: Path, records: int) -> dict[str, Any]:
    """Rate limiting off, the collection and its rows, a signed-in user: {record_id, token, ids}."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        api = Api(session, base, ADMIN_EMAIL, ADMIN_PASSWORD)
        await api.login()
        status, body, _ = await api.request("POST", "/api/v1/settings",
                                            json={"key": "rate_limit_enabled", "value": "false"})
        if status != 200:
            raise Fatal(f"switching rate limiting off failed: HTTP {status} {describe(body)}")
        await ensure_collection(api, COLLECTION, recreate=True)
        form = aiohttp.FormData()
        form.add_field("file", rows_csv(csv_path, records), filename="p.csv", content_type="text/csv")
        status, body, _ = await api.request("POST", f"/api/v1/collections/{COLLECTION}/records/import/csv", data=form)
        if status != 200:
            raise Fatal(f"CSV import failed: HTTP {status} {describe(body)}")
        print(f"imported {body['imported']:,} rows", file=sys.stderr)
        status, page, _ = await api.request("GET", f"/api/v1/collections/{COLLECTION}/records",
                                            params={"per_page": 1, "sort": "name"})
        status, body, _ = await api.request(
            "POST", "/api/v1/collections", json={"name": AUTH_COLLECTION, "type": "auth", "schema": {"fields": []}})
        if status != 201:
            raise Fatal(f"creating the auth collection failed: HTTP {status} {describe(body)}")
        auth = f"/api/v1/collections/{AUTH_COLLECTION}/auth"
        await api.request("POST", f"{auth}/register", json={
            "email": USER_EMAIL, "password": USER_PASSWORD, "password_confirm": USER_PASSWORD})
        status, body, _ = await api.request("POST", f"{auth}/login", json={"email": USER_EMAIL,
                                                                           "password": USER_PASSWORD})
        if status != 200:
            raise Fatal(f"user login failed: HTTP {status} {describe(body)}")
        ids: list[str] = []
        for number in range(1, -(-records // 100) + 1):
            status, listed, _ = await api.request("GET", f"/api/v1/collections/{COLLECTION}/records",
                                                  params={"per_page": 100, "page": number, "skip_total": "true"})
            if status != 200:
                raise Fatal(f"listing the ids failed: HTTP {status} {describe(listed)}")
            ids.extend(item["id"] for item in listed["items"])
        return {"record_id": page["items"][0]["id"], "token": "Bearer " + body["token"]["access_token"],
                "ids": ids}


def command_calls(client: redis.Redis) -> collections.Counter[str]:
    """Calls per Redis command so far (`INFO commandstats`)."""
    stats: dict[str, Any] = client.info("commandstats")
    return collections.Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


async def count_commands(client: redis.Redis, base: str, get_url: str, token: str) -> dict[str, dict[str, float]]:
    """Redis commands per request of a warm get and of a create (averaged over COUNTED_REQUESTS)."""
    out: dict[str, dict[str, float]] = {}
    async with aiohttp.ClientSession() as session:
        async with session.get(get_url) as resp:  # warm it
            await resp.read()
        for label, call in (
            ("get", lambda: session.get(get_url)),
            ("create", lambda: session.post(
                f"{base}/api/v1/collections/{COLLECTION}/records", headers={"Authorization": token},
                json={"data": {"name": f"count-{time.monotonic_ns()}", "version": "1"}})),
        ):
            async with call() as resp:  # one first, so caches of the caller are warm
                await resp.read()
            await asyncio.sleep(0.3)
            before = command_calls(client)
            for _ in range(COUNTED_REQUESTS):
                async with call() as resp:
                    await resp.read()
                    if resp.status >= 300:
                        raise Fatal(f"{label}: HTTP {resp.status}")
            after = command_calls(client)
            delta = after - before
            delta.pop("info", None)
            out[label] = {name: n / COUNTED_REQUESTS for name, n in sorted(delta.items())}
    return out


def run_wrk(url: str, script: Path | None, args: argparse.Namespace,
            duration: int | None = None) -> tuple[float, float, float, int]:
    """(req/s, p50 ms, p99 ms, non-2xx) of one wrk run (`duration` s, else `--duration`)."""
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{duration or args.duration}s", "--timeout",
           "10s", "--latency"]
    if script is not None:
        cmd += ["-s", str(script)]
    text = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))  # type: ignore[union-attr]
    pct = {p: _ms(re.search(rf"^\s+{p}(?:\.000)?%\s+(\S+)", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
           for p in ("50", "99")}
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return rps, pct["50"], pct["99"], int(bad.group(1)) if bad else 0


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def self_times(path: Path, top: int = 15) -> list[tuple[str, float]]:
    """The `top` functions by self time (share of samples) of a py-spy raw (folded) profile."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        leaf = stack.rsplit(";", 1)[-1]
        counts[re.sub(r":\d+\)$", ")", leaf)] += int(n)
        total += int(n)
    return [(name, 100 * n / total) for name, n in counts.most_common(top)]


@dataclass
class Target:
    """One `cms serve` under test: the code it runs (`repo`), its URLs, wrk script and process."""

    label: str
    repo: Path
    work: Path
    base: str = ""
    proc: subprocess.Popen[bytes] | None = None
    get_url: str = ""
    post_url: str = ""
    script: Path | None = None
    touch_script: Path | None = None
    batch_script: Path | None = None
    token: str = ""

    def start(self, workers: int) -> None:
        """Start `cms serve` (embedded) from `repo` on a free port, with its own data directory."""
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "ADMIN_EMAIL": ADMIN_EMAIL, "ADMIN_PASSWORD": ADMIN_PASSWORD, "LOG_LEVEL": "WARNING",
               "PYTHONPATH": str(self.repo)}
        self.work.mkdir(parents=True)
        with (self.work / "cms.log").open("wb") as log_file:
            self.proc = subprocess.Popen([sys.executable, "-m", "cms", "serve", "--port", str(port), "--data-dir",
                                          str(self.work / "data"), "--workers", str(workers)],
                                         stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=self.repo)

    def set_up(self, csv_path: Path, records: int) -> None:
        """Wait for it, then load it (`set_up`) and write its create script."""
        assert self.proc is not None
        _wait_up(self.base, self.proc, self.work / "cms.log")
        ids = asyncio.run(set_up(self.base, csv_path, records))
        self.get_url = f"{self.base}/api/v1/collections/{COLLECTION}/records/{ids['record_id']}"
        self.post_url = f"{self.base}/api/v1/collections/{COLLECTION}/records"
        self.script = self.work / "create.lua"
        self.script.write_text(LUA_CREATE.format(token=ids["token"]))
        self.token = ids["token"]
        self.touch_script = ids_script(self.work / "touch.lua", f"/api/v1/collections/{COLLECTION}/records/",
                                       ids["ids"], threads=2)
        item = (f'{{"method":"POST","url":"/api/v1/collections/{COLLECTION}/records","body":{{"data":{{'
                '"name":"hot-batch-%d-%d-%d-%d","version":"1.0","released":"2026-01-01","popular":false,'
                '"summary":"created by the benchmark"}}}')
        self.batch_script = batch_script(self.work / "batch.lua", item, BATCH_SIZE, ids["token"])
        client = redis.Redis(unix_socket_path=str(next((self.work / "data").rglob("redis.sock"))))
        for label, per in asyncio.run(count_commands(client, self.base, self.get_url, ids["token"])).items():
            listed = ", ".join(f"{k} {v:.2f}" for k, v in per.items())
            print(f"{self.label}: Redis commands per {label}: {sum(per.values()):.2f} ({listed})")

    def scenarios(self, keys: list[str]) -> list[tuple[str, str, Path | None]]:
        """(key, URL, wrk script) of each scenario of `keys`, in the order get, touch, create, batch."""
        every = [("get", self.get_url, None), ("touch", self.base, self.touch_script),
                 ("create", self.post_url, self.script), ("batch", f"{self.base}/api/v1/batch", self.batch_script)]
        return [scenario for scenario in every if scenario[0] in keys]

    def before(self, key: str) -> None:
        """Before a `touch` run: one create, so every cached read of the collection is stale (its
        version moved) and each get of the run is a first touch."""
        if key != "touch":
            return
        request = urllib.request.Request(
            self.post_url, method="POST", headers={"Authorization": self.token, "Content-Type": "application/json"},
            data=b'{"data":{"name":"touch-%d","version":"1"}}' % time.monotonic_ns())
        with urllib.request.urlopen(request, timeout=30) as resp:
            resp.read()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def profile(target: Target, args: argparse.Namespace) -> None:
    """One more wrk run of each scenario under py-spy (folded stacks in `args.profile`), and the top
    functions by self time."""
    assert target.proc is not None
    args.profile.mkdir(parents=True, exist_ok=True)
    for label, url, lua in target.scenarios(args.scenarios):
        out = args.profile / f"{target.label}-{label}.txt"
        duration = args.touch_duration if label == "touch" else args.duration
        for fmt, path in (("flamegraph", out.with_suffix(".svg")), ("raw", out)):
            target.before(label)
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(target.proc.pid), "--format", fmt,
                                    "--rate", "250", "--output", str(path), "--duration", str(duration)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            run_wrk(url, lua, args, duration)
            spy.wait()
        print(f"\nTop self time, {target.label} {label} ({out}):")
        for name, share in self_times(out):
            print(f"  {share:5.1f}%  {name}")


def main() -> int:
    """Run the benchmark (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--touch-duration", type=int, default=2,
                        help="seconds of a touch run: short enough that each id is read about once (default 2)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout of the code to compare with (e.g. a `git worktree` of the commit before)")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--scenarios", default="get,touch,create",
                        help="of get, touch, create, batch (default: get,touch,create)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    args = parser.parse_args()
    args.scenarios = [key for key in args.scenarios.split(",") if key]
    work = Path(tempfile.mkdtemp(prefix="cms-hot-"))
    targets = [Target("this", REPO_ROOT, work / "this")]
    if args.baseline is not None:
        targets.insert(0, Target("baseline", args.baseline.resolve(), work / "baseline"))
    try:
        for target in targets:
            target.start(args.workers)
        for target in targets:
            target.set_up(args.csv, args.records)
        results: dict[tuple[str, str], list[tuple[float, float, float, int]]] = collections.defaultdict(list)
        for round_no in range(args.rounds):  # interleaved: each round runs every target and scenario
            for target in targets:
                for label, url, lua in target.scenarios(args.scenarios):
                    target.before(label)
                    duration = args.touch_duration if label == "touch" else args.duration
                    result = run_wrk(url, lua, args, duration)
                    results[target.label, label].append(result)
                    per_id = f", {result[0] * duration / args.records:.2f} reads per id" if label == "touch" else ""
                    print(f"round {round_no + 1} {target.label} {label}: {result[0]:,.0f} req/s, "
                          f"p50 {result[1]:.1f} ms, p99 {result[2]:.1f} ms, non-2xx {result[3]}{per_id}")
        for (name, label), runs in results.items():
            print(f"median {name} {label}: {statistics.median(r[0] for r in runs):,.0f} req/s, "
                  f"p50 {statistics.median(r[1] for r in runs):.1f} ms, "
                  f"p99 {statistics.median(r[2] for r in runs):.1f} ms")
        if args.profile is not None:
            for target in targets:
                profile(target, args)
        return 0
    except Fatal as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        for target in targets:
            target.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _wait_up(base: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """Wait until `/health` answers 200. Raises Fatal when the server exits or does not start."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Fatal(f"cms exited with {proc.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise Fatal("cms did not start")


if __name__ == "__main__":
    sys.exit(main())
