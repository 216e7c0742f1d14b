"""View collections (decisions.md, Aggregation and view collections), end to end over HTTP: records
that are the groups of a source, with exact values and stable ids, listed, filtered, sorted and paged
under the view's own rules; current after every kind of write to the source (and, after one write,
without reading the whole source again); read-only (405); validated; a source kept while a view reads
it; not a realtime topic nor a webhook target."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import aiohttp
import pytest

from cms.services.content.views import groups as view_groups
from cms.store.documents import records_mongo_name
from tests.api.test_access_rules import customer
from tests.api.test_batch import delete, patch, post
from tests.api.test_webhooks import (
    config,  # noqa: F401 - loopback receivers allowed
    receiver,  # noqa: F401 - the receiver fixture
)
from tests.conftest import bearer, create_collection, create_record, error_of, records_path
from tests.fixtures import CommandLog

COLLECTIONS = "/api/v1/collections"
POSTS = [{"name": "title", "type": "text"}, {"name": "published", "type": "bool"},
         {"name": "views", "type": "number"}, {"name": "author", "type": "text"}]
STATS = {"source": "posts", "group_by": "published", "aggregates": "count(),sum(views)"}


async def make_view(client: Any, token: str, name: str = "stats", view: dict[str, Any] | None = None,
                    **extra: Any) -> dict[str, Any]:
    response = await client.post(COLLECTIONS, headers=bearer(token),
                                 json={"name": name, "type": "view", "view": view or STATS, **extra})
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def listed(client: Any, name: str, token: str | None = None, **params: Any) -> dict[str, Any]:
    response = await client.get(records_path(name), params=params, headers=bearer(token) if token else {})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def by_published(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The view's records computed here: false first (ascending key)."""
    counts: dict[bool, int] = defaultdict(int)
    sums: dict[bool, int] = defaultdict(int)
    for record in records:
        counts[record["published"]] += 1
        sums[record["published"]] += record.get("views") or 0
    return [{"published": key, "count": counts[key], "sum_views": sums[key]} for key in sorted(counts)]


def without_ids(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in body["items"]]


@pytest.fixture
async def posts(client: Any, admin_token: str) -> dict[str, dict[str, Any]]:
    """`posts` with 12 random posts (by id, as created) and the view `stats` (public list and view rules)."""
    await create_collection(client, admin_token, "posts", POSTS, list_rule="", view_rule="")
    rng = random.Random(7)
    made = {}
    for n in range(12):
        record = await create_record(client, admin_token, "posts", {
            "title": f"p{n}", "published": rng.random() < 0.5, "views": rng.randint(0, 100),
            "author": rng.choice(["ann", "bob", "cid"])})
        made[record["id"]] = record
    await make_view(client, admin_token, list_rule="", view_rule="")
    return made


async def test_a_view_shows_the_groups_of_its_source_with_exact_values(client, admin_token, posts):
    body = await listed(client, "stats")
    assert without_ids(body) == by_published(list(posts.values()))
    assert body["total"] == 2 and body["page"] == 1 and body["per_page"] == 30
    assert [list(item) for item in body["items"]] == [["id", "published", "count", "sum_views"]] * 2
    described = await (await client.get(f"{COLLECTIONS}/{(await collection_named(client, 'stats'))['id']}")).json()
    assert described["type"] == "view" and described["view"] == {**STATS, "filter": ""}
    assert [(f["name"], f["type"]) for f in described["schema"]["fields"]] == [
        ("published", "bool"), ("count", "number"), ("sum_views", "number")]


async def collection_named(client: Any, name: str) -> dict[str, Any]:
    listing = await (await client.get(COLLECTIONS)).json()
    return next(c for c in listing if c["name"] == name)


