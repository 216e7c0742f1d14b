"""Webhooks screen (issue 15, scenario S6): create a webhook in the UI aimed at a real receiver in
the test process, change a record through the REST API, see the delivery in the UI's delivery
log, and "send again" it.

The session's `ui_server` refuses loopback webhook URLs (the SSRF rule; its config does not set
`webhook_allow_private`), so this module serves the same app a second time on the same database,
Redis and secret with `webhook_allow_private=True` (`hooks_server`), and drives that one; the REST
assertions go to `ui_server` (`api`): both see the same data. Deliveries are made by burst arq
workers (`run_jobs`, as tests/conftest.py's) on services opened in a loop thread of this module."""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from aiohttp import web
from playwright.sync_api import expect

from cms.runtime.embedded import free_port
from cms.wiring import open_services
from tests.conftest import run_burst_worker
from tests.ui.conftest import Api, BrowserPage, ServerThread, UiServer, _open

ANSWER = "<b>thanks</b><script>alert(1)</script>"


@dataclass
class Receiver:
    """What the receiver got: (headers, body) per request."""

    url: str = ""
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


class LoopThread(threading.Thread):
    """An event loop of its own: the receiver's HTTP server and the workers' services live here."""

    def __init__(self) -> None:
        super().__init__(name="webhooks-ui-loop", daemon=True)
        self.loop = asyncio.new_event_loop()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, make: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(_run(make), self.loop).result(timeout)


async def _run(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()


@dataclass
class Hooks:
    """The app served with private webhook URLs allowed, a receiver and a way to run queued jobs."""

    server: UiServer
    receiver: Receiver
    run_jobs: Callable[[], None]


@pytest.fixture(scope="module")
def hooks(ui_server: UiServer) -> Iterator[Hooks]:
    config = replace(ui_server.config, webhook_allow_private=True)
    loop = LoopThread()
    loop.start()
    stack = AsyncExitStack()
    receiver = Receiver()

    async def handle(request: web.Request) -> web.Response:
        receiver.requests.append((dict(request.headers), await request.read()))
        return web.Response(text=ANSWER, content_type="text/html")

    async def start() -> Any:
        app = web.Application()
        app.router.add_post("/hook", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        receiver.url = f"http://127.0.0.1:{port}/hook"
        return await stack.enter_async_context(open_services(config))

    services = loop.call(start)

    async def burst() -> None:
        await run_burst_worker(config, services)

    server = ServerThread(config, free_port())
    server.start()
    assert server.ready.wait(30), "the webhooks UI server did not start"
    if server.error is not None:
        raise server.error
    yield Hooks(UiServer(url=f"http://127.0.0.1:{server.port}", config=config), receiver,
                lambda: loop.call(burst))
    server.stop()
    loop.call(stack.aclose)
    loop.loop.call_soon_threadsafe(loop.loop.stop)
    loop.join(timeout=15)


@pytest.fixture
def hooks_page(browser: Any, hooks: Hooks, admin_state: Any, request: pytest.FixtureRequest) -> Iterator[BrowserPage]:
    """`admin_page` on the hooks server (the session cookie is the same database's)."""
    yield from _open(browser, hooks.server, request, storage_state=admin_state)


def test_webhook_delivery_log_and_send_again(hooks_page: BrowserPage, hooks: Hooks, api: Api):
    ui = hooks_page.page
    collection = f"hooked_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": collection,
                                                            "schema": [{"name": "title", "type": "text"}]})
    assert status == 201, body
    before = len(hooks.receiver.requests)

    # create it in the UI: a refused one first (no events), then a good one
    hooks_page.goto("/_/webhooks")
    form = ui.locator("#create-webhook")
    form.locator("input[name=url]").fill(hooks.receiver.url)
    form.locator("select[name=collection_name]").select_option(collection)
    for kind in ("create", "update", "delete"):
        form.locator(f"input[name=events][value={kind}]").uncheck()
    form.locator("button[type=submit]").click()
    expect(ui.locator("#create-webhook .error")).to_contain_text("events")
    hooks_page.watch.allow(r"status of 422")
    form.locator("input[name=events][value=create]").check()
    form.locator("input[name=events][value=update]").check()
    form.locator("input[name=retry_count]").fill("2")
    form.locator("input[name=secret]").fill("ui-secret")
    form.locator("button[type=submit]").click()
    expect(ui.locator(".flash")).to_have_text("Webhook created")
    webhook_id = ui.locator("#webhook").get_attribute("data-id")
    status, webhook = api.call("GET", f"/api/v1/webhooks/{webhook_id}")
    assert status == 200, webhook
    assert (webhook["url"], webhook["collection_name"], webhook["events"], webhook["retry_count"],
            webhook["signed"], webhook["active"]) == (hooks.receiver.url, collection, ["create", "update"], 2,
                                                      True, True)
    expect(ui.locator("#no-deliveries")).to_be_visible()

    # a record change through the REST API is delivered by a worker, and logged
    status, record = api.call("POST", f"/api/v1/collections/{collection}/records", {"data": {"title": "hi"}})
    assert status == 201, record
    hooks.run_jobs()
    assert len(hooks.receiver.requests) == before + 1
    first_headers, first_body = hooks.receiver.requests[-1]
    assert record["id"] in first_body.decode()
    ui.click("#refresh-log")
    rows = ui.locator("#deliveries tbody tr")
    expect(rows).to_have_count(1)
    entry_id = first_headers["X-Webhook-Delivery"]
    row = ui.locator(f'#deliveries tr[data-id="{entry_id}"]')
    expect(row.locator(".status")).to_have_text("delivered")
    expect(row.locator(".http")).to_have_text("200")
    expect(row.locator(".attempt")).to_have_text("1")
    expect(row.locator(".duration")).to_have_text(re.compile(r"^\d+ ms$"))
    row.locator("summary").click()
    expect(row.locator("pre.excerpt")).to_have_text(ANSWER)  # the receiver's HTML, as text
    assert ui.locator("#deliveries b, #deliveries script").count() == 0
    status, log = api.call("GET", f"/api/v1/webhooks/{webhook_id}/deliveries")
    assert status == 200 and log["total"] == 1
    assert log["items"][0]["id"] == entry_id and log["items"][0]["response_body"] == ANSWER
    assert f'{log["items"][0]["duration_ms"]} ms' == row.locator(".duration").inner_text()

    # send again: a second delivery of the same body reaches the receiver and the log
    row.locator("form.redeliver button").click()
    expect(ui.locator(".flash")).to_contain_text("Queued again as delivery")
    hooks.run_jobs()
    assert len(hooks.receiver.requests) == before + 2
    again_headers, again_body = hooks.receiver.requests[-1]
    assert again_body == first_body and again_headers["X-Webhook-Delivery"] != entry_id
    ui.click("#refresh-log")
    expect(rows).to_have_count(2)
    again = ui.locator(f'#deliveries tr[data-id="{again_headers["X-Webhook-Delivery"]}"]')
    expect(again.locator(".status")).to_have_text("delivered")
    expect(ui.locator("#delivery-total")).to_have_text("2")
    status, log = api.call("GET", f"/api/v1/webhooks/{webhook_id}/deliveries")
    assert log["total"] == 2 and {e["id"] for e in log["items"]} == {entry_id, again_headers["X-Webhook-Delivery"]}
    hooks_page.watch.assert_clean()


