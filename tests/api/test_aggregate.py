"""`GET /api/v1/collections/{name}/aggregate` (decisions.md, Aggregation and view collections), end to
end over HTTP: exact values against sums computed here, date buckets, sort and paging, the list rule
and field rules, every bad input of issue 42, the time limit (503 with Retry-After), the scan line, the
read cache (a write is seen at once) and API keys."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.services.content import aggregates
from cms.store.documents import records_mongo_name
from tests.api.test_access_rules import customer
from tests.conftest import bearer, create_collection, create_record, error_of

ORDERS: list[dict[str, Any]] = [
    {"name": "status", "type": "select", "values": ["new", "paid", "sent"]},
    {"name": "total", "type": "number"},
    {"name": "placed", "type": "date"},
    {"name": "customer", "type": "text"},
    {"name": "paid", "type": "bool"},
    {"name": "owner", "type": "text"},
    {"name": "tags", "type": "select", "values": ["a", "b"], "max_select": 2},
    {"name": "meta", "type": "json"},
]
STATUSES = ["new", "paid", "sent"]


def order_data(rng: random.Random) -> dict[str, Any]:
    """One random order; `total` may be an integer or a half, or absent; `placed` in 2026."""
    data: dict[str, Any] = {
        "status": rng.choice(STATUSES),
        "placed": datetime(2026, rng.randint(1, 4), rng.randint(1, 28), rng.randint(0, 23), tzinfo=UTC).isoformat(),
        "customer": rng.choice(["ann", "bob", "cid", "dee"]),
        "paid": rng.random() < 0.5,
        "owner": rng.choice(["u1", "u2"]),
    }
    if rng.random() < 0.9:
        data["total"] = rng.randint(0, 500) + rng.choice([0, 0.5])
    return data


@pytest.fixture
async def orders(client: Any, admin_token: str) -> list[dict[str, Any]]:
    """`orders` (public list rule) with 40 random orders, as created."""
    await create_collection(client, admin_token, "orders", ORDERS, list_rule="", view_rule="")
    rng = random.Random(42)
    return [await create_record(client, admin_token, "orders", order_data(rng)) for _ in range(40)]


def month(text: str) -> str:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return datetime(moment.year, moment.month, 1, tzinfo=UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def expected_groups(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """By (status, placed:month): count, sum/avg/max of total, min of placed, distinct customers."""
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_key[(record["status"], month(record["placed"]))].append(record)
    expected = {}
    for key, group in by_key.items():
        totals = [r["total"] for r in group if r.get("total") is not None]
        total_sum = sum(totals)
        expected[key] = {
            "key": {"status": key[0], "placed:month": key[1]},
            "count": len(group),
            "sum_total": float(total_sum) if any(isinstance(t, float) and t != int(t) for t in totals)
            else total_sum,
            "avg_total": total_sum / len(totals) if totals else None,
            "max_total": max(totals) if totals else None,
            "min_placed": min(r["placed"] for r in group),
            "count_distinct_customer": len({r["customer"] for r in group}),
        }
    return expected


async def aggregate(client: Any, name: str, token: str | None = None, **params: Any) -> Any:
    return await client.get(f"/api/v1/collections/{name}/aggregate", params=params,
                            headers=bearer(token) if token else {})


async def groups_of(client: Any, name: str, token: str | None = None, **params: Any) -> dict[str, Any]:
    response = await aggregate(client, name, token, **params)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


AGGREGATES = "count(),sum(total),avg(total),max(total),min(placed),count_distinct(customer)"


async def test_groups_have_exact_values_against_sums_computed_here(client, orders):
    body = await groups_of(client, "orders", group_by="status,placed:month", aggregates=AGGREGATES, per_page=100)
    expected = expected_groups(orders)
    assert body["total"] == len(expected) and body["page"] == 1 and body["per_page"] == 100
    got = {(g["key"]["status"], g["key"]["placed:month"]): g for g in body["items"]}
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        group = got[key]
        assert group["count"] == want["count"] and group["sum_total"] == want["sum_total"], key
        assert group["avg_total"] == pytest.approx(want["avg_total"]) and group["max_total"] == want["max_total"]
        assert group["min_placed"] == want["min_placed"].replace("+00:00", ".000Z")
        assert group["count_distinct_customer"] == want["count_distinct_customer"]
    assert [list(g["key"]) for g in body["items"]][0] == ["status", "placed:month"]
    # default order: the keys ascending
    assert [(g["key"]["status"], g["key"]["placed:month"]) for g in body["items"]] == sorted(expected)


async def test_without_group_by_there_is_one_group_with_an_empty_key(client, orders):
    body = await groups_of(client, "orders", aggregates="count(),sum(total),min(total)")
    totals = [o["total"] for o in orders if o.get("total") is not None]
    assert body["total"] == 1 and body["items"] == [{"key": {}, "count": 40, "sum_total": sum(totals),
                                                     "min_total": min(totals)}]
    assert (await groups_of(client, "orders"))["items"] == [{"key": {}, "count": 40}]  # count() by default
    none = await groups_of(client, "orders", filter="customer = 'nobody'",
                           aggregates="count(),count_distinct(customer),sum(total),avg(total),max(total)")
    assert none == {"items": [{"key": {}, "count": 0, "count_distinct_customer": 0, "sum_total": 0,
                               "avg_total": None, "max_total": None}], "total": 1, "page": 1, "per_page": 30}


async def test_filter_sort_and_paging_apply_to_groups(client, orders):
    paid = [o for o in orders if o["paid"]]
    counts: dict[str, int] = defaultdict(int)
    sums: dict[str, float] = defaultdict(float)
    for order in paid:
        counts[order["customer"]] += 1
        sums[order["customer"]] += order.get("total") or 0
    by_sum = sorted(counts, key=lambda c: (-sums[c], c))
    first = await groups_of(client, "orders", filter="paid = true", group_by="customer",
                            aggregates="count(),sum(total)", sort="-sum_total", per_page=2)
    second = await groups_of(client, "orders", filter="paid = true", group_by="customer",
                             aggregates="count(),sum(total)", sort="-sum_total", per_page=2, page=2)
    assert first["total"] == second["total"] == len(counts)
    shown = [g["key"]["customer"] for g in first["items"] + second["items"]]
    assert shown == by_sum[:4]
    assert all(g["count"] == counts[g["key"]["customer"]] for g in first["items"] + second["items"])
    by_count = await groups_of(client, "orders", group_by="paid", sort="-count,paid")
    assert [g["count"] for g in by_count["items"]] == sorted((g["count"] for g in by_count["items"]), reverse=True)
    clamped = await groups_of(client, "orders", group_by="customer", per_page=1000)
    assert clamped["per_page"] == aggregates.MAX_PER_PAGE


async def test_a_missing_value_groups_as_null_and_buckets_cover_every_unit(client, admin_token):
    await create_collection(client, admin_token, "events", [{"name": "kind", "type": "text"},
                                                            {"name": "at", "type": "date"}], list_rule="")
    rows: list[dict[str, Any]] = [{"kind": "a", "at": "2026-03-04T05:06:07Z"},
                                  {"kind": None, "at": "2026-03-04T05:59:00Z"}, {}]
    for data in rows:
        await create_record(client, admin_token, "events", data)
    body = await groups_of(client, "events", group_by="kind,at:year,at:month,at:day,at:hour")
    assert body["items"] == [
        {"key": {"kind": None, "at:year": None, "at:month": None, "at:day": None, "at:hour": None}, "count": 1},
        {"key": {"kind": None, "at:year": "2026-01-01T00:00:00.000Z", "at:month": "2026-03-01T00:00:00.000Z",
                 "at:day": "2026-03-04T00:00:00.000Z", "at:hour": "2026-03-04T05:00:00.000Z"}, "count": 1},
        {"key": {"kind": "a", "at:year": "2026-01-01T00:00:00.000Z", "at:month": "2026-03-01T00:00:00.000Z",
                 "at:day": "2026-03-04T00:00:00.000Z", "at:hour": "2026-03-04T05:00:00.000Z"}, "count": 1},
    ]
    created = await groups_of(client, "events", group_by="created:year")
    assert created["items"][0]["count"] == 3
    assert created["items"][0]["key"]["created:year"].endswith("-01-01T00:00:00.000Z")


@pytest.mark.parametrize("params, status, code, says", [
    ({"aggregates": "sum(customer)"}, 400, "invalid_filter", "sum needs a number field"),
    ({"aggregates": "avg(placed)"}, 400, "invalid_filter", "avg needs a number field"),
    ({"group_by": ",".join(f"k{i}" for i in range(11))}, 422, "validation_error", "at most 10"),
    ({"aggregates": ",".join(f"max(f{i})" for i in range(11))}, 422, "validation_error", "at most 10"),
    ({"aggregates": "count_distinct(customer),count_distinct(status)"}, 422, "validation_error", "count_distinct"),
    ({"group_by": "customer:month"}, 400, "invalid_filter", "a date unit needs a date field"),
    ({"group_by": "placed:week"}, 400, "invalid_filter", "unknown date unit"),
    ({"group_by": "meta"}, 400, "invalid_filter", "holds a JSON document"),
    ({"group_by": "tags"}, 400, "invalid_filter", "holds a list"),
    ({"aggregates": "max(tags)"}, 400, "invalid_filter", "holds a list"),
    ({"group_by": "nope"}, 400, "invalid_filter", "unknown field 'nope'"),
    ({"group_by": "status,status"}, 400, "invalid_filter", "given twice"),
    ({"group_by": "status,"}, 400, "invalid_filter", "empty item"),
    ({"aggregates": "count(total)"}, 400, "invalid_filter", "count() takes no field"),
    ({"aggregates": "sum()"}, 400, "invalid_filter", "count() takes no field"),
    ({"aggregates": "median(total)"}, 400, "invalid_filter", "unknown function"),
    ({"aggregates": "sum(total"}, 400, "invalid_filter", "function(field)"),
    ({"aggregates": "sum($where)"}, 400, "invalid_filter", "function(field)"),
    ({"group_by": "status", "sort": "total"}, 400, "invalid_filter", "unknown sort field 'total'"),
    ({"filter": "total >"}, 400, "invalid_filter", "filter"),
    ({"group_by": "x" * 1001}, 422, "validation_error", "group_by"),
], ids=["sum-text", "avg-date", "11-keys", "11-aggregates", "two-distinct", "unit-on-text", "bad-unit", "json",
        "list", "max-list", "unknown", "twice", "empty-item", "count-field", "sum-nothing", "unknown-function",
        "syntax", "injection", "sort-unknown", "filter-syntax", "too-long"])
async def test_bad_input_is_refused_with_a_clear_error(client, orders, params, status, code, says):
    body = await error_of(await aggregate(client, "orders", **params), status, code)
    assert says in body["detail"] or says in str(body.get("errors")), body


async def test_unknown_collection_is_404(client):
    await error_of(await aggregate(client, "nope"), 404, "not_found")


async def test_the_list_rule_applies(client, admin_token):
    await create_collection(client, admin_token, "members", [], type="auth", list_rule="", view_rule="")
    ann_id, ann = await customer(client, "members", "ann@example.com")
    bob_id, bob = await customer(client, "members", "bob@example.com")
    await create_collection(client, admin_token, "notes", [{"name": "owner", "type": "text"},
                                                           {"name": "score", "type": "number"}],
                            list_rule="owner = @request.auth.id")
    for owner, score in [(ann_id, 1), (ann_id, 2), (bob_id, 10), (bob_id, 20), (bob_id, 30)]:
        await create_record(client, admin_token, "notes", {"owner": owner, "score": score})
    mine = await client.get("/api/v1/collections/notes/aggregate", params={"aggregates": "count(),sum(score)"},
                            headers=ann)
    assert (await mine.json())["items"] == [{"key": {}, "count": 2, "sum_score": 3}]
    theirs = await client.get("/api/v1/collections/notes/aggregate", params={"aggregates": "count(),sum(score)"},
                              headers=bob)
    assert (await theirs.json())["items"] == [{"key": {}, "count": 3, "sum_score": 60}]
    everyone = await groups_of(client, "notes", admin_token, aggregates="count(),sum(score)")
    assert everyone["items"] == [{"key": {}, "count": 5, "sum_score": 63}]
    anonymous = await groups_of(client, "notes", aggregates="count()")
    assert anonymous["items"] == [{"key": {}, "count": 0}]
    await create_collection(client, admin_token, "private", [{"name": "x", "type": "text"}], list_rule=None)
    await error_of(await aggregate(client, "private"), 401, "unauthorized")
    await error_of(await client.get("/api/v1/collections/private/aggregate", headers=ann), 403, "forbidden")
    assert (await groups_of(client, "private", admin_token))["items"] == [{"key": {}, "count": 0}]


async def test_a_hidden_field_cannot_be_grouped_aggregated_or_sorted_and_tells_nothing(client, admin_token):
    await create_collection(client, admin_token, "members", [], type="auth", list_rule="", view_rule="")
    ann_id, ann = await customer(client, "members", "ann@example.com")
    await create_collection(client, admin_token, "cards", [
        {"name": "owner", "type": "text"},
        {"name": "pin", "type": "number", "view_rule": "owner = @request.auth.id"},
        {"name": "secret", "type": "text", "view_rule": None},
        {"name": "title", "type": "text"}], list_rule="")
    await create_record(client, admin_token, "cards", {"owner": ann_id, "pin": 1234, "secret": "s1", "title": "a"})
    other = await create_record(client, admin_token, "cards", {"owner": "someone", "pin": 9999, "secret": "s2",
                                                               "title": "b"})
    for params in ({"group_by": "pin"}, {"aggregates": "sum(pin)"}, {"aggregates": "max(pin)"},
                   {"aggregates": "count_distinct(pin)"}):
        body = await error_of(await client.get("/api/v1/collections/cards/aggregate", params=params, headers=ann),
                              400, "invalid_filter")
        assert "view rule" in body["detail"]
    unknown = await error_of(await client.get("/api/v1/collections/cards/aggregate", params={"group_by": "secret"},
                                              headers=ann), 400, "invalid_filter")
    assert "unknown field 'secret'" in unknown["detail"]
    # the same refusal whatever the values (no oracle): change them and ask again
    changed = await client.patch(f"/api/v1/collections/cards/records/{other['id']}", headers=bearer(admin_token),
                                 json={"data": {"secret": "s1", "pin": 1}})
    assert changed.status == 200
    again = await error_of(await client.get("/api/v1/collections/cards/aggregate", params={"group_by": "secret"},
                                            headers=ann), 400, "invalid_filter")
    assert again["detail"] == unknown["detail"]
    # a filter on the guarded field counts only the records where the caller may see it, as a list does
    mine = await client.get("/api/v1/collections/cards/aggregate", params={"filter": "pin > 0"}, headers=ann)
    assert (await mine.json())["items"] == [{"key": {}, "count": 1}]
    listed = await client.get("/api/v1/collections/cards/records", params={"filter": "pin > 0"}, headers=ann)
    assert (await listed.json())["total"] == 1
    # admins see every field
    assert (await groups_of(client, "cards", admin_token, aggregates="sum(pin)"))["items"][0]["sum_pin"] == 1235
    assert (await groups_of(client, "cards", admin_token, group_by="secret"))["items"] == [
        {"key": {"secret": "s1"}, "count": 2}]


async def test_a_write_is_seen_by_the_next_aggregation(client, admin_token, orders):
    before = await groups_of(client, "orders", aggregates="count(),sum(total)")
    cached = await aggregate(client, "orders", aggregates="count(),sum(total)")
    assert (await cached.json()) == before
    revalidated = await client.get("/api/v1/collections/orders/aggregate",
                                   params={"aggregates": "count(),sum(total)"},
                                   headers={"If-None-Match": cached.headers["ETag"]})
    assert revalidated.status == 304
    await create_record(client, admin_token, "orders", {"status": "new", "total": 1000, "placed": "2026-05-01"})
    after = await groups_of(client, "orders", aggregates="count(),sum(total)")
    assert after["items"][0]["count"] == before["items"][0]["count"] + 1
    assert after["items"][0]["sum_total"] == before["items"][0]["sum_total"] + 1000


async def test_past_the_time_limit_it_is_503_with_retry_after(client, admin_token, mongo_db, monkeypatch):
    collection = await create_collection(client, admin_token, "big", [{"name": "n", "type": "number"}], list_rule="")
    documents = [{"_id": f"id{i:05d}", "n": i, "created": datetime(2026, 1, 1, tzinfo=UTC),
                  "updated": datetime(2026, 1, 1, tzinfo=UTC)} for i in range(3000)]
    await mongo_db[records_mongo_name(collection["id"])].insert_many(documents)
    monkeypatch.setattr(aggregates, "AGGREGATE_MAX_TIME_MS", 1)
    response = await aggregate(client, "big", group_by="n", aggregates="count(),sum(n)")
    body = await error_of(response, 503, "service_unavailable")
    assert "longer than 1 ms" in body["detail"] and response.headers["Retry-After"] == "1"


async def test_an_aggregation_waits_in_the_scan_line_like_a_list(client, orders, services, monkeypatch):
    repository = services.records.repository
    monkeypatch.setattr(repository.scans, "max_wait_s", 0.2)
    async with repository.hold_scans():  # every slot is taken
        response = await aggregate(client, "orders", group_by="status")
        await error_of(response, 503, "service_unavailable")
        assert int(response.headers["Retry-After"]) >= 1
    assert (await groups_of(client, "orders", group_by="status"))["total"] == 3


async def test_an_api_key_with_the_read_scope_may_aggregate(client, admin_token, orders):
    created = await client.post("/api/v1/api-keys", headers=bearer(admin_token),
                                json={"name": "dash", "scopes": ["read"]})
    key = (await created.json())["key"]
    response = await client.get("/api/v1/collections/orders/aggregate", headers={"X-API-Key": key})
    assert response.status == 200 and (await response.json())["items"] == [{"key": {}, "count": 40}]



async def test_a_localized_field_cannot_be_grouped_but_filters_as_a_list_does(client, admin_token):
    await create_collection(client, admin_token, "pages", [{"name": "title", "type": "text", "localized": True},
                                                          {"name": "hits", "type": "number"}], list_rule="")
    for title, hits in [("Home", 3), ("About", 5)]:
        await create_record(client, admin_token, "pages", {"title": title, "hits": hits})
    for params in ({"group_by": "title"}, {"aggregates": "max(title)"}):
        body = await error_of(await aggregate(client, "pages", **params), 400, "invalid_filter")
        assert "is localized" in body["detail"]
    filtered = await groups_of(client, "pages", filter="title = 'About'", aggregates="sum(hits)")
    assert filtered["items"] == [{"key": {}, "sum_hits": 5}]
