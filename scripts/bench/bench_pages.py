"""Time the pages of list queries cold and warm (issue 31, items 1 and 2): after a write (every cached
answer and result set of the collection stale), the first page, the next pages, a deep page and the
first page again, for a few queries, sequentially, as an anonymous client.

Usage (a running `cms serve`, a collection loaded by scripts/load_packages.py, list rule public):

    python scripts/bench/bench_pages.py --url http://127.0.0.1:8097 --email ADMIN --password PASSWORD \\
        [--collection packages] [--rounds 3] [--deep-page 1000]

Each round writes once (a PATCH of one record, the same value: any write bumps the collection's
version), then asks the pages of each query in order; it prints the median over the rounds of each
step, in ms, as a Markdown table. Exit status 1 when the server is unreachable or a request fails.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import aiohttp

QUERIES: list[tuple[str, dict[str, str]]] = [
    ("newest first", {"sort": "-created"}),
    ("filter bool", {"filter": "popular=true"}),
    ("sort by name", {"sort": "name"}),
]
STEPS = ["page 1 (cold)", "page 2", "page 3", "page 10", "deep page", "page 1 again"]


async def timed(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> tuple[float, Any]:
    """One GET: (milliseconds, JSON body). Raises RuntimeError for a status other than 200."""
    started = time.perf_counter()
    async with session.get(url, params=params) as response:
        body = await response.json()
        if response.status != 200:
            raise RuntimeError(f"GET {url} {params}: {response.status} {body}")
    return (time.perf_counter() - started) * 1000, body


async def main(args: argparse.Namespace) -> int:
    """Log in, run the rounds, print the table."""
    base = args.url.rstrip("/") + "/api/v1"
    records = f"{base}/collections/{args.collection}/records"
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(f"{base}/auth/login", json={"email": args.email, "password": args.password}) as r:
            if r.status != 200:
                print(f"login failed: {r.status}", file=sys.stderr)
                return 1
            token = (await r.json())["token"]["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        _, first = await timed(session, records, {"per_page": "1"})
        record = first["items"][0]
        total = first["total"]
        deep = min(args.deep_page, max(1, total // 30))
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name, params in QUERIES:
                async with session.patch(f"{records}/{record['id']}", headers=headers,
                                         json={"data": {"version": record.get("version") or "1"}}) as r:
                    if r.status != 200:
                        print(f"write failed: {r.status} {await r.text()}", file=sys.stderr)
                        return 1
                for step, page in zip(STEPS, [1, 2, 3, 10, deep, 1], strict=True):
                    ms, _ = await timed(session, records, {**params, "page": str(page)})
                    times.setdefault((name, step), []).append(ms)
        print(f"{total} records; deep page = page {deep}; median of {args.rounds} rounds, ms\n")
        print("| query | " + " | ".join(STEPS) + " |")
        print("|---|" + "---:|" * len(STEPS))
        for name, _ in QUERIES:
            cells = [f"{statistics.median(times[(name, step)]):,.1f}" for step in STEPS]
            print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8090")
    parser.add_argument("--email", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--collection", default="packages")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deep-page", type=int, default=1000)
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
