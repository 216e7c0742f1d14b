"""Measure what observability costs on the hot path (issue 30): get one record by id and a warm list
page, under wrk, against `cms serve` with metrics off, metrics on, and metrics with tracing on.

Usage:

    python scripts/bench/bench_observability.py [CSV] [--records 1000] [--duration 10] [--rounds 3] \\
        [--connections 16] [--threads 2] [--cms-workers 1] [--keep]

CSV defaults to `../shared/data/pypi-packages.csv` (bench_vs_pocketbase's set-up loads `--records`
rows). Needs `wrk` on PATH and psutil (the `bench` extra).

What it does:

1. Starts one `cms serve` per variant, each in embedded mode with its own data directory
   (bench_vs_pocketbase's `start_cms`, whose environment it inherits): `metrics off`
   (METRICS_ENABLED=false), `metrics on` (the default) and, when this tree has tracing
   (`cms.observability.tracing` and the OpenTelemetry SDK importable), `metrics + tracing`
   (OTEL_EXPORTER_OTLP_ENDPOINT set to a tiny HTTP sink this script serves on a free loopback port,
   which answers 200 to every POST). Without tracing that variant is skipped, and said so.
2. Sets each up alike (bench_vs_pocketbase's `setup_cms`: rate limiting off, the `packages`
   collection with `--records` rows) and warms the read cache.
3. Runs, `--rounds` times, each scenario on each variant in turn (interleaved, so drift of the
   machine hits every variant alike): `wrk -tT -cC -dDs --latency` of `get by id`
   (GET .../records/<id>) and `warm list` (GET .../records?page=1, answered by the read cache).
4. Prints a Markdown table: per scenario and variant the median req/s of the rounds, the median
   p50 latency, the range over the rounds, and the overhead against `metrics off` (1 - req/s / off's
   req/s, in %) and the change of the server's CPU time per request (its children's included), which
   other load on the machine skews less than req/s.

All servers stay up while the rounds run (idle ones cost a little CPU: their workers poll Redis).

Exit status: 0 on success; 1 when a server does not start or a set-up step fails; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
from bench_vs_pocketbase import (
    COLLECTION,
    setup_cms,
    take_rows,
)
from common import (  # sibling scripts, not a package
    HTTP_TIMEOUT_S,
    Server,
    WrkResult,
    free_port,
    run_wrk,
    start_cms,
    wait_healthy,
    warm_up,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import DEFAULT_CSV, Fatal, run_cli  # a sibling script, not a package

OFF, ON, TRACED = "metrics off", "metrics on", "metrics + tracing"


# --- the OTLP sink ---------------------------------------------------------------------------------


class _Accept(BaseHTTPRequestHandler):
    """Reads and drops any POST (OTLP/HTTP export), answering 200 with an empty body."""

    received = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    """An HTTP server on a free loopback port answering 200 to every POST; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Accept)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def tracing_available() -> bool:
    """Whether this tree traces (issue 30, item 2): its tracing module and the OpenTelemetry SDK."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("cms.observability.tracing", "opentelemetry.sdk"))


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """`values` set in os.environ meanwhile (a server started inside inherits them), then restored."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# --- runs ------------------------------------------------------------------------------------------


@dataclass
class Variant:
    """One configuration under test: its server and its wrk results per scenario, one per round."""

    name: str
    server: Server
    runs: dict[str, list[WrkResult]] = field(default_factory=dict)

    def rps(self, scenario: str) -> float:
        """Median req/s of the rounds of `scenario`."""
        return statistics.median(r.rps for r in self.runs[scenario])

    def spread(self, scenario: str) -> str:
        """The rounds' req/s of `scenario`, lowest to highest."""
        rates = [r.rps for r in self.runs[scenario]]
        return f"{min(rates):,.0f}–{max(rates):,.0f}"

    def cpu_ms(self, scenario: str) -> float:
        """Median over the rounds of the server's CPU milliseconds (its children's included) per request."""
        return statistics.median(r.cpu_s * 1000 / r.requests for r in self.runs[scenario] if r.requests)

    def p50_ms(self, scenario: str) -> float:
        """Median of the rounds' p50 latencies of `scenario`, in ms."""
        return statistics.median(r.p50_ms[0] for r in self.runs[scenario] if r.p50_ms)


def start_variant(name: str, work: Path, workers: int, otlp: str | None) -> Variant:
    """`cms serve` for variant `name` in its own directory under `work`."""
    folder = work / name.replace(" ", "_").replace("+", "and")
    folder.mkdir()
    settings = {"METRICS_ENABLED": "false" if name == OFF else "true"}
    if otlp is not None:
        settings.update(OTEL_EXPORTER_OTLP_ENDPOINT=otlp, OTEL_SERVICE_NAME="cms-bench")
    with environment(**settings):
        return Variant(name, start_cms(folder, workers))


def overhead(value: float, base: float) -> str:
    """`1 - value / base` as a signed percentage (positive: slower than `base`)."""
    return f"{(1 - value / base) * 100:+.1f} %" if base else "?"


