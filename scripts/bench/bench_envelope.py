"""The embedded server's envelope: at how many records a cold list page passes 250 ms on this machine.

Usage:

    python scripts/bench/bench_envelope.py [CSV] [--sizes 500,1000,2000,5000,10000,20000,50000] \\
        [--samples 5] [--rounds 3] [--budget-ms 250] [--cms-workers 1] [--keep]

Needs the `bench` extra (`psutil`). CSV defaults to `../shared/data/pypi-packages.csv`.

What it does:

1. Starts `cms serve` in embedded mode (SecantusDB and redis-server as its child processes; no
   `MONGODB_URL`) on a free port with a fresh data directory and `DATABASE_TIMEOUT_S=300` (the
   largest sizes' cold pages outlast the default 20 s), and switches rate limiting off.
2. Per round (`--rounds`), creates the collection `packages` afresh (`scripts/load_packages.py`'s
   schema) and grows it through the sizes (`--sizes`) by the CSV import endpoint (the rows of
   `pypi-packages.csv` with distinct names, in file order, in imports of at most IMPORT_CHUNK rows).
3. At each size, asks `--samples` cold list pages, one after another, as the admin:
   `GET /api/v1/collections/packages/records?per_page=30&sort=-created&filter=name!="envelope-R-S-I"`,
   a filter that matches every record but is new each time, so no cached answer (the read cache, or a
   result-set cache) can serve it: each is what the first visitor of a query meets. The first
   request after an import is a warm-up and is not counted. It also times the server's count
   estimate of the collection (`estimated_document_count` through pymongo, on the embedded server's
   URL from `<data-dir>/embedded.json`), the call `cms serve`'s start-up check and the admin UI's
   notice use.
4. Prints a Markdown table: per size, the median of each round and the median of the rounds' medians
   (ms), the count estimate's median (ms), and the record count at which the median passes
   `--budget-ms` (linear interpolation between the two sizes around it; below the first size, on the
   line through the first two; past the last, on the line through the last two sizes, said so).

Exit status: 0 on success; 1 when the server does not start or a set-up step fails; 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from pymongo import MongoClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import remove_work  # noqa: E402 - a sibling script, not a package
from bench_vs_pocketbase import (
    COLLECTION,
    rows_to_csv,
    take_rows,
)
from common import (  # sibling scripts, not a package
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    HTTP_TIMEOUT_S,
    start_cms,
    wait_healthy,
)
from load_packages import DEFAULT_CSV, Api, Fatal, describe, ensure_collection, run_cli

from cms.store.documents import records_mongo_name

DEFAULT_SIZES = (500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000)
IMPORT_CHUNK = 10_000
"""Rows per CSV import (the endpoint takes at most 10 MiB; 10,000 rows of this CSV are about 2 MiB)."""
PER_PAGE = 30
DATABASE_TIMEOUT_S = 300
"""`cms serve`'s DATABASE_TIMEOUT_S here: the largest sizes' cold pages take longer than the default 20 s."""
SORT = "-created"


def interpolate(sizes: list[int], medians_ms: list[float], budget_ms: float) -> tuple[float | None, str]:
    """The record count at which the cold page's median passes `budget_ms`, and how it was found:
    linear between the last size under the budget and the first over it; below the first size on
    the line through the first two sizes (or the origin); past the last size on the line through the last two (None when
    that line does not rise)."""
    for index, (size, median) in enumerate(zip(sizes, medians_ms, strict=True)):
        if median > budget_ms:
            if index == 0:  # on the line through the first two sizes (fixed costs), else through 0
                if len(sizes) >= 2 and medians_ms[1] > median:
                    slope = (medians_ms[1] - median) / (sizes[1] - size)
                    return max(size + (budget_ms - median) / slope, 0.0), f"extrapolated below {size:,}"
                return size * budget_ms / median, f"below the first size ({size:,}), on the line through 0"
            low_size, low_ms = sizes[index - 1], medians_ms[index - 1]
            share = (budget_ms - low_ms) / (median - low_ms)
            return low_size + share * (size - low_size), f"between {low_size:,} and {size:,}"
    if len(sizes) >= 2 and medians_ms[-1] > medians_ms[-2]:
        slope = (medians_ms[-1] - medians_ms[-2]) / (sizes[-1] - sizes[-2])
        return sizes[-1] + (budget_ms - medians_ms[-1]) / slope, "extrapolated past the last size"
    return None, "never passed"


async def cold_page_ms(api: Api, round_no: int, size: int, sample: int) -> float:
    """Wall-clock ms of one cold list page (a filter no earlier request used). Raises Fatal on an
    error answer."""
    params = {"per_page": PER_PAGE, "sort": SORT, "filter": f'name!="envelope-{round_no}-{size}-{sample}"'}
    started = time.perf_counter()
    status, body, _ = await api.request("GET", f"/api/v1/collections/{COLLECTION}/records", params=params)
    elapsed_ms = (time.perf_counter() - started) * 1000
    if status != 200 or not isinstance(body, dict) or len(body.get("items", [])) != min(PER_PAGE, size):
        raise Fatal(f"cold page at {size:,} records: HTTP {status} {describe(body)}")
    return elapsed_ms


def estimate_ms(mongodb_url: str, database: str, mongo_name: str) -> float:
    """Wall-clock ms of `estimated_document_count` of one MongoDB collection (a fresh client per
    call is not timed)."""
    with MongoClient(mongodb_url, serverSelectionTimeoutMS=10_000) as client:
        coll = client[database][mongo_name]
        coll.database.command("ping")
        started = time.perf_counter()
        coll.estimated_document_count()
        return (time.perf_counter() - started) * 1000


async def import_rows(api: Api, rows: list[dict[str, Any]]) -> None:
    """Import `rows` into COLLECTION by the CSV endpoint, IMPORT_CHUNK at a time. Raises Fatal."""
    for start in range(0, len(rows), IMPORT_CHUNK):
        form = aiohttp.FormData()
        form.add_field("file", rows_to_csv(rows[start:start + IMPORT_CHUNK]), filename="packages.csv",
                       content_type="text/csv")
        status, body, _ = await api.request(
            "POST", f"/api/v1/collections/{COLLECTION}/records/import/csv", data=form)
        if status != 200 or not isinstance(body, dict) or body.get("failed"):
            raise Fatal(f"cms: CSV import failed: HTTP {status} {describe(body)}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring); exits with status 2 for bad arguments."""
    parser = argparse.ArgumentParser(description="Cold list page latency against collection size, embedded server.")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV,
                        help=f"packages CSV (default: {DEFAULT_CSV})")
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                        help="record counts, ascending, comma-separated (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=5, help="cold pages per size and round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="times the collection is grown afresh and measured (default: %(default)s)")
    parser.add_argument("--budget-ms", type=float, default=250.0, help="the latency budget (default: %(default)s)")
    parser.add_argument("--cms-workers", type=int, default=1, help="cms serve --workers (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error("--sizes must be whole numbers separated by commas")
    if not args.sizes or args.sizes != sorted(set(args.sizes)) or args.sizes[0] < 1:
        parser.error("--sizes must be ascending, distinct and at least 1")
    if min(args.samples, args.rounds, args.cms_workers) < 1 or args.budget_ms <= 0:
        parser.error("--samples, --rounds, --cms-workers and --budget-ms must be positive")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    return args


async def main_async(args: argparse.Namespace) -> int:
    """Run the measurement and print the report; returns the exit status."""
    rows = take_rows(args.csv, args.sizes[-1])
    sizes = [s for s in args.sizes if s <= len(rows)]
    work = Path(tempfile.mkdtemp(prefix="bench_envelope_"))
    # a cold page of a large collection takes longer than the default 20 s wait for the database
    os.environ["DATABASE_TIMEOUT_S"] = str(DATABASE_TIMEOUT_S)
    cms = start_cms(work, args.cms_workers)
    # per size: one list of sample medians per round; the estimate's timings
    page_ms: dict[int, list[float]] = {size: [] for size in sizes}
    count_ms: dict[int, list[float]] = {size: [] for size in sizes}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            await wait_healthy(session, cms, "/health")
            async with session.get(cms.base + "/health") as resp:
                cms_version = (await resp.json()).get("version", "?")
            urls = json.loads((work / "cms_data" / "embedded.json").read_text())
            api = Api(session, cms.base, ADMIN_EMAIL, ADMIN_PASSWORD)
            await api.login()
            status, body, _ = await api.request(
                "POST", "/api/v1/settings", json={"key": "rate_limit_enabled", "value": "false"})
            if status != 200:
                raise Fatal(f"cms: switching rate limiting off failed: HTTP {status} {describe(body)}")
            for round_no in range(1, args.rounds + 1):
                collection = await ensure_collection(api, COLLECTION, recreate=True)
                mongo_name = records_mongo_name(collection["id"])
                loaded = 0
                for size in sizes:
                    started = time.perf_counter()
                    await import_rows(api, rows[loaded:size])
                    print(f"round {round_no}: {size:,} records ({size - loaded:,} imported in "
                          f"{time.perf_counter() - started:.1f} s)", file=sys.stderr)
                    loaded = size
                    await cold_page_ms(api, round_no, size, 0)  # warm-up: connections, definitions
                    samples = [await cold_page_ms(api, round_no, size, n) for n in range(1, args.samples + 1)]
                    page_ms[size].append(statistics.median(samples))
                    count_ms[size].append(await asyncio.to_thread(
                        estimate_ms, urls["mongodb_url"], "cms", mongo_name))
                    print(f"  cold page median {page_ms[size][-1]:,.0f} ms (samples "
                          f"{', '.join(f'{s:,.0f}' for s in samples)}); count estimate "
                          f"{count_ms[size][-1]:,.1f} ms", file=sys.stderr)
    finally:
        cms.stop()
        remove_work(work, args.keep)
    medians = [statistics.median(page_ms[size]) for size in sizes]
    threshold, how = interpolate(sizes, medians, args.budget_ms)
    print(f"# The embedded server's envelope, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
    print(f"- cms {cms_version} embedded (SecantusDB child process), `cms serve --workers {args.cms_workers}`; "
          f"Python {platform.python_version()}; {platform.system()} {platform.release()}, nproc {os.cpu_count()}, "
          f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    print(f"- cold list page: `per_page={PER_PAGE}&sort={SORT}` with a filter new to every request "
          f"(`name!=\"envelope-...\"`, matches all), as the admin; median of {args.samples} per size and "
          f"round, {args.rounds} round(s), each growing the collection afresh by CSV imports\n")
    rounds_head = " | ".join(f"round {n} ms" for n in range(1, args.rounds + 1))
    print(f"| records | {rounds_head} | median ms | ms per 1,000 records | count estimate ms |")
    print("|---:|" + "---:|" * args.rounds + "---:|---:|---:|")
    for size, median in zip(sizes, medians, strict=True):
        per_round = " | ".join(f"{ms:,.0f}" for ms in page_ms[size])
        print(f"| {size:,} | {per_round} | **{median:,.0f}** | {median / size * 1000:,.1f} | "
              f"{statistics.median(count_ms[size]):,.1f} |")
    if threshold is None:
        print(f"\nThe cold page never passed {args.budget_ms:,.0f} ms up to {sizes[-1]:,} records.")
    else:
        print(f"\n**A cold list page passes {args.budget_ms:,.0f} ms at about {threshold:,.0f} records** ({how}).")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
