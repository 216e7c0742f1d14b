"""No way around a rate limit (issue 28, item 3: Parse Server's `/batch` that ran each sub-request
unlimited; spoofed `X-Forwarded-For`).

- Batch: each sub-request of `/batch` counts against the general limit
  (`tests/api/test_batch.py::test_each_request_counts_against_the_rate_limit`, which needs
  transactions); here, a batch cannot carry a request of a stricter limit (login, OTP, reset):
  such a sub-request is refused before any credential is checked.
- Body fields in a limiter key: `test_rate_limit_keys.py`.
- Client address: an `X-Forwarded-For` (or any other forwarding header) of a peer that is not one
  of TRUSTED_PROXIES changes neither the limiter key nor the audited address; without
  TRUSTED_PROXIES, and with proxies that do not include the peer."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

import pytest

from cms.config import Config
from cms.services.operations.rate_limits import AUTH_LIMIT
from tests.conftest import USER_PASSWORD, bearer, create_collection, error_of

PEOPLE = "/api/v1/collections/people/auth"
ALICE = "alice@example.com"
PEER = "127.0.0.1"
FORWARDING = ("X-Forwarded-For", "X-Real-IP", "Forwarded", "CF-Connecting-IP", "True-Client-IP", "X-Client-IP")


@pytest.fixture(params=["no-proxies", "other-proxies"])
def config(config: Config, request: pytest.FixtureRequest) -> Config:
    """No TRUSTED_PROXIES, or proxies that do not include the test client's peer (loopback)."""
    if request.param == "no-proxies":
        return config
    return replace(config, trusted_proxies=(ipaddress.ip_network("10.0.0.0/8"),
                                            ipaddress.ip_network("fd00::/8")))


@pytest.fixture
async def people(client, admin_token) -> None:
    await create_collection(client, admin_token, "people", [], type="auth", otp_enabled=True)
    response = await client.post(f"{PEOPLE}/register", json={"email": ALICE, "password": USER_PASSWORD})
    assert response.status == 201, await response.text()


def spoofed(n: int) -> dict[str, str]:
    """Forwarding headers naming a new client address for attempt `n`."""
    address = f"203.0.{n // 250}.{n % 250 + 1}"
    return {name: (f"for={address}" if name == "Forwarded" else address) for name in FORWARDING}


async def test_forwarding_headers_of_an_untrusted_peer_give_no_fresh_login_budget(client, admin_token, people):
    for n in range(AUTH_LIMIT):
        response = await client.post(f"{PEOPLE}/login", headers=spoofed(n),
                                     json={"email": ALICE, "password": "wrong-password"})
        await error_of(response, 401, "invalid_credentials")
    refused = await client.post(f"{PEOPLE}/login", headers=spoofed(AUTH_LIMIT),
                                json={"email": ALICE, "password": USER_PASSWORD})
    await error_of(refused, 429, "rate_limited")
    audit = await client.get("/api/v1/audit?event_type=login_failed&per_page=100", headers=bearer(admin_token))
    entries = (await audit.json())["items"]
    assert len(entries) == AUTH_LIMIT and {e["ip_address"] for e in entries} == {PEER}, entries


async def test_forwarding_headers_of_an_untrusted_peer_give_no_fresh_general_budget(client, services):
    await services.settings.set("rate_limit_per_minute", 3)
    statuses = [(await client.get("/api/v1/collections", headers=spoofed(n))).status for n in range(4)]
    assert statuses == [200, 200, 200, 429]


@pytest.mark.parametrize("path, body", [
    (f"{PEOPLE}/login", {"email": ALICE, "password": "wrong-password"}),
    (f"{PEOPLE}/otp/verify", {"email": ALICE, "code": "000000"}),
    (f"{PEOPLE}/otp/request", {"email": ALICE}),
    ("/api/v1/auth/login", {"email": ALICE, "password": "wrong-password"}),
    ("/api/v1/auth/reset-password", {"token": "x" * 43, "new_password": "new-password-1"}),
    ("/api/v1/auth/request-password-reset", {"email": ALICE}),
    ("/api/v1/batch", {"requests": []}),
], ids=["login", "otp-verify", "otp-request", "admin-login", "reset", "reset-request", "nested-batch"])
async def test_a_batch_carries_no_request_of_a_stricter_limit(client, admin_token, people, services, path, body):
    requests = [{"method": "POST", "url": path, "body": body}] * 2
    for _ in range(AUTH_LIMIT + 1):
        response = await client.post("/api/v1/batch", headers=bearer(admin_token), json={"requests": requests})
        assert 400 <= response.status < 500 and response.status != 429, await response.text()
        answer = await response.json()
        assert answer["code"] in ("validation_error", "bad_request"), answer
    assert await services.audit.count(event_type="login_failed") == 0
    assert await services.audit.count(event_type="otp_failed") == 0
    # the budget of the real endpoint is whole
    direct = await client.post(f"{PEOPLE}/login", json={"email": ALICE, "password": USER_PASSWORD})
    assert direct.status == 200, await direct.text()
    assert direct.headers.get("X-RateLimit-Remaining") != "0"
