"""Server-side request forgery through webhooks and OAuth2 provider URLs (issue 28, item 3: the SSRF
class of our peers' advisories). In production mode (`WEBHOOK_ALLOW_PRIVATE` false) no outgoing
request reaches a loopback, link-local (cloud metadata), private or unspecified address, whatever
the URL's spelling: IPv6 forms, IPv4 mapped into IPv6, decimal, octal and short IPv4 forms, or a
host name that resolves inward at delivery time (DNS rebinding: the rule is applied to the address
connected to, not only when the URL is saved). A receiver's redirect is never followed.

The test receivers run on loopback, so "public" cannot be simulated by an address: the production
rule is shown by what it refuses (nothing reaches the loopback receivers), and the redirect case
runs with private addresses allowed, where a redirect would be followed if anything followed it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from cms.app import create_app
from cms.clock import new_id, utcnow
from cms.config import Config
from cms.models import Webhook, WebhookDelivery
from cms.services.delivery.webhook_outbox import batches_of
from cms.store.webhooks import DeliveryLog, DeliveryOutbox, WebhookRepository
from cms.wiring import Services, open_services
from tests.api.test_webhooks import POSTS, WEBHOOKS
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, bearer, create_collection, error_of, login

# Each spelling names this machine (loopback) or the cloud metadata address.
INWARD_HOSTS = {
    "unspecified-v4": "0.0.0.0",
    "unspecified-v6": "[::]",
    "loopback-v6": "[::1]",
    "metadata": "169.254.169.254",
    "mapped-loopback": "[::ffff:127.0.0.1]",
    "mapped-hex": "[::ffff:7f00:1]",
    "mapped-metadata": "[::ffff:a9fe:a9fe]",
    "decimal": "2130706433",
    "octal": "0177.0.0.1",
    "hex": "0x7f.0.0.1",
    "short": "127.1",
    "name": "localhost",
}


@pytest.fixture
def config(config: Config) -> Config:
    """Test mode, as the other webhook tests: private addresses allowed (the strict app is built per test)."""
    return replace(config, webhook_allow_private=True, webhook_timeout_s=2.0)


@pytest.fixture
async def production(config: Config, services: Services) -> AsyncIterator[Services]:
    """The same database and Redis served with the SSRF rule on (`WEBHOOK_ALLOW_PRIVATE=false`)."""
    async with open_services(replace(config, webhook_allow_private=False)) as strict:
        yield strict


@pytest.fixture
async def strict_client(aiohttp_client: Any, config: Config, production: Services, admin_token: str) -> Any:
    """The strict app (the admin of `admin_token` exists)."""
    return await aiohttp_client(create_app(replace(config, webhook_allow_private=False), services=production))


class Hits:
    """A loopback server that counts every request it gets, answering `status` (with `location`)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.port = 0
        self.status = 200
        self.location = ""


