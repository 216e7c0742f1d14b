"""The request log (cms.observability.request_log): two replicas push into one list in the suite's real
Redis, bounded by the `request_log_size` setting, newest first, filterable; size 0 turns it off; and
the log of a served app holds route templates, never paths or query strings."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.app import RECORDER
from cms.errors import ValidationFailed
from cms.observability import request_log
from cms.observability.recorder import Recorder
from cms.observability.request_log import parse_route, parse_status_class, read_page, routes_seen
from cms.observability.signals import RequestSample
from cms.wiring import Services
from tests.conftest import COLLECTIONS, bearer


def sample(at: float, status: int = 200, route: str = "/api/v1/health", user: str | None = None) -> RequestSample:
    return RequestSample(at=at, method="GET", route=route, status=status, duration_s=0.0123,
                         client_ip="10.0.0.9", principal=user)


async def length(redis: Redis, key: str) -> int:
    return await cast(Awaitable[int], redis.llen(key))


class Size:
    """The `request_log_size` setting as the recorder reads it."""

    def __init__(self, value: int) -> None:
        self.value = value

    async def __call__(self) -> int:
        return self.value


async def test_two_replicas_share_one_log_bounded_by_the_setting_newest_first(redis: Redis) -> None:
    db = f"obs_{uuid.uuid4().hex[:8]}"
    size = Size(5)
    a, b = Recorder(redis, db, log_size=size), Recorder(redis, db, log_size=size)
    await a.flush()  # reads the size
    await b.flush()
    t0 = time.time()
    for index in range(4):
        a.log.request(sample(t0 + index, 200, "/api/v1/a"))
    for index in range(3):
        b.log.request(sample(t0 + 10 + index, 404, "/api/v1/b", user="admin:u1"))
    assert await a.flush() and await b.flush()
    assert await length(redis, keys.request_log(db)) == 5
    page = await read_page(redis, db, size=5)
    assert [round(e.at_s - t0) for e in page.entries] == [12, 11, 10, 3, 2]
    newest = page.entries[0]
    assert (newest.method, newest.route, newest.status, newest.client_ip, newest.principal) == (
        "GET", "/api/v1/b", 404, "10.0.0.9", "admin:u1")
    assert newest.duration_ms == 12.3
    assert await routes_seen(redis, db) == ["/api/v1/a", "/api/v1/b"]

    only_a = await read_page(redis, db, size=5, route="/api/v1/a")
    assert [e.route for e in only_a.entries] == ["/api/v1/a"] * 2
    client_errors = await read_page(redis, db, size=5, status_class="4xx", per_page=2)
    assert len(client_errors.entries) == 2 and client_errors.has_next
    second = await read_page(redis, db, size=5, status_class="4xx", per_page=2, page=2)
    assert len(second.entries) == 1 and not second.has_next
    assert (await read_page(redis, db, size=5, status_class="5xx")).entries == []


async def test_a_process_holds_at_most_the_log_size_between_flushes(redis: Redis) -> None:
    db = f"obs_{uuid.uuid4().hex[:8]}"
    recorder = Recorder(redis, db, log_size=Size(3))
    await recorder.flush()
    for index in range(1000):
        recorder.log.request(sample(time.time() + index))
    assert len(recorder.log.drain()) == 3


async def test_size_zero_turns_the_log_off_and_deletes_it(redis: Redis) -> None:
    db = f"obs_{uuid.uuid4().hex[:8]}"
    size = Size(10)
    recorder = Recorder(redis, db, log_size=size)
    await recorder.flush()
    recorder.log.request(sample(time.time()))
    assert await recorder.flush()
    assert await length(redis, keys.request_log(db)) == 1
    size.value = 0
    assert await recorder.flush()
    assert await redis.exists(keys.request_log(db)) == 0
    for _ in range(5):
        recorder.log.request(sample(time.time()))
    assert recorder.log.drain() == []  # nothing is held
    assert await recorder.flush()
    assert await redis.exists(keys.request_log(db)) == 0  # nor written
    size.value = 2
    assert await recorder.flush()
    recorder.log.request(sample(time.time()))
    assert await recorder.flush()
    assert await length(redis, keys.request_log(db)) == 1  # on again


@pytest.mark.parametrize("raw, expected", [
    (None, None), ("", None), ("2xx", "2xx"), ("5xx", "5xx"),
], ids=["absent", "empty", "2xx", "5xx"])
def test_a_status_class_filter(raw: str | None, expected: str | None) -> None:
    assert parse_status_class(raw) == expected


@pytest.mark.parametrize("raw", ["6xx", "200", "4XX", "x" * 5000], ids=["6xx", "a-status", "upper", "long"])
def test_a_bad_status_class_is_refused(raw: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_status_class(raw)
    assert "status" in (caught.value.errors or {})


@pytest.mark.parametrize("raw, ok", [
    ("/api/v1/collections/{name}/records", True), ("unmatched", True), ("/_/logs", True),
    ("/a?b=1", False), ("<script>", False), ("/" + "a" * request_log.MAX_ROUTE_LENGTH, False), ("a b", False),
], ids=["template", "unmatched", "admin", "query", "markup", "long", "space"])
def test_a_route_filter_is_a_route_template(raw: str, ok: bool) -> None:
    if ok:
        assert parse_route(raw) == raw
    else:
        with pytest.raises(ValidationFailed):
            parse_route(raw)


async def test_the_served_app_logs_route_templates_never_paths_or_queries(client: Any, admin_token: str,
                                                                           services: Services, redis: Redis) -> None:
    recorder = client.server.app[RECORDER]  # the app records while it serves
    await client.post(COLLECTIONS, headers=bearer(admin_token),
                      json={"name": "posts", "schema": [{"name": "title", "type": "text"}]})
    secret = f"q{uuid.uuid4().hex}"
    response = await client.get(f"{COLLECTIONS}/posts/records?filter=title%3D%22{secret}%22",
                                headers=bearer(admin_token))
    assert response.status == 200
    missing = await client.get(f"{COLLECTIONS}/posts/records/{secret}", headers=bearer(admin_token))
    assert missing.status == 404
    assert await recorder.flush()
    raw = await cast(Awaitable[list[bytes]], redis.lrange(keys.request_log(services.config.mongodb_db), 0, -1))
    assert len(raw) == 4 and not any(secret.encode() in entry for entry in raw)  # login + 3, each once
    page = await read_page(redis, services.config.mongodb_db, size=1000)
    routes = {(e.route, e.status) for e in page.entries}
    assert ("/api/v1/collections/{collection_name}/records", 200) in routes
    assert ("/api/v1/collections/{collection_name}/records/{record_id}", 404) in routes
    assert all(e.principal and e.principal.startswith("admin:") for e in page.entries
               if e.route.startswith("/api/v1/collections/{collection_name}"))
