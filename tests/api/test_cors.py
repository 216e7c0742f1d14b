"""CORS refusals (issue 44): a browser origin that CORS_ORIGINS does not list gets, for its preflight and its
actual request, a 403 `cors_origin_not_allowed` whose detail names it and the allowed origins (or says none
are set and how to set them), before any handler runs; the service's own origin is never refused; each
refused origin is logged once, and the remembered ones are capped (cms.api.cors)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from cms.api.cors import MAX_LOGGED_REFUSED_ORIGINS, MAX_SHOWN_ORIGIN_CHARS
from cms.app import create_app
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, COLLECTIONS, bearer, error_of, login

GOOD, OTHER_GOOD = "http://127.0.0.1:5173", "https://app.example"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization, Content-Type"}


@pytest.fixture
async def restricted(aiohttp_client: Any, config: Any, services: Any) -> Any:
    """A client of the app with CORS_ORIGINS = GOOD, OTHER_GOOD."""
    return await aiohttp_client(create_app(replace(config, cors_origins=(GOOD, OTHER_GOOD)), services=services))


async def test_a_refused_preflight_names_the_origin_and_the_allowed_ones(restricted):
    response = await restricted.options(COLLECTIONS, headers={"Origin": "http://localhost:5173", **PREFLIGHT})
    body = await error_of(response, 403, "cors_origin_not_allowed")
    assert "http://localhost:5173 is not allowed" in body["detail"]
    assert f"the allowed origins are {GOOD}, {OTHER_GOOD}" in body["detail"]
    assert "CORS_ORIGINS" in body["detail"]
    assert "Access-Control-Allow-Origin" not in response.headers
    assert response.headers["Vary"] == "Origin"
    assert response.headers["X-Request-Id"]


async def test_an_allowed_preflight_and_request_still_pass(restricted):
    preflight = await restricted.options(COLLECTIONS, headers={"Origin": GOOD, **PREFLIGHT})
    assert preflight.status == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == GOOD
    response = await restricted.get("/health", headers={"Origin": OTHER_GOOD})
    assert response.status == 200
    assert response.headers["Access-Control-Allow-Origin"] == OTHER_GOOD


async def test_a_refused_actual_request_runs_no_handler(restricted, services):
    await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
    token = (await login(restricted, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"]
    refused = await restricted.post(COLLECTIONS, headers={**bearer(token), "Origin": "https://evil.example"},
                                    json={"name": "never_made", "schema": []})
    body = await error_of(refused, 403, "cors_origin_not_allowed")
    assert "https://evil.example" in body["detail"]
    assert (await restricted.get(COLLECTIONS + "/never_made", headers=bearer(token))).status == 404
    made = await restricted.post(COLLECTIONS, headers={**bearer(token), "Origin": GOOD},
                                 json={"name": "made", "schema": []})
    assert made.status == 201, await made.text()


async def test_the_services_own_origin_is_never_refused(restricted):
    own = f"http://{restricted.server.host}:{restricted.server.port}"  # same-origin pages (the API explorer)
    assert (await restricted.get("/health", headers={"Origin": own})).status == 200
    assert (await restricted.get("/health", headers={"Origin": "http://cms.test"})).status == 200  # PUBLIC_URL


async def test_no_origin_header_and_pages_outside_cors_are_not_refused(restricted):
    assert (await restricted.get("/health")).status == 200
    page = await restricted.get("/_/login", headers={"Origin": "https://evil.example"})  # the admin UI: same-origin
    assert page.status == 200


async def test_with_no_origin_set_the_refusal_says_how_to_set_them(aiohttp_client, config, services):
    client = await aiohttp_client(create_app(replace(config, cors_origins=()), services=services))
    response = await client.get("/health", headers={"Origin": "http://localhost:3000"})
    body = await error_of(response, 403, "cors_origin_not_allowed")
    assert "no origins are allowed" in body["detail"] and "CORS_ORIGINS" in body["detail"]


async def test_the_default_star_allows_every_origin(client):
    response = await client.get("/health", headers={"Origin": "http://anything.example:1234"})
    assert response.status == 200
    assert response.headers["Access-Control-Allow-Origin"] in ("*", "http://anything.example:1234")


async def test_a_long_origin_is_cut_in_the_detail(restricted):
    origin = "https://" + "a" * 5000 + ".example"
    body = await error_of(await restricted.get("/health", headers={"Origin": origin}), 403, "cors_origin_not_allowed")
    assert "a" * (MAX_SHOWN_ORIGIN_CHARS - len("https://")) + "..." in body["detail"]
    assert "a" * MAX_SHOWN_ORIGIN_CHARS not in body["detail"]


async def test_each_refused_origin_is_logged_once_and_the_remembered_ones_are_capped(restricted, caplog):
    caplog.set_level(logging.WARNING, logger="cms.api")
    for _ in range(3):
        assert (await restricted.get("/health", headers={"Origin": "http://localhost:8000"})).status == 403
    lines = [r.getMessage() for r in caplog.records if "CORS" in r.getMessage()]
    assert len(lines) == 1 and "http://localhost:8000" in lines[0] and GOOD in lines[0]

    caplog.clear()
    for index in range(MAX_LOGGED_REFUSED_ORIGINS + 50):  # an attacker cycling origins
        assert (await restricted.get("/health", headers={"Origin": f"http://o{index}.example"})).status == 403
    lines = [r.getMessage() for r in caplog.records if "CORS" in r.getMessage()]
    assert len(lines) == MAX_LOGGED_REFUSED_ORIGINS  # one was remembered before; one line says the rest are not
    assert "further new ones are not logged" in lines[-1]
    caplog.clear()
    assert (await restricted.get("/health", headers={"Origin": "http://one-more.example"})).status == 403
    assert not [r for r in caplog.records if "CORS" in r.getMessage()]
