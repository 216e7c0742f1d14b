"""The bounded cold path (issue 31, item 2): list scans wait in a bounded line of LIST_SCAN_SLOTS per
process and are refused with 503 `service_unavailable` and `Retry-After` past it, instead of queueing
for seconds; real concurrent requests against a collection large enough that scans overlap."""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cms.config import Config
from cms.models import Record
from cms.wiring import Services
from tests.api.test_read_cache import POSTS
from tests.conftest import bearer, create_collection, records_path

SCAN_RECORDS = 3_000
FLOOD_RECORDS = 1_000
"""Records of the flooded collection: every filtered list is a scan, short enough to keep the test quick."""
FLOODERS = 24
"""Concurrent cold lists of the flooding client: more than the whole line (1 slot + 16 waiting)."""
FLOODER, OTHER = "10.0.0.1", "10.0.0.2"


@pytest.fixture
def config(config: Config) -> Config:
    """One scan at a time per process (LIST_SCAN_SLOTS=1), so a small burst fills the line; the test
    client is a trusted proxy, so `X-Forwarded-For` names the client's address."""
    return replace(config, list_scan_slots=1, trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),))


async def test_different_cold_queries_are_refused_past_the_line_not_queued(
        client: Any, services: Services, admin_token: str) -> None:
    collection = await create_collection(client, admin_token, "posts", POSTS, list_rule="")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    await services.records.repository.insert_many(collection["id"], [
        Record(id=str(uuid.uuid4()), created=start + timedelta(seconds=n), updated=start,
               data={"title": f"t{n}", "views": n}) for n in range(SCAN_RECORDS)])
    scans = services.records.repository.scans
    assert scans.slots == 1
    scans.max_waiting = 2

    async def cold(n: int) -> tuple[int, dict[str, Any], str | None, float]:
        started = time.monotonic()
        response = await client.get(records_path("posts"), params={"filter": f"views >= {n}", "per_page": 1})
        return response.status, await response.json(), response.headers.get("Retry-After"), time.monotonic() - started

    answers = await asyncio.gather(*(cold(n) for n in range(12)))
    served = [(n, body) for n, (status, body, _, _) in enumerate(answers) if status == 200]
    refused = [(body, retry_after, took) for status, body, retry_after, took in answers if status == 503]
    assert len(served) + len(refused) == 12 and served and refused
    assert len(served) <= 1 + scans.max_waiting + 2  # the line held; a scan may end while others arrive
    for n, body in served:
        assert body["total"] == SCAN_RECORDS - n
    for body, retry_after, took in refused:
        assert body["code"] == "service_unavailable" and retry_after is not None and int(retry_after) >= 1
        assert took < scans.max_wait_s + 1  # refused at once or after the bounded wait, never queued for long
    # the line is free again: a refused query succeeds when retried
    n = next(n for n, (status, *_rest) in enumerate(answers) if status == 503)
    status, body, _, _ = await cold(n)
    assert status == 200 and body["total"] == SCAN_RECORDS - n
    # a predicted wait over the bound is refused at once, with that wait as Retry-After
    assert scans.mean_scan_s is not None
    scans.max_wait_s = scans.mean_scan_s / 4
    async with services.records.repository.hold_scans():
        started = time.monotonic()
        status, body, retry_after, _ = await cold(1_000)
        assert status == 503 and retry_after == "1" and time.monotonic() - started < scans.max_wait_s + 0.5


