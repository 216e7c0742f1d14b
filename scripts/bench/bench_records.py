"""Benchmark the bulk record paths of a running CMS: CSV import vs single POSTs, CSV export, bulk
update and bulk delete.

Usage:

    python scripts/bench/bench_records.py [CSV] --url http://127.0.0.1:8090 \\
        --email ADMIN_EMAIL --password ADMIN_PASSWORD [--server-pid PID] \\
        [--single-rows 5000] [--concurrency 16] [--import-repeat 3] [--export-repeat 3] \\
        [--bulk-repeat 10] [--batch-size 10] [--batch-rounds 3] [--only-batches] [--keep]

It starts nothing: point it at a `cms serve` you started. CSV defaults to
`../shared/data/pypi-packages.csv` (50,000 rows; columns name, version, released, popular, summary).

What it does, against collections `bench_import`, `bench_import_<n>` and `bench_single` (created
afresh, deleted at the end unless `--keep`), with the schema of `scripts/load_packages.py`:

1. CSV import: uploads the whole file to `POST .../records/import/csv`, `--import-repeat` times,
   each into an empty collection (the first one is kept for the next steps).
2. Single POSTs: POSTs the first `--single-rows` rows one by one to `POST .../records` from
   `--concurrency` workers (all 50,000 take minutes, so a sample is timed; the rate is per row).
3. CSV export: downloads `GET .../records/export/csv` of the imported collection `--export-repeat`
   times and checks the row count.
4. Bulk update, then bulk delete: `--bulk-repeat` calls each, every call with 1,000 distinct ids
   of the exported records.
5. Batches (`--batch-size N`, default 10; 0 skips): `--batch-rounds` rounds (default 3), each POSTing
   the first `--single-rows` rows one by one and then again as `POST /api/v1/batch` of N creates each
   (one transaction), both from `--concurrency` workers into fresh collections (`bench_single_<r>`,
   `bench_batch_<r>`), so the two alternate; prints records/s of each round and the medians.
   `--only-batches` runs this step alone (no CSV import, export or bulk steps).
6. With `--scale-rows N`: imports the file again and again into `bench_scale` (the same schema
   without the unique rule) until it holds at least N records, then exports it once, to show that
   the memory of `cms serve` does not grow with the size of an export.

It prints a Markdown table: per operation the calls, rows per call, rows per second (rows over the
summed call time), p50 and p99 call latency (nearest rank) and, with `--server-pid`, the peak resident
memory of that process (and its RSS when the operation began) and of it plus its children
(SecantusDB, redis-server in embedded mode), sampled every 50 ms in a thread while the calls run.

Rate limiting: the default general limit (600 requests a minute per IP) paces the single POSTs; the
script waits out 429s (counted in the report), so switch `rate_limit_enabled` off for a fair figure.

Exit status: 0 on success; 1 when the server is unreachable, login fails or a step fails;
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import math
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import (  # a sibling script, not a package
    DEFAULT_CSV,
    SCHEMA,
    Api,
    BadRow,
    Fatal,
    check_reachable,
    describe,
    open_csv,
    row_to_data,
    run_cli,
)

BULK_IDS = 1_000
SAMPLE_INTERVAL_S = 0.05


# --- memory ----------------------------------------------------------------------------------------


class MemorySampler:
    """Samples the RSS of a process (and of it plus its descendants) in a thread; keeps the peak of
    each named phase, in bytes."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peaks: dict[str, tuple[int, int]] = {}  # phase -> (process peak, tree peak)
        self.starts: dict[str, int] = {}  # phase -> process RSS when the phase first began
        self._phase: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: Any = None
        if pid is not None:
            import psutil

            self._process = psutil.Process(pid)

    def start(self) -> None:
        if self._process is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        sample = self.sample()
        if sample is not None:
            self.starts.setdefault(name, sample[0])
        self._sample_into(name)
        self._phase = name
        try:
            yield
        finally:
            self._phase = None
            self._sample_into(name)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            phase = self._phase
            if phase is not None:
                self._sample_into(phase)

    def _sample_into(self, phase: str) -> None:
        sample = self.sample()
        if sample is None:
            return
        own, tree = sample
        old_own, old_tree = self.peaks.get(phase, (0, 0))
        self.peaks[phase] = (max(old_own, own), max(old_tree, tree))

    def sample(self) -> tuple[int, int] | None:
        """(RSS of the process, RSS of it and its descendants) in bytes, or None without a pid."""
        if self._process is None:
            return None
        import psutil

        try:
            own = self._process.memory_info().rss
            tree = own
            for child in self._process.children(recursive=True):
                try:
                    tree += child.memory_info().rss
                except psutil.Error:
                    continue
        except psutil.Error:
            return None
        return own, tree


