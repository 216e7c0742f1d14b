"""Rate limiting in Redis: 429 with headers, release after the window, switch, proxies, replicas."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from dataclasses import replace

import pytest

from cms.app import create_app
from cms.wiring import open_services

PATH = "/api/v1/collections"


@pytest.fixture
async def make_client(aiohttp_client, config, clock):
    """Build apps on the test's database with config overrides; each has its own services."""
    opened = []

    async def make(**overrides):
        own = replace(config, **overrides)
        context = open_services(own, clock=clock)
        services = await context.__aenter__()
        opened.append(context)
        return await aiohttp_client(create_app(own, services=services)), services

    yield make
    for context in reversed(opened):
        await context.__aexit__(None, None, None)


async def test_general_limit_429_with_headers_and_audit(client, services):
    await services.settings.set("rate_limit_per_minute", 3)
    statuses = [(await client.get(PATH)).status for _ in range(3)]
    assert statuses == [200, 200, 200]
    ok = await client.get("/api/v1/stats")  # any API path counts
    assert ok.status == 429
    assert ok.headers["X-RateLimit-Limit"] == "3"
    assert ok.headers["X-RateLimit-Remaining"] == "0"
    assert 1 <= int(ok.headers["Retry-After"]) <= 60
    body = await ok.json()
    assert body["code"] == "rate_limited"
    assert await services.audit.count(event_type="rate_limited") == 1


async def test_headers_on_allowed_responses(client):
    response = await client.get(PATH)
    assert response.headers["X-RateLimit-Limit"] == "600"
    assert response.headers["X-RateLimit-Remaining"] == "599"


async def test_health_is_not_limited(client, services):
    await services.settings.set("rate_limit_per_minute", 1)
    statuses = [(await client.get("/health")).status for _ in range(3)]
    assert statuses == [200, 200, 200]


async def test_limit_released_after_window(make_client):
    client, services = await make_client(rate_limit_window_s=1)
    await services.settings.set("rate_limit_per_minute", 2)
    assert [(await client.get(PATH)).status for _ in range(3)] == [200, 200, 429]
    deadline = time.monotonic() + 5
    while (await client.get(PATH)).status == 429:
        assert time.monotonic() < deadline, "limit not released after its window"
        await asyncio.sleep(0.1)


async def test_switch_turns_limiting_off(client, services):
    await services.settings.set("rate_limit_per_minute", 1)
    await services.settings.set("rate_limit_enabled", False)
    responses = [await client.get(PATH) for _ in range(3)]
    assert [r.status for r in responses] == [200, 200, 200]
    assert "X-RateLimit-Limit" not in responses[0].headers


async def test_forwarded_for_ignored_without_trusted_proxies(client, services):
    await services.settings.set("rate_limit_per_minute", 2)
    statuses = [(await client.get(PATH, headers={"X-Forwarded-For": f"10.0.0.{i}"})).status for i in range(3)]
    assert statuses == [200, 200, 429]


async def test_trusted_proxy_uses_rightmost_untrusted_hop(make_client):
    client, services = await make_client(trusted_proxies=(ipaddress.ip_network("127.0.0.0/8"),))
    await services.settings.set("rate_limit_per_minute", 2)
    # different real clients behind the proxy are counted apart ...
    for i in range(3):
        assert (await client.get(PATH, headers={"X-Forwarded-For": f"203.0.113.{i}"})).status == 200
    # ... and a client cannot escape by prepending fake hops: the right-most untrusted hop counts
    spoofed = [(await client.get(PATH, headers={"X-Forwarded-For": f"1.2.3.{i}, 198.51.100.7"})).status
               for i in range(3)]
    assert spoofed == [200, 200, 429]


async def test_limit_is_shared_across_replicas(client, services, make_client):
    await services.settings.set("rate_limit_per_minute", 2)
    second, _ = await make_client()
    assert (await client.get(PATH)).status == 200
    assert (await second.get(PATH)).status == 200
    assert (await client.get(PATH)).status == 429
    assert (await second.get(PATH)).status == 429
