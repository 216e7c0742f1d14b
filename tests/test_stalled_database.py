"""A stalled MongoDB gives 503 within seconds, not a hung request; a stalled Redis slows reads but
does not fail them (issue 11, item 4: explicit time-outs; issue 12: the read cache never fails a read).

Each test starts its own servers (SIGSTOP on the session's shared ones could stall other tests)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cms.app import create_app
from cms.config import Config
from cms.runtime.embedded import ChildServer, start_mongodb, start_redis
from cms.wiring import open_services
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, bearer, create_collection, create_record, login, records_path

TIMEOUT_S = 2
"""`database_timeout_s` in these tests, so a stall is detected in about that long."""


@pytest.fixture
def own_servers(tmp_path: Path) -> Iterator[tuple[ChildServer, ChildServer]]:
    with start_mongodb(tmp_path / "mongodb") as mongodb, start_redis(tmp_path / "redis") as redis:
        yield mongodb, redis


def paused(server: ChildServer) -> Any:
    """Context: the server's process is stopped (SIGSTOP) inside, continued (SIGCONT) after."""

    class Paused:
        def __enter__(self) -> None:
            os.kill(server.process.pid, signal.SIGSTOP)

        def __exit__(self, *exc: object) -> None:
            os.kill(server.process.pid, signal.SIGCONT)

    return Paused()


@pytest.fixture
async def stack(aiohttp_client, config: Config, own_servers, clock):
    mongodb, redis = own_servers
    own = replace(config, mongodb_url=mongodb.url, redis_url=redis.url, database_timeout_s=TIMEOUT_S)
    async with open_services(own, clock=clock) as services:
        client = await aiohttp_client(create_app(own, services=services))
        await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
        token = str((await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"])
        await create_collection(client, token, "posts", [{"name": "title", "type": "text"}])
        record = await create_record(client, token, "posts", {"title": "hello"})
        yield client, token, record, mongodb, redis


async def test_a_stalled_mongodb_is_503_within_seconds_and_recovers(stack):
    client, token, record, mongodb, _ = stack
    with paused(mongodb):
        started = time.monotonic()
        # as the admin, whom no rule stops before the query: an anonymous list that the collection's
        # rules answer empty without a query may be served while the database is stopped
        response = await client.get(records_path("posts"), params={"filter": "title = 'x'"}, headers=bearer(token))
        elapsed = time.monotonic() - started
        assert response.status == 503, await response.text()
        assert (await response.json())["code"] == "service_unavailable"
        # the read, its one automatic retry and the new connection's handshake may each wait once
        assert elapsed < TIMEOUT_S * 4
    again = await client.get(records_path("posts", record["id"]), headers=bearer(token))
    assert again.status == 200 and (await again.json())["title"] == "hello"


async def test_a_stalled_redis_slows_reads_but_does_not_fail_them(stack):
    client, _, record, _, redis = stack
    with paused(redis):
        started = time.monotonic()
        response = await client.get(records_path("posts", record["id"]))
        assert response.status == 200, await response.text()
        assert (await response.json())["title"] == "hello"
        # the rate limiter (2 s), the settings version (1 s) and the cache (0.5 s each way) give up
        assert time.monotonic() - started < 10


async def test_a_write_during_a_stall_is_refused_within_seconds_and_no_answered_write_is_lost(stack):
    client, token, _, mongodb, _ = stack
    with paused(mongodb):
        started = time.monotonic()
        response = await client.post(records_path("posts"), headers=bearer(token), json={"data": {"title": "stalled"}})
        assert response.status == 503, await response.text()
        assert (await response.json())["code"] == "service_unavailable"
        assert time.monotonic() - started < TIMEOUT_S * 4
    # recovered without a restart: a new write is answered and stored; the refused one is stored at most once
    stored = await create_record(client, token, "posts", {"title": "after"})
    page = await (await client.get(records_path("posts"), params={"per_page": 100}, headers=bearer(token))).json()
    titles = [r["title"] for r in page["items"]]
    assert stored["id"] in {r["id"] for r in page["items"]}
    assert titles.count("stalled") <= 1 and titles.count("after") == 1
