"""What several test modules share beyond the servers of conftest.py: the MongoDB commands the
driver sent (`mongo_commands`, which can also act just before a command is sent: `before`),
blocking clients of the test's database and cache Redis for such actions (`sync_db`,
`sync_cache`), the catalog epoch as Redis holds it (`catalog_epoch`), a cache redis-server of the
test's own that the test may stop (`cache_server`), polling with a time-out (`wait_until`), one
registered admin-table user with its tokens (`user`, `tokens`), and schemas used by more than one
module.

conftest.py imports the fixtures defined here, so every test module can request them by name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymongo
import pytest
import redis
from aiohttp import web
from pymongo import monitoring
from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.config import Config
from cms.runtime.children import ChildServer
from cms.runtime.embedded import free_port, start_redis
from cms.security import passwords
from cms.services.caching.counters import counter_text
from cms.store.client import Database, open_client
from cms.store.documents import records_mongo_name

# --- the MongoDB commands the driver sends -----------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command a client of this process sent: its name (`find`, `insert`, `count`, ...), the
    Mongo collection it names, for an `insert` how many documents it carried, and for a `find` its
    filter and sort."""

    name: str
    collection: str
    documents: int = 0
    filter: dict[str, Any] = field(default_factory=dict)
    sort: dict[str, Any] = field(default_factory=dict)


@dataclass
class Before:
    """An action `CommandLog.before` runs just before a command that `matches`; `times` is how many
    more times (None: every time)."""

    matches: Callable[[Command], bool]
    action: Callable[[Command], object]
    times: int | None = 1


@dataclass
class CommandLog(monitoring.CommandListener):
    """The driver's own command monitoring (a public pymongo seam), registered once for every
    client this process opens; it keeps commands only while a test's `mongo_commands` is active."""

    commands: list[Command] = field(default_factory=list)
    recording: bool = False
    actions: list[Before] = field(default_factory=list)
    acting: bool = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Keep the command and run the `before` actions it matches (only while recording)."""
        if not self.recording:
            return
        target = event.command.get(event.command_name)
        documents = event.command.get("documents")
        command = Command(event.command_name, target if isinstance(target, str) else "",
                          len(documents) if isinstance(documents, list) else 0,
                          dict(event.command.get("filter") or {}), dict(event.command.get("sort") or {}))
        self.commands.append(command)
        if self.acting:  # the commands an action sends itself
            return
        for before in [b for b in self.actions if b.times != 0 and b.matches(command)]:
            self.acting = True
            try:
                before.action(command)
            finally:
                self.acting = False
            if before.times is not None:
                before.times -= 1

    def before(self, matches: Callable[[Command], bool], action: Callable[[Command], object], *,
               times: int | None = 1) -> None:
        """Run `action(command)` just before a client of this process sends a command that `matches`, the
        next `times` times (None: every time), while the test's `mongo_commands` is active. The
        driver publishes a command's start before it sends it, and `action` blocks, so what it does
        with a blocking client of its own (`sync_db`, `sync_cache`) is done before the command
        reaches the server: a real concurrent writer at an exact point, or a look at the state
        right then. Commands `action` sends itself are logged but match nothing."""
        self.actions.append(Before(matches, action, times))

    def finds(self, collection: str, key: str) -> list[Command]:
        """The `find` commands sent to the Mongo collection `collection` whose filter has `key`
        (e.g. `_id`: look-ups by id)."""
        return [c for c in self.commands if c.name == "find" and c.collection == collection and key in c.filter]

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Nothing to keep."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Nothing to keep."""

    def named(self, name: str, collection_id: str) -> list[Command]:
        """The `name` commands (e.g. `find`) sent to the records of the CMS collection `collection_id`."""
        mongo_name = records_mongo_name(collection_id)
        return [c for c in self.commands if c.name == name and c.collection == mongo_name]

    def insert_sizes(self, collection_id: str) -> list[int]:
        """The number of documents of each `insert` into the collection's records, in order
        (an `insert_one` is 1, one `insert_many` of a group is the group's size)."""
        return [c.documents for c in self.named("insert", collection_id)]


COMMANDS = CommandLog()
monitoring.register(COMMANDS)  # every client opened from here on reports to it


@pytest.fixture
def mongo_commands() -> Iterator[CommandLog]:
    """The MongoDB commands every client of this process sends during the test."""
    COMMANDS.commands.clear()
    COMMANDS.recording = True
    yield COMMANDS
    COMMANDS.recording = False
    COMMANDS.commands.clear()
    COMMANDS.actions.clear()