# --- figures ---------------------------------------------------------------------------------------


@dataclass
class Step:
    """The timed calls of one operation."""

    label: str
    rows_per_call: int = 0
    latencies_s: list[float] = field(default_factory=list)
    rows: int = 0  # rows handled over all calls
    wall_s: float = 0.0  # wall clock of the whole step (concurrent calls overlap)
    note: str = ""

    def rate(self) -> float:
        elapsed = self.wall_s or sum(self.latencies_s)
        return self.rows / elapsed if elapsed else 0.0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of `values`."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


# --- steps -----------------------------------------------------------------------------------------


def read_rows(path: Path, limit: int | None) -> list[dict[str, Any]]:
    """Record data of the CSV rows (typed as load_packages does), the first `limit` of them."""
    handle, reader = open_csv(path)
    out: list[dict[str, Any]] = []
    with handle:
        for row in reader:
            if limit is not None and len(out) >= limit:
                break
            try:
                out.append(row_to_data(row))
            except BadRow:
                continue
    return out


async def fresh_collection(api: Api, name: str) -> None:
    """Delete `name` if it exists, then create it with the packages schema."""
    await drop_collection(api, name)
    status, body, _ = await api.request("POST", "/api/v1/collections",
                                        json={"name": name, "type": "base", "schema": SCHEMA})
    if status != 201:
        raise Fatal(f"creating collection {name!r} failed: HTTP {status} {describe(body)}")


async def drop_collection(api: Api, name: str) -> None:
    status, body, _ = await api.request("GET", "/api/v1/collections")
    if status != 200 or not isinstance(body, list):
        raise Fatal(f"listing collections failed: HTTP {status} {describe(body)}")
    for existing in body:
        if existing.get("name") == name:
            status, body, _ = await api.request("DELETE", f"/api/v1/collections/{existing['id']}")
            if status != 204:
                raise Fatal(f"deleting collection {name!r} failed: HTTP {status} {describe(body)}")


async def csv_import(api: Api, collection: str, content: bytes, filename: str) -> tuple[float, int, int]:
    """(seconds, imported, failed) of one upload."""
    form = aiohttp.FormData()
    form.add_field("file", content, filename=filename, content_type="text/csv")
    started = time.perf_counter()
    status, body, _ = await api.request("POST", f"/api/v1/collections/{collection}/records/import/csv", data=form)
    elapsed = time.perf_counter() - started
    if status != 200 or not isinstance(body, dict):
        raise Fatal(f"CSV import into {collection!r} failed: HTTP {status} {describe(body)}")
    return elapsed, int(body["imported"]), len(body["failed"])


async def single_posts(api: Api, collection: str, rows: list[dict[str, Any]], concurrency: int,
                       step: Step) -> None:
    """POST every row from `concurrency` workers; latencies and rows go to `step`."""
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    for row in rows:
        queue.put_nowait(row)
    for _ in range(concurrency):
        queue.put_nowait(None)
    refused: list[str] = []
    path = f"/api/v1/collections/{collection}/records"

    async def worker() -> None:
        while (row := await queue.get()) is not None:
            started = time.perf_counter()
            status, body, _ = await api.request("POST", path, json={"data": row})
            if status == 201:
                step.latencies_s.append(time.perf_counter() - started)
                step.rows += 1
            elif len(refused) < 5:
                refused.append(f"HTTP {status} {describe(body)}")

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    step.wall_s = time.monotonic() - started
    if refused:
        step.note = "refused: " + "; ".join(refused)


