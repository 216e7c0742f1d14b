"""Measure what localized fields cost (issue 40): a warm list read with `?locale=de`, whose values fall
back to `en` on half the records, against the same list of a collection without localized fields (aim:
at least 0.85 of its req/s); and cold lists (a filter new to each request, so no cache answers) with a
fallback filter, and with a fallback sort, against the same lists of that collection, at the embedded
server's envelope (about 1,000 records per collection: a cold page within 250 ms).

Usage:

    python scripts/bench/bench_locales.py [CSV] [--records 1000] [--workers 2] [--rounds 3] \\
        [--duration 10] [--connections 16] [--threads 2] [--cold 5] [--keep]

CSV defaults to `../shared/data/pypi-packages.csv`. Needs Debian's `wrk` on PATH and `psutil` (the
`bench` extra) for CPU times.

What it does:

1. Starts `cms serve --workers WORKERS` in embedded mode on a free port with a fresh data directory in a
   temp dir, switches rate limiting off and sets the `locales` setting to `en`, then `de` falling back
   to `en`.
2. Creates two collections of the same `--records` rows (the schema of `scripts/load_packages.py`),
   list and view rule "": `plain`, and `localized` whose `version` and `summary` are localized; its
   rows hold their `en` values and, on every other row, `de` values too (`version` + "-de", "DE: " +
   summary), imported with `version:en,version:de,summary:en,summary:de` columns.
3. Checks page 1 of `plain` and of `localized?locale=de` once (total, 30 items, `de` shown where there is
   one and `en` elsewhere, `Content-Language: de`), which fills the read cache: every measured warm
   request is a hit.
4. `--rounds` rounds of `wrk -tTHREADS -cCONNECTIONS -dDURATIONs --latency` per collection (plain:
   page 1; localized: page 1 `?locale=de`), the order alternating between rounds, waiting after each
   run until the server is idle.
5. Cold: `--rounds` rounds of `--cold` sequential requests per case, each with a filter no request
   asked before: `summary!="cold-N"` (every record matches; on `localized?locale=de` the two-branch
   `$or` of a fallback), then the same with `sort=summary` (`localized`: the `$ifNull` aggregation).
   The median per round, then the median of the rounds.
6. Stops the server and prints Markdown tables and the ratios.

Exit status: 0 on success (figures are printed, not judged); 1 when the server does not start, a
set-up step or a check fails, or wrk saw a non-2xx answer or socket errors; 2 for bad arguments; 130
when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from common import remove_work  # noqa: E402 - a sibling script, not a package
from bench_rules import (  # sibling scripts
    HTTP_TIMEOUT_S,
    PER_PAGE,
    Arm,
    Result,
    call,
    concurrent_wrk,
    load_average,
    log_anomalies,
    machine_line,
    settle,
)
from bench_vs_pocketbase import ADMIN_EMAIL, ADMIN_PASSWORD, start_cms, take_rows, wait_healthy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import DEFAULT_CSV, SCHEMA, Api, Fatal, run_cli  # a sibling script

PLAIN = "plain"
LOCALIZED = "localized"
LOCALES = '[{"code": "en"}, {"code": "de", "fallback": "en"}]'
LOCALIZED_FIELDS = ("version", "summary")
AIM = 0.85  # issue 40: the localized warm list at least 0.85 of the plain one


def schema(localized: bool) -> dict[str, Any]:
    """The packages schema, `version` and `summary` localized when `localized`."""
    return {"fields": [{**f, "localized": True} if localized and f["name"] in LOCALIZED_FIELDS else f
                       for f in SCHEMA["fields"]]}


def german(field: str, value: Any) -> str:
    """The `de` value of row field `field` (its `en` value is the row's)."""
    return f"{value}-de" if field == "version" else f"DE: {value}"


def csv_of(rows: list[dict[str, Any]], localized: bool) -> bytes:
    """The rows as an import file; for `localized`, `field:en` / `field:de` columns, `de` on even rows."""
    columns = [f["name"] for f in SCHEMA["fields"]]
    header = [c for name in columns for c in ((f"{name}:en", f"{name}:de") if localized and name in LOCALIZED_FIELDS
                                              else (name,))]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for number, row in enumerate(rows):
        cells: list[str] = []
        for name in columns:
            value = row.get(name, "")
            text = str(value).lower() if isinstance(value, bool) else "" if value is None else str(value)
            cells.append(text)
            if localized and name in LOCALIZED_FIELDS:
                cells.append(german(name, text) if number % 2 == 0 and text else "")
        writer.writerow(cells)
    return out.getvalue().encode()


async def make_collection(api: Api, name: str, content: bytes) -> None:
    """A collection open to everyone filled by one CSV import. Raises Fatal."""
    await call(api, "POST", "/api/v1/collections", 201, f"creating {name}",
               json={"name": name, "type": "base", "schema": schema(name == LOCALIZED), "list_rule": "",
                     "view_rule": ""})
    form = aiohttp.FormData()
    form.add_field("file", content, filename=f"{name}.csv", content_type="text/csv")
    started = time.perf_counter()
    body = await call(api, "POST", f"/api/v1/collections/{name}/records/import/csv", 200, f"importing into {name}",
                      data=form)
    if body.get("failed"):
        raise Fatal(f"importing into {name}: {len(body['failed'])} rows failed, first {body['failed'][0]}")
    print(f"{name}: imported {body['imported']:,} rows in {time.perf_counter() - started:.1f} s", file=sys.stderr)


async def check_page(session: aiohttp.ClientSession, arm: Arm, token: str, rows: dict[str, dict[str, Any]]) -> int:
    """GET page 1 of `arm` once (filling the read cache) and check it; returns the body's bytes. Raises Fatal."""
    async with session.get(arm.url, headers={"Authorization": f"Bearer {token}"}) as resp:
        raw = await resp.read()
        language = resp.headers.get("Content-Language")
        if resp.status != 200:
            raise Fatal(f"listing {arm.name}: HTTP {resp.status} {raw[:200]!r}")
    body = json.loads(raw)
    if body.get("total") != arm.expected_total or len(body.get("items", [])) != PER_PAGE:
        raise Fatal(f"{arm.name}: total {body.get('total')} and {len(body.get('items', []))} items")
    for item in body["items"]:
        number, row = rows[item["name"]]["number"], rows[item["name"]]
        wanted = str(row.get("summary") or "") or None
        if arm.name == LOCALIZED and number % 2 == 0 and wanted:
            wanted = german("summary", wanted)
        if (item.get("summary") or None) != wanted:
            raise Fatal(f"{arm.name}: record {item['name']} shows summary {item.get('summary')!r}, not {wanted!r}")
    if arm.name == LOCALIZED and language != "de":
        raise Fatal(f"{arm.name}: Content-Language {language!r}")
    return len(raw)


async def cold(session: aiohttp.ClientSession, base: str, token: str, name: str, query: str, count: int,
               serial: list[int], records: int) -> list[float]:
    """`count` pages of collection `name` (`query` added), each with a filter no request asked before; ms
    each. Raises Fatal on an error answer or a wrong total."""
    times = []
    for _ in range(count):
        serial[0] += 1
        url = (f"{base}/api/v1/collections/{name}/records?per_page={PER_PAGE}&{query}"
               f"&filter={quote(f'summary!={chr(34)}cold-{serial[0]}{chr(34)}')}")
        started = time.perf_counter()
        async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
            raw = await resp.read()
        times.append((time.perf_counter() - started) * 1000)
        if resp.status != 200 or json.loads(raw).get("total") != records:
            raise Fatal(f"cold {name}?{query}: HTTP {resp.status} {raw[:200]!r}")
    return times


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Localized fields: warm list with fallbacks, cold lists.")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV, help=f"packages CSV (default: {DEFAULT_CSV})")
    parser.add_argument("--records", type=int, default=1_000, help="rows per collection (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="cms serve --workers (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--duration", type=int, default=10, help="wrk -d, seconds (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=16, help="wrk -c (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default: %(default)s)")
    parser.add_argument("--cold", type=int, default=5, help="cold pages per case and round (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and server log)")
    args = parser.parse_args(argv)
    if min(args.records, args.workers, args.rounds, args.duration, args.connections, args.threads, args.cold) < 1:
        parser.error("every number must be at least 1")
    if args.records < 2 * PER_PAGE:
        parser.error(f"--records must be at least {2 * PER_PAGE}")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    if shutil.which("wrk") is None:
        parser.error("wrk is not on PATH (apt-get install wrk)")
    return args


def cpu_ms(result: Result) -> float:
    """Server CPU ms per completed request."""
    return result.cpu_s * 1000 / result.requests if result.requests else float("nan")


COLD_CASES = (("filter", ""), ("filter + sort", "sort=summary"))


async def main_async(args: argparse.Namespace) -> int:
    """Set up, measure, report; returns the exit status (see the module docstring)."""
    rows = take_rows(args.csv, args.records)
    records = len(rows)
    by_name = {row["name"]: {**row, "number": number} for number, row in enumerate(rows)}
    work = Path(tempfile.mkdtemp(prefix="bench_locales_"))
    server = start_cms(work, workers=args.workers)
    server.probe_url = server.base + "/health"
    rounds: list[dict[str, Result]] = []
    cold_rounds: list[dict[tuple[str, str], float]] = []
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
            await call(api, "POST", "/api/v1/settings", 200, "setting the locales",
                       json={"key": "locales", "value": LOCALES})
            for name in (PLAIN, LOCALIZED):
                await make_collection(api, name, csv_of(rows, name == LOCALIZED))
            token = api.token
            base = f"{server.base}/api/v1/collections"
            arm_list = [Arm(PLAIN, f"{base}/{PLAIN}/records?page=1&per_page={PER_PAGE}", records),
                        Arm(LOCALIZED, f"{base}/{LOCALIZED}/records?page=1&per_page={PER_PAGE}&locale=de", records)]
            sizes = {arm.name: await check_page(session, arm, token, by_name) for arm in arm_list}
        for number in range(args.rounds):
            results = {arm.name: Result() for arm in arm_list}
            for arm in arm_list if number % 2 == 0 else arm_list[::-1]:
                print(f"round {number + 1}: {arm.name}", file=sys.stderr)
                cpu_before = server.cpu_s()
                await asyncio.to_thread(concurrent_wrk, arm, token, args, results[arm.name])
                await asyncio.to_thread(settle, server)
                results[arm.name].cpu_s = server.cpu_s() - cpu_before
            rounds.append(results)
        serial = [0]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            for number in range(args.rounds):
                medians: dict[tuple[str, str], float] = {}
                for case, query in COLD_CASES:
                    order = (PLAIN, LOCALIZED) if number % 2 == 0 else (LOCALIZED, PLAIN)
                    for name in order:
                        asked = "&".join(q for q in (query, "locale=de" if name == LOCALIZED else "") if q)
                        times = await cold(session, server.base, token, name, asked, args.cold, serial, records)
                        medians[(case, name)] = statistics.median(times)
                shown = ", ".join(f"{c}/{n} {ms:.0f} ms" for (c, n), ms in medians.items())
                print(f"cold round {number + 1}: {shown}", file=sys.stderr)
                cold_rounds.append(medians)
    finally:
        server.stop()
        print(f"server stopped (exit {server.proc.returncode})", file=sys.stderr)
        anomalies = log_anomalies(server.log_path)
        remove_work(work, args.keep)
    print(f"# Localized fields, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
    print(f"- cms {version} embedded (SecantusDB + redis-server children), `cms serve --workers {args.workers}`; "
          f"rate limiting off; locales en, de -> en")
    print(machine_line() + f" (at start: {load_at_start})")
    print(f"- data: {records:,} rows of {args.csv.name} in `{PLAIN}` and in `{LOCALIZED}` (version and summary "
          f"localized, `de` on every other row); list and view rule \"\"")
    print(f"- warm: page 1, per_page {PER_PAGE}, default sort, as the admin, cached before wrk starts; "
          f"`{LOCALIZED}` with ?locale=de; body {sizes[PLAIN]:,} B / {sizes[LOCALIZED]:,} B; wrk -t{args.threads} "
          f"-c{args.connections} -d{args.duration}s --latency, {args.rounds} rounds, order alternating")
    print("\n| round | plain req/s / p50 / p99 ms | localized de req/s / p50 / p99 ms | ratio | "
          "server CPU ms/req plain / localized |")
    print("|---|---:|---:|---:|---:|")
    ratios = []
    for number, res in enumerate(rounds, 1):
        plain, local = res[PLAIN], res[LOCALIZED]
        ratio = local.rps / plain.rps if plain.rps else float("nan")
        ratios.append(ratio)
        print(f"| {number} | {plain.rps:,.0f} / {plain.p50:.1f} / {plain.p99:.1f} | {local.rps:,.0f} / "
              f"{local.p50:.1f} / {local.p99:.1f} | {ratio:.3f} | {cpu_ms(plain):.2f} / {cpu_ms(local):.2f} |")
    medians_rps = {name: statistics.median(r[name].rps for r in rounds) for name in (PLAIN, LOCALIZED)}
    ratio_of_medians = medians_rps[LOCALIZED] / medians_rps[PLAIN] if medians_rps[PLAIN] else float("nan")
    print(f"| **median** | {medians_rps[PLAIN]:,.0f} | {medians_rps[LOCALIZED]:,.0f} | **{ratio_of_medians:.3f}** | |")
    print(f"\nWarm: ratio of the medians {ratio_of_medians:.3f} (per-round median {statistics.median(ratios):.3f}); "
          f"aim >= {AIM:.2f}: {'met' if ratio_of_medians >= AIM else 'missed'}.")
    print(f"\n- cold: {args.cold} pages per case and round, each with a filter new to the server "
          f"(`summary!=\"cold-N\"`, every record matches), {args.rounds} rounds; median ms per round, then of "
          "the rounds")
    heads = " | ".join(f"round {n}" for n in range(1, args.rounds + 1))
    print(f"\n| case | {heads} | median ms | localized / plain |")
    print("|---|" + "---:|" * (args.rounds + 2))
    for case, _query in COLD_CASES:
        middle = {name: statistics.median(r[(case, name)] for r in cold_rounds) for name in (PLAIN, LOCALIZED)}
        for name in (PLAIN, LOCALIZED):
            label = f"{case}, {name}" + (" ?locale=de" if name == LOCALIZED else "")
            shown = " | ".join(f"{r[(case, name)]:.0f}" for r in cold_rounds)
            share = f"{middle[LOCALIZED] / middle[PLAIN]:.2f}" if name == LOCALIZED else ""
            print(f"| {label} | {shown} | **{middle[name]:.0f}** | {share} |")
    status = 0
    for number, res in enumerate(rounds, 1):
        for name, result in res.items():
            if result.problems:
                status = 1
                listed = ", ".join(f"{n:,} x {p}" for p, n in result.problems.most_common())
                print(f"- ANOMALY round {number}, {name}: {listed}")
    print(f"- server log: {len(anomalies)} error line(s), first: {anomalies[0]}" if anomalies
          else "- server log: no ERROR / Traceback / 5xx lines")
    return status


def main(argv: list[str] | None = None) -> int:
    """Entry point: see the module docstring."""
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
