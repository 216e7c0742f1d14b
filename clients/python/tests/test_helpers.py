"""The client's helpers beyond the API's calls (decisions.md, Clients): `filter`, `get_first_list_item`,
`aggregate` and view collections, httpx event hooks and the per-request `timeout`."""

from __future__ import annotations

import socket
from datetime import UTC, date, datetime, timedelta, timezone

import httpx
import pytest
from conftest import Blog, Service, unique

from cms_client import AsyncCmsClient, CmsClient, CmsError, CmsNetworkError, bind_filter

pytestmark = pytest.mark.anyio

HOSTILE = [
    '" || 1=1 || "',
    "' || 1=1 || '",
    'a\\" || title != "',
    "ends with a backslash \\",
    '\\\\" || views > -1 || "',
    'line one\nline two" || true || "',
    "(x) && y = 1",
]
"""Titles that would change a filter's shape if pasted in quotes: each must stay one literal."""


def test_filter_writes_the_grammar_literals() -> None:
    bound = bind_filter("title = {:t} && views > {:n}", {"t": 'say "hi"', "n": 10})
    assert bound == 'title = "say \\"hi\\"" && views > 10'
    assert bind_filter("a = {:a} && b = {:b} && c = {:c} && d = {:d}", {"a": True, "b": None, "c": 2.5, "d": -0.0}) \
        == "a = true && b = null && c = 2.5 && d = 0"
    moment = datetime(2026, 1, 2, 4, 5, 6, tzinfo=timezone(timedelta(hours=1)))
    assert bind_filter("at > {:m} && day = {:d}", {"m": moment, "d": date(2026, 1, 2)}) \
        == 'at > "2026-01-02T03:05:06Z" && day = "2026-01-02"'
    assert bind_filter("at > {:m}", {"m": datetime(2026, 1, 2)}) == 'at > "2026-01-02T00:00:00Z"'
    assert bind_filter("a = {:a} || a = {:a}", {"a": "x"}) == 'a = "x" || a = "x"'
    with pytest.raises(KeyError, match="no value for the placeholder"):
        bind_filter("title = {:missing}", {"t": "x"})
    with pytest.raises(TypeError):
        bind_filter("views = {:n}", {"n": float("nan")})
    with pytest.raises(TypeError):
        bind_filter("tags = {:t}", {"t": ["a"]})  # type: ignore[dict-item]


async def test_hostile_values_stay_one_literal_on_the_service(service: Service, blog: Blog) -> None:
    tag = unique("inject")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        posts = client.collection(blog.posts)
        decoy = await posts.create({"title": f"{tag} decoy", "views": 7})
        created = {title: await posts.create({"title": title, "views": 7}) for title in HOSTILE}
        for title, record in created.items():
            expr = client.filter("title = {:t} && views = {:v}", {"t": title, "v": 7})
            found = await posts.get_full_list(filter=expr)
            assert [r["id"] for r in found] == [record["id"]], (title, expr)
            assert (await posts.get_first_list_item(expr))["title"] == title
        contains = await posts.get_full_list(filter=client.filter("title ~ {:t}", {"t": '" || 1=1 || "'}))
        assert decoy["id"] not in {r["id"] for r in contains}


async def test_get_first_list_item_and_its_404(service: Service, blog: Blog) -> None:
    tag = unique("first")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        posts = client.collection(blog.posts)
        for views in (3, 1, 2):
            await posts.create({"title": f"{tag} {views}", "views": views})
        first = await posts.get_first_list_item(client.filter("title ~ {:t}", {"t": tag}), sort="-views")
        assert first["title"] == f"{tag} 3"
        with pytest.raises(CmsError) as caught:
            await posts.get_first_list_item(client.filter("title = {:t}", {"t": f"{tag} none"}))
        assert (caught.value.status, caught.value.code) == (404, "not_found")
    with CmsClient(service.url) as sync_client:
        with pytest.raises(CmsError) as caught_sync:
            sync_client.collection(blog.posts).get_first_list_item(sync_client.filter("title = {:t}", {"t": tag}))
        assert caught_sync.value.status == 404