async def test_a_view_record_has_a_stable_id_and_is_read_by_it(client, admin_token, posts):
    first = (await listed(client, "stats"))["items"]
    some = next(iter(posts.values()))
    changed = await client.patch(records_path("posts", some["id"]), headers=bearer(admin_token),
                                 json={"data": {"views": some["views"] + 5}})
    assert changed.status == 200
    second = (await listed(client, "stats"))["items"]
    assert [i["id"] for i in first] == [i["id"] for i in second]  # same keys, same ids; the sums moved
    assert [i["sum_views"] for i in second] != [i["sum_views"] for i in first]
    one = await client.get(records_path("stats", second[1]["id"]))
    assert one.status == 200 and await one.json() == second[1]
    await error_of(await client.get(records_path("stats", "nope")), 404, "not_found")
    # the id is a hash of the key: a new view with the same key gives the same ids
    await make_view(client, admin_token, "stats2", {**STATS, "aggregates": "count()"}, list_rule="")
    assert [i["id"] for i in (await listed(client, "stats2"))["items"]] == [i["id"] for i in second]


async def test_view_records_are_filtered_sorted_and_paged(client, posts):
    expected = by_published(list(posts.values()))
    top = max(expected, key=lambda g: g["sum_views"])
    body = await listed(client, "stats", sort="-sum_views", per_page=1)
    assert body["total"] == 2 and without_ids(body) == [top]
    page_two = await listed(client, "stats", sort="-sum_views", per_page=1, page=2)
    assert without_ids(page_two) == [g for g in expected if g is not top]
    published = str(top["published"]).lower()
    filtered = await listed(client, "stats", filter=f"sum_views = {top['sum_views']} && published = {published}")
    assert without_ids(filtered) == [top]
    narrowed = await listed(client, "stats", fields="published,count")
    assert narrowed["items"] == [{"published": g["published"], "count": g["count"]} for g in expected]
    await error_of(await client.get(records_path("stats"), params={"filter": "title = 'x'"}), 400, "invalid_filter")
    await error_of(await client.get(records_path("stats"), params={"sort": "views"}), 400, "invalid_filter")
    await error_of(await client.get(records_path("stats"), params={"expand": "published"}), 400, "invalid_filter")
    await error_of(await client.get(records_path("stats"), params={"search": "x"}), 400, "invalid_filter")
    skipped = await listed(client, "stats", skip_total="true")
    assert skipped["total"] == -1


async def test_date_buckets_are_fields_of_a_view(client, admin_token):
    await create_collection(client, admin_token, "orders", [{"name": "placed", "type": "date"},
                                                            {"name": "total", "type": "number"}])
    for placed, total in [("2026-01-05", 10), ("2026-01-20", 5), ("2026-02-01", 7), ("2026-03-09", 1)]:
        await create_record(client, admin_token, "orders", {"placed": placed, "total": total})
    await make_view(client, admin_token, "monthly", {"source": "orders", "group_by": "placed:month",
                                                     "aggregates": "count(),sum(total),max(placed)"}, list_rule="")
    body = await listed(client, "monthly", filter="placed:month >= '2026-02-01'", sort="-placed:month")
    assert without_ids(body) == [
        {"placed:month": "2026-03-01T00:00:00.000Z", "count": 1, "sum_total": 1,
         "max_placed": "2026-03-09T00:00:00.000Z"},
        {"placed:month": "2026-02-01T00:00:00.000Z", "count": 1, "sum_total": 7,
         "max_placed": "2026-02-01T00:00:00.000Z"}]


async def test_a_view_is_current_after_every_kind_of_write(client, admin_token, posts):
    records = dict(posts)

    async def check() -> None:
        assert without_ids(await listed(client, "stats")) == by_published(list(records.values()))

    await check()
    made = await create_record(client, admin_token, "posts", {"title": "new", "published": True, "views": 1000})
    records[made["id"]] = made
    await check()
    one = next(iter(records))
    moved = await client.patch(records_path("posts", one), headers=bearer(admin_token),
                               json={"data": {"published": not records[one]["published"], "views": 3}})
    records[one] = await moved.json()
    await check()
    gone = list(records)[1]
    assert (await client.delete(records_path("posts", gone), headers=bearer(admin_token))).status == 204
    del records[gone]
    await check()
    ids = list(records)[:3]
    bulk = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                             json={"record_ids": ids, "data": {"views": 1}})
    assert bulk.status == 200
    for record_id in ids:
        records[record_id] = {**records[record_id], "views": 1}
    await check()
    removed = list(records)[3:5]
    assert (await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                              json={"record_ids": removed})).status == 200
    for record_id in removed:
        del records[record_id]
    await check()
    form = aiohttp.FormData()
    form.add_field("file", b"title,published,views\nc1,true,7\nc2,false,9\n", filename="p.csv",
                   content_type="text/csv")
    imported = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token), data=form)
    assert (await imported.json())["imported"] == 2
    for item in (await listed(client, "posts", admin_token, filter="title ~ 'c'"))["items"]:
        records[item["id"]] = item
    await check()
    victim = list(records)[0]
    answers = await client.post("/api/v1/batch", headers=bearer(admin_token), json={"requests": [
        post("posts", {"title": "b1", "published": False, "views": 11}), delete("posts", victim)]})
    assert answers.status == 200, await answers.text()
    del records[victim]
    created = (await answers.json())[0]["body"]
    records[created["id"]] = created
    await check()


