"""`cms worker` under faults (decisions.md, Workers and Redis; issue 28): killed with SIGKILL while
webhook deliveries are in flight, or after it logged a batch's attempts and before it finished the
batch; and its Redis stopped and started again (AOF) under it. And (issue 37, item 5) killed with
SIGKILL mid-delivery behind a real `cms serve`, with a receiver that answers 0.3 s late.

Each test runs `cms worker` as a real process (production mode) on the test's database and queue;
the records and webhooks are written through the in-process app (`client`), which shares them, or
for the last test through a `cms serve` process. Receivers are served on loopback (`served`),
which the worker process reaches."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis
from aiohttp import web

from cms.config import Config
from cms.runtime.children import ChildServer, free_port
from cms.runtime.embedded import start_redis
from cms.store.client import Database, open_client
from cms.store.webhooks import DONE
from cms.wiring import Services
from tests.conftest import Client, bearer, create_collection, create_record, records_path
from tests.fixtures import served, wait_until
from tests.test_replicas import V1, Processes, Replicas, _env, _wait_healthy, admin_client, new_collection
from workers.liveness import LOCK_TTL_S

WEBHOOKS = "/api/v1/webhooks"
RERUN_WITHIN_S = 30.0
"""decisions.md: a killed worker's job runs again within 30 s of another worker being up."""
SLACK_S = 10.0
"""Seconds on top of a bound for process start-up and a loaded machine."""
STOP_TIMEOUT_S = 10.0


# --- processes -------------------------------------------------------------------------------------


def worker_env(config: Config, data_dir: Path) -> dict[str, str]:
    """The environment of a production-mode `cms worker` on `config`'s database, Redis and queue."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MONGODB_", "REDIS_", "CMS_"))}
    assert config.mongodb_url and config.redis_url
    return {**base, "MONGODB_URL": config.mongodb_url, "MONGODB_DB": config.mongodb_db,
            "REDIS_URL": config.redis_url, "QUEUE_NAME": config.queue_name, "SECRET_KEY": config.secret_key,
            "WEBHOOK_ALLOW_PRIVATE": "true", "SHUTDOWN_TIMEOUT_S": "2", "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1", "CMS_DATA_DIR": str(data_dir)}


@dataclass
class Workers:
    """`cms worker` processes, each logging to `<tmp>/<name>.log`; stopped (SIGTERM, then SIGKILL) on exit."""

    config: Config
    tmp: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, name: str) -> subprocess.Popen[bytes]:
        data_dir = self.tmp / name
        data_dir.mkdir()
        with self.log(name).open("wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "cms", "worker"], env=worker_env(self.config, data_dir),
                                       stdout=log, stderr=subprocess.STDOUT)
        self.started.append(process)
        return process

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@pytest.fixture
def workers(config: Config, tmp_path: Path) -> Iterator[Workers]:
    running = Workers(config, tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


async def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL `process` and reap it."""
    process.kill()
    await asyncio.to_thread(process.wait, STOP_TIMEOUT_S)


@dataclass
class OwnRedis:
    """A redis-server of the test's own (AOF on), which the test stops and starts again on the same
    port and directory."""

    data_dir: Path
    port: int
    server: ChildServer

    def restart(self) -> None:
        self.server = start_redis(self.data_dir, port=self.port)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    port = free_port()
    data_dir = tmp_path / "redis"
    redis = OwnRedis(data_dir, port, start_redis(data_dir, port=port))
    try:
        yield redis
    finally:
        redis.server.stop()


# --- the receiver ----------------------------------------------------------------------------------


