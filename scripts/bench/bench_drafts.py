"""Measure what drafts cost readers, and scheduled publishing at volume (issue 39, Benchmarks): readers'
warm list and get on a collection with drafts at least 0.9x the same on a collection without drafts;
1,000 schedules due in the same second all run within 5 s, each once (counted in the webhook
deliveries), on `cms serve --workers 2` (embedded: one of the two processes runs the worker).

Usage:

    python scripts/bench/bench_drafts.py [CSV] [--records 10000] [--workers 2] [--rounds 3] \\
        [--duration 10] [--connections 16] [--threads 2] [--schedules 1000] [--keep]

CSV defaults to `../shared/data/pypi-packages.csv`. Needs Debian's `wrk` on PATH and `psutil` (the
`bench` extra) for CPU times.

What it does:

1. Starts `cms serve --workers WORKERS` in embedded mode on a free port with a fresh data directory,
   switches rate limiting off.
2. Imports the same `--records` rows (the schema of `scripts/load_packages.py`) into `plain` and into
   `drafted`, then turns drafts on for `drafted` (its records become published copies, each with a
   working copy). Checks page 1 and one record of each as an anonymous reader (list and view rule "").
3. `--rounds` rounds of `wrk` per arm (list page 1 per_page 30, and GET of one record; the admin's
   token: the readers' path, through the read cache), each warm (read once before), the order of the
   two collections alternating; req/s, p50, p99. The ratio
   drafted / plain per arm (per round and of the medians) against the aim (>= 0.90).
4. `--rounds` times: a fresh collection with drafts and a webhook (create, update, delete) to a
   receiver in this process; creates `--schedules` drafts, schedules each for the same moment (a
   whole second, a few seconds ahead), then waits until every one is published. Reports the seconds
   from that moment to the last `published_at`, and the webhook deliveries (distinct `webhook-id`):
   each record must have exactly one `create` and nothing else.
5. Prints a Markdown report. Exit status: 0 on success (aims met or not: this prints figures);
   1 when the server does not start, a step or a check fails, or wrk saw errors; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
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
from bench_vs_pocketbase import ADMIN_EMAIL, ADMIN_PASSWORD, rows_to_csv, start_cms, take_rows, wait_healthy
from common import free_port  # noqa: E402 - a sibling script, not a package

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import DEFAULT_CSV, SCHEMA, Api, Fatal, run_cli  # a sibling script

PLAIN, DRAFTED = "plain", "drafted"
AIM_RATIO = 0.90
AIM_SCHEDULE_S = 5.0
CONCURRENCY = 16
"""Concurrent requests while creating and scheduling the drafts."""
LEAD_S = 8.0
SCHEDULING_FACTOR = 3.0
PROBE = 50
"""The moment is LEAD_S plus SCHEDULING_FACTOR times the time scheduling them all should take (from the
pace of the first PROBE schedule requests) ahead, so every schedule request lands before it."""


async def import_rows(api: Api, name: str, content: bytes, drafts: bool) -> None:
    """A public collection `name` with the packages schema holding `content`; with `drafts` turned on after."""
    body = await call(api, "POST", "/api/v1/collections", 201, f"creating {name}",
                      json={"name": name, "schema": SCHEMA, "list_rule": "", "view_rule": ""})
    form = aiohttp.FormData()
    form.add_field("file", content, filename=f"{name}.csv", content_type="text/csv")
    imported = await call(api, "POST", f"/api/v1/collections/{name}/records/import/csv", 200, f"importing {name}",
                          data=form)
    if imported.get("failed"):
        raise Fatal(f"importing into {name}: {len(imported['failed'])} rows failed")
    if drafts:
        started = time.perf_counter()
        await call(api, "PATCH", f"/api/v1/collections/{body['id']}", 200, f"turning drafts on for {name}",
                   json={"drafts": True})
        print(f"{name}: drafts on for {imported['imported']:,} records in {time.perf_counter() - started:.1f} s",
              file=sys.stderr)


async def check_read(session: aiohttp.ClientSession, arm: Arm, drafted: bool) -> None:
    """Read `arm` once as an anonymous reader (warming the cache) and check it. Raises Fatal."""
    async with session.get(arm.url) as resp:
        body = await resp.json()
        if resp.status != 200:
            raise Fatal(f"{arm.name}: HTTP {resp.status} {body}")
    item = body["items"][0] if "items" in body else body
    if "items" in body and body.get("total") != arm.expected_total:
        raise Fatal(f"{arm.name}: total {body.get('total')}, expected {arm.expected_total}")
    if drafted != ("status" in item) or (drafted and item["status"] != "published"):
        raise Fatal(f"{arm.name}: a record shows {sorted(item)}")


async def readers(args: argparse.Namespace, api: Api, session: aiohttp.ClientSession, base: str,
                  rows: list[dict[str, Any]], server: Any) -> dict[str, list[dict[str, Result]]]:
    """Steps 2 and 3: per arm (`list`, `get`), the rounds' results by collection."""
    content = rows_to_csv(rows)
    await import_rows(api, PLAIN, content, drafts=False)
    await import_rows(api, DRAFTED, content, drafts=True)
    arms: dict[str, dict[str, Arm]] = {"list": {}, "get": {}}
    for name in (PLAIN, DRAFTED):
        records = f"{base}/api/v1/collections/{name}/records"
        page = await call(api, "GET", f"/api/v1/collections/{name}/records?per_page=1&sort=-created", 200, "id")
        arms["list"][name] = Arm(f"{name} list", f"{records}?page=1&per_page={PER_PAGE}", len(rows))
        arms["get"][name] = Arm(f"{name} get", f"{records}/{page['items'][0]['id']}", 1)
        for arm in (arms["list"][name], arms["get"][name]):
            await check_read(session, arm, name == DRAFTED)
    results: dict[str, list[dict[str, Result]]] = {"list": [], "get": []}
    for number in range(args.rounds):
        for kind in ("list", "get"):
            by_name = {name: Result() for name in (PLAIN, DRAFTED)}
            for name in (PLAIN, DRAFTED) if number % 2 == 0 else (DRAFTED, PLAIN):
                print(f"round {number + 1}: {kind} {name}", file=sys.stderr)
                cpu_before = server.cpu_s()
                await asyncio.to_thread(concurrent_wrk, arms[kind][name], api.token, args, by_name[name])
                await asyncio.to_thread(settle, server)
                by_name[name].cpu_s = server.cpu_s() - cpu_before
            results[kind].append(by_name)
    return results


