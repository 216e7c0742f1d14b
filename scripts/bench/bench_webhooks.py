"""Benchmark webhook delivery (issue 8): record events through the outbox and one arq worker to a
local receiver.

Usage:

    python scripts/bench/bench_webhooks.py [--events 10000] [--quick] [--single-updates 200]
        [--single-rate 20] [--worker default] [--worker 100/0.05 ...] [--profile-dir DIR] [--keep]

It starts SecantusDB and redis-server as child processes in a fresh temporary directory (or uses
MONGODB_URL and REDIS_URL when both are set, with a database of its own), opens the services in
this process, creates an admin, a base collection `bench_hooks` (fields `title`, `round`) with
min(--events, 1,000) records, an aiohttp receiver on 127.0.0.1 (a free port) that notes the
arrival time of each `X-Webhook-Delivery` and answers 200, and one webhook (`update` events, with
a secret, so every delivery is signed) pointing at it. Then, per worker (`--worker`, repeatable):

0. drain: with no worker running, bulk updates write --events events (their outbox entries and
   batch jobs wait), then the worker starts and empties the backlog. Deliveries/s runs from the
   first receipt to the last: the worker's own rate, without the writes competing for the CPU
   (latency is not shown: it is the time the backlog waited).
1. starts the worker in a separate process with MONGODB_URL, REDIS_URL, MONGODB_DB, SECRET_KEY and
   WEBHOOK_ALLOW_PRIVATE=true (the queue name is the fixed `cms:queue`). `default` is
   `python -m cms worker`, the project's worker as deployed (arq max_jobs 10, poll_delay 0.5 s,
   LOG_LEVEL INFO); `MAX_JOBS/POLL_DELAY_S` (e.g. `100/0.05`) is the same `build_worker` with those
   two arq settings changed. One warm-up delivery is awaited before timing.
2. throughput: bulk updates of up to 1,000 ids each (`RecordService.bulk_update`, as the API's
   bulk-update does), back to back, until --events events were written; each call sets `round`,
   so the receiver knows which call produced a delivery. Deliveries/s runs from the start of the
   first call to the last receipt; latency is receipt minus the response of the producing call
   (negative when the worker delivered before the call answered).
3. unsaturated: --single-updates single-record updates at --single-rate per second; latency is
   receipt minus that update's response.

It prints a Markdown table per phase and worker: events, write call p50/p99, deliveries/s,
latency p50/p99, the worker's RSS (before → peak, sampled every 50 ms), deliveries that arrived
more than once or never, the outbox backlog once every delivery arrived (should be 0), and the CPU
seconds each process used during the phase (worker, SecantusDB, redis-server, this process, which
does the writes and the receiving), which shows where a bottleneck is. With --profile-dir, py-spy
(`pip install py-spy`) records the worker and SecantusDB during the drain phase (raw collapsed
stacks, one file per process and worker) and the top functions by inclusive on-CPU samples are
printed.

Exit status: 0 when every delivery arrived exactly once; 1 when some did not or a step failed;
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import logging
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import arq
import psutil  # type: ignore[import-untyped]
from aiohttp import web
from bench_records import MemorySampler, mib, percentile  # a sibling script

from cms import __version__
from cms.clock import new_id, utcnow
from cms.config import Config
from cms.models import Principal, Record
from cms.runtime.embedded import ChildServer, free_port, start_mongodb, start_redis
from cms.wiring import Services, open_services

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "bench_hooks"
BULK_IDS = 1_000
SINGLE_ROUND_BASE = 1_000_000
"""`round` values of the single updates start here, so they never meet a bulk round."""
WARMUP_ROUND = -2
SEED_ROUND = -1
DEFAULT_WORKER = "default"
STALL_TIMEOUT_S = 60.0
"""A phase gives up waiting when no delivery arrived for this long."""
BACKLOG_WAIT_S = 10.0
"""How long to wait for the outbox to drain after the last receipt (mark_done follows the POST)."""
PY_SPY_RATE_HZ = 100
PROFILE_TOP = 25


# --- the receiver ----------------------------------------------------------------------------------


@dataclass
class Receiver:
    """Arrival times (time.monotonic) per delivery id, and each delivery's `round`."""

    arrivals: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    round_of: dict[str, int] = field(default_factory=dict)
    by_round: Counter[int] = field(default_factory=Counter)
    last_arrival: float = 0.0
    bad_requests: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        arrived = time.monotonic()
        delivery_id = request.headers.get("X-Webhook-Delivery")
        try:
            data = json.loads(body)["data"]
            round_ = int(data["round"] if "round" in data else data["data"]["round"])
        except (ValueError, KeyError, TypeError):
            round_ = None
        if delivery_id is None or round_ is None:
            self.bad_requests += 1
            return web.Response(status=200)
        self.arrivals[delivery_id].append(arrived)
        if delivery_id not in self.round_of:
            self.round_of[delivery_id] = round_
            self.by_round[round_] += 1
        self.last_arrival = arrived
        return web.Response(status=200)

    def received(self, rounds: range) -> int:
        """Distinct deliveries of `rounds` that arrived."""
        return sum(self.by_round[r] for r in rounds)

    async def wait_for(self, rounds: range, expected: int) -> None:
        """Return once `expected` distinct deliveries of `rounds` arrived, or none arrived for
        STALL_TIMEOUT_S."""
        last_count, last_change = -1, time.monotonic()
        while (count := self.received(rounds)) < expected:
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif time.monotonic() - last_change > STALL_TIMEOUT_S:
                print(f"warning: {expected - count:,} deliveries did not arrive", file=sys.stderr)
                return
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def serve_receiver(receiver: Receiver) -> AsyncIterator[str]:
    """Serve `receiver` on 127.0.0.1 at a free port; yields its URL."""
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