@dataclass
class Receiver:
    """A webhook receiver. Records each request's delivery id, title and arrival time; answers
    `flaky` records 500 the first time and every other request 200. While `holding`, it answers
    nothing (the request stays in flight). `on_arrival`, if set, runs before it answers."""

    url: str = ""
    requests: list[tuple[str, str, float]] = field(default_factory=list)
    holding: asyncio.Event = field(default_factory=asyncio.Event)
    on_arrival: Any = None

    def count(self) -> Counter[str]:
        return Counter(delivery_id for delivery_id, _, _ in self.requests)

    async def handle(self, request: web.Request) -> web.Response:
        title = str((await request.json())["data"].get("title", ""))
        delivery_id = request.headers["X-Webhook-Delivery"]
        earlier = self.count()[delivery_id]
        self.requests.append((delivery_id, title, time.monotonic()))
        if self.on_arrival is not None:
            await self.on_arrival(self)
        while self.holding.is_set():
            await asyncio.sleep(0.05)
        status = 500 if title.startswith("flaky") and earlier == 0 else 200
        return web.Response(status=status, text=f"answer {status}")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    state = Receiver()
    app = web.Application()
    app.router.add_post("/hook", state.handle)
    async with served(app, "/hook", shutdown_timeout_s=0.5) as url:
        state.url = url
        try:
            yield state
        finally:
            state.holding.clear()


async def add_webhook(client: Client, token: str, url: str, events: list[str]) -> str:
    await create_collection(client, token, "posts", [{"name": "title", "type": "text"},
                                                     {"name": "views", "type": "number"}])
    response = await client.post(WEBHOOKS, headers=bearer(token),
                                 json={"url": url, "collection_name": "posts", "events": events})
    assert response.status == 201, await response.text()
    return str((await response.json())["id"])


async def delivery_log(client: Client, token: str, webhook_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"{WEBHOOKS}/{webhook_id}/deliveries", headers=bearer(token), params={"limit": 200})
    assert response.status == 200, await response.text()
    items: list[dict[str, Any]] = (await response.json())["items"]
    return items


