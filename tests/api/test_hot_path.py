"""The hot path of reads (issue "Fast reads", items 3, 4 and 6): cold reads still share one query,
list queries wait in a bounded line, whole-collection totals, and HTTPS behind a trusted proxy."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from cms.app import create_app
from cms.config import Config
from cms.errors import ServiceUnavailable
from cms.store.client import open_client
from cms.store.documents import records_mongo_name
from cms.web.context import SERVICES, is_https
from cms.wiring import Services, open_services
from tests.api.test_read_cache import POSTS
from tests.conftest import bearer, create_collection, create_record, records_path
from tests.fixtures import CommandLog, wait_until


async def test_with_the_cache_off_identical_concurrent_reads_share_one_query(
        client: Any, services: Services, admin_token: str, mongo_commands: CommandLog) -> None:
    collection = await create_collection(client, admin_token, "posts", POSTS, list_rule="")
    for n in range(3):
        await create_record(client, admin_token, "posts", {"title": f"t{n}", "views": n})
    response = await client.post("/api/v1/settings", headers=bearer(admin_token),
                                 json={"key": "read_cache_enabled", "value": False})
    assert response.status == 200

    async def read() -> Any:
        response = await client.get(records_path("posts"), params={"sort": "-views"})
        assert response.status == 200
        return await response.json()

    def finds() -> int:
        return len(mongo_commands.named("find", collection["id"]))

    # the list queries wait in line until all 8 reads wait for one computation
    async with services.records.repository.hold_scans():
        reads = [asyncio.create_task(read()) for _ in range(8)]
        await wait_until(lambda: services.records.reads_waiting() == 8, "8 reads share one computation")
        assert finds() == 0
    pages = await asyncio.gather(*reads)
    assert all(p == pages[0] for p in pages) and pages[0]["total"] == 3
    assert finds() == 1
    await read()  # nothing was kept: the next read queries again
    assert finds() == 2


async def test_a_list_query_waits_in_line_at_most_the_bound(
        services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    repository = services.records.repository
    monkeypatch.setattr(repository.scans, "max_wait_s", 0.2)
    async with repository.hold_scans():  # every slot is taken
        with pytest.raises(ServiceUnavailable) as refused:
            await repository.find("no-such-collection", {}, [], 0, 10)
    assert refused.value.headers["Retry-After"] == "1"
    assert await repository.find("no-such-collection", {}, [], 0, 10) == []  # the slots came back
    assert await repository.count("no-such-collection", {}) == 0


async def test_the_whole_collection_total_follows_creates_and_deletes(
        client: Any, admin_token: str, mongo_commands: CommandLog) -> None:
    posts = await create_collection(client, admin_token, "posts", POSTS, list_rule="")
    made = [await create_record(client, admin_token, "posts", {"title": f"t{n}"}) for n in range(5)]
    for record in made[:2]:
        response = await client.delete(records_path("posts", record["id"]), headers=bearer(admin_token))
        assert response.status == 204
    mongo_commands.commands.clear()
    page = await (await client.get(records_path("posts"))).json()
    sent = [c for c in mongo_commands.commands if c.collection == records_mongo_name(posts["id"])]
    # one scan for the ids of the whole result (their number is the total) and one `_id $in`: no count
    assert page["total"] == 3 and [(c.name, "_id" in c.filter) for c in sent] == [("find", False), ("find", True)]
    filtered = await (await client.get(records_path("posts"), params={"filter": "title = 't4'"})).json()
    assert filtered["total"] == 1


def probe_app(services: Services, trusted: str | None) -> web.Application:
    """An app answering `is_https(request)` as text, with TRUSTED_PROXIES = `trusted`."""
    app = web.Application()
    networks = (ipaddress.ip_network(trusted),) if trusted else ()
    app[SERVICES] = replace(services, config=replace(services.config, trusted_proxies=networks))

    async def probe(request: web.Request) -> web.Response:
        return web.Response(text=str(is_https(request)))

    app.router.add_get("/probe", probe)
    return app


@pytest.mark.parametrize("trusted, headers, expected", [
    ("127.0.0.0/8", {"X-Forwarded-Proto": "https"}, "True"),
    ("127.0.0.0/8", {"X-Forwarded-Proto": "http, https"}, "True"),  # the last hop is the trusted proxy's
    ("127.0.0.0/8", {}, "False"),
    ("127.0.0.0/8", {"X-Forwarded-Proto": "http"}, "False"),
    ("192.0.2.0/24", {"X-Forwarded-Proto": "https"}, "False"),  # the peer is not a trusted proxy
    (None, {"X-Forwarded-Proto": "https"}, "False"),
])
async def test_https_is_read_from_a_trusted_proxy_only(aiohttp_client: Any, services: Services, trusted: str | None,
                                                       headers: dict[str, str], expected: str) -> None:
    client = await aiohttp_client(probe_app(services, trusted))
    response = await client.get("/probe", headers=headers)
    assert await response.text() == expected


async def test_a_user_changed_through_one_instance_is_seen_by_the_others_rules_at_once(
        aiohttp_client: Any, config: Any, clock: Any, client: Any, services: Services, admin_token: str,
        collection_user_token: str) -> None:
    """The other instance caches the user's principal (verified: false) over several requests; when
    this one marks the user verified (the admin UI's service call), the other's next request is
    decided with the new value. Then a revoke-all here refuses the token there."""
    await create_collection(client, admin_token, "docs", [{"name": "title", "type": "text"}],
                            list_rule="@request.auth.verified = true")
    await create_record(client, admin_token, "docs", {"title": "members only"})
    async with open_services(config, clock=clock) as other_services:
        other = await aiohttp_client(create_app(config, services=other_services))
        for _ in range(3):
            response = await other.get(records_path("docs"), headers=bearer(collection_user_token))
            assert response.status == 403, await response.text()  # the rule refuses unverified users

        system = await services.identity.systems.collection("people")
        user = await system.find_by_email("person@example.com")
        admin = await services.authenticator.authenticate(admin_token)
        assert user is not None
        await services.identity.verification.mark_verified(system, user, admin)
        page = await (await other.get(records_path("docs"), headers=bearer(collection_user_token))).json()
        assert page["total"] == 1, page

        await services.identity.sessions.revoke_all(system, user, by=admin)
        response = await other.get(records_path("docs"), headers=bearer(collection_user_token))
        assert response.status == 401


async def test_the_created_sorts_walk_the_created_index_and_ties_reverse_exactly(
        client: Any, config: Config, admin_token: str, mongo_commands: CommandLog) -> None:
    """`created` and `-created` (and the default) end with `_id` in the same direction, so they are
    the `created_id` index walked forward or backward: no in-memory sort of the whole collection
    (on MongoDB a blocking SORT stage; on the embedded server a Python sort of every record)."""
    created = await create_collection(client, admin_token, "walked", [{"name": "title", "type": "text"}],
                                      list_rule="")
    for n in range(6):  # the suite's clock stands still: equal `created`, the id decides
        await create_record(client, admin_token, "walked", {"title": f"t{n}"})
    response = await client.post("/api/v1/settings", headers=bearer(admin_token),  # every read queries
                                 json={"key": "read_cache_enabled", "value": False})
    assert response.status == 200
    assert config.mongodb_url
    mongo = open_client(config.mongodb_url)
    store = mongo[config.mongodb_db][records_mongo_name(created["id"])]
    pages = {}
    try:
        for sort in (None, "created", "-created"):
            mongo_commands.commands.clear()
            response = await client.get(records_path("walked"), params={"sort": sort} if sort else {})
            pages[sort] = [item["id"] for item in (await response.json())["items"]]
            [find] = mongo_commands.named("find", created["id"])  # the sort the list sent
            order = list(find.sort.items())
            plan = json.dumps((await store.find({}).sort(order).limit(30).explain())["queryPlanner"]["winningPlan"])
            assert '"SORT"' not in plan and '"created_id"' in plan, (sort, plan)
    finally:
        await mongo.close()
    assert pages[None] == pages["created"] == sorted(pages["created"])
    assert pages["-created"] == pages["created"][::-1]