# --- the worker process ----------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """One worker child process (and, with --profile-dir, the py-spy recorders attached to it and to
    SecantusDB)."""

    spec: str
    process: subprocess.Popen[bytes]
    log_path: Path
    recorders: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM (arq finishes its jobs), then SIGKILL after 15 s; always reaped."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def worker_label(spec: str) -> str:
    if spec == DEFAULT_WORKER:
        return (f"`cms worker` (max_jobs {Config.worker_max_jobs}, "
                f"poll {Config.worker_poll_delay_s:g} s)")
    max_jobs, poll_delay_s = parse_worker_spec(spec)
    return f"max_jobs {max_jobs}, poll {poll_delay_s:g} s"


def parse_worker_spec(spec: str) -> tuple[int, float]:
    """`MAX_JOBS/POLL_DELAY_S` -> (max_jobs, poll_delay_s). Raises ValueError."""
    max_jobs, poll_delay_s = spec.split("/")
    values = int(max_jobs), float(poll_delay_s)
    if values[0] < 1 or values[1] <= 0:
        raise ValueError(spec)
    return values


def worker_env(config: Config) -> dict[str, str]:
    assert config.mongodb_url and config.redis_url
    env = {k: v for k, v in os.environ.items() if k not in ("CMS_DATA_DIR", "BACKUP_DIR")}
    env.update(MONGODB_URL=config.mongodb_url, REDIS_URL=config.redis_url, MONGODB_DB=config.mongodb_db,
               SECRET_KEY=config.secret_key, WEBHOOK_ALLOW_PRIVATE="true",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    return env


def start_worker(spec: str, config: Config, work_dir: Path) -> WorkerProcess:
    """Start the worker of `spec` in `work_dir` (so no stray `.env` is read); its log goes to a file."""
    if spec == DEFAULT_WORKER:
        command = [sys.executable, "-m", "cms", "worker"]
    else:
        command = [sys.executable, str(Path(__file__).resolve()), "--run-worker", spec]
    log_path = work_dir / f"worker-{spec.replace('/', '_')}.log"
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(command, cwd=work_dir, env=worker_env(config), stdout=log_file,
                                   stderr=subprocess.STDOUT)
    return WorkerProcess(spec, process, log_path)


def run_worker(spec: str) -> int:
    """The child process of a `MAX_JOBS/POLL_DELAY_S` worker: the project's `build_worker` (as in
    `cms worker`) with arq's max_jobs and poll_delay changed."""
    from workers.settings import build_worker

    max_jobs, poll_delay_s = parse_worker_spec(spec)
    config = Config.from_env(os.environ)
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = build_worker(config, poll_delay_s=poll_delay_s)
    # arq sizes these from max_jobs in Worker.__init__, which build_worker does not expose.
    worker.max_jobs = max_jobs
    worker.sem = asyncio.BoundedSemaphore(max_jobs + 1)
    worker.queue_read_limit = max(max_jobs * 5, 100)
    worker.run()
    return 0


# --- profiling -------------------------------------------------------------------------------------