def successes_per_attempt(log: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    """Successful log entries per (record, attempt): here each record has one delivery."""
    return Counter((entry["record_id"], entry["attempt"]) for entry in log if entry["success"])


# --- the tests -------------------------------------------------------------------------------------


@pytest.fixture
def config(config: Config, request: pytest.FixtureRequest) -> Config:
    """Receivers on loopback; a test that requests `own_redis` gets it as its only Redis."""
    if "own_redis" in request.fixturenames:
        config = replace(config, redis_url=request.getfixturevalue("own_redis").server.url)
    return replace(config, webhook_allow_private=True)


async def test_a_killed_workers_deliveries_are_made_by_the_next_worker_within_30_s(
        client: Client, admin_token: str, services: Services, receiver: Receiver, workers: Workers,
        mongo_db: Database) -> None:
    """SIGKILL while every delivery is in flight (the receiver holds them): a worker started at
    once runs the killed worker's jobs again when their locks lapse, and delivers every event."""
    webhook_id = await add_webhook(client, admin_token, receiver.url, ["create"])
    receiver.holding.set()
    first = workers.start("worker")
    titles = [f"post {n}" for n in range(6)]
    for title in titles:  # one outbox batch, one job each
        await create_record(client, admin_token, "posts", {"title": title})
    await wait_until(lambda: len(receiver.count()) == len(titles), "every delivery in flight", timeout_s=30)
    await kill(first)
    killed_at = time.monotonic()
    receiver.holding.clear()
    workers.start("worker2")

    await wait_until(lambda: len(receiver.requests) > len(titles), "a delivery by the second worker",
                     timeout_s=RERUN_WITHIN_S + SLACK_S)
    rerun_after_s = receiver.requests[len(titles)][2] - killed_at

    async def all_delivered() -> bool:  # read in the store: polling the API would meet its rate limit
        delivered = await mongo_db["webhook_deliveries"].distinct("delivery_id", {"success": True})
        return len(delivered) == len(titles) and await services.webhook_outbox.backlog() == 0

    await wait_until(all_delivered, "every event delivered and the outbox drained", timeout_s=RERUN_WITHIN_S)
    print(f"killed worker's jobs ran again {rerun_after_s:.1f} s after SIGKILL")
    assert rerun_after_s <= RERUN_WITHIN_S, rerun_after_s  # workers.liveness.LOCK_TTL_S (15 s) when quiet
    log = await delivery_log(client, admin_token, webhook_id)
    assert set(receiver.count()) == {entry["id"] for entry in log}  # X-Webhook-Delivery: the attempt-1 entry
    assert sorted({title for _, title, _ in receiver.requests}) == sorted(titles)
    assert max(successes_per_attempt(log).values()) == 1, log
    assert len(log) == len(titles), log  # the killed run logged nothing; the re-run logs each once


async def test_a_worker_killed_after_logging_a_batch_sends_only_what_was_not_sent(
        config: Config, client: Client, admin_token: str, services: Services, receiver: Receiver,
        workers: Workers, own_redis: OwnRedis, mongo_db: Database) -> None:
    """A worker got every answer of a batch and logged them, then could not hand the retry over (its
    Redis stopped meanwhile) and was killed before it marked the batch done. The next worker runs
    the batch again as a re-run (`job_try` > 1): it reads the log, sends nothing twice, still hands
    the logged 500 to its retry, and the outbox drains."""
    assert config.redis_url == own_redis.server.url
    webhook_id = await add_webhook(client, admin_token, receiver.url, ["update"])
    titles = ["ok 1", "ok 2", "flaky", "ok 3"]
    ids = [(await create_record(client, admin_token, "posts", {"title": t}))["id"] for t in titles]

    async def stop_redis_at_the_last_arrival(state: Receiver) -> None:
        if len(state.requests) == len(titles):  # before the worker has its last answer
            await asyncio.to_thread(own_redis.server.stop)

    receiver.on_arrival = stop_redis_at_the_last_arrival
    first = workers.start("worker")
    response = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"views": 1}})
    assert response.status == 200, await response.text()  # one outbox batch of four deliveries

    async def batch_logged() -> bool:
        return await mongo_db["webhook_deliveries"].count_documents({}) == len(titles)

    await wait_until(batch_logged, "the first run's attempts logged", timeout_s=30)
    await asyncio.sleep(0.5)  # it tries to queue the retry and fails: Redis is down
    assert first.poll() is None, workers.log("worker").read_text()
    await kill(first)
    own_redis.restart()  # in the main thread: the child dies with us
    workers.start("worker2")

    async def drained() -> bool:
        return await services.webhook_outbox.backlog() == 0

    await wait_until(drained, "the outbox drained", timeout_s=RERUN_WITHIN_S + SLACK_S)
    by_title = Counter(title for _, title, _ in receiver.requests)
    assert by_title == {"ok 1": 1, "ok 2": 1, "ok 3": 1, "flaky": 2}, receiver.requests
    log = await delivery_log(client, admin_token, webhook_id)
    assert max(successes_per_attempt(log).values()) == 1, log
    assert sorted((entry["attempt"], entry["success"]) for entry in log) == [
        (1, False), (1, True), (1, True), (1, True), (2, True)], log
    assert "try=2" in workers.log("worker2").read_text()  # arq ran the batch again, as a re-run


async def test_a_worker_rides_out_a_redis_restart(
        config: Config, client: Client, admin_token: str, services: Services, receiver: Receiver,
        workers: Workers, own_redis: OwnRedis) -> None:
    """Redis is killed (SIGKILL) under a running worker and started again on the same port and
    directory: the worker does not exit, and a job queued after Redis is back runs."""
    assert config.redis_url == own_redis.server.url
    await add_webhook(client, admin_token, receiver.url, ["create"])
    worker = workers.start("worker")
    await create_record(client, admin_token, "posts", {"title": "before"})
    await wait_until(lambda: len(receiver.requests) == 1, "a delivery before the restart", timeout_s=30)

    async def drained() -> bool:
        return await services.webhook_outbox.backlog() == 0

    await wait_until(drained, "the delivery before the restart finished", timeout_s=10)

    own_redis.server.process.kill()
    await asyncio.to_thread(own_redis.server.stop)
    await asyncio.sleep(3)  # several failed polls and back-offs
    assert worker.poll() is None, workers.log("worker").read_text()
    own_redis.restart()  # in the main thread: the child dies with us
    back_at = time.monotonic()

    await create_record(client, admin_token, "posts", {"title": "after"})
    await wait_until(lambda: len(receiver.requests) == 2, "a delivery queued after the restart", timeout_s=30)
    print(f"a job queued after the restart ran {time.monotonic() - back_at:.1f} s after Redis was back")
    assert [title for _, title, _ in receiver.requests] == ["before", "after"]
    assert worker.poll() is None, workers.log("worker").read_text()
    log = workers.log("worker").read_text()
    assert "Redis unreachable" in log and "Redis reachable again" in log, log