@pytest.fixture
async def mongo_db(config: Config) -> AsyncIterator[Database]:
    """The test's database through a client of its own (to check or plant what is stored)."""
    assert config.mongodb_url
    client = open_client(config.mongodb_url)
    yield client[config.mongodb_db]
    await client.close()


@pytest.fixture
def sync_db(config: Config) -> Iterator[pymongo.database.Database[Any]]:
    """The test's database through a blocking client of its own: for `CommandLog.before` actions,
    which run inside the driver's (synchronous) monitoring call."""
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(config.mongodb_url)
    yield client[config.mongodb_db]
    client.close()


@pytest.fixture
def sync_cache(config: Config) -> Iterator[redis.Redis]:
    """A blocking client of the test's cache Redis (`CACHE_REDIS_URL`, else `REDIS_URL`), for
    `CommandLog.before` actions."""
    client = redis.Redis.from_url(config.cache_redis_url or config.redis_url or "")
    yield client
    client.close()


async def catalog_epoch(config: Config) -> str:
    """The catalog epoch of `config`'s database, as the services read it (`keys.catalog_epoch`, on
    the cache Redis): what `CollectionService.current_by_name` hands out."""
    client = Redis.from_url(config.cache_redis_url or config.redis_url or "")
    try:
        return counter_text(await client.get(keys.catalog_epoch(config.mongodb_db)))
    finally:
        await client.aclose()


async def bump_catalog_epoch(config: Config) -> None:
    """Move the catalog epoch of `config`'s database (INCR, as a collection change or a restore
    does on any replica): every cached definition and read becomes stale."""
    client = Redis.from_url(config.cache_redis_url or config.redis_url or "")
    try:
        await client.incr(keys.catalog_epoch(config.mongodb_db))
    finally:
        await client.aclose()


@pytest.fixture(name="redis")
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    """A client of the suite's Redis, closed after the test."""
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def cache_server(tmp_path: Path) -> Iterator[ChildServer]:
    """A redis-server of this test's own, which the `config` fixture makes the cache Redis
    (`cache_redis_url`) of a test that requests this fixture: the test may stop it (a real cache
    outage: counters and epochs fail open) without touching the suite's shared Redis."""
    with start_redis(tmp_path / "cache-redis") as server:
        yield server


def dummy_verifications() -> int:
    """How many dummy password verifications (`passwords.verify_dummy`: the argon2 work a login
    for an unknown email spends) this process has run so far."""
    info = passwords.dummy_hash.cache_info()
    return info.hits + info.misses


# --- requests --------------------------------------------------------------------------------------

JSON = {"Content-Type": "application/json"}


async def post_raw_json(client: Any, path: str, data: bytes | str) -> Any:
    """POST `data` as it is (malformed JSON, bytes that are not UTF-8, ...) with the JSON content
    type; returns the response."""
    return await client.post(path, data=data, headers=JSON)


# --- servers a test runs itself ------------------------------------------------------------------


@asynccontextmanager
async def served(app: web.Application, path: str, *, shutdown_timeout_s: float = 60.0) -> AsyncIterator[str]:
    """Serve `app` on a free loopback port (reachable from processes the test starts, which the
    `aiohttp_server` fixture's server is too, but with a fixed shutdown time-out); yields the URL of
    `path` on it. The server is cleaned up on exit, waiting at most `shutdown_timeout_s` seconds
    for requests still running."""
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        await runner.cleanup()


# --- waiting -----------------------------------------------------------------------------------


async def wait_until(check: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = 10.0) -> None:
    """Poll `check` (plain or async) every 5 ms until it is true; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        outcome = check()
        if outcome if isinstance(outcome, bool) else await outcome:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.005)


# --- one admin-table user ----------------------------------------------------------------------

REGISTER = "/api/v1/auth/register"
REGISTERED_EMAIL = "registered@example.com"
REGISTERED_PASSWORD = "password-1"


@pytest.fixture
async def user(client: Any) -> dict[str, Any]:
    """A registered admin-table user (REGISTERED_EMAIL, REGISTERED_PASSWORD; role user): `{id, email, ...}`."""
    response = await client.post(REGISTER, json={"email": REGISTERED_EMAIL, "password": REGISTERED_PASSWORD})
    assert response.status == 201, await response.text()
    body: dict[str, Any] = (await response.json())["user"]
    return body


@pytest.fixture
async def tokens(client: Any, user: dict[str, Any]) -> dict[str, Any]:
    """The token object (`access_token`, `refresh_token`, ...) of one login of `user`."""
    credentials = {"email": REGISTERED_EMAIL, "password": REGISTERED_PASSWORD}
    response = await client.post("/api/v1/auth/login", json=credentials)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = (await response.json())["token"]
    return body