def start_recorders(worker: WorkerProcess, mongodb: ChildServer | None, profile_dir: Path) -> None:
    """py-spy (raw collapsed stacks, on-CPU samples only) on the worker and SecantusDB."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        print("warning: py-spy not found (pip install py-spy); not profiling", file=sys.stderr)
        return
    profile_dir.mkdir(parents=True, exist_ok=True)
    targets = [("worker", worker.pid)] + ([("secantusdb", mongodb.process.pid)] if mongodb else [])
    for name, pid in targets:
        path = profile_dir / f"{name}-{worker.spec.replace('/', '_')}.txt"
        recorder = subprocess.Popen([py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate",
                                     str(PY_SPY_RATE_HZ), "--nonblocking", "--output", str(path)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        worker.recorders.append((name, recorder, path))
    time.sleep(1.0)  # py-spy attaches


def stop_recorders(worker: WorkerProcess) -> list[tuple[str, Path]]:
    """Stop the recorders (SIGINT makes py-spy write its file); returns (process name, file)."""
    written = []
    for name, recorder, path in worker.recorders:
        recorder.send_signal(signal.SIGINT)
        try:
            recorder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()
        if path.exists():
            written.append((name, path))
    worker.recorders.clear()
    return written


def summarize_profile(path: Path, top: int = PROFILE_TOP) -> list[tuple[str, float, float]]:
    """(function, inclusive %, self %) of the on-CPU samples in a py-spy raw file, by inclusive share."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_frame_name(f) for f in stack.split(";")]
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    if not total:
        return []
    return [(name, 100 * n / total, 100 * own[name] / total) for name, n in inclusive.most_common(top)]


def _frame_name(frame: str) -> str:
    """`stage (cms/services/delivery/webhook_outbox.py:9)` -> `stage (cms/services/delivery/webhook_outbox.py)`."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where})"


# --- phases ----------------------------------------------------------------------------------------


@dataclass
class Phase:
    """The figures of one phase with one worker."""

    worker: str
    label: str
    events: int = 0
    write_latencies_s: list[float] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    started: float = 0.0
    last_receipt: float = 0.0
    received: int = 0
    drained: int = 0  # deliveries that arrived after the last write's response
    last_response: float = 0.0
    duplicates: int = 0
    missing: int = 0
    backlog: int | None = None
    rss: tuple[int, int] = (0, 0)  # before, peak
    cpu_s: dict[str, float] = field(default_factory=dict)

    def deliveries_per_s(self) -> float:
        elapsed = self.last_receipt - self.started
        return self.received / elapsed if elapsed > 0 else 0.0

    def drain_per_s(self) -> float:
        """Deliveries/s once the writes were over: the worker alone, without the writer's load."""
        elapsed = self.last_receipt - self.last_response
        return self.drained / elapsed if elapsed > 0 else 0.0