# --- a worker killed mid-delivery, real `cms serve` and `cms worker` (issue 37, item 5) -------------

ANSWER_AFTER_S = 0.3
"""How long the slow receiver takes to answer each request."""
CREATES = 40
KILL_AFTER_ARRIVALS = 13


@dataclass
class SlowReceiver:
    """A receiver that answers 200 ANSWER_AFTER_S seconds after each request arrives. Keeps, per
    delivery id (`X-Webhook-Delivery`), the monotonic times of its arrivals and of its answers."""

    url: str = ""
    arrivals: dict[str, list[float]] = field(default_factory=dict)
    answers: dict[str, list[float]] = field(default_factory=dict)

    def arrived(self) -> int:
        return sum(len(times) for times in self.arrivals.values())

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        delivery_id = request.headers["X-Webhook-Delivery"]
        self.arrivals.setdefault(delivery_id, []).append(time.monotonic())
        await asyncio.sleep(ANSWER_AFTER_S)  # the receiver's slowness, not the test waiting
        self.answers.setdefault(delivery_id, []).append(time.monotonic())
        return web.Response(text="ok")


@pytest.fixture
async def slow_receiver() -> AsyncIterator[SlowReceiver]:
    state = SlowReceiver()
    app = web.Application()
    app.router.add_post("/hook", state.handle)
    async with served(app, "/hook", shutdown_timeout_s=0.5) as url:
        state.url = url
        yield state


@pytest.fixture
async def serve_and_workers(mongodb_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[str, Processes]]:
    """A production-mode `cms serve` (healthy) on its own database and queue, and the helper that
    starts `cms worker` processes with the same environment; every process is stopped after."""
    env = {**_env(mongodb_url, redis_url), "QUEUE_NAME": f"cms:test:{uuid.uuid4().hex[:12]}",
           "SHUTDOWN_TIMEOUT_S": "2", "LOG_LEVEL": "INFO"}
    processes = Processes(tmp_path, env)
    try:
        url, serve = processes.serve("serve")
        await asyncio.to_thread(_wait_healthy, url, serve, processes.log("serve"))
        yield url, processes
    finally:
        processes.stop_all()


async def claims_after_the_kill(redis_url: str) -> dict[str, int]:
    """Milliseconds each arq job claim (`arq:in-progress:<job id>`) still has to live."""
    client = redis.from_url(redis_url)
    try:
        return {key.decode(): await client.pttl(key) async for key in client.scan_iter("arq:in-progress:webhooks:*")}
    finally:
        await client.aclose()


