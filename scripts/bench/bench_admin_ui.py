"""Time the admin UI's records page against a running `cms serve` (issue 15: p95 under 100 ms
server-side on a 10,000-record collection, served through the same read cache as the API).

Usage:

    python scripts/bench/bench_admin_ui.py --url http://127.0.0.1:8090 --email ADMIN --password PASS \\
        --collection packages [--requests 200] [--per-page 30]

Signs in through `/_/login` (its CSRF nonce included), then requests, one after the other,
`/_/collections/<collection>/records` with `per_page`, cycling through `pages` distinct pages and
three sorts (the first round fills the read cache; every later request is a warm one), and the same
list through `GET /api/v1/collections/<collection>/records` with the admin's bearer token. Prints
p50, p95 and max in ms of each (wall time as the client sees it over loopback).

Exit status: 0 on success; 1 when sign-in or a request fails.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time

import aiohttp

CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def sign_in(session: aiohttp.ClientSession, url: str, email: str, password: str) -> None:
    """The browser's sign-in: the form (its nonce cookie and field), then the POST."""
    async with session.get(url + "/_/login") as response:
        match = CSRF_INPUT.search(await response.text())
    if match is None:
        raise SystemExit("no CSRF field on /_/login")
    form = {"csrf_token": match.group(1), "next": "/_/", "email": email, "password": password}
    async with session.post(url + "/_/login", data=form, allow_redirects=False) as response:
        if response.status != 303 and response.status != 302:
            raise SystemExit(f"sign-in failed: HTTP {response.status}")


async def api_token(session: aiohttp.ClientSession, url: str, email: str, password: str) -> str:
    """An admin bearer token from `POST /api/v1/auth/login`."""
    async with session.post(url + "/api/v1/auth/login", json={"email": email, "password": password}) as response:
        body = await response.json()
    return str(body["token"]["access_token"])


async def timed(session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> float:
    """Milliseconds for one GET (body read); raises SystemExit on a non-200."""
    started = time.perf_counter()
    async with session.get(url, headers=headers, allow_redirects=False) as response:
        await response.read()
        if response.status != 200:
            raise SystemExit(f"GET {url}: HTTP {response.status}")
    return (time.perf_counter() - started) * 1000


async def main_async(args: argparse.Namespace) -> int:
    """Sign in, time both paths, print the table."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        await sign_in(session, args.url, args.email, args.password)
        token = await api_token(session, args.url, args.email, args.password)
        queries = [f"page={page}&per_page={args.per_page}&sort={sort}"
                   for page in range(1, args.pages + 1) for sort in ("-created", "name", "-version")]
        ui_times: list[float] = []
        api_times: list[float] = []
        for index in range(args.requests + len(queries)):
            query = queries[index % len(queries)]
            ui = await timed(session, f"{args.url}/_/collections/{args.collection}/records?{query}")
            api = await timed(session, f"{args.url}/api/v1/collections/{args.collection}/records?{query}",
                              {"Authorization": f"Bearer {token}"})
            if index >= len(queries):  # the first round fills the cache
                ui_times.append(ui)
                api_times.append(api)
    print(f"{args.requests} warm requests each, {len(queries)} distinct pages of {args.per_page} records:\n")
    print("| path | p50 ms | p95 ms | max ms |\n|---|---:|---:|---:|")
    for label, values in (("admin UI records page", ui_times), ("REST list", api_times)):
        print(f"| {label} | {statistics.median(values):.1f} | {percentile(values, 0.95):.1f} | {max(values):.1f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description="Time the admin UI's records page.")
    parser.add_argument("--url", default="http://127.0.0.1:8090")
    parser.add_argument("--email", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--collection", default="packages")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--per-page", type=int, default=30)
    parser.add_argument("--pages", type=int, default=5)
    args = parser.parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
