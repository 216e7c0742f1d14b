"""The Redis round trips of the hot path (issue 31, item 3), watched with the real Redis server's
`MONITOR`: a warm get by id is one `MGET` (the read cache's stamp and entry, which also vouches for
the cached collection definition), plus one `EVALSHA` when rate limiting is on (the moving window's
hit and its statistics in one script); a signed-in get adds the session epoch's `MGET`; a create is
the session epoch, the check that its collection still exists after the insert, the read cache's
version bump and the realtime append. And a create renders its record's JSON once, for its event
and its answer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from cms.config import Config
from cms.services.delivery.events import RecordEvent
from cms.services.representation import records as represent
from cms.wiring import Services
from tests.api.test_read_cache import POSTS
from tests.conftest import bearer, create_collection, create_record, records_path

WARM_GETS = 5


class Monitor:
    """The commands the Redis server ran for one test's database (`MONITOR`), as sent by clients:
    the commands a Lua script runs are left out, and so are the request log's and the dashboard's
    flushes (`cms:obs:`) and the realtime hub's reads and trims (`cms:rt:`), which run on their own
    tasks; a record event's append to the realtime stream is kept."""

    def __init__(self, redis: Redis, db: str) -> None:
        self._redis = redis
        self._db = db
        self.seen: list[str] = []

    def _appends(self, text: str) -> bool:
        """Whether a script call is a record event's realtime append (its keys end with the key
        saying whether realtime is in use; the hub's own trims do not name it)."""
        return f"cms:rt:{self._db}:active" in text

    async def during(self, work: Callable[[], Awaitable[None]]) -> list[str]:
        """The names of the commands (`MGET`, `EVALSHA`, ...) run while `work()` ran, in order."""
        sentinel = f"monitor-end-{uuid.uuid4().hex}"
        commands: list[str] = []
        started = asyncio.Event()
        async with self._redis.monitor() as monitor:
            async def listen() -> None:
                await self._redis.echo("monitor-start")
                while True:
                    command = await monitor.next_command()
                    text = str(command.get("command", ""))
                    if not started.is_set():
                        started.set()
                    if sentinel in text:
                        return
                    if command.get("client_type") == "lua" or f":{self._db}" not in text:
                        continue
                    name = text.split(" ", 1)[0].strip('"').upper()
                    if f"cms:obs:{self._db}" in text:
                        continue
                    if f"cms:rt:{self._db}" in text and not (name == "EVALSHA" and self._appends(text)):
                        continue
                    commands.append(name)

            listening = asyncio.create_task(listen())
            await self._redis.echo("monitor-start")
            await asyncio.wait_for(started.wait(), 5)
            await work()
            await self._redis.echo(sentinel)
            await asyncio.wait_for(listening, 10)
        return commands


@pytest.fixture
async def monitor(config: Config) -> AsyncIterator[Monitor]:
    assert config.redis_url
    redis = Redis.from_url(config.redis_url)
    try:
        yield Monitor(redis, config.mongodb_db)
    finally:
        await redis.aclose()


async def public_record(client: Any, admin_token: str) -> str:
    """A collection everyone may view and a record of it; returns the record's id (its get warm)."""
    await create_collection(client, admin_token, "posts", POSTS, list_rule="", view_rule="")
    record = await create_record(client, admin_token, "posts", {"title": "hot", "views": 1})
    for _ in range(2):  # cached, and the definition cached for the next request
        response = await client.get(records_path("posts", record["id"]))
        assert response.status == 200
    return str(record["id"])


async def gets(client: Any, record_id: str, headers: dict[str, str] | None = None) -> None:
    """WARM_GETS gets of the record, one after the other, each answered 200 with it."""
    for _ in range(WARM_GETS):
        response = await client.get(records_path("posts", record_id), headers=headers or {})
        assert response.status == 200
        assert (await response.json())["id"] == record_id


async def test_a_warm_get_by_id_is_one_round_trip(client: Any, services: Services, admin_token: str,
                                                  monitor: Monitor) -> None:
    await services.settings.set("rate_limit_enabled", False)
    record_id = await public_record(client, admin_token)
    commands = await monitor.during(lambda: gets(client, record_id))
    assert commands == ["MGET"] * WARM_GETS


async def test_with_rate_limiting_on_a_warm_get_adds_one_script_call(client: Any, services: Services,
                                                                     admin_token: str, monitor: Monitor) -> None:
    record_id = await public_record(client, admin_token)
    assert (await services.settings.values())["rate_limit_enabled"] is True  # the default
    commands = await monitor.during(lambda: gets(client, record_id))
    assert commands == ["EVALSHA", "MGET"] * WARM_GETS
    remaining = []
    for _ in range(2):  # the headers the one script call's statistics give
        response = await client.get(records_path("posts", record_id))
        assert response.headers["X-RateLimit-Limit"] == "600"
        assert 1 <= int(response.headers["X-RateLimit-Reset"]) <= 60
        remaining.append(int(response.headers["X-RateLimit-Remaining"]))
    assert remaining[1] == remaining[0] - 1 and 0 < remaining[1] < 600 - WARM_GETS


async def test_a_signed_in_warm_get_adds_the_session_epoch(client: Any, services: Services, admin_token: str,
                                                           monitor: Monitor) -> None:
    await services.settings.set("rate_limit_enabled", False)
    record_id = await public_record(client, admin_token)
    await gets(client, record_id, bearer(admin_token))  # the session cached
    commands = await monitor.during(lambda: gets(client, record_id, bearer(admin_token)))
    assert commands == ["MGET", "MGET"] * WARM_GETS


async def test_a_create_costs_four_round_trips_and_renders_its_record_once(
        client: Any, services: Services, admin_token: str, monitor: Monitor, seen: list[RecordEvent]) -> None:
    await services.settings.set("rate_limit_enabled", False)
    await public_record(client, admin_token)
    made: list[dict[str, Any]] = []

    async def create() -> None:
        made.append(await create_record(client, admin_token, "posts", {"title": "new", "views": 2}))

    commands = await monitor.during(create)
    # the session epoch; after the insert, the catalog epoch (the collection still exists); the read
    # cache's version bump with its change log entry (one script); the realtime append (one script)
    assert sorted(commands) == ["EVALSHA", "EVALSHA", "MGET", "MGET"], commands
    [event] = [e for e in seen if e.record_id == made[0]["id"]]
    assert event.data == made[0]
    assert event.record is not None and represent.written_record_json(event.record) is event.data
