"""Redis killed (SIGKILL) and started again on the same port and directory (AOF) under a running `cms serve`
and `cms worker` (issue 28, item 1; decisions.md, Workers and Redis and Realtime).

One production-mode `cms serve` and one `cms worker` (the process helpers of tests/test_replicas.py) on the
session's MongoDB and a redis-server of the test's own (`own_redis` of test_worker_faults.py). Invariants:

- during the outage no request answers 500: record writes and reads go on (201, 200), a login goes on
  (its rate limit fails open), sessions are checked in MongoDB (a revoked one stays refused, a live one
  works), and what needs Redis answers 503 (a realtime stream or subscription);
- a webhook retry queued in Redis before the kill is still queued after the restart and is delivered, and
  the webhooks of writes made during the outage are delivered after it (the relay of the outbox);
- after the restart a login works, the login rate limit counts again (the 11th bad try is 429), a
  revoked session stays revoked;
- a realtime client whose stream was open before resumes with its Last-Event-ID: the events of writes
  made while Redis was down never reached the stream, so it gets `resync` first (reload), then the events
  of writes made after Redis came back.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.faults.test_worker_faults import OwnRedis, Receiver, own_redis, receiver  # noqa: F401 - fixtures
from tests.fixtures import wait_until
from tests.realtime.sse import Stream, data
from tests.test_replicas import (
    V1,
    Client,
    Processes,
    Replicas,
    _env,
    _wait_healthy,
    admin_client,
    login,
    new_collection,
)

FIELDS = [{"name": "title", "type": "text"}]
MEMBER = {"email": "member@example.com", "password": "member-password-1"}


@dataclass
class Stack:
    processes: Processes
    url: str
    queue: str


@pytest.fixture
async def stack(mongodb_url: str, own_redis: OwnRedis, tmp_path: Path) -> AsyncIterator[Stack]:  # noqa: F811
    queue = f"cms:redis-restart:{uuid.uuid4().hex[:12]}"
    processes = Processes(tmp_path, {**_env(mongodb_url, own_redis.server.url), "QUEUE_NAME": queue})
    try:
        url, serve = processes.serve("serve")
        worker = processes.start("worker", "worker")
        await asyncio.to_thread(_wait_healthy, url, serve, processes.log("serve"))
        assert worker.poll() is None, processes.log("worker").read_text()
        yield Stack(processes, url, queue)
    finally:
        processes.stop_all()


async def create(http: Client, name: str, title: str) -> dict[str, Any]:
    status, record = await http.call("a", "POST", f"{V1}/collections/{name}/records", json={"data": {"title": title}})
    assert status == 201, record
    result: dict[str, Any] = record
    return result


async def test_redis_restarted_under_a_running_serve_and_worker(
        stack: Stack, own_redis: OwnRedis, receiver: Receiver) -> None:  # noqa: F811
    redis = Redis.from_url(own_redis.server.url)
    stream = Stream(stack.url)
    try:
        async with admin_client(Replicas(a=stack.url, b=stack.url)) as http:
            await run(stack, own_redis, receiver, http, redis, stream)
    finally:
        await stream.close()
        await redis.aclose()


async def run(stack: Stack, own_redis: OwnRedis, receiver: Receiver, http: Client,  # noqa: F811
              redis: Redis, stream: Stream) -> None:
    name = (await new_collection(http, FIELDS, list_rule="", view_rule=""))["name"]
    status, body = await http.call("a", "POST", f"{V1}/webhooks",
                                   json={"url": receiver.url, "collection_name": name, "events": ["create"]})
    assert status == 201, body
    auth = f"{V1}/collections/{(await new_collection(http, [], type='auth'))['name']}/auth"
    status, body = await http.call("a", "POST", auth + "/register", token="", json=MEMBER)
    assert status == 201, body
    kept = await login(http, "a", MEMBER["email"], MEMBER["password"], auth + "/login")
    revoked = await login(http, "a", MEMBER["email"], MEMBER["password"], auth + "/login")
    status, sessions = await http.call("a", "GET", auth + "/sessions", token=revoked["access_token"])
    assert status == 200, sessions
    (current,) = [s for s in sessions if s["current"]]
    status, body = await http.call("a", "DELETE", f"{auth}/sessions/{current['id']}", token=kept["access_token"])
    assert status == 204, body

    await stream.open()
    assert (await stream.subscribe([f"{name}/*"])).status_code == 204
    before = await create(http, name, "before")
    assert data(await stream.next()) == {"action": "create", "record": before}

    # a retry queued in Redis: the first attempt answers 500, the worker defers the next (1 s)
    await create(http, name, "flaky")
    flaky_event = await stream.next()
    assert data(flaky_event)["record"]["title"] == "flaky"

    async def deferred() -> list[bytes]:
        """The deferred jobs of the queue, but arq's cron jobs (queued up to a second early, deferred
        to their time: the outbox relay's every 5 s)."""
        return [job for job in await redis.zrangebyscore(stack.queue, time.time() * 1000, "+inf")
                if not job.startswith(b"cron:")]

    async def retry_queued() -> bool:
        return bool(receiver.requests) and bool(await deferred())

    await wait_until(retry_queued, "the retry of the first attempt queued", timeout_s=20)
    (job_id,) = await deferred()
    own_redis.server.process.kill()
    await asyncio.to_thread(own_redis.server.stop)

    # --- Redis is down ---
    answers: dict[str, tuple[int, Any]] = {}
    during = await http.call("a", "POST", f"{V1}/collections/{name}/records", json={"data": {"title": "during"}})
    answers["create"] = during
    load = await asyncio.gather(*(http.call("a", "POST", f"{V1}/collections/{name}/records",
                                            json={"data": {"title": f"during {n}"}}) for n in range(20)))
    answers.update({f"create {n}": answer for n, answer in enumerate(load)})
    answers["list"] = await http.call("a", "GET", f"{V1}/collections/{name}/records")
    if during[0] == 201:
        answers["view"] = await http.call("a", "GET", f"{V1}/collections/{name}/records/{during[1]['id']}")
    answers["login"] = await http.call("a", "POST", auth + "/login", token="", json=MEMBER)
    answers["me (kept)"] = await http.call("a", "GET", auth + "/me", token=kept["access_token"])
    answers["me (revoked)"] = await http.call("a", "GET", auth + "/me", token=revoked["access_token"])
    subscribe = await stream.subscribe([f"{name}/*"])
    answers["realtime subscribe"] = (subscribe.status_code, subscribe.text)
    answers["health"] = await http.call("a", "GET", "/health")
    print({what: status for what, (status, _) in answers.items()})
    assert all(status != 500 for status, _ in answers.values()), answers
    assert all(answers.pop(f"create {n}")[0] == 201 for n in range(20)), answers
    assert {what: status for what, (status, _) in answers.items()} == {"health": 503,
        "create": 201, "list": 200, "view": 200, "login": 200, "me (kept)": 200, "me (revoked)": 401,
        "realtime subscribe": 503}, answers

    own_redis.restart()  # in the main thread: the child dies with us
    survived = (await redis.zscore(stack.queue, job_id) is not None
                or await redis.exists(f"arq:in-progress:{job_id.decode()}", f"arq:result:{job_id.decode()}") > 0)
    assert survived, "the queued retry was lost with the restart"
    outage_titles = {"during", *(f"during {n}" for n in range(20))}
    await wait_until(lambda: [t for _, t, _ in receiver.requests].count("flaky") == 2
                     and outage_titles <= {t for _, t, _ in receiver.requests},
                     "the queued retry, and the deliveries of the writes during the outage, made", timeout_s=30)

    # sessions and rate limits
    await login(http, "a", MEMBER["email"], MEMBER["password"], auth + "/login")
    status, body = await http.call("a", "GET", auth + "/me", token=revoked["access_token"])
    assert status == 401, body
    guesser = Client(http.session, http.replicas)
    tries = [(await guesser.call("a", "POST", auth + "/login", json={**MEMBER, "password": "wrong-password"}))[0]
             for _ in range(11)]
    assert tries == [401] * 10 + [429], tries

    # realtime: the open stream is told to resync (the write made during the outage never reached it)
    resync = await stream.next(timeout=15)
    assert resync.event == "resync" and data(resync) == {"reason": "events were lost"}, resync
    await stream.close()
    # a resume from before the outage replays up to the loss, then resync, then what came after
    resumed = Stream(stack.url)
    try:
        await resumed.open(client_id=stream.client_id, last_event_id=flaky_event.id)
        after = await create(http, name, "after")
        events = [await resumed.next(), await resumed.next()]
        print([(e.event, e.data) for e in events])
        assert [e.event for e in events] == ["resync", f"{name}/*"], events
        assert events[0].id == resync.id
        assert data(events[1]) == {"action": "create", "record": after}
        await resumed.nothing()
    finally:
        await resumed.close()