async def test_aggregate_and_a_view_collection(service: Service) -> None:
    name, view = unique("sales"), unique("sales_by_region")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        await client.collections.create({"name": name, "list_rule": "", "view_rule": "", "schema": [
            {"name": "region", "type": "text"}, {"name": "amount", "type": "number"}]})
        sales = client.collection(name)
        for region, amount in (("north", 5), ("north", 7), ("south", 1)):
            await sales.create({"region": region, "amount": amount})
        page = await sales.aggregate(group_by=["region"], aggregates=["count()", "sum(amount)"], sort="-sum_amount")
        assert page["total"] == 2
        assert [(g["key"], g["count"], g["sum_amount"]) for g in page["items"]] == [  # type: ignore[typeddict-item]
            ({"region": "north"}, 2, 12), ({"region": "south"}, 1, 1)]
        only = await sales.aggregate(aggregates="count()", filter=client.filter("region = {:r}", {"r": "south"}))
        assert only["items"][0]["key"] == {} and only["items"][0]["count"] == 1  # type: ignore[typeddict-item]
        with pytest.raises(CmsError) as caught:
            await sales.aggregate(aggregates="sum(region)")
        assert (caught.value.status, caught.value.code) == (400, "invalid_filter")

        await client.collections.create({"name": view, "type": "view", "list_rule": "", "view_rule": "",
                                         "view": {"source": name, "group_by": "region",
                                                  "aggregates": "count(),sum(amount)"}})
        groups = client.collection(view)
        rows = await groups.get_full_list(sort="region")
        assert [(r["region"], r["count"], r["sum_amount"]) for r in rows] == [("north", 2, 12), ("south", 1, 1)]
        assert (await groups.get_one(rows[0]["id"]))["sum_amount"] == 12
        assert (await groups.get_first_list_item('region = "south"'))["count"] == 1
        with pytest.raises(CmsError) as refused:
            await groups.create({"region": "west"})
        assert refused.value.status == 405


async def test_event_hooks_see_every_request_and_response(service: Service) -> None:
    seen: list[str] = []

    async def on_request(request: httpx.Request) -> None:
        seen.append(f"> {request.method} {request.url.path}")

    async def on_response(response: httpx.Response) -> None:
        seen.append(f"< {response.status_code}")

    async with AsyncCmsClient(service.url, event_hooks={"request": [on_request], "response": [on_response]}) as client:
        await client.health()
        with pytest.raises(CmsError):
            await client.collection(unique("missing")).get_list()
    assert seen[:2] == ["> GET /health", "< 200"] and seen[3] == "< 404" and len(seen) == 4

    statuses: list[int] = []
    with CmsClient(service.url, event_hooks={"response": [lambda response: statuses.append(response.status_code)]}) \
            as sync_client:
        sync_client.health()
    assert statuses == [200]
    with pytest.raises(ValueError, match="event_hooks"):
        AsyncCmsClient(service.url, http=httpx.AsyncClient(), event_hooks={"request": [on_request]})


async def test_a_per_request_timeout_bounds_one_call(service: Service, blog: Blog) -> None:
    """A server that accepts and never answers: a call with `timeout=0.3` fails soon as a CmsNetworkError, in
    both flavours; a call with a generous one succeeds."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        async with AsyncCmsClient(url) as client:
            started = datetime.now(UTC)
            with pytest.raises(CmsNetworkError, match="Timeout"):
                await client.health(timeout=0.3)
            assert datetime.now(UTC) - started < timedelta(seconds=5)
        with CmsClient(url) as sync_client:
            with pytest.raises(CmsNetworkError):
                sync_client.collection(blog.posts).get_list(timeout=0.3)
    async with AsyncCmsClient(service.url) as live:
        assert (await live.health(timeout=10))["status"] == "ok"


async def test_settings_are_listed_and_set_as_the_js_client_does(service: Service) -> None:
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        before = {s["key"]: s["value"] for s in await client.settings.list()}
        changed = str(int(before["request_log_size"]) + 1)
        try:
            answer = await client.settings.set("request_log_size", int(changed))
            assert answer["key"] == "request_log_size" and answer["value"] == changed
            assert {s["key"]: s["value"] for s in await client.settings.list()}["request_log_size"] == changed
            with pytest.raises(CmsError) as refused:
                await client.settings.set("no_such_setting", 1)
            assert refused.value.status == 422
        finally:
            await client.settings.set("request_log_size", before["request_log_size"])
    with CmsClient(service.url) as sync:
        sync.auth.auth_with_password(service.admin_email, service.admin_password)
        assert {s["key"]: s["value"] for s in sync.settings.list()}["request_log_size"] == before["request_log_size"]