class CpuMeter:
    """CPU seconds (user + system) used by named processes between `start` and `stop`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._start: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        out = {}
        for name, process in self._processes.items():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                out[name] = times.user + times.system
        return out

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> dict[str, float]:
        return {name: value - self._start.get(name, 0.0) for name, value in self._now().items()}


@contextlib.contextmanager
def measured(phase: Phase, sampler: MemorySampler, cpu: CpuMeter) -> Iterator[None]:
    cpu.start()
    with sampler.phase(phase.label):
        yield
    phase.cpu_s = cpu.stop()
    phase.rss = (sampler.starts.get(phase.label, 0), sampler.peaks.get(phase.label, (0, 0))[0])


def settle(phase: Phase, receiver: Receiver, rounds: range, responses: dict[int, float]) -> None:
    """Latencies, receipts, duplicates and missing deliveries of `rounds` into `phase`."""
    first_arrivals = []
    for delivery_id, round_ in receiver.round_of.items():
        if round_ not in rounds:
            continue
        times = receiver.arrivals[delivery_id]
        phase.duplicates += len(times) - 1
        first_arrivals.append(times[0])
        phase.latencies_s.append(times[0] - responses[round_])
    phase.received = len(first_arrivals)
    phase.missing = phase.events - phase.received
    phase.last_receipt = max(first_arrivals, default=phase.started)
    phase.last_response = max(responses.values(), default=phase.started)
    phase.drained = sum(1 for t in first_arrivals if t > phase.last_response)


async def wait_for_backlog(services: Services) -> int:
    deadline = time.monotonic() + BACKLOG_WAIT_S
    while (backlog := await services.webhook_outbox.backlog()) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return backlog


async def bulk_writes(services: Services, principal: Principal, ids: list[str], events: int, first_round: int,
                      phase: Phase) -> tuple[range, dict[int, float]]:
    """Bulk updates of `ids` (the last call fewer) until `events` events; returns their rounds and
    the time each call answered."""
    rounds = range(first_round, first_round + math.ceil(events / len(ids)))
    responses: dict[int, float] = {}
    started_all = time.monotonic()
    left = events
    for round_ in rounds:
        chunk = ids[:min(left, len(ids))]
        started = time.monotonic()
        await services.records.bulk_update(principal, COLLECTION, chunk, {"round": round_})
        responses[round_] = time.monotonic()
        phase.write_latencies_s.append(responses[round_] - started)
        phase.events += len(chunk)
        left -= len(chunk)
    print(f"  {phase.events:,} events written in {time.monotonic() - started_all:,.1f} s", file=sys.stderr)
    return rounds, responses


async def throughput(services: Services, principal: Principal, receiver: Receiver, ids: list[str],
                     events: int, first_round: int, phase: Phase) -> int:
    """Bulk updates of `ids` (the last call fewer) until `events` events while the worker runs;
    returns the next round."""
    phase.started = time.monotonic()
    rounds, responses = await bulk_writes(services, principal, ids, events, first_round, phase)
    await receiver.wait_for(rounds, phase.events)
    settle(phase, receiver, rounds, responses)
    phase.backlog = await wait_for_backlog(services)
    return rounds.stop


async def drain(services: Services, receiver: Receiver, rounds: range, responses: dict[int, float],
                phase: Phase) -> None:
    """Wait until the worker (started after the writes) delivered the backlog of `rounds`; the rate
    runs from the first receipt to the last."""
    await receiver.wait_for(rounds, phase.events)
    settle(phase, receiver, rounds, responses)
    first = min((receiver.arrivals[d][0] for d, r in receiver.round_of.items() if r in rounds),
                default=phase.last_receipt)
    phase.started = phase.last_response = first
    phase.drained = phase.received
    phase.latencies_s.clear()  # the time the backlog waited for the worker, not a delivery latency
    phase.backlog = await wait_for_backlog(services)


async def unsaturated(services: Services, principal: Principal, receiver: Receiver, ids: list[str],
                      count: int, rate_per_s: float, first_round: int, phase: Phase) -> int:
    """`count` single updates at `rate_per_s`; returns the next round."""
    rounds = range(first_round, first_round + count)
    responses: dict[int, float] = {}
    phase.started = time.monotonic()
    for n, round_ in enumerate(rounds):
        await asyncio.sleep(max(0.0, phase.started + n / rate_per_s - time.monotonic()))
        started = time.monotonic()
        await services.records.update(principal, COLLECTION, ids[n % len(ids)], {"round": round_})
        responses[round_] = time.monotonic()
        phase.write_latencies_s.append(responses[round_] - started)
        phase.events += 1
    await receiver.wait_for(rounds, phase.events)
    settle(phase, receiver, rounds, responses)
    phase.backlog = await wait_for_backlog(services)
    return rounds.stop


async def warm_up(services: Services, principal: Principal, receiver: Receiver, record_id: str,
                  worker: WorkerProcess) -> None:
    """One delivery end to end, so the worker is up and its connections are open."""
    before = receiver.by_round[WARMUP_ROUND]
    await services.records.update(principal, COLLECTION, record_id, {"round": WARMUP_ROUND})
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while receiver.by_round[WARMUP_ROUND] == before:
        if worker.process.poll() is not None:
            raise RuntimeError(f"the worker exited with code {worker.process.returncode}; see {worker.log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up delivery did not arrive; see {worker.log_path}")
        await asyncio.sleep(0.05)


# --- set-up and report -----------------------------------------------------------------------------


async def seed(services: Services, principal: Principal, count: int) -> list[str]:
    """Create the collection and `count` records (one bulk insert, not timed); returns their ids."""
    collection = await services.collections.create(
        principal, COLLECTION, "base", [{"name": "title", "type": "text"}, {"name": "round", "type": "number"}])
    now = utcnow()
    records = [Record(id=new_id(), created=now, updated=now, data={"title": f"Record {n}", "round": SEED_ROUND})
               for n in range(count)]
    # The repository's bulk insert emits no events: seeding is not what is measured.
    failures = await services.records._records.insert_many(collection.id, records)
    if failures:
        raise RuntimeError(f"seeding refused {len(failures)} records")
    return [r.id for r in records]


@contextlib.contextmanager
def servers(work_dir: Path) -> Iterator[tuple[str, str, ChildServer | None, ChildServer | None]]:
    """(mongodb_url, redis_url, mongodb child, redis child): MONGODB_URL / REDIS_URL when both are
    set, else embedded servers in `work_dir`."""
    if os.environ.get("MONGODB_URL") and os.environ.get("REDIS_URL"):
        yield os.environ["MONGODB_URL"], os.environ["REDIS_URL"], None, None
        return
    with start_mongodb(work_dir / "db") as mongodb, start_redis(work_dir / "redis") as redis:
        yield mongodb.url, redis.url, mongodb, redis


def versions(redis_version: str) -> str:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    return (f"cms {__version__}, Python {platform.python_version()}, arq {arq.VERSION}, "
            f"aiohttp {aiohttp.__version__}, pymongo {version('pymongo')}, SecantusDB {version('SecantusDB')}, "
            f"redis-server {redis_version}; {platform.system()} {platform.release()}, {os.cpu_count()} CPUs")


def ms(values: list[float], p: float) -> str:
    return f"{percentile(values, p) * 1000:,.0f}" if values else "–"


def report(phases: list[Phase]) -> None:
    print("| worker | phase | events | write call p50 / p99 ms | deliveries/s (after the writes) | latency p50 / p99 ms "
          "| worker RSS MiB: before → peak | dup / missing | backlog after | CPU s: worker / db / redis / bench |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p in phases:
        cpu = " / ".join(f"{p.cpu_s[k]:,.1f}" if k in p.cpu_s else "–"
                         for k in ("worker", "secantusdb", "redis", "bench"))
        rss_before = "start" if p.label.startswith("drain") else mib(p.rss[0])  # drain: the process had just started
        rate = (f"{p.deliveries_per_s():,.0f} ({p.drain_per_s():,.0f})" if not p.label.startswith("unsaturated")
                else "–")  # the unsaturated phase is paced by its writes
        print(f"| {worker_label(p.worker)} | {p.label} | {p.events:,} | {ms(p.write_latencies_s, 50)} / "
              f"{ms(p.write_latencies_s, 99)} | {rate} | {ms(p.latencies_s, 50)} / "
              f"{ms(p.latencies_s, 99)} | {rss_before} → {mib(p.rss[1])} | {p.duplicates} / {p.missing} | "
              f"{p.backlog if p.backlog is not None else '–'} | {cpu} |")


# --- main ------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, work_dir: Path) -> int:
    phases: list[Phase] = []
    profiles: list[tuple[str, str, Path]] = []
    with servers(work_dir) as (mongodb_url, redis_url, mongodb, redis):
        config = Config(secret_key="bench-" + "x" * 40, mongodb_url=mongodb_url, redis_url=redis_url,
                        mongodb_db=f"bench_webhooks_{new_id()[:8]}", data_dir=work_dir, webhook_allow_private=True)
        async with open_services(config) as services:
            admin = await services.identity.registration.create_admin("bench@example.com", "bench-password-1234")
            principal = Principal(kind="admin_user", user_id=admin.id, role="admin")
            ids = await seed(services, principal, min(args.events, BULK_IDS))
            redis_version = str((await services.redis.info()).get("redis_version", "?"))
            receiver = Receiver()
            async with serve_receiver(receiver) as url:
                await services.webhooks.create(principal, url=url, collection_name=COLLECTION, events=["update"],
                                               secret="bench-webhook-secret")
                print(f"# Webhook delivery benchmark: {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
                print(f"{versions(redis_version)}; "
                      f"{'external MongoDB and Redis' if mongodb is None else 'embedded SecantusDB and redis-server'}; "
                      f"{len(ids):,} records, one webhook (signed), receiver in this process\n")
                next_round = 0
                for spec in args.worker:
                    drained = Phase(spec, "drain (backlog written first)")
                    print(f"worker {spec}: {args.events:,} events by bulk update, no worker running ...",
                          file=sys.stderr)
                    rounds, responses = await bulk_writes(services, principal, ids, args.events, next_round,
                                                          drained)
                    next_round = rounds.stop
                    print(f"worker {spec}: starting ...", file=sys.stderr)
                    worker = start_worker(spec, config, work_dir)
                    try:
                        pids = {"worker": worker.pid, "bench": os.getpid()}
                        if mongodb is not None and redis is not None:
                            pids.update(secantusdb=mongodb.process.pid, redis=redis.process.pid)
                        cpu = CpuMeter(pids)
                        sampler = MemorySampler(worker.pid)
                        sampler.start()
                        try:
                            if args.profile_dir:
                                start_recorders(worker, mongodb, args.profile_dir)
                            with measured(drained, sampler, cpu):
                                await drain(services, receiver, rounds, responses, drained)
                            phases.append(drained)
                            profiles += [(spec, name, path) for name, path in stop_recorders(worker)]
                            await warm_up(services, principal, receiver, ids[0], worker)
                            phase = Phase(spec, "throughput (bulk updates)")
                            print(f"worker {spec}: {args.events:,} events by bulk update ...", file=sys.stderr)
                            with measured(phase, sampler, cpu):
                                next_round = await throughput(services, principal, receiver, ids, args.events,
                                                              next_round, phase)
                            phases.append(phase)
                            phase = Phase(spec, f"unsaturated ({args.single_rate:g} updates/s)")
                            print(f"worker {spec}: {args.single_updates} single updates at {args.single_rate:g}/s ...",
                                  file=sys.stderr)
                            with measured(phase, sampler, cpu):
                                next_round = await unsaturated(
                                    services, principal, receiver, ids, args.single_updates, args.single_rate,
                                    max(next_round, SINGLE_ROUND_BASE), phase)
                            phases.append(phase)
                        finally:
                            sampler.stop()
                    finally:
                        stop_recorders(worker)
                        worker.stop()
            bad_requests = receiver.bad_requests
    report(phases)
    print("\nLatency: receipt at the receiver minus the response of the write that produced the delivery; "
          "deliveries/s: distinct deliveries over the time from the first write's start (drain: from the first "
          "receipt) to the last receipt; in brackets, the deliveries that arrived after the last write's response "
          "over the time from it to the last receipt.")
    if bad_requests:
        print(f"- {bad_requests} requests without X-Webhook-Delivery or a readable body")
    best = max((p.deliveries_per_s() for p in phases if not p.label.startswith("unsaturated")), default=0.0)
    print(f"- aim ≥ 1,000 deliveries/s for one worker: best {best:,.0f}/s "
          f"({'met' if best >= 1000 else 'not met'})")
    for spec, name, path in profiles:
        print(f"\n## py-spy, {name}, worker {worker_label(spec)}: top functions by on-CPU samples ({path})\n")
        print("| function | inclusive % | self % |\n|---|---:|---:|")
        for function, inclusive, own in summarize_profile(path):
            print(f"| {function} | {inclusive:.1f} | {own:.1f} |")
    return 0 if all(p.duplicates == 0 and p.missing == 0 and p.backlog == 0 for p in phases) else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time webhook deliveries through the outbox and one worker to a local receiver.",
        epilog="Example: python scripts/bench/bench_webhooks.py --quick --worker default --worker 100/0.05")
    parser.add_argument("--events", type=int, default=None,
                        help="record events in the throughput phase (default: 10,000; 2,000 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a smaller run: 2,000 events, 50 single updates")
    parser.add_argument("--single-updates", type=int, default=None,
                        help="single updates in the unsaturated phase (default: 200; 50 with --quick)")
    parser.add_argument("--single-rate", type=float, default=20.0,
                        help="single updates per second (default: %(default)s)")
    parser.add_argument("--worker", action="append", default=None, metavar="SPEC",
                        help="`default` (python -m cms worker) or MAX_JOBS/POLL_DELAY_S, e.g. 100/0.05; "
                        "repeatable, each measured in turn (default: default)")
    parser.add_argument("--profile-dir", type=Path, default=None,
                        help="record the worker and SecantusDB with py-spy during the throughput phase")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (data, worker logs)")
    parser.add_argument("--run-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_worker:
        return args
    args.events = args.events or (2_000 if args.quick else 10_000)
    args.single_updates = args.single_updates or (50 if args.quick else 200)
    args.worker = args.worker or [DEFAULT_WORKER]
    if args.events < 1 or args.single_updates < 1 or args.single_rate <= 0:
        parser.error("--events and --single-updates must be at least 1, --single-rate above 0")
    for spec in args.worker:
        if spec != DEFAULT_WORKER:
            try:
                parse_worker_spec(spec)
            except ValueError:
                parser.error(f"--worker {spec!r}: expected 'default' or MAX_JOBS/POLL_DELAY_S, e.g. 100/0.05")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.run_worker:
        return run_worker(args.run_worker)
    work_dir = Path(tempfile.mkdtemp(prefix="bench-webhooks-"))
    try:
        return asyncio.run(run(args, work_dir))
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
