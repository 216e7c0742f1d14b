"""Load a CSV of PyPI packages into the CMS through its REST API, then time some queries.

Usage:

    python scripts/load_packages.py [CSV] --url http://127.0.0.1:8090 \\
        --email ADMIN_EMAIL --password ADMIN_PASSWORD \\
        [--concurrency 16] [--limit N] [--collection packages] [--recreate] \\
        [--repeat 5] [--queries-only] [--server-pid PID]

CSV defaults to `../shared/data/pypi-packages.csv` (next to the repository). Its header must hold
`name,version,released,popular,summary`: `released` an ISO date (2026-08-01), `popular` `true` or
`false`. `--email` / `--password` default to the `ADMIN_EMAIL` / `ADMIN_PASSWORD` environment variables.

What it does:

1. Logs in as an admin (POST /api/v1/auth/login).
2. Creates the collection (POST /api/v1/collections) with the schema
   name: text, required, unique; version: text; released: date; popular: bool; summary: editor.
   An existing collection of that name is reused, or deleted and created again with `--recreate`.
3. POSTs every row to /api/v1/collections/<collection>/records as `{"data": {...}}` from a fixed pool
   of `--concurrency` workers, with a progress bar on stderr. Values are typed (`popular` a JSON bool,
   `released` the date string); empty values are left out. Rows whose name repeats an earlier row
   (case-sensitive), rows that cannot be converted, and rows the server refuses are skipped and counted.
4. Times (wall clock, `--repeat` runs after one warm-up, sequentially) a set of list, filter, sort and
   search queries and a GET by id, and prints a Markdown table with the median and max in ms.
5. With `--server-pid`, prints the resident memory of that process and its children (psutil).

Exit status: 0 on success; 1 when the server is unreachable, login or collection set-up fails, or no
row could be loaded; 2 for bad arguments or an unreadable CSV.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

try:
    from tqdm import tqdm
except ImportError:  # tqdm is a dev dependency; degrade to no progress bar
    tqdm = None

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = REPO_ROOT.parent / "shared" / "data" / "pypi-packages.csv"
REQUIRED_COLUMNS = ("name", "version", "released", "popular", "summary")
# Every field carries a `validation` object, even an empty one: the service as committed (4d4928d)
# answers 500 (KeyError 'min' in cms/services/content/fields.py `_to_spec`) for a field definition without one.
SCHEMA = {
    "fields": [
        {"name": "name", "type": "text", "validation": {"required": True, "unique": True}},
        {"name": "version", "type": "text", "validation": {}},
        {"name": "released", "type": "date", "validation": {}},
        {"name": "popular", "type": "bool", "validation": {}},
        {"name": "summary", "type": "editor", "validation": {}},
    ]
}
TRUE_WORDS = {"true", "1", "yes", "y", "t"}
FALSE_WORDS = {"false", "0", "no", "n", "f"}
MAX_429_RETRIES = 20
RATE_WINDOWS = 10  # the load's throughput is reported for this many equal slices of the rows


class Fatal(Exception):
    """Stops the script with a message and exit status 1."""


# --- CSV -------------------------------------------------------------------------------------------


class BadRow(ValueError):
    """A CSV row that cannot become a record."""


class CsvError(Exception):
    """The CSV cannot be read as a packages CSV (exit status 2)."""


def open_csv(path: Path) -> tuple[Any, csv.DictReader]:
    """An open handle and a DictReader with stripped header names. Raises CsvError."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise CsvError(f"cannot open {path}: {exc}") from None
    reader = csv.DictReader(handle)
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        handle.close()
        raise CsvError(f"{path}: header lacks column(s) {', '.join(missing)} (found: {', '.join(header)})")
    reader.fieldnames = header
    return handle, reader