async def batch_posts(api: Api, collection: str, rows: list[dict[str, Any]], batch_size: int, concurrency: int,
                      step: Step) -> None:
    """POST `rows` as batches of `batch_size` creates (`POST /api/v1/batch`) from `concurrency` workers;
    latencies (per batch) and rows go to `step`."""
    chunks = [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
    queue: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue()
    for chunk in chunks:
        queue.put_nowait(chunk)
    for _ in range(concurrency):
        queue.put_nowait(None)
    refused: list[str] = []
    url = f"/api/v1/collections/{collection}/records"

    async def worker() -> None:
        while (chunk := await queue.get()) is not None:
            requests = [{"method": "POST", "url": url, "body": {"data": row}} for row in chunk]
            started = time.perf_counter()
            status, body, _ = await api.request("POST", "/api/v1/batch", json={"requests": requests})
            if status == 200:
                step.latencies_s.append(time.perf_counter() - started)
                step.rows += len(chunk)
            elif len(refused) < 5:
                refused.append(f"HTTP {status} {describe(body)}")

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    step.wall_s = time.monotonic() - started
    if refused:
        step.note = "refused: " + "; ".join(refused)


async def compare_batches(api: Api, rows: list[dict[str, Any]], args: argparse.Namespace) -> list[Step]:
    """Step 5: `args.batch_rounds` rounds of single POSTs then batches of `args.batch_size`, alternating,
    each into a fresh collection (dropped after unless `--keep`); returns the steps in run order and
    prints the medians."""
    steps: list[Step] = []
    for number in range(1, args.batch_rounds + 1):
        single = Step(f"round {number}: single POSTs ({len(rows):,} rows)", rows_per_call=1)
        batch = Step(f"round {number}: batches of {args.batch_size} ({len(rows):,} rows)",
                     rows_per_call=args.batch_size)
        for step, name in ((single, f"bench_single_{number}"), (batch, f"bench_batch_{number}")):
            await fresh_collection(api, name)
            print(f"{step.label} ...", file=sys.stderr)
            if step is single:
                await single_posts(api, name, rows, args.concurrency, step)
            else:
                await batch_posts(api, name, rows, args.batch_size, args.concurrency, step)
            if not args.keep:
                await drop_collection(api, name)
            steps.append(step)
    singles = statistics.median(s.rate() for s in steps[0::2])
    batches = statistics.median(s.rate() for s in steps[1::2])
    print(f"\nmedians of {args.batch_rounds} alternating rounds (concurrency {args.concurrency}): single creates "
          f"{singles:,.0f} records/s, batches of {args.batch_size} {batches:,.0f} records/s "
          f"({batches / singles if singles else 0:,.2f}x)")
    return steps


async def csv_export(api: Api, collection: str) -> tuple[float, int, bytes]:
    """(seconds to the last byte, bytes, body) of one download."""
    started = time.perf_counter()
    async with api.session.get(api.url(f"/api/v1/collections/{collection}/records/export/csv"),
                               headers=api.headers) as response:
        if response.status != 200:
            raise Fatal(f"CSV export failed: HTTP {response.status} {await response.text()}")
        chunks = [chunk async for chunk in response.content.iter_chunked(256 * 1024)]
    elapsed = time.perf_counter() - started
    body = b"".join(chunks)
    return elapsed, len(body), body


async def bulk(api: Api, collection: str, action: str, ids: list[str]) -> float:
    payload: dict[str, Any] = {"record_ids": ids}
    if action == "update":
        payload["data"] = {"popular": True, "version": "bench"}
    started = time.perf_counter()
    status, body, _ = await api.request("POST", f"/api/v1/collections/{collection}/records/bulk-{action}",
                                        json=payload)
    elapsed = time.perf_counter() - started
    key = "updated" if action == "update" else "deleted"
    if status != 200 or not isinstance(body, dict) or body.get(key) != len(ids):
        raise Fatal(f"bulk-{action} failed: HTTP {status} {describe(body)}")
    return elapsed


async def export_at_scale(api: Api, sampler: MemorySampler, content: bytes, filename: str, rows_per_file: int,
                          scale_rows: int) -> Step:
    """Fill `bench_scale` to at least `scale_rows` records by repeated imports, then time one export."""
    await drop_collection(api, "bench_scale")
    schema = {"fields": [{**f, "validation": {}} for f in SCHEMA["fields"]]}  # no unique rule
    status, body, _ = await api.request("POST", "/api/v1/collections",
                                        json={"name": "bench_scale", "type": "base", "schema": schema})
    if status != 201:
        raise Fatal(f"creating collection 'bench_scale' failed: HTTP {status} {describe(body)}")
    total = 0
    while total < scale_rows:
        print(f"filling bench_scale: {total:,} of {scale_rows:,} ...", file=sys.stderr)
        _, imported, _ = await csv_import(api, "bench_scale", content, filename)
        total += imported
    step = Step(f"CSV export at scale ({total:,} rows)", rows_per_call=total)
    print(f"exporting {total:,} rows ...", file=sys.stderr)
    with sampler.phase(step.label):
        elapsed, size, body = await csv_export(api, "bench_scale")
    lines = body.count(b"\n")
    step.latencies_s.append(elapsed)
    step.rows = total
    step.note = f"{size / 2**20:,.0f} MiB, {lines:,} lines"
    await drop_collection(api, "bench_scale")
    return step


# --- main ------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int:
    content = args.csv.read_bytes()
    total_rows = max(sum(1 for _ in csv.reader(io.StringIO(content.decode("utf-8-sig"), newline=""))) - 1, 0)
    single_rows = read_rows(args.csv, args.single_rows)
    sampler = MemorySampler(args.server_pid)
    base = args.url.rstrip("/")
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    steps: list[Step] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=args.concurrency),
                                     timeout=timeout) as session:
        health = await check_reachable(session, base)
        api = Api(session, base, args.email, args.password)
        await api.login()
        _, _, headers = await api.request("GET", "/api/v1/collections")
        limit = headers.get("X-RateLimit-Limit")
        print(f"# Bulk record benchmark: {base} (cms {health.get('version', '?')}), "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        print(f"client: Python {platform.python_version()}, aiohttp {aiohttp.__version__}, "
              f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs; "
              f"CSV {args.csv.name}: {total_rows:,} rows, {len(content) / 2**20:,.1f} MiB; "
              f"rate limit: {limit + '/min' if limit else 'off'}")
        if limit and int(limit) < args.single_rows:
            print(f"\nwarning: rate limiting is on ({limit}/min); single POSTs will be paced by it",
                  file=sys.stderr)
        sampler.start()
        try:
            if args.only_batches:
                batch_steps = await compare_batches(api, single_rows, args)
                report(batch_steps, sampler)
                return 0
            # 1. CSV import
            step = Step("CSV import (whole file, one request)", rows_per_call=total_rows)
            for n in range(args.import_repeat):
                name = "bench_import" if n == 0 else f"bench_import_{n}"
                await fresh_collection(api, name)
                print(f"importing {total_rows:,} rows into {name!r} ...", file=sys.stderr)
                with sampler.phase(step.label):
                    elapsed, imported, failed = await csv_import(api, name, content, args.csv.name)
                step.latencies_s.append(elapsed)
                step.rows += imported
                if failed:
                    step.note = f"{failed:,} rows refused per import"
                if n:
                    await drop_collection(api, name)
            steps.append(step)
            imported_rows = step.rows // args.import_repeat

            # 2. single POSTs
            step = Step(f"single POSTs ({len(single_rows):,} rows, concurrency {args.concurrency})",
                        rows_per_call=1)
            await fresh_collection(api, "bench_single")
            print(f"POSTing {len(single_rows):,} rows one by one ...", file=sys.stderr)
            with sampler.phase(step.label):
                await single_posts(api, "bench_single", single_rows, args.concurrency, step)
            steps.append(step)

            # 3. CSV export
            step = Step(f"CSV export ({imported_rows:,} rows)", rows_per_call=imported_rows)
            body = b""
            for _ in range(args.export_repeat):
                print("exporting ...", file=sys.stderr)
                with sampler.phase(step.label):
                    elapsed, size, body = await csv_export(api, "bench_import")
                step.latencies_s.append(elapsed)
                step.rows += imported_rows
                step.note = f"{size / 2**20:,.1f} MiB per download"
            rows = list(csv.reader(io.StringIO(body.decode(), newline="")))
            if len(rows) - 1 != imported_rows:
                raise Fatal(f"the export has {len(rows) - 1:,} rows, expected {imported_rows:,}")
            steps.append(step)
            ids = [row[0] for row in rows[1:]]

            # 4. bulk update, bulk delete
            needed = 2 * args.bulk_repeat * BULK_IDS
            if len(ids) < needed:
                raise Fatal(f"bulk steps need {needed:,} records; {len(ids):,} were imported")
            slices = [ids[i * BULK_IDS:(i + 1) * BULK_IDS] for i in range(2 * args.bulk_repeat)]
            for action, chosen in (("update", slices[:args.bulk_repeat]), ("delete", slices[args.bulk_repeat:])):
                step = Step(f"bulk-{action} ({BULK_IDS:,} ids)", rows_per_call=BULK_IDS)
                print(f"bulk-{action} x {args.bulk_repeat} ...", file=sys.stderr)
                for chunk in chosen:
                    with sampler.phase(step.label):
                        step.latencies_s.append(await bulk(api, "bench_import", action, chunk))
                    step.rows += len(chunk)
                steps.append(step)

            # 5. batches against single creates
            if args.batch_size:
                steps.extend(await compare_batches(api, single_rows, args))

            # 6. export at scale
            if args.scale_rows:
                steps.append(await export_at_scale(api, sampler, content, args.csv.name, imported_rows,
                                                   args.scale_rows))
        finally:
            sampler.stop()
            if not args.keep:
                for name in ("bench_import", "bench_single", "bench_scale"):
                    try:
                        await drop_collection(api, name)
                    except Fatal as exc:
                        print(f"warning: {exc}", file=sys.stderr)
    report(steps, sampler)
    return 0


def report(steps: list[Step], sampler: MemorySampler) -> None:
    print("\n| operation | calls | rows per call | rows/s | p50 ms | p99 ms | RSS `cms serve` MiB: before → peak "
          "| peak RSS with children MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for step in steps:
        lat = step.latencies_s or [0.0]
        own, tree = sampler.peaks.get(step.label, (0, 0))
        before = sampler.starts.get(step.label, 0)
        memory = f"{mib(before)} → {mib(own)} | {mib(tree)}" if own else "– | –"
        print(f"| {step.label} | {len(step.latencies_s):,} | {step.rows_per_call:,} | {step.rate():,.0f} | "
              f"{percentile(lat, 50) * 1000:,.0f} | {percentile(lat, 99) * 1000:,.0f} | {memory} |")
    imports = next((s for s in steps if s.label.startswith("CSV import")), None)
    singles = next((s for s in steps if s.label.startswith("single POSTs")), None)
    if imports and singles and singles.rate():
        print(f"\nCSV import is {imports.rate() / singles.rate():,.1f}x the rows/s of single POSTs.")
    for step in steps:
        if step.note:
            print(f"- {step.label}: {step.note}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time CSV import/export, bulk update/delete and single POSTs against a running CMS.",
        epilog="Example: python scripts/bench/bench_records.py --url http://127.0.0.1:8098 "
        "--email admin@example.com --password secret --server-pid 12345",
    )
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV,
                        help=f"CSV of packages (default: {DEFAULT_CSV})")
    parser.add_argument("--url", default="http://127.0.0.1:8090", help="base URL of the CMS (default: %(default)s)")
    parser.add_argument("--email", default=os.environ.get("ADMIN_EMAIL"), help="admin email (default: $ADMIN_EMAIL)")
    parser.add_argument("--password", default=os.environ.get("ADMIN_PASSWORD"),
                        help="admin password (default: $ADMIN_PASSWORD)")
    parser.add_argument("--server-pid", type=int, default=None,
                        help="pid of `cms serve`: sample its (and its children's) resident memory")
    parser.add_argument("--single-rows", type=int, default=5000,
                        help="rows POSTed one by one (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=16, help="single POSTs in flight (default: %(default)s)")
    parser.add_argument("--import-repeat", type=int, default=3, help="CSV imports timed (default: %(default)s)")
    parser.add_argument("--export-repeat", type=int, default=3, help="CSV exports timed (default: %(default)s)")
    parser.add_argument("--bulk-repeat", type=int, default=10,
                        help="bulk-update and bulk-delete calls timed, 1,000 ids each (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=10,
                        help="creates per batch in the batch step; 0 skips it (default: %(default)s)")
    parser.add_argument("--batch-rounds", type=int, default=3,
                        help="alternating rounds of single POSTs and batches (default: %(default)s)")
    parser.add_argument("--only-batches", action="store_true", help="run the batch step alone")
    parser.add_argument("--scale-rows", type=int, default=0,
                        help="also export a collection of at least this many records (default: skip)")
    parser.add_argument("--keep", action="store_true", help="keep the bench collections")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.email or not args.password:
        parser.error("--email and --password (or ADMIN_EMAIL / ADMIN_PASSWORD) are required")
    if min(args.single_rows, args.concurrency, args.import_repeat, args.export_repeat, args.bulk_repeat,
           args.batch_rounds) < 1 or args.batch_size < 0 or (args.only_batches and not args.batch_size):
        parser.error("counts must be at least 1")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    return args


def main(argv: list[str] | None = None) -> int:
    return run_cli(run(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