async def test_after_one_write_a_read_reads_only_the_changed_record(client, admin_token, posts, mongo_commands):
    source = (await collection_named(client, "posts"))["id"]
    await listed(client, "stats")  # the view's groups are built: the source is read once
    made = await create_record(client, admin_token, "posts", {"title": "n", "published": True, "views": 9})
    mongo_commands.commands.clear()
    body = await listed(client, "stats")
    assert without_ids(body) == by_published([*posts.values(), made])
    reads = [c for c in mongo_commands.commands if c.collection == records_mongo_name(source)]
    assert reads and all(c.name == "find" and set(c.filter) == {"_id"} for c in reads), reads


async def test_a_source_larger_than_a_mirror_is_grouped_by_the_database(client, admin_token, posts, monkeypatch,
                                                                        mongo_commands):
    monkeypatch.setattr(view_groups, "MIRROR_MAX_RECORDS", 5)
    records = list(posts.values())
    await make_view(client, admin_token, "stats_db", list_rule="")
    assert without_ids(await listed(client, "stats_db")) == by_published(records)
    made = await create_record(client, admin_token, "posts", {"title": "n", "published": False, "views": 50})
    assert without_ids(await listed(client, "stats_db")) == by_published([*records, made])
    assert mongo_commands.named("aggregate", (await collection_named(client, "posts"))["id"])


async def test_the_mirror_and_the_database_group_alike(client, admin_token, posts):
    """The view's groups kept in memory equal the aggregate endpoint's, after random writes."""
    await create_collection(client, admin_token, "sales", [
        {"name": "region", "type": "select", "values": ["n", "s"]}, {"name": "amount", "type": "number"},
        {"name": "on", "type": "date"}, {"name": "rep", "type": "text"}, {"name": "won", "type": "bool"}])
    definition = {"source": "sales", "filter": "amount != 13", "group_by": "region,on:month,won",
                  "aggregates": "count(),sum(amount),avg(amount),min(on),max(amount),count_distinct(rep)"}
    await make_view(client, admin_token, "sales_view", definition, list_rule="")
    rng = random.Random(3)
    ids: list[str] = []
    for step in range(40):
        if ids and rng.random() < 0.25:
            target = rng.choice(ids)
            await client.patch(records_path("sales", target), headers=bearer(admin_token),
                               json={"data": {"amount": rng.choice([None, 13, rng.randint(0, 9) + 0.25])}})
        elif ids and rng.random() < 0.15:
            await client.delete(records_path("sales", ids.pop(rng.randrange(len(ids)))), headers=bearer(admin_token))
        else:
            record = await create_record(client, admin_token, "sales", {
                "region": rng.choice(["n", "s", None]), "amount": rng.choice([rng.randint(0, 50), 13, 2.5, None]),
                "on": f"2026-0{rng.randint(1, 3)}-1{rng.randint(0, 9)}", "rep": rng.choice(["x", "y", "z", None]),
                "won": rng.random() < 0.5})
            ids.append(record["id"])
        if step % 8 == 7:
            view = (await listed(client, "sales_view", per_page=100))["items"]
            response = await client.get(f"{COLLECTIONS}/sales/aggregate", headers=bearer(admin_token), params={
                "filter": definition["filter"], "group_by": definition["group_by"],
                "aggregates": definition["aggregates"], "per_page": 100})
            groups = (await response.json())["items"]
            assert [{k: v for k, v in item.items() if k != "id"} for item in view] == [
                {**g["key"], **{k: v for k, v in g.items() if k != "key"}} for g in groups]