def count_rows(path: Path) -> int:
    """Data rows in the CSV (a quick first pass, so the progress bar has a total)."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        return max(sum(1 for _ in csv.reader(handle)) - 1, 0)


def row_to_data(row: dict[str | None, Any]) -> dict[str, Any]:
    """The record `data` of one CSV row: typed values, empty ones left out. Raises BadRow."""
    if None in row:
        raise BadRow("more columns than the header")
    if any(row.get(c) is None for c in REQUIRED_COLUMNS):
        raise BadRow("fewer columns than the header")
    name = row["name"].strip()
    if not name:
        raise BadRow("empty name")
    data: dict[str, Any] = {"name": name}
    version = row["version"].strip()
    if version:
        data["version"] = version
    released = row["released"].strip()
    if released:
        data["released"] = released
    popular = row["popular"].strip().lower()
    if popular in TRUE_WORDS:
        data["popular"] = True
    elif popular in FALSE_WORDS:
        data["popular"] = False
    elif popular:
        raise BadRow(f"popular is neither true nor false: {row['popular']!r}")
    summary = row["summary"]
    if summary and summary.strip():
        data["summary"] = summary
    return data


# --- HTTP ------------------------------------------------------------------------------------------


@dataclass
class Api:
    """A logged-in admin session against the CMS."""

    session: aiohttp.ClientSession
    base: str
    email: str
    password: str
    token: str = ""
    _login_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def url(self, path: str) -> str:
        return self.base + path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def login(self) -> None:
        async with self.session.post(
            self.url("/api/v1/auth/login"), json={"email": self.email, "password": self.password}
        ) as resp:
            body = await json_or_text(resp)
            if resp.status != 200:
                raise Fatal(f"login as {self.email} failed: HTTP {resp.status} {describe(body)}")
        try:
            self.token = body["token"]["access_token"]
            role = body["user"].get("role")
        except (KeyError, TypeError):
            raise Fatal(f"login response has no token.access_token: {describe(body)}") from None
        if role != "admin":
            raise Fatal(f"{self.email} has role {role!r}; creating a collection needs an admin")

    async def relogin(self, stale_token: str) -> None:
        """Log in again unless another worker already did since `stale_token` was refused."""
        async with self._login_lock:
            if self.token == stale_token:
                await self.login()

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any, dict[str, str]]:
        """(status, parsed body, headers); renews the token once on 401 and waits out 429s."""
        renewed = False
        for _attempt in range(MAX_429_RETRIES + 1):
            token = self.token
            async with self.session.request(method, self.url(path), headers=self.headers, **kwargs) as resp:
                body = await json_or_text(resp)
                status, headers = resp.status, dict(resp.headers)
            if status == 401 and not renewed:
                renewed = True
                await self.relogin(token)
                continue
            if status == 429:
                await asyncio.sleep(retry_after(headers))
                continue
            return status, body, headers
        return status, body, headers


async def json_or_text(resp: aiohttp.ClientResponse) -> Any:
    text = await resp.text()
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def retry_after(headers: dict[str, str]) -> float:
    try:
        return min(max(float(headers.get("Retry-After", "1")), 0.1), 60.0)
    except ValueError:
        return 1.0


def describe(body: Any) -> str:
    if isinstance(body, dict):
        text = f"{body.get('code', '')}: {body.get('detail', '')}"
        if body.get("errors"):
            text += f" {json.dumps(body['errors'])}"
        return text
    return str(body)[:200]


async def check_reachable(session: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    try:
        async with session.get(base + "/health", timeout=aiohttp.ClientTimeout(total=10)) as resp:
            body = await json_or_text(resp)
    except (TimeoutError, aiohttp.ClientConnectionError, OSError) as exc:
        raise Fatal(
            f"cannot reach the CMS at {base} ({exc.__class__.__name__}: {exc}). "
            f"Is `cms serve` running there? Start one with e.g. "
            f"`ADMIN_EMAIL=... ADMIN_PASSWORD=... cms serve --port 8090`."
        ) from None
    if resp.status != 200:
        raise Fatal(f"{base}/health answered HTTP {resp.status}: {describe(body)}")
    return body if isinstance(body, dict) else {}


# --- collection ------------------------------------------------------------------------------------


async def ensure_collection(api: Api, name: str, recreate: bool) -> dict[str, Any]:
    status, body, _ = await api.request("GET", "/api/v1/collections")
    if status != 200 or not isinstance(body, list):
        raise Fatal(f"listing collections failed: HTTP {status} {describe(body)}")
    existing = next((c for c in body if c.get("name") == name), None)
    if existing is not None and recreate:
        status, body, _ = await api.request("DELETE", f"/api/v1/collections/{existing['id']}")
        if status != 204:
            raise Fatal(f"deleting collection {name!r} failed: HTTP {status} {describe(body)}")
        print(f"deleted the existing collection {name!r} ({existing['id']})", file=sys.stderr)
        existing = None
    if existing is not None:
        have = {f["name"]: f["type"] for f in (existing.get("schema") or {}).get("fields", [])}
        want = {f["name"]: f["type"] for f in SCHEMA["fields"]}
        if have != want:
            raise Fatal(
                f"collection {name!r} exists with another schema ({have}); use --recreate to replace it"
            )
        print(f"reusing the existing collection {name!r} ({existing['id']})", file=sys.stderr)
        return existing
    status, body, _ = await api.request(
        "POST", "/api/v1/collections", json={"name": name, "type": "base", "schema": SCHEMA}
    )
    if status != 201:
        raise Fatal(f"creating collection {name!r} failed: HTTP {status} {describe(body)}")
    print(f"created collection {name!r} ({body['id']})", file=sys.stderr)
    return body


# --- load ------------------------------------------------------------------------------------------


@dataclass
class LoadStats:
    rows: int = 0  # CSV data rows read (up to --limit)
    loaded: int = 0
    duplicates: int = 0  # name seen earlier in the CSV
    invalid: int = 0  # could not be converted locally
    refused: Counter = field(default_factory=Counter)  # (status, code) -> n
    errors: Counter = field(default_factory=Counter)  # transport errors by kind
    examples: list[str] = field(default_factory=list)  # a few failure messages
    latencies: list[float] = field(default_factory=list)  # seconds per successful POST
    done_at: list[float] = field(default_factory=list)  # monotonic time of each success
    elapsed: float = 0.0

    def note(self, message: str) -> None:
        if len(self.examples) < 10:
            self.examples.append(message)

    @property
    def failed(self) -> int:
        return sum(self.refused.values()) + sum(self.errors.values())


def produce_rows(path: Path, limit: int | None, stats: LoadStats) -> Iterator[tuple[int, dict[str, Any]]]:
    """(data-row number, record data) for each row to send; counts duplicates and bad rows."""
    seen: set[str] = set()
    handle, reader = open_csv(path)
    with handle:
        for number, row in enumerate(reader, start=1):
            if limit is not None and number > limit:
                break
            stats.rows += 1
            try:
                data = row_to_data(row)
            except BadRow as exc:
                stats.invalid += 1
                stats.note(f"row {number}: {exc}")
                yield number, {}
                continue
            if data["name"] in seen:
                stats.duplicates += 1
                stats.note(f"row {number}: duplicate name {data['name']!r}")
                yield number, {}
                continue
            seen.add(data["name"])
            yield number, data


async def load(api: Api, csv_path: Path, collection: str, concurrency: int, limit: int | None) -> LoadStats:
    stats = LoadStats()
    total = count_rows(csv_path)
    if limit is not None:
        total = min(total, limit)
    bar = (
        tqdm(total=total, unit="row", file=sys.stderr, dynamic_ncols=True, smoothing=0.05)
        if tqdm is not None
        else None
    )
    queue: asyncio.Queue[tuple[int, dict[str, Any]] | None] = asyncio.Queue(maxsize=concurrency * 4)
    path = f"/api/v1/collections/{collection}/records"
    abort: list[str] = []  # a reason to stop sending, set by a worker

    async def worker() -> None:
        while True:
            item = await queue.get()
            try:
                if item is None:
                    return
                number, data = item
                if data and not abort:
                    try:
                        await post_one(number, data)
                    except Fatal as exc:  # e.g. a renewed login was refused
                        abort.append(str(exc))
                    except Exception as exc:  # noqa: BLE001 -- one bad row must never stop a worker
                        stats.errors[exc.__class__.__name__] += 1
                        stats.note(f"row {number} ({data['name']!r}): {exc.__class__.__name__}: {exc}")
                if bar is not None:
                    bar.update(1)
                    if stats.failed or stats.duplicates or stats.invalid:
                        bar.set_postfix(
                            failed=stats.failed, skipped=stats.duplicates + stats.invalid, refresh=False
                        )
            finally:
                queue.task_done()

    async def post_one(number: int, data: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            status, body, _ = await api.request("POST", path, json={"data": data})
        except aiohttp.ClientConnectorError as exc:
            stats.errors["connection refused"] += 1
            stats.note(f"row {number}: {exc}")
            abort.append(f"the server at {api.base} stopped answering ({exc})")
            return
        except (TimeoutError, aiohttp.ClientError) as exc:
            kind = exc.__class__.__name__
            stats.errors[kind] += 1
            stats.note(f"row {number} ({data['name']!r}): {kind}: {exc}")
            return
        if status == 201:
            stats.loaded += 1
            stats.latencies.append(time.perf_counter() - started)
            stats.done_at.append(time.monotonic())
            return
        code = body.get("code", "") if isinstance(body, dict) else ""
        stats.refused[(status, code)] += 1
        stats.note(f"row {number} ({data['name']!r}): HTTP {status} {describe(body)}")

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    started = time.monotonic()
    stats.done_at.append(started)
    try:
        for item in produce_rows(csv_path, limit, stats):
            await queue.put(item)
            if abort:
                break
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        stats.elapsed = time.monotonic() - started
        if bar is not None:
            bar.close()
    if abort:
        print_load_report(stats, concurrency)
        raise Fatal(f"load stopped after {stats.loaded:,} rows: {abort[0]}")
    return stats


def rate_windows(stats: LoadStats) -> list[tuple[int, int, float]]:
    """(first row, last row, rows/s) for RATE_WINDOWS equal slices of the successful inserts."""
    times = stats.done_at  # done_at[0] is the start
    n = len(times) - 1
    if n < RATE_WINDOWS * 10:
        return []
    out = []
    for i in range(RATE_WINDOWS):
        lo, hi = i * n // RATE_WINDOWS, (i + 1) * n // RATE_WINDOWS
        span = times[hi] - times[lo]
        out.append((lo + 1, hi, (hi - lo) / span if span > 0 else math.inf))
    return out


# --- queries ---------------------------------------------------------------------------------------


@dataclass
class QueryResult:
    label: str
    params: str
    times_ms: list[float]
    total: int | None
    note: str = ""


async def time_query(api: Api, label: str, path: str, params: dict[str, Any], repeat: int) -> QueryResult:
    shown = "&".join(f"{k}={v}" for k, v in params.items())
    times: list[float] = []
    total: int | None = None
    note = ""
    for i in range(repeat + 1):  # the first run warms up and is not counted
        started = time.perf_counter()
        try:
            status, body, _ = await api.request("GET", path, params=params)
        except (TimeoutError, aiohttp.ClientError) as exc:
            return QueryResult(label, shown, times, total, f"{exc.__class__.__name__}: {exc}")
        elapsed_ms = (time.perf_counter() - started) * 1000
        if status != 200:
            return QueryResult(label, shown, times, total, f"HTTP {status} {describe(body)}")
        if i > 0:
            times.append(elapsed_ms)
        if isinstance(body, dict):
            total = body.get("total", 1 if "id" in body else None)
    return QueryResult(label, shown, times, total, note)


async def run_queries(api: Api, collection: str, repeat: int) -> list[QueryResult]:
    records = f"/api/v1/collections/{collection}/records"
    status, first, _ = await api.request("GET", records, params={"per_page": 1, "sort": "-name"})
    if status != 200 or not isinstance(first, dict) or not first.get("items"):
        raise Fatal(
            f"the collection {collection!r} has no records to query (HTTP {status} {describe(first)})"
        )
    sample = first["items"][0]
    total = first["total"]
    last_page = max(math.ceil(total / 30), 1)
    queries: list[tuple[str, str, dict[str, Any]]] = [
        ("first page (default: 30, sort created)", records, {}),
        ("page 100", records, {"page": 100}),
        (f"last page ({last_page})", records, {"page": last_page}),
        ("per_page=100", records, {"per_page": 100}),
        ("sort by date, newest first", records, {"sort": "-released"}),
        ("sort by name", records, {"sort": "name"}),
        ("filter bool", records, {"filter": "popular=true"}),
        ("filter date and bool", records, {"filter": "released>=2025-01-01 && popular=false"}),
        ("filter exact name (unique index)", records, {"filter": f'name="{sample["name"]}"'}),
        ("filter name contains", records, {"filter": "name~django"}),
        ("search, two words", records, {"search": "http client"}),
        ("search + sort", records, {"search": "django rest", "sort": "name"}),
        ("search + filter", records, {"search": "django", "filter": "popular=true"}),
        ("GET one record by id", f"{records}/{sample['id']}", {}),
    ]
    results = []
    bar = tqdm(queries, desc="queries", unit="query", file=sys.stderr, leave=False) if tqdm else queries
    for label, path, params in bar:
        results.append(await time_query(api, label, path, params, repeat))
    return results


# --- report ----------------------------------------------------------------------------------------


def server_memory(pid: int) -> list[tuple[str, int, float]]:
    """(name, pid, RSS MiB) of the process and each of its descendants."""
    import psutil

    root = psutil.Process(pid)
    out = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            argv = proc.cmdline()
            label = " ".join(Path(a).name if a.startswith("/") else a for a in argv[:3]) or proc.name()
            out.append((label[:60], proc.pid, proc.memory_info().rss / 2**20))
        except psutil.Error:
            continue
    return out


def fmt_ms(values: list[float], fn: Any) -> str:
    return f"{fn(values):,.1f}" if values else "–"


def print_load_report(stats: LoadStats, concurrency: int) -> None:
    print("\n## Load\n")
    attempted = stats.rows - stats.duplicates - stats.invalid
    print(f"- CSV rows read: {stats.rows:,}; sent: {attempted:,}; loaded: {stats.loaded:,}")
    print(
        f"- skipped before sending: {stats.duplicates:,} duplicate names, "
        f"{stats.invalid:,} unconvertible rows"
    )
    refused = ", ".join(f"{n:,} × HTTP {s} {c}" for (s, c), n in stats.refused.most_common()) or "none"
    errors = ", ".join(f"{n:,} × {k}" for k, n in stats.errors.most_common()) or "none"
    print(f"- refused by the server: {refused}; transport errors: {errors}")
    rate = stats.loaded / stats.elapsed if stats.elapsed else 0.0
    print(
        f"- total time: {stats.elapsed:,.1f} s ({stats.elapsed / 60:,.1f} min); "
        f"{rate:,.1f} rows/s at concurrency {concurrency}"
    )
    if stats.latencies:
        lat = sorted(x * 1000 for x in stats.latencies)
        p95 = lat[min(int(len(lat) * 0.95), len(lat) - 1)]
        print(
            f"- POST latency: median {statistics.median(lat):,.1f} ms, p95 {p95:,.1f} ms, "
            f"max {lat[-1]:,.1f} ms"
        )
    windows = rate_windows(stats)
    if windows:
        print("\n| inserts | rows/s |\n|---|---:|")
        for lo, hi, r in windows:
            print(f"| {lo:,}–{hi:,} | {r:,.1f} |")
    if stats.examples:
        print("\nFirst problems:")
        for message in stats.examples:
            print(f"  - {message}")


def print_query_report(results: list[QueryResult], repeat: int) -> None:
    print(f"\n## Queries ({repeat} timed runs each after one warm-up, sequential, wall clock)\n")
    print("| query | parameters | total | median ms | max ms |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        params = f"`{r.params}`" if r.params else "(none)"
        total = f"{r.total:,}" if isinstance(r.total, int) else "–"
        if r.note:
            print(f"| {r.label} | {params} | – | error: {r.note.replace('|', '/')} | – |")
        else:
            print(
                f"| {r.label} | {params} | {total} | {fmt_ms(r.times_ms, statistics.median)} | "
                f"{fmt_ms(r.times_ms, max)} |"
            )


# --- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Load a CSV of PyPI packages into the CMS through the REST API and time some queries.",
        epilog="Example: python scripts/load_packages.py --url http://127.0.0.1:8090 "
        "--email admin@example.com --password secret --recreate",
    )
    parser.add_argument(
        "csv",
        nargs="?",
        type=Path,
        default=DEFAULT_CSV,
        help=f"CSV with columns {','.join(REQUIRED_COLUMNS)} (default: {DEFAULT_CSV})",
    )
    parser.add_argument(
        "--url", default="http://127.0.0.1:8090", help="base URL of the CMS (default: %(default)s)"
    )
    parser.add_argument(
        "--email", default=os.environ.get("ADMIN_EMAIL"), help="admin email (default: $ADMIN_EMAIL)"
    )
    parser.add_argument(
        "--password",
        default=os.environ.get("ADMIN_PASSWORD"),
        help="admin password (default: $ADMIN_PASSWORD)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight (default: %(default)s)"
    )
    parser.add_argument("--limit", type=int, default=None, help="load only the first N data rows")
    parser.add_argument("--collection", default="packages", help="collection name (default: %(default)s)")
    parser.add_argument("--recreate", action="store_true", help="delete and recreate an existing collection")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per query (default: %(default)s)")
    parser.add_argument("--queries-only", action="store_true", help="skip the load; time the queries only")
    parser.add_argument("--no-queries", action="store_true", help="load only; do not time queries")
    parser.add_argument(
        "--server-pid",
        type=int,
        default=None,
        help="pid of `cms serve`: report its and its children's resident memory at the end",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per request (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if not args.email or not args.password:
        parser.error("--email and --password (or ADMIN_EMAIL / ADMIN_PASSWORD) are required")
    if args.concurrency < 1 or args.repeat < 1 or (args.limit is not None and args.limit < 1):
        parser.error("--concurrency, --repeat and --limit must be at least 1")
    if not args.queries_only and not args.csv.is_file():
        parser.error(f"CSV not found: {args.csv}")
    return args


async def main_async(args: argparse.Namespace) -> int:
    base = args.url.rstrip("/")
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    if not args.queries_only:
        handle, _ = open_csv(args.csv)  # check the header before touching the server
        handle.close()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        health = await check_reachable(session, base)
        api = Api(session, base, args.email, args.password)
        await api.login()
        print(
            f"# Load and query timings: {base} (cms {health.get('version', '?')}), "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}"
        )
        print(
            f"\nclient: Python {platform.python_version()}, aiohttp {aiohttp.__version__}, "
            f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs"
        )
        status = 0
        if not args.queries_only:
            await ensure_collection(api, args.collection, args.recreate)
            print(
                f"loading {args.csv} into {args.collection!r} with concurrency {args.concurrency}",
                file=sys.stderr,
            )
            stats = await load(api, args.csv, args.collection, args.concurrency, args.limit)
            print_load_report(stats, args.concurrency)
            if stats.loaded == 0:
                print("\nerror: no row could be loaded", file=sys.stderr)
                status = 1
        if not args.no_queries:
            results = await run_queries(api, args.collection, args.repeat)
            print_query_report(results, args.repeat)
        code, stats_body, _ = await api.request("GET", "/api/v1/stats")
        if code == 200 and isinstance(stats_body, dict) and stats_body.get("mongodb"):
            print(f"\nserver /api/v1/stats mongodb: {json.dumps(stats_body['mongodb'])}")
    if args.server_pid:
        try:
            rows = server_memory(args.server_pid)
        except Exception as exc:  # noqa: BLE001 -- psutil missing or pid gone: report only
            print(f"\n(could not read the memory of pid {args.server_pid}: {exc})")
        else:
            print("\n| process | pid | RSS MiB |\n|---|---:|---:|")
            for name, pid, rss in rows:
                print(f"| `{name}` | {pid} | {rss:,.0f} |")
            print(f"| total | | {sum(r for _, _, r in rows):,.0f} |")
    return status


def run_cli(work: Coroutine[Any, Any, int]) -> int:
    """Run a script's async work; map its errors to exit statuses (1 service, 2 input, 130 Ctrl-C)."""
    try:
        return asyncio.run(work)
    except Fatal as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except CsvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