def test_disable_enable_and_delete_a_webhook(hooks_page: BrowserPage, hooks: Hooks, api: Api):
    ui = hooks_page.page
    collection = f"hooked_{uuid.uuid4().hex[:6]}"
    assert api.call("POST", "/api/v1/collections", {"name": collection, "schema": []})[0] == 201
    url = "http://127.0.0.1:9/<i>x</i>"  # loopback: made through the hooks server, which allows it
    status, webhook = Api(hooks.server.url, api.token).call("POST", "/api/v1/webhooks", {
        "url": url, "collection_name": collection, "events": ["delete"]})
    assert status == 201, webhook
    hooks_page.goto("/_/webhooks")
    row = ui.locator(f'#webhooks tr[data-id="{webhook["id"]}"]')
    expect(row.locator(".url")).to_have_text(url)
    row.locator("form.toggle button").click()
    expect(ui.locator(".flash")).to_have_text("Webhook disabled")
    expect(row.locator(".state")).to_have_text("disabled")
    assert api.call("GET", f"/api/v1/webhooks/{webhook['id']}")[1]["active"] is False
    row.locator("form.toggle button").click()
    expect(row.locator(".state")).to_have_text("active")
    assert api.call("GET", f"/api/v1/webhooks/{webhook['id']}")[1]["active"] is True

    row.locator("a.delete").click()
    expect(ui.locator("#confirm-delete")).to_contain_text(url)
    ui.click("#confirm-delete button[type=submit]")
    expect(ui.locator(".flash")).to_have_text("Webhook deleted")
    expect(ui.locator(f'#webhooks tr[data-id="{webhook["id"]}"]')).to_have_count(0)
    assert api.call("GET", f"/api/v1/webhooks/{webhook['id']}")[0] == 404
    hooks_page.watch.assert_clean()
