"""The bounded cold path (issue 31, item 2): list scans wait in a bounded line of LIST_SCAN_SLOTS per
process and are refused with 503 `service_unavailable` and `Retry-After` past it, instead of queueing
for seconds; real concurrent requests against a collection large enough that scans overlap."""

from __future__ import annotations

import asyncio
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
from tests.conftest import create_collection, records_path

SCAN_RECORDS = 3_000


@pytest.fixture
def config(config: Config) -> Config:
    """One scan at a time per process (LIST_SCAN_SLOTS=1), so a small burst fills the line."""
    return replace(config, list_scan_slots=1)


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
