"""What declared indexes cost writes (issue 38, item 5): creates and updates through the API into a
collection with five declared indexes against the same collection without them, on the embedded
SecantusDB, and the same writes straight to SecantusDB (no service) to show the database's part.

    PYTHONPATH=. python scripts/bench/bench_index_writes.py [--records 2000] [--rounds 3] [--concurrency 16]

1. Starts `cms serve --workers 1` embedded (fresh data dir, rate limiting off) and makes two base
   collections of the same schema (`title` text, `views`, `score` numbers, `status`, `lang` text,
   `published` a date): `plain` (only the indexes every collection has) and `indexed` with five declared
   indexes (`views`, `score`, `status`+`-created`, `lang`, `published`).
2. Per round, alternating which goes first: `--records` creates into each (`--concurrency` at once),
   then one PATCH of `views` and `status` per record created; records/s of each and the server's CPU
   (cms serve and its children, user + system) per write.
3. The database alone: `--records` `insert_one` and `update_one` calls (one at a time) into two raw
   collections with the same indexes as each, median µs per call.

Prints one line per round and a Markdown table of the medians. Figures: docs/performance.md, Indexes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from pymongo import MongoClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_relations import cms_call, gather_limited  # noqa: E402 - sibling scripts, not a package
from common import ADMIN_EMAIL, ADMIN_PASSWORD, HTTP_TIMEOUT_S, start_cms, wait_healthy  # noqa: E402
from load_packages import Api, run_cli  # noqa: E402

from cms.runtime.embedded import start_mongodb  # noqa: E402

FIELDS = [{"name": "title", "type": "text"}, {"name": "views", "type": "number"}, {"name": "score", "type": "number"},
          {"name": "status", "type": "text"}, {"name": "lang", "type": "text"}, {"name": "published", "type": "date"}]
DECLARED = [{"fields": ["views"]}, {"fields": ["score"]}, {"fields": ["status", "-created"]}, {"fields": ["lang"]},
            {"fields": ["published"]}]
RAW_INDEXES = [[("views", 1)], [("score", 1)], [("status", 1), ("created", -1)], [("lang", 1)], [("published", 1)]]
BASE_INDEXES = [[("created", 1), ("_id", 1)]]
STATUSES, LANGS = ("draft", "review", "published"), ("en", "de", "fr", "es")


def data(number: int) -> dict[str, Any]:
    """The data of record `number`."""
    return {"title": f"title {number}", "views": number * 7_919 % 100_000, "score": number % 97,
            "status": STATUSES[number % 3], "lang": LANGS[number % 4],
            "published": (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=number)).isoformat()}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its live descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


async def writes(api: Api, collection: str, count: int, concurrency: int, pid: int, tag: str) -> tuple[float, ...]:
    """`count` creates then `count` updates: (creates/s, CPU ms per create, updates/s, CPU ms per update)."""
    path = f"/api/v1/collections/{collection}/records"
    cpu, started = cpu_s(pid), time.perf_counter()
    made = await gather_limited(range(count), lambda n: cms_call(
        api, "POST", path, 201, "a create", json={"data": {**data(n), "title": f"{tag} {n}"}}), concurrency)
    create_s, create_cpu = time.perf_counter() - started, cpu_s(pid) - cpu
    cpu, started = cpu_s(pid), time.perf_counter()
    await gather_limited(made, lambda record: cms_call(
        api, "PATCH", f"{path}/{record['id']}", 200, "an update",
        json={"data": {"views": record["views"] + 1, "status": "published"}}), concurrency)
    update_s, update_cpu = time.perf_counter() - started, cpu_s(pid) - cpu
    return count / create_s, create_cpu * 1000 / count, count / update_s, update_cpu * 1000 / count


def database_alone(count: int) -> dict[str, tuple[float, float]]:
    """Median µs of one `insert_one` and one `update_one` on SecantusDB, per kind of collection."""
    out: dict[str, tuple[float, float]] = {}
    with start_mongodb(Path(tempfile.mkdtemp()) / "db") as server:
        db = MongoClient(server.url).bench
        for name, indexes in (("plain", BASE_INDEXES), ("indexed", BASE_INDEXES + RAW_INDEXES)):
            for keys in indexes:
                db[name].create_index(keys)
            inserts, updates = [], []
            for n in range(count):
                doc = {"_id": f"r{n:06d}", "created": n, "updated": n, **data(n)}
                started = time.perf_counter()
                db[name].insert_one(doc)
                inserts.append((time.perf_counter() - started) * 1e6)
            for n in range(count):
                started = time.perf_counter()
                db[name].update_one({"_id": f"r{n:06d}"}, {"$set": {"views": n, "status": "published", "updated": -n}})
                updates.append((time.perf_counter() - started) * 1e6)
            out[name] = (statistics.median(inserts), statistics.median(updates))
    return out


async def main_async(args: argparse.Namespace) -> int:
    """Run the rounds through the API, then the database alone; print the table."""
    work = Path(tempfile.mkdtemp(prefix="bench_index_writes_"))
    cms = start_cms(work, 1)
    results: dict[str, list[tuple[float, ...]]] = {"plain": [], "indexed": []}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            await wait_healthy(session, cms, "/health")
            api = Api(session, cms.base, ADMIN_EMAIL, ADMIN_PASSWORD)
            await api.login()
            await cms_call(api, "POST", "/api/v1/settings", 200, "switching rate limiting off",
                           json={"key": "rate_limit_enabled", "value": "false"})
            for name, indexes in (("plain", []), ("indexed", DECLARED)):
                await cms_call(api, "POST", "/api/v1/collections", 201, f"creating {name}", json={
                    "name": name, "type": "base", "schema": {"fields": FIELDS}, "indexes": indexes})
            for number in range(args.rounds):
                order = ("plain", "indexed") if number % 2 == 0 else ("indexed", "plain")
                for name in order:
                    figures = await writes(api, name, args.records, args.concurrency, cms.proc.pid, f"r{number}")
                    results[name].append(figures)
                    print(f"round {number + 1} {name}: {figures[0]:,.0f} creates/s ({figures[1]:.2f} ms CPU each), "
                          f"{figures[2]:,.0f} updates/s ({figures[3]:.2f} ms CPU each)", file=sys.stderr)
    finally:
        cms.stop()
    alone = database_alone(args.records)
    print(f"\n{args.records:,} writes per round and collection, {args.concurrency} at once, {args.rounds} rounds "
          "(medians); CPU = cms serve and its children (SecantusDB, redis-server)\n")
    print("| collection | creates/s | CPU ms per create | updates/s | CPU ms per update | SecantusDB alone: "
          "insert_one µs / update_one µs |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, label in (("plain", "no declared index"), ("indexed", "five declared indexes")):
        med = [statistics.median(r[i] for r in results[name]) for i in range(4)]
        insert_us, update_us = alone[name]
        print(f"| {label} | {med[0]:,.0f} | {med[1]:.2f} | {med[2]:,.0f} | {med[3]:.2f} | "
              f"{insert_us:,.0f} / {update_us:,.0f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    if min(args.records, args.rounds, args.concurrency) < 1:
        parser.error("every count must be at least 1")
    return run_cli(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