async def test_a_worker_killed_mid_delivery_has_every_unanswered_delivery_sent_again_within_30_s(
        serve_and_workers: tuple[str, Processes], slow_receiver: SlowReceiver, mongodb_url: str,
        redis_url: str) -> None:
    """Real `cms serve` and `cms worker` processes: 40 creates into a collection with a webhook whose
    receiver answers each request 0.3 s late; SIGKILL of the worker once 13 deliveries arrived, and a
    new worker started at once. Every delivery the killed worker had not had answered (in flight,
    claimed but not started, or still queued) goes out again within RERUN_WITHIN_S of the kill, each
    event is logged delivered once, and the outbox drains. Before the fix, a job arq had claimed
    but not yet started kept arq's 130 s claim (`arq:in-progress:<job id>`), and its delivery went
    out 130 s after the kill (workers/liveness.py)."""
    url, processes = serve_and_workers
    first = processes.start("worker", "worker")
    async with admin_client(Replicas(a=url, b=url)) as http:
        name = (await new_collection(http, [{"name": "title", "type": "text"}]))["name"]
        status, webhook = await http.call("a", "POST", V1 + "/webhooks", json={
            "url": slow_receiver.url, "collection_name": name, "events": ["create"]})
        assert status == 201, webhook

        async def create_all() -> None:  # one outbox batch, one job each
            for n in range(CREATES):
                status, record = await http.call("a", "POST", f"{V1}/collections/{name}/records",
                                                 json={"data": {"title": f"post {n}"}})
                assert status == 201, record

        creating = asyncio.create_task(create_all())
        await wait_until(lambda: slow_receiver.arrived() >= KILL_AFTER_ARRIVALS, "the first deliveries",
                         timeout_s=30)
        await kill(first)
        killed_at = time.monotonic()
        claims = await claims_after_the_kill(redis_url)  # a few ms: the new worker still starts "at once"
        processes.start("worker2", "worker")
        await creating

    def answered_before_the_kill(delivery_id: str) -> bool:
        return min(slow_receiver.answers.get(delivery_id, [killed_at])) < killed_at

    def each_sent_after_the_kill_or_answered_before() -> bool:
        return len(slow_receiver.arrivals) == CREATES and all(
            answered_before_the_kill(d) or max(times) >= killed_at for d, times in slow_receiver.arrivals.items())

    await wait_until(each_sent_after_the_kill_or_answered_before, "every unanswered delivery sent again",
                     timeout_s=RERUN_WITHIN_S + SLACK_S)
    unanswered = [d for d in slow_receiver.arrivals if not answered_before_the_kill(d)]
    in_flight = {d for d in unanswered if min(slow_receiver.arrivals[d]) < killed_at}
    sent_after_s = {d: min(t for t in slow_receiver.arrivals[d] if t >= killed_at) - killed_at for d in unanswered}
    print(f"answered before the kill: {CREATES - len(unanswered)}; seconds from the kill to each re-sent "
          f"delivery, in flight: {sorted(round(sent_after_s[d], 1) for d in in_flight)}; not sent before: "
          f"{sorted(round(s, 1) for d, s in sent_after_s.items() if d not in in_flight)}")
    assert in_flight, "the kill came after every answer"
    assert max(sent_after_s.values()) <= RERUN_WITHIN_S, sent_after_s
    assert max(claims.values(), default=0) <= LOCK_TTL_S * 1000, claims  # no claim keeps arq's 130 s

    client = open_client(mongodb_url)
    try:
        db = client[processes.env["MONGODB_DB"]]

        async def delivered_and_drained() -> bool:
            delivered = await db["webhook_deliveries"].distinct("delivery_id", {"success": True})
            return len(delivered) == CREATES and await db["webhook_outbox"].count_documents(
                {"status": {"$ne": DONE}}) == 0

        await wait_until(delivered_and_drained, "every event logged delivered, the outbox drained", timeout_s=SLACK_S)
        log = [entry async for entry in db["webhook_deliveries"].find({}, {"delivery_id": 1, "attempt": 1})]
    finally:
        await client.close()
    assert set(slow_receiver.arrivals) == {entry["delivery_id"] for entry in log}
    assert max(Counter((e["delivery_id"], e["attempt"]) for e in log).values()) == 1, log
    # At least once: a delivery answered just before the kill may go out again (decisions.md; receivers
    # drop it by X-Webhook-Delivery), never more than once again.
    assert max(len(times) for times in slow_receiver.arrivals.values()) <= 2, slow_receiver.arrivals
