"""Indexes in the admin UI (issue 38): the Slow queries screen lists a slow query that another replica
ran, with its suggested index, and its button creates that index (which `explain` then reports); the
collection page shows every index with why it exists, and adds and removes declared ones. End states
are asserted through the REST API too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from playwright.sync_api import expect

from cms.runtime.embedded import free_port
from tests.ui.conftest import START_TIMEOUT_S, Api, BrowserPage, ServerThread, UiServer

UNPROCESSABLE = r"status of 422"


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def slow_replica(ui_server: UiServer, api: Api) -> Iterator[Api]:
    """A second replica of the UI server's deployment (same database and Redis) where every list query
    is slow (SLOW_QUERY_MS=0): a REST client of it, signed in as the admin."""
    server = ServerThread(replace(ui_server.config, slow_query_ms=0), free_port())
    server.start()
    assert server.ready.wait(START_TIMEOUT_S), "the slow replica did not start"
    if server.error is not None:
        raise server.error
    yield Api(f"http://127.0.0.1:{server.port}", token=api.token)
    server.stop()


def create(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, created = api.call("POST", path, body)
    assert status == 201, created
    return dict(created)


def test_a_slow_query_shows_up_with_its_suggestion_and_its_index_is_created(
        admin_page: BrowserPage, api: Api, slow_replica: Api) -> None:
    ui, page = admin_page, admin_page.page
    name = unique("packages")
    collection = create(api, "/api/v1/collections", {"name": name, "schema": [
        {"name": "views", "type": "number"}, {"name": "status", "type": "select", "values": ["draft", "live"]}]})
    for views in range(6):
        create(api, f"/api/v1/collections/{name}/records", {"data": {"views": views, "status": "live"}})
    status, _ = slow_replica.call("GET", f"/api/v1/collections/{name}/records?filter=status%3D%27live%27")
    assert status == 200

    row = page.locator(f'#slow-queries tr[data-collection="{name}"]')
    deadline = time.monotonic() + 10
    ui.goto("/_/slow-queries")
    while row.count() == 0 and time.monotonic() < deadline:  # the replica records in the background
        page.wait_for_timeout(200)
        ui.goto("/_/slow-queries")
    expect(row).to_have_count(1)
    expect(row.locator("code.shape")).to_have_text("{status: $eq} sort created")
    expect(row.locator("td.suggestion")).to_have_text("status")
    row.locator("form.create-index button").click()
    page.wait_for_url(ui.base + "/_/slow-queries")
    expect(page.locator(".flash")).to_have_text(f"Index idx_status_1 created on {name}")
    expect(row).to_have_count(0)

    status, stored = api.call("GET", f"/api/v1/collections/{collection['id']}")
    assert status == 200 and stored["indexes"] == [{"fields": ["status"], "unique": False}]
    status, body = api.call("GET", f"/api/v1/collections/{name}/records?filter=status%3D%27live%27&explain=true")
    assert status == 200 and body["explain"]["index"] == "idx_status_1", body.get("explain")
    ui.watch.assert_clean()


def test_declared_indexes_are_added_and_removed_on_the_collection_page(admin_page: BrowserPage, api: Api) -> None:
    ui, page = admin_page, admin_page.page
    ui.watch.allow(UNPROCESSABLE)
    authors = create(api, "/api/v1/collections", {"name": unique("authors"), "schema": []})
    name = unique("posts")
    posts = create(api, "/api/v1/collections", {"name": name, "list_rule": "owner = @request.auth.id", "schema": [
        {"name": "views", "type": "number"}, {"name": "owner", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": authors["id"]}]})
    ui.goto(f"/_/collections/{name}/edit")
    table = page.locator("#index-table")
    expect(table.locator('tr[data-name="auto_relation_author"] td.reason')).to_contain_text("relation field")
    expect(table.locator('tr[data-name="auto_rule_owner"] td.reason')).to_have_text(
        "a rule compares owner with @request.auth")
    expect(table.locator('tr[data-name="created_id"] td.origin')).to_have_text("service")
    expect(table.locator("form.remove-index")).to_have_count(0)  # nothing declared yet

    page.fill("#index-fields", "views, -created")
    page.click("#add-index-button")
    page.wait_for_url(ui.base + f"/_/collections/{name}/edit#indexes")
    expect(page.locator(".flash")).to_have_text("Index idx_views_1_created_-1 added")
    declared = table.locator('tr[data-name="idx_views_1_created_-1"]')
    expect(declared.locator("td.origin")).to_have_text("declared")
    expect(declared.locator("td.fields")).to_have_text("views, -created")
    status, stored = api.call("GET", f"/api/v1/collections/{posts['id']}")
    assert stored["indexes"] == [{"fields": ["views", "-created"], "unique": False}]

    page.fill("#index-fields", "nope")
    page.click("#add-index-button")
    expect(page.locator("#index-error")).to_contain_text("Unknown field 'nope'")
    expect(page.locator("#index-fields")).to_have_value("nope")
    status, stored = api.call("GET", f"/api/v1/collections/{posts['id']}")
    assert stored["indexes"] == [{"fields": ["views", "-created"], "unique": False}]

    declared.locator("form.remove-index button").click()
    page.wait_for_url(ui.base + f"/_/collections/{name}/edit#indexes")
    expect(page.locator(".flash")).to_have_text("Index idx_views_1_created_-1 removed")
    expect(declared).to_have_count(0)
    status, stored = api.call("GET", f"/api/v1/collections/{posts['id']}")
    assert status == 200 and stored["indexes"] == []
    ui.watch.assert_clean()