async def test_a_view_has_its_own_rules(client, admin_token, posts):
    await make_view(client, admin_token, "closed")  # admins only by default
    await error_of(await client.get(records_path("closed")), 401, "unauthorized")
    await create_collection(client, admin_token, "members", [], type="auth", list_rule="", view_rule="")
    _, ann = await customer(client, "members", "ann@example.com")
    await error_of(await client.get(records_path("closed"), headers=ann), 403, "forbidden")
    assert (await listed(client, "closed", admin_token))["total"] == 2
    expected = by_published(list(posts.values()))
    larger = max(g["count"] for g in expected)
    await make_view(client, admin_token, "big_groups", list_rule=f"count >= {larger}",
                    view_rule='@request.auth.id != ""')
    shown = await listed(client, "big_groups")
    assert without_ids(shown) == [g for g in expected if g["count"] >= larger]
    record_id = shown["items"][0]["id"]
    await error_of(await client.get(records_path("big_groups", record_id)), 401, "unauthorized")
    assert (await client.get(records_path("big_groups", record_id), headers=ann)).status == 200
    # a rule over the source's fields does not fit a view's: refused when set
    bad = await client.post(COLLECTIONS, headers=bearer(admin_token), json={
        "name": "bad", "type": "view", "view": STATS, "list_rule": "views > 1"})
    await error_of(bad, 400, "invalid_filter")


async def test_writes_to_a_view_are_405_for_everyone(client, admin_token, posts, tmp_path):
    record_id = (await listed(client, "stats"))["items"][0]["id"]
    for token in (admin_token, None):
        headers = bearer(token) if token else {}
        attempts = [
            client.post(records_path("stats"), headers=headers, json={"data": {"count": 1}}),
            client.patch(records_path("stats", record_id), headers=headers, json={"data": {"count": 1}}),
            client.delete(records_path("stats", record_id), headers=headers),
        ]
        for attempt in attempts:
            response = await attempt
            await error_of(response, 405, "method_not_allowed")
            assert response.headers["Allow"] == "GET"  # the paths serve no HEAD
    for path, body in [("/bulk-update", {"record_ids": [record_id], "data": {"count": 1}}),
                       ("/bulk-delete", {"record_ids": [record_id]})]:
        await error_of(await client.post(records_path("stats") + path, headers=bearer(admin_token), json=body), 405,
                       "method_not_allowed")
    form = aiohttp.FormData()
    form.add_field("file", b"count\n1\n", filename="s.csv", content_type="text/csv")
    await error_of(await client.post(records_path("stats") + "/import/csv", headers=bearer(admin_token), data=form),
                   405, "method_not_allowed")
    batch = await client.post("/api/v1/batch", headers=bearer(admin_token),
                              json={"requests": [patch("stats", record_id, {"count": 2})]})
    assert batch.status == 400 and (await batch.json())["failed"]["status"] == 405
    upload = aiohttp.FormData()
    upload.add_field("collection", "stats")
    upload.add_field("record_id", record_id)
    upload.add_field("file", b"x", filename="x.txt", content_type="text/plain")
    await error_of(await client.post("/api/v1/files", headers=bearer(admin_token), data=upload), 405,
                   "method_not_allowed")
    assert without_ids(await listed(client, "stats")) == by_published(list(posts.values()))


