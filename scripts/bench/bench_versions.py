"""Benchmark what record versions cost a running CMS: creates and updates into a collection keeping
versions against the same into one keeping none, and the version list's latency.

Usage:

    python scripts/bench/bench_versions.py --url http://127.0.0.1:8090 --email ADMIN_EMAIL \\
        --password ADMIN_PASSWORD [--records 300] [--updates 600] [--concurrency 16] [--rounds 3] [--keep 10]

It starts nothing: point it at a `cms serve` you started (switch `rate_limit_enabled` off first, or the
general limit paces the writes). Each round creates two collections afresh, `bench_plain_<r>` (versions
0) and `bench_versioned_<r>` (versions `--keep`), with a text and a number field, and in each, one after
the other (the kind that goes first alternates by round):

1. `--records` creates from `--concurrency` workers;
2. `--updates` PATCHes spread over those records, from `--concurrency` workers (so each record of the
   versioned collection ends with versions to trim once it passes `--keep`);
3. (versioned only) 100 `GET .../records/{id}/versions` of records' first pages.

It prints per round and kind the writes per second, then the medians of the rounds and the versioned
rate over the plain one, and the p50 / p95 of the version list. Collections are deleted at the end.
Exit status: 0 on success, 1 when the server is unreachable or a request fails.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

SCHEMA = [{"name": "title", "type": "text"}, {"name": "views", "type": "number"}]


class Failed(Exception):
    """A request got an unexpected answer."""


async def call(session: aiohttp.ClientSession, method: str, url: str, token: str, body: Any = None,
               expect: int = 200) -> Any:
    """One request with the admin's token; its JSON answer. Raises Failed on another status than `expect`."""
    async with session.request(method, url, json=body, headers={"Authorization": f"Bearer {token}"}) as response:
        if response.status != expect:
            raise Failed(f"{method} {url}: {response.status} {await response.text()}")
        return await response.json() if response.status != 204 else None


async def run_all(jobs: list[Callable[[], Awaitable[Any]]], concurrency: int) -> float:
    """Run `jobs` from `concurrency` workers; returns the seconds taken."""
    queue = list(reversed(jobs))

    async def worker() -> None:
        while queue:
            await queue.pop()()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def one_kind(session: aiohttp.ClientSession, base: str, token: str, name: str, versions: int,
                   args: argparse.Namespace) -> tuple[float, float, list[float]]:
    """(creates/s, updates/s, version list latencies in ms) of one collection."""
    collection = await call(session, "POST", f"{base}/collections", token,
                            {"name": name, "schema": SCHEMA, "versions": versions}, expect=201)
    records = f"{base}/collections/{name}/records"
    ids: list[str] = []

    async def create(n: int) -> None:
        ids.append((await call(session, "POST", records, token, {"data": {"title": f"r{n}", "views": n}},
                               expect=201))["id"])

    create_s = await run_all([lambda n=n: create(n) for n in range(args.records)], args.concurrency)

    async def update(n: int) -> None:
        await call(session, "PATCH", f"{records}/{ids[n % len(ids)]}", token, {"data": {"views": n}})

    update_s = await run_all([lambda n=n: update(n) for n in range(args.updates)], args.concurrency)
    latencies: list[float] = []
    if versions:
        for n in range(100):
            started = time.perf_counter()
            await call(session, "GET", f"{records}/{ids[n % len(ids)]}/versions", token)
            latencies.append((time.perf_counter() - started) * 1000)
    await call(session, "DELETE", f"{base}/collections/{collection['id']}", token, expect=204)
    return args.records / create_s, args.updates / update_s, latencies


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile `share` (0..1) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


async def main(args: argparse.Namespace) -> int:
    """Run the rounds and print the report; the exit status."""
    base = args.url.rstrip("/") + "/api/v1"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        async with session.post(f"{base}/auth/login", json={"email": args.email, "password": args.password}) as r:
            if r.status != 200:
                print(f"login failed: {r.status} {await r.text()}", file=sys.stderr)
                return 1
            token = (await r.json())["token"]["access_token"]
        rates: dict[str, list[tuple[float, float]]] = {"plain": [], "versioned": []}
        latencies: list[float] = []
        for round_ in range(args.rounds):
            kinds = [("plain", 0), ("versioned", args.keep)]
            for kind, versions in kinds if round_ % 2 == 0 else kinds[::-1]:
                creates, updates, lists = await one_kind(session, base, token, f"bench_{kind}_{round_}", versions,
                                                         args)
                rates[kind].append((creates, updates))
                latencies += lists
                print(f"round {round_ + 1} {kind:9}: {creates:7.1f} creates/s  {updates:7.1f} updates/s", flush=True)
    print("\n| kind | creates/s (median) | updates/s (median) |\n|---|---:|---:|")
    medians = {}
    for kind, values in rates.items():
        medians[kind] = (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
        print(f"| {kind} | {medians[kind][0]:,.0f} | {medians[kind][1]:,.0f} |")
    print(f"\nversioned / plain: creates {medians['versioned'][0] / medians['plain'][0]:.2f}, "
          f"updates {medians['versioned'][1] / medians['plain'][1]:.2f}; version list p50 "
          f"{percentile(latencies, 0.5):.1f} ms, p95 {percentile(latencies, 0.95):.1f} ms")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8090")
    parser.add_argument("--email", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=int, default=10, help="versions of the versioned collection")
    return parser.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse())))
    except (Failed, aiohttp.ClientError) as exc:
        print(f"failed: {exc}", file=sys.stderr)
        sys.exit(1)