def print_report(header: list[str], scenarios: list[str], variants: list[Variant], skipped: str) -> None:
    """The Markdown report: `header`, then one row per scenario (the first variant is the base)."""
    print("\n".join(header))
    print()
    names = [v.name for v in variants]
    columns = ["scenario", *(f"{n}: req/s (p50 ms; rounds' range; server CPU per request)" for n in names),
               *(f"overhead, {n}" for n in names[1:])]
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|")
    base = variants[0]
    for scenario in scenarios:
        cells = [scenario] + [f"{v.rps(scenario):,.0f} ({v.p50_ms(scenario):.2f}; {v.spread(scenario)}; "
                              f"CPU {v.cpu_ms(scenario):.3f} ms)" for v in variants]
        cells += [f"{overhead(v.rps(scenario), base.rps(scenario))} (CPU/request "
                  f"{(v.cpu_ms(scenario) / base.cpu_ms(scenario) - 1) * 100:+.1f} %)" for v in variants[1:]]
        print("| " + " | ".join(cells) + " |")
    problems = [f"{v.name}, {s}: {sum(r.non_2xx for r in v.runs[s])} non-2xx, "
                f"{sum(r.socket_errors for r in v.runs[s])} socket errors"
                for v in variants for s in scenarios
                if any(r.non_2xx or r.socket_errors for r in v.runs[s])]
    print()
    print("Overhead = 1 - req/s / (metrics off)'s req/s, of the medians; positive = slower. CPU/request: the "
          "server's (and its children's) CPU time per request against metrics off's, of the medians; positive = "
          "more CPU.")
    if skipped:
        print(skipped)
    for problem in problems:
        print(f"warning: {problem}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring); exits 2 on bad arguments or without wrk."""
    parser = argparse.ArgumentParser(description="Measure the cost of metrics and tracing with wrk.")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV,
                        help=f"packages CSV (default: {DEFAULT_CSV})")
    parser.add_argument("--records", type=int, default=1_000, help="rows to load (default: %(default)s)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of wrk per run (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per scenario and variant (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=16, help="wrk -c (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default: %(default)s)")
    parser.add_argument("--cms-workers", type=int, default=1, help="cms serve --workers (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = parser.parse_args(argv)
    if min(args.records, args.duration, args.rounds, args.connections, args.threads, args.cms_workers) < 1:
        parser.error("--records, --duration, --rounds, --connections, --threads and --cms-workers must be at least 1")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    if shutil.which("wrk") is None:
        parser.error("wrk not found on PATH (apt-get install wrk)")
    return args


async def main_async(args: argparse.Namespace) -> int:
    """Start the variants, set them up, run the interleaved rounds, print the report; returns 0."""
    work = Path(tempfile.mkdtemp(prefix="bench_observability_"))
    rows = take_rows(args.csv, args.records)
    traced = tracing_available()
    skipped = "" if traced else (f"`{TRACED}` skipped: this tree has no cms.observability.tracing or no "
                                 "OpenTelemetry SDK.")
    variants: list[Variant] = []
    with otlp_sink() as otlp, contextlib.ExitStack() as stop:
        try:
            for name in (OFF, ON, TRACED) if traced else (OFF, ON):
                variant = start_variant(name, work, args.cms_workers, otlp if name == TRACED else None)
                stop.callback(variant.server.stop)
                variants.append(variant)
            ids: dict[str, dict[str, str]] = {}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
                for variant in variants:
                    await wait_healthy(session, variant.server, "/health")
                    ids[variant.name] = await setup_cms(session, variant.server.base, rows)
            urls: dict[str, dict[str, str]] = {}
            for variant in variants:
                records = f"{variant.server.base}/api/v1/collections/{COLLECTION}/records"
                record_id = ids[variant.name]["record_id"]
                urls[variant.name] = {"get by id": f"{records}/{record_id}", "warm list": f"{records}?page=1"}
                variant.server.probe_url = urls[variant.name]["get by id"]
                for url in urls[variant.name].values():
                    warm_up(url)
            scenarios = ["get by id", "warm list"]
            for round_number in range(1, args.rounds + 1):
                for scenario in scenarios:
                    for variant in variants:
                        print(f"round {round_number}: {scenario}: {variant.name}", file=sys.stderr)
                        result = WrkResult()
                        await asyncio.to_thread(run_wrk, urls[variant.name][scenario], None, args, variant.server,
                                                result)
                        variant.runs.setdefault(scenario, []).append(result)
            header = [
                f"# Observability overhead, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
                "",
                f"- cms serve --workers {args.cms_workers}, embedded (SecantusDB, redis-server), "
                f"{ids[OFF]['total']} records of {args.csv.name}; rate limiting off; Python "
                f"{platform.python_version()}",
                f"- machine: {platform.system()} {platform.release()}, nproc {os.cpu_count()}; servers and wrk "
                f"share it",
                f"- wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency; medians of "
                f"{args.rounds} interleaved rounds; OTLP exports received by the sink: {_Accept.received}",
                f"- load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
                f"other processes on the machine skew every figure",
            ]
            print_report(header, scenarios, variants, skipped)
        except Fatal:
            for variant in variants:
                print(f"log of {variant.name}: {variant.server.log_path}", file=sys.stderr)
            raise
        finally:
            if args.keep:
                print(f"kept {work}", file=sys.stderr)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: the exit status (see the module docstring)."""
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