@pytest.mark.parametrize("view, extra, status, code, where", [
    ({"source": "nope"}, {}, 422, "validation_error", "view.source"),
    ({"source": "stats"}, {}, 422, "validation_error", "view.source"),
    ({"source": "posts", "filter": "views >"}, {}, 400, "invalid_filter", None),
    ({"source": "posts", "aggregates": "sum(title)"}, {}, 400, "invalid_filter", None),
    ({"source": "posts", "group_by": ",".join(["title"] + [f"f{i}" for i in range(10)])}, {}, 422,
     "validation_error", "group_by"),
    ({"source": "posts", "group_by": "views", "aggregates": "count(),sum(views)"}, {}, 201, None, None),
    ({"source": "posts", "group_by": "title", "aggregates": "count(),max(title)"}, {}, 201, None, None),
    ({"source": "posts", "group_by": "id"}, {}, 422, "validation_error", "view.group_by"),
    ({"source": "posts", "unknown": "x"}, {}, 422, "validation_error", "view.unknown"),
    ({"filter": "x"}, {}, 422, "validation_error", "view.source"),
    (STATS, {"create_rule": ""}, 422, "validation_error", "create_rule"),
    (STATS, {"schema": [{"name": "x", "type": "text"}]}, 422, "validation_error", "schema"),
    (STATS, {"indexes": [{"fields": ["count"]}]}, 422, "validation_error", "indexes"),
    (STATS, {"otp_enabled": True}, 422, "validation_error", "otp_enabled"),
    (None, {}, 422, "validation_error", "view"),
], ids=["no-source", "view-over-view", "bad-filter", "sum-text", "11-keys", "ok-views", "ok-title", "key-id",
        "unknown-key", "no-source-key", "write-rule", "schema", "indexes", "auth-switch", "no-view"])
async def test_a_view_definition_is_checked(client, admin_token, posts, view, extra, status, code, where):
    response = await client.post(COLLECTIONS, headers=bearer(admin_token),
                                 json={"name": "v2", "type": "view", **({"view": view} if view else {}), **extra})
    if status == 201:
        assert response.status == 201, await response.text()
        return
    body = await error_of(response, status, code)
    if where is not None:
        assert where in body["errors"], body


async def test_view_is_only_for_views(client, admin_token, posts):
    body = await error_of(await client.post(COLLECTIONS, headers=bearer(admin_token),
                                            json={"name": "x", "view": STATS}), 422, "validation_error")
    assert "view" in body["errors"]
    source = await collection_named(client, "posts")
    await error_of(await client.patch(f"{COLLECTIONS}/{source['id']}", headers=bearer(admin_token),
                                      json={"view": STATS}), 422, "validation_error")
    relation = await client.post(COLLECTIONS, headers=bearer(admin_token), json={"name": "links", "schema": [
        {"name": "to", "type": "relation", "collection_id": (await collection_named(client, "stats"))["id"]}]})
    assert "a relation cannot point to a view" in str((await error_of(relation, 422, "validation_error"))["errors"])


async def test_a_source_keeps_its_name_and_fields_while_a_view_reads_them(client, admin_token, posts):
    source = await collection_named(client, "posts")
    path = f"{COLLECTIONS}/{source['id']}"
    deleted = await error_of(await client.delete(path, headers=bearer(admin_token)), 422, "validation_error")
    assert "'stats'" in deleted["detail"] and "cannot be deleted" in deleted["detail"]
    renamed = await error_of(await client.patch(path, headers=bearer(admin_token), json={"name": "articles"}), 422,
                             "validation_error")
    assert "'stats'" in renamed["detail"]
    without_views = [f for f in POSTS if f["name"] != "views"]
    await error_of(await client.patch(path, headers=bearer(admin_token), json={"schema": without_views}), 422,
                   "validation_error")
    as_text = [f if f["name"] != "views" else {"name": "views", "type": "text"} for f in POSTS]
    await error_of(await client.patch(path, headers=bearer(admin_token), json={"schema": as_text}), 422,
                   "validation_error")
    grown = await client.patch(path, headers=bearer(admin_token), json={"schema": [*POSTS, {"name": "x",
                                                                                            "type": "text"}]})
    assert grown.status == 200, await grown.text()  # a change the view does not read
    assert without_ids(await listed(client, "stats")) == by_published(list(posts.values()))
    view = await collection_named(client, "stats")
    assert (await client.delete(f"{COLLECTIONS}/{view['id']}", headers=bearer(admin_token))).status == 204
    assert (await client.delete(path, headers=bearer(admin_token))).status == 204