async def schedules_once(api: Api, number: int, count: int, hook_url: str,
                         received: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Step 4 once: returns `{seconds, creates, others, records}` (seconds: due moment to the last publish)."""
    name = f"scheduled{number}"
    await call(api, "POST", "/api/v1/collections", 201, f"creating {name}", json={
        "name": name, "drafts": True, "schema": [{"name": "title", "type": "text", "validation": {"required": True}}]})
    await call(api, "POST", "/api/v1/webhooks", 201, "creating the webhook", json={
        "url": hook_url, "collection_name": name, "events": ["create", "update", "delete"]})
    records = f"/api/v1/collections/{name}/records"
    semaphore = asyncio.Semaphore(CONCURRENCY)

    async def bounded(method: str, path: str, body: Any) -> Any:
        async with semaphore:
            return await call(api, method, path, 201 if method == "POST" and path == records else 200, path, json=body)

    created = await asyncio.gather(*(bounded("POST", records, {"data": {"title": f"r{i}"}}) for i in range(count)))
    ids = [c["id"] for c in created]
    # the moment: a whole second far enough ahead for every schedule request to land before it, from the
    # pace of the first PROBE ones (scheduled an hour ahead, then moved to the moment with the rest)
    probe, started = ids[:PROBE], time.perf_counter()
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    await asyncio.gather(*(bounded("POST", f"{records}/{i}/publish", {"at": later}) for i in probe))
    estimate_s = (time.perf_counter() - started) * count / len(probe)
    due = (datetime.now(UTC) + timedelta(seconds=SCHEDULING_FACTOR * estimate_s + LEAD_S)).replace(microsecond=0)
    await asyncio.gather(*(bounded("POST", f"{records}/{i}/publish", {"at": due.isoformat()}) for i in ids))
    if datetime.now(UTC) >= due:
        raise Fatal("scheduling took longer than the lead: raise LEAD_S")
    print(f"{name}: {count} drafts scheduled for {due.isoformat()}", file=sys.stderr)
    while (datetime.now(UTC) - due).total_seconds() < 60:
        page = await call(api, "GET", f"{records}?per_page=1", 200, "counting")
        if page["total"] >= count:
            break
        await asyncio.sleep(0.1)
    published = []
    for page_number in range(1, math.ceil(count / 100) + 1):
        page = await call(api, "GET", f"{records}?per_page=100&page={page_number}", 200, "reading")
        published += [datetime.fromisoformat(r["published_at"].replace("Z", "+00:00")) for r in page["items"]]
    if len(published) < count:
        raise Fatal(f"{name}: {len(published)} of {count} published within 60 s")
    wait_until = time.monotonic() + 60
    while time.monotonic() < wait_until:
        mine = [b for b in received.values() if b.get("collection") == name]
        if len(mine) >= count:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # a second delivery of a record would come now
    mine = [b for b in received.values() if b.get("collection") == name]
    kinds = Counter((b["event"], b["record_id"]) for b in mine)
    creates = sum(1 for (event, record_id), n in kinds.items() if event == "create" and n == 1 and record_id in ids)
    return {"seconds": (max(published) - due).total_seconds(), "earliest_s": (min(published) - due).total_seconds(),
            "creates": creates, "others": len(mine) - creates, "records": count}


async def receiver() -> tuple[web.AppRunner, str, dict[str, dict[str, Any]]]:
    """A webhook receiver on loopback: (runner, url, each distinct delivery's body by its `webhook-id`)."""
    received: dict[str, dict[str, Any]] = {}

    async def hook(request: web.Request) -> web.Response:
        received.setdefault(request.headers["webhook-id"], await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/hook", received


def reads_line(reads: dict[str, list[dict[str, Result]]]) -> str:
    """One line of the readers' medians (printed as soon as they are measured)."""
    parts = []
    for kind, rounds in reads.items():
        plain, drafted = median_result([r[PLAIN] for r in rounds]), median_result([r[DRAFTED] for r in rounds])
        parts.append(f"{kind} plain {plain.rps:,.0f} req/s, drafted {drafted.rps:,.0f} req/s, "
                     f"ratio {drafted.rps / plain.rps:.3f}")
    return "; ".join(parts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Readers' warm reads with drafts vs without; scheduled publishes.")
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV, help=f"packages CSV (default: {DEFAULT_CSV})")
    parser.add_argument("--records", type=int, default=10_000, help="rows per collection (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="cms serve --workers (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each part (default: %(default)s)")
    parser.add_argument("--duration", type=int, default=10, help="wrk -d, seconds (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=16, help="wrk -c (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default: %(default)s)")
    parser.add_argument("--schedules", type=int, default=1000, help="drafts due at once (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and server log)")
    args = parser.parse_args(argv)
    if min(args.records, args.workers, args.rounds, args.duration, args.connections, args.threads,
           args.schedules) < 1:
        parser.error("every number must be at least 1")
    if not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    if shutil.which("wrk") is None:
        parser.error("wrk is not on PATH (apt-get install wrk)")
    return args


def cell(result: Result) -> str:
    """req/s / p50 / p99 ms."""
    return f"{result.rps:,.0f} / {result.p50:,.1f} / {result.p99:,.1f}"


def median_result(results: list[Result]) -> Result:
    """The medians of req/s, p50 and p99 as one Result."""
    return Result(requests=round(statistics.median(r.rps for r in results)), seconds=1.0,
                  p50_ms=statistics.median(r.p50 for r in results), p99_ms=statistics.median(r.p99 for r in results))


def report(args: argparse.Namespace, version: str, records: int, reads: dict[str, list[dict[str, Result]]],
           scheduled: list[dict[str, Any]]) -> int:
    """Print the Markdown report; returns 1 when a run saw errors or a schedule ran other than once."""
    status = 0
    print(f"# Drafts: readers' warm reads and scheduled publishes, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
    print(f"- cms {version} embedded (SecantusDB + redis-server children), `cms serve --workers {args.workers}` "
          "(one process runs the worker); rate limiting off")
    print(machine_line())
    print(f"- readers: {records:,} rows of {args.csv.name} in `{PLAIN}` and in `{DRAFTED}` (drafts turned on after "
          f"the import: every record published); anonymous, warm; wrk -t{args.threads} -c{args.connections} "
          f"-d{args.duration}s per arm, {args.rounds} rounds, order alternating")
    print("\n| arm, round | plain req/s / p50 / p99 ms | drafted req/s / p50 / p99 ms | ratio drafted/plain |")
    print("|---|---:|---:|---:|")
    for kind, rounds in reads.items():
        for number, res in enumerate(rounds, 1):
            print(f"| {kind} {number} | {cell(res[PLAIN])} | {cell(res[DRAFTED])} | "
                  f"{res[DRAFTED].rps / res[PLAIN].rps:.3f} |")
            for name, result in res.items():
                if result.problems:
                    status = 1
                    print(f"| ANOMALY {kind} {number} {name} | {dict(result.problems)} | | |")
        plain, drafted = median_result([r[PLAIN] for r in rounds]), median_result([r[DRAFTED] for r in rounds])
        ratio = drafted.rps / plain.rps
        print(f"| **{kind}, median of {len(rounds)}** | {cell(plain)} | {cell(drafted)} | **{ratio:.3f}** "
              f"({'met' if ratio >= AIM_RATIO else 'missed'}) |")
    print(f"\n- schedules: {args.schedules:,} drafts of a fresh collection (with a webhook) due at the same whole "
          f"second, {len(scheduled)} runs; seconds from that moment to the first and the last `published_at`; "
          "webhook deliveries (distinct webhook-id)")
    print("\n| run | first publish s | last publish s | records with exactly one `create` | other deliveries |")
    print("|---|---:|---:|---:|---:|")
    for number, run in enumerate(scheduled, 1):
        print(f"| {number} | {run['earliest_s']:.2f} | {run['seconds']:.2f} | {run['creates']:,} of "
              f"{run['records']:,} | {run['others']} |")
        if run["creates"] != run["records"] or run["others"]:
            status = 1
    if scheduled:
        last = statistics.median(run["seconds"] for run in scheduled)
        print(f"| **median** | | **{last:.2f}** | | |")
        print(f"\nAim: all within {AIM_SCHEDULE_S:.0f} s of their time, each once: "
              f"{'met' if last <= AIM_SCHEDULE_S and status == 0 else 'missed'}.")
    return status


async def main_async(args: argparse.Namespace) -> int:
    """Set up, measure, report; returns the exit status (see the module docstring)."""
    rows = take_rows(args.csv, args.records)
    work = Path(tempfile.mkdtemp(prefix="bench_drafts_"))
    server = start_cms(work, workers=args.workers)
    server.probe_url = server.base + "/health"
    load_at_start, started = load_average(), time.monotonic()
    hook_runner, hook_url, received = await receiver()
    scheduled: list[dict[str, Any]] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            await wait_healthy(session, server, "/health")
            async with session.get(server.base + "/health") as resp:
                version = (await resp.json()).get("version", "?")
            api = Api(session, server.base, ADMIN_EMAIL, ADMIN_PASSWORD)
            await api.login()
            await call(api, "POST", "/api/v1/settings", 200, "switching rate limiting off",
                       json={"key": "rate_limit_enabled", "value": "false"})
            reads = await readers(args, api, session, server.base, rows, server)
            print(f"readers: {reads_line(reads)}", file=sys.stderr)
            for number in range(args.rounds):
                scheduled.append(await schedules_once(api, number + 1, args.schedules, hook_url, received))
                print(f"schedules run {number + 1}: last publish {scheduled[-1]['seconds']:.2f} s after its time",
                      file=sys.stderr)
    finally:
        server.stop()
        await hook_runner.cleanup()
        anomalies = log_anomalies(server.log_path)
        remove_work(work, args.keep)
    status = report(args, version, len(rows), reads, scheduled)
    print(f"- server log: {len(anomalies)} error line(s), first: {anomalies[0]}" if anomalies
          else "- server log: no ERROR / Traceback / 5xx lines")
    print(f"- wall time {time.monotonic() - started:,.0f} s; load average (1/5/15 min) at the start {load_at_start}, "
          f"at the end {load_average()} (above the core count: other processes competed for the CPU)")
    return status


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    return int(run_cli(main_async(parse_args(argv))))


if __name__ == "__main__":
    sys.exit(main())