@pytest.fixture
async def hits(aiohttp_server: Any) -> Hits:
    state = Hits()

    async def handle(request: web.Request) -> web.Response:
        state.requests.append(f"{request.method} {request.path}")
        headers = {"Location": state.location} if state.location else {}
        return web.json_response({}, status=state.status, headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = await aiohttp_server(app)
    state.port = server.port
    return state


def url_of(host: str, port: int, path: str = "/hook") -> str:
    return f"http://{host}:{port}{path}"


async def strict_admin(strict_client: Any) -> str:
    return str((await login(strict_client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"])


async def stored_webhook(mongo_db: Any, posts: dict[str, Any], url: str) -> tuple[Webhook, str]:
    """A webhook stored as if saved while its host was public, and one delivery batch for it."""
    now = utcnow()
    webhook = Webhook(id=new_id(), url=url, collection_name="posts", collection_id=posts["id"], events=("create",),
                      active=True, retry_count=3, created=now, updated=now)
    await WebhookRepository(mongo_db).insert(webhook)
    delivery = WebhookDelivery(id=new_id(), webhook_id=webhook.id, event="create", collection="posts",
                               record_id="r", body="{}", created=now)
    [batch] = batches_of([delivery], now)
    await DeliveryOutbox(mongo_db).insert([batch])
    return webhook, batch.id


@pytest.mark.parametrize("host", list(INWARD_HOSTS.values()), ids=list(INWARD_HOSTS))
async def test_a_webhook_to_an_inward_address_is_refused_when_saved(strict_client, hits, host):
    token = await strict_admin(strict_client)
    await create_collection(strict_client, token, "posts", POSTS)
    response = await strict_client.post(WEBHOOKS, headers=bearer(token), json={
        "url": url_of(host, hits.port), "collection_name": "posts", "events": ["create"]})
    assert "url" in (await error_of(response, 422, "validation_error"))["errors"]
    assert hits.requests == []


@pytest.mark.parametrize("host", list(INWARD_HOSTS.values()), ids=list(INWARD_HOSTS))
async def test_a_stored_webhook_to_an_inward_address_is_refused_at_delivery(
        client, admin_token, production, mongo_db, hits, host):
    """The URL passed when it was saved (a name whose DNS later points inward; rebinding): the
    delivery is refused on the address it would connect to, logged, and not retried."""
    posts = await create_collection(client, admin_token, "posts", POSTS)
    webhook, batch_id = await stored_webhook(mongo_db, posts, url_of(host, hits.port))
    outcome = await production.webhook_outbox.deliver_batch(batch_id)
    assert (outcome.sent, outcome.failed, outcome.retrying) == (1, 1, 0)
    items, _ = await DeliveryLog(mongo_db).page(webhook_ids=[webhook.id], skip=0, limit=10)
    assert items[0].error is not None and items[0].error.startswith("refused"), items[0].error
    assert hits.requests == []


async def test_a_receivers_redirect_is_never_followed(client, admin_token, services, mongo_db, hits, aiohttp_server):
    """A receiver that answers 302 to an inner address: the delivery fails with the 302 (not retried),
    and the inner address gets nothing. Private addresses are allowed here, so only the refusal to
    follow redirects stops it."""
    posts = await create_collection(client, admin_token, "posts", POSTS)
    inner: list[str] = []

    async def record(request: web.Request) -> web.Response:
        inner.append(request.path)
        return web.Response(text="inner")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    target = await aiohttp_server(app)
    hits.status, hits.location = 302, str(target.make_url("/latest/meta-data"))
    webhook, batch_id = await stored_webhook(mongo_db, posts, url_of("127.0.0.1", hits.port))
    outcome = await services.webhook_outbox.deliver_batch(batch_id)
    assert (outcome.failed, outcome.retrying) == (1, 0)
    items, _ = await DeliveryLog(mongo_db).page(webhook_ids=[webhook.id], skip=0, limit=10)
    assert items[0].status_code == 302
    assert hits.requests == ["POST /hook"] and inner == []


# --- OAuth2 provider URLs (admin-configured, fetched by the server) ---------------------------------


def provider_setting(**urls: str) -> str:
    return json.dumps([{"name": "corp", "client_id": "cms", "client_secret": "secret", "scopes": ["openid"], **urls}])


@pytest.mark.parametrize("host", ["127.0.0.1", "[::ffff:127.0.0.1]", "2130706433", "localhost"],
                         ids=["loopback", "mapped", "decimal", "name"])
async def test_oauth_provider_urls_to_inward_addresses_are_never_fetched(strict_client, hits, host):
    """A discovery document at an inward address, and a provider with explicit endpoints whose
    token endpoint is inward: neither is requested (the provider is left out of the list, the
    callback is a 400)."""
    token = await strict_admin(strict_client)
    for value in (provider_setting(discovery_url=url_of(host, hits.port, "/.well-known/openid-configuration")),
                  provider_setting(auth_url="https://id.example.com/authorize",
                                   token_url=url_of(host, hits.port, "/token"),
                                   userinfo_url=url_of(host, hits.port, "/userinfo"))):
        response = await strict_client.post("/api/v1/settings", headers=bearer(token),
                                            json={"key": "oauth_providers", "value": value})
        if response.status == 422:  # refused when saved: nothing is ever fetched
            continue
        assert response.status == 200, await response.text()
        listed = await strict_client.get("/api/v1/auth/oauth2/providers", params={"redirect_uri": "http://a.test/"})
        links = await listed.json()
        assert listed.status == 200, links
        for link in links:
            answer = await strict_client.post("/api/v1/auth/oauth2/callback", json={
                "provider": "corp", "code": "c", "code_verifier": link["code_verifier"], "state": link["state"],
                "redirect_uri": "http://a.test/"})
            await error_of(answer, 400, "bad_request")
    assert hits.requests == []