@pytest.mark.parametrize("signed_in", [False, True], ids=["another-address", "signed-in-at-the-same-address"])
async def test_a_flooding_client_fills_only_its_own_share_of_the_line(
        client: Any, services: Services, admin_token: str, signed_in: bool) -> None:
    """Issue 37, item 4: one client sending cold lists as fast as the line takes them (within its rate
    limit) gets 503s past its share, while another client's cold lists are all served: another
    address, or a signed-in caller behind the flooder's own address (a principal has its own share)."""
    collection = await create_collection(client, admin_token, "posts", POSTS, list_rule="")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    await services.records.repository.insert_many(collection["id"], [
        Record(id=str(uuid.uuid4()), created=start + timedelta(seconds=n), updated=start,
               data={"title": f"t{n}", "views": n}) for n in range(FLOOD_RECORDS)])
    scans = services.records.repository.scans
    fresh = itertools.count(FLOOD_RECORDS)  # a filter no earlier request asked: always a scan

    async def cold(headers: dict[str, str], n: int) -> tuple[int, dict[str, Any]]:
        response = await client.get(records_path("posts"), headers=headers,
                                     params={"filter": f"views >= {n % FLOOD_RECORDS} && title != 'x{n}'",
                                             "per_page": 1})
        return response.status, await response.json()

    flooder = {"X-Forwarded-For": FLOODER}
    other = {"X-Forwarded-For": FLOODER, **bearer(admin_token)} if signed_in else {"X-Forwarded-For": OTHER}
    flood_statuses: list[int] = []
    flooding, full = asyncio.Event(), asyncio.Event()
    flooding.set()

    async def flood() -> None:
        while flooding.is_set():
            status, _ = await cold(flooder, next(fresh))
            flood_statuses.append(status)
            if status == 503:
                full.set()
                await asyncio.sleep(0.25)  # a polite client: comes back soon, within its rate limit

    flood_tasks = [asyncio.create_task(flood()) for _ in range(FLOODERS)]
    try:
        async with asyncio.timeout(30):
            await full.wait()  # the flooder's share (or, before issue 37, the whole line) is full
        answers = []
        for _ in range(6):  # the other client's cold lists, one after the other, while the flood goes on
            n = next(fresh)
            answers.append((n, *await cold(other, n)))
        assert [(status, body.get("code")) for _, status, body in answers] == [(200, None)] * 6
        tracked = scans.clients
    finally:
        flooding.clear()
        await asyncio.gather(*flood_tasks)
    for n, _, body in answers:
        assert body["total"] == FLOOD_RECORDS - n % FLOOD_RECORDS
    assert set(flood_statuses) == {200, 503}  # served within its share, refused past it; never a 429
    assert tracked == 1  # the flooder, in line; the other client left it with its last answer
    assert scans.clients == 0 and scans.waiting == 0  # idle clients are forgotten


async def test_an_expanded_view_takes_no_slot_of_the_line(client: Any, services: Services, admin_token: str) -> None:
    """Issue 38: the related records of an `expand` are read by `_id` and by a relation field's
    `auto_relation_<field>` index, not scanned, so a view with `expand` is served while every scan slot
    is taken (a list is still refused), as a view without it is."""
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}],
                                      list_rule="", view_rule="")
    posts = await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": authors["id"], "max_select": 1}],
        list_rule="", view_rule="")
    comments = await create_collection(client, admin_token, "comments", [
        {"name": "body", "type": "text"},
        {"name": "post", "type": "relation", "collection_id": posts["id"], "max_select": 1}],
        list_rule="", view_rule="")
    author = await (await client.post(records_path("authors"), headers=bearer(admin_token),
                                      json={"data": {"name": "Ada"}})).json()
    post = await (await client.post(records_path("posts"), headers=bearer(admin_token),
                                    json={"data": {"title": "p", "author": author["id"]}})).json()
    for n in range(3):
        response = await client.post(records_path("comments"), headers=bearer(admin_token),
                                     json={"data": {"body": f"c{n}", "post": post["id"]}})
        assert response.status == 201
    scans = services.records.repository.scans
    scans.max_wait_s = 0.2
    async with services.records.repository.hold_scans():
        response = await client.get(records_path("posts", post["id"]), params={"expand": "author,comments_via_post"})
        assert response.status == 200
        body = await response.json()
        assert body["expand"]["author"]["name"] == "Ada"
        assert sorted(c["body"] for c in body["expand"]["comments_via_post"]) == ["c0", "c1", "c2"]
        refused = await client.get(records_path("comments"), params={"filter": "body != 'x'"})
        assert refused.status == 503
    # a view rule on comments joins the back-relation's query (`$and`), which the embedded server scans:
    # then it takes a slot like a list
    changed = await client.patch(f"/api/v1/collections/{comments['id']}", headers=bearer(admin_token),
                                 json={"view_rule": "body != 'x'"})
    assert changed.status == 200, await changed.text()
    async with services.records.repository.hold_scans():
        response = await client.get(records_path("posts", post["id"]), params={"expand": "author,comments_via_post"})
        assert response.status == 503
    response = await client.get(records_path("posts", post["id"]), params={"expand": "author,comments_via_post"})
    assert response.status == 200 and len((await response.json())["expand"]["comments_via_post"]) == 3