async def test_a_changed_definition_changes_the_records(client, admin_token, posts):
    view = await collection_named(client, "stats")
    changed = await client.patch(f"{COLLECTIONS}/{view['id']}", headers=bearer(admin_token), json={
        "view": {"source": "posts", "group_by": "author", "aggregates": "count()", "filter": "views > 50"},
        "name": "by_author"})
    assert changed.status == 200, await changed.text()
    assert [f["name"] for f in (await changed.json())["schema"]["fields"]] == ["author", "count"]
    counts: dict[str, int] = defaultdict(int)
    for record in posts.values():
        if record["views"] > 50:
            counts[record["author"]] += 1
    expected = [{"author": author, "count": n} for author, n in sorted(counts.items())]
    assert without_ids(await listed(client, "by_author")) == expected
    await error_of(await client.get(records_path("stats")), 404, "not_found")


async def test_a_view_is_not_a_realtime_topic_nor_a_webhook_target(client, admin_token, posts, streams):
    stream = streams()
    await stream.open()
    response = await client.post("/api/v1/realtime", json={"client_id": stream.client_id,
                                                           "subscriptions": ["stats/*"]})
    body = await error_of(response, 422, "validation_error")
    assert "is a view" in body["errors"]["subscriptions.0"][0]
    hook = await client.post("/api/v1/webhooks", headers=bearer(admin_token), json={
        "url": "http://127.0.0.1:9/hook", "collection_name": "stats", "events": ["create"]})
    assert "is a view" in str((await error_of(hook, 422, "validation_error"))["errors"])


async def test_aggregating_exporting_or_explaining_a_view_is_refused(client, admin_token, posts):
    body = await error_of(await client.get(f"{COLLECTIONS}/stats/aggregate"), 400, "bad_request")
    assert "aggregate its source 'posts'" in body["detail"]
    await error_of(await client.get(records_path("stats") + "/export/csv", headers=bearer(admin_token)), 400,
                   "bad_request")
    await error_of(await client.get(records_path("stats"), params={"explain": "true"}, headers=bearer(admin_token)),
                   400, "bad_request")


async def test_a_read_begun_before_a_write_is_served_the_newer_groups(client, admin_token, posts, services,
                                                                      mongo_commands: CommandLog):
    """A read whose stamp is older than the mirror (a write landed meanwhile) is served the mirror's
    newer rows, without reading the source again."""
    await listed(client, "stats")
    await create_record(client, admin_token, "posts", {"title": "n", "published": True, "views": 1})
    current = await listed(client, "stats")
    view, source = await services.catalog.by_name("stats"), await services.catalog.by_name("posts")
    stamp, _ = await services.records.reads.cache.lookup(view.name, "probe", [source.name])
    epoch, view_version, source_version = stamp.split(".")
    mongo_commands.commands.clear()
    reads = services.records.views
    _, shape = await reads.resolved(view)
    rows = await reads.groups.rows(view, source, shape, f"{epoch}.{view_version}.{int(source_version) - 1}")
    assert sorted(row["count"] for row in rows) == sorted(item["count"] for item in current["items"])
    assert not mongo_commands.named("find", source.id) and not mongo_commands.named("aggregate", source.id)


async def test_drafts_count_once_published(client, admin_token):
    """With drafts (decisions.md), readers see published copies only: so do a view and an aggregate."""
    await create_collection(client, admin_token, "articles", [{"name": "kind", "type": "text"}], drafts=True,
                            list_rule="", view_rule="")
    await make_view(client, admin_token, "article_kinds", {"source": "articles", "group_by": "kind"}, list_rule="")
    draft = await create_record(client, admin_token, "articles", {"kind": "news"})
    assert (await listed(client, "article_kinds"))["items"] == []
    counted = await client.get(f"{COLLECTIONS}/articles/aggregate")
    assert (await counted.json())["items"] == [{"key": {}, "count": 0}]
    published = await client.post(records_path("articles", draft["id"]) + "/publish", headers=bearer(admin_token))
    assert published.status == 200, await published.text()
    assert without_ids(await listed(client, "article_kinds")) == [{"kind": "news", "count": 1}]
    counted = await client.get(f"{COLLECTIONS}/articles/aggregate")
    assert (await counted.json())["items"] == [{"key": {}, "count": 1}]
    changed = await client.patch(records_path("articles", draft["id"]), headers=bearer(admin_token),
                                 json={"data": {"kind": "opinion"}})
    assert changed.status == 200  # a working copy: readers still see "news"
    assert without_ids(await listed(client, "article_kinds")) == [{"kind": "news", "count": 1}]
