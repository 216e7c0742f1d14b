"""The admin UI is a sub-app at `/_/` with its own error pages: every failure under `/_/` is an HTML
page, every other path keeps the API's `{detail, code}` JSON, and the API's frame (request id,
general rate limit) still runs first on the UI's requests."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aiohttp import web

from cms.admin_ui.errors import error_pages_middleware
from cms.admin_ui.session import SESSION_COOKIE
from cms.api.middlewares import request_middleware
from cms.web.context import HTTP_STATS
from cms.wiring import Services
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, bearer, error_of, login

NOT_FOUND = "There is no such page in the admin area."


async def admin_cookies(client: Any, services: Services) -> dict[str, str]:
    await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
    token = (await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]
    return {SESSION_COOKIE: f"{token['access_token']}~{token['refresh_token']}"}


def assert_html(response: Any, status: int) -> None:
    assert response.status == status
    assert response.content_type == "text/html"
    assert response.headers["Content-Security-Policy"].startswith("default-src 'self'")  # the UI's hook ran
    assert response.headers["Cache-Control"] == "no-store"


async def test_an_unknown_admin_page_is_an_html_404(client: Any) -> None:
    response = await client.get("/_/no/such/page", headers={"X-Request-Id": "ui-404-probe"})
    assert_html(response, 404)
    text = await response.text()
    assert text.startswith("<!doctype html>") and NOT_FOUND in text
    assert 'href="/_/login"' in text  # signed out: the way in
    assert response.headers["X-Request-Id"] == "ui-404-probe"  # the API's frame still runs first


async def test_the_404_page_of_a_signed_in_admin_is_in_the_layout(client: Any, services: Services) -> None:
    response = await client.get("/_/no/such/page", cookies=await admin_cookies(client, services))
    assert_html(response, 404)
    text = await response.text()
    assert NOT_FOUND in text and 'aria-label="Admin screens"' in text and 'href="/_/login"' not in text


async def test_a_method_an_admin_page_does_not_take_is_an_html_405(client: Any) -> None:
    response = await client.put("/_/login", allow_redirects=False)
    assert_html(response, 405)
    assert {"GET", "POST"} <= {m.strip() for m in response.headers["Allow"].split(",")}


async def test_a_service_error_on_an_admin_page_is_an_html_page_of_its_status(client: Any,
                                                                            services: Services) -> None:
    response = await client.get("/_/collections/no_such_collection/edit", cookies=await admin_cookies(client, services))
    assert_html(response, 404)
    assert "no_such_collection" in await response.text()


async def test_the_bare_prefix_redirects_into_the_admin_ui(client: Any) -> None:
    response = await client.get("/_", allow_redirects=False)
    assert response.status == 308 and response.headers["Location"] == "/_/"


@pytest.mark.parametrize("path", ["/api/v1/no-such-endpoint", "/_x", "/no-such-page"])
async def test_a_path_outside_the_admin_ui_is_still_a_json_404(client: Any, path: str) -> None:
    response = await client.get(path)
    assert response.content_type == "application/json"
    await error_of(response, 404, "not_found")


async def test_an_api_handler_error_is_still_json(client: Any, admin_token: str) -> None:
    response = await client.get("/api/v1/collections/no_such_collection", headers=bearer(admin_token))
    assert response.content_type == "application/json" and "X-Request-Id" in response.headers
    await error_of(response, 404, "not_found")
    method = await client.put("/api/v1/collections", headers=bearer(admin_token))
    await error_of(method, 405, "method_not_allowed")


async def test_the_emailed_link_pages_under_the_prefix_stay_api_pages(client: Any) -> None:
    response = await client.get("/_/verify-email?token=x")
    assert response.status == 200 and response.content_type == "text/html"
    assert "Content-Security-Policy" not in response.headers  # not an admin page: its inline script runs


async def test_admin_pages_count_against_the_general_rate_limit(client: Any, services: Services) -> None:
    await services.settings.set("rate_limit_per_minute", 2)
    first = await client.get("/_/login")
    assert first.status == 200
    assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == ("2", "1")
    assert (await client.get("/api/v1/collections")).status == 200  # one budget for the API and the UI
    refused = await client.get("/_/login")
    assert refused.status == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["Cache-Control"] == "no-store"


async def test_an_unexpected_error_in_the_admin_ui_is_an_html_500_naming_the_request_id(
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        raise RuntimeError("internal detail 5f1c")

    ui = web.Application(middlewares=[error_pages_middleware])
    ui.router.add_get("/broken", broken)
    root = web.Application(middlewares=[request_middleware])
    root[HTTP_STATS] = {"active_connections": 0, "requests_total": 0}
    root.add_subapp("/_", ui)
    client = await aiohttp_client(root)
    with caplog.at_level(logging.ERROR, logger="cms.admin_ui"):
        response = await client.get("/_/broken", headers={"X-Request-Id": "ui-500-probe"})
    assert response.status == 500 and response.content_type == "text/html"
    text = await response.text()
    assert "ui-500-probe" in text and "internal detail" not in text and "Traceback" not in text
    assert response.headers["X-Request-Id"] == "ui-500-probe"
    (record,) = [r for r in caplog.records if r.name == "cms.admin_ui" and r.exc_info]
    assert "ui-500-probe" in record.getMessage()
