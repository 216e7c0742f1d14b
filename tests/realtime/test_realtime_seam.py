"""Replay then live, at the seam (decisions.md, Realtime: a resume first receives what it missed, in
order, then live events, with no gap and no repeat; issue 37, item 3).

The reader here is a raw socket that parses the chunked body and the event stream itself and keeps
every event it receives, repeats included (the JS and Python clients drop repeated ids themselves, so
they would hide a repeat at the seam). A client disconnects; writes go on (bulk updates of 50 records,
one event per record), started before the resume and running through its replay and past it (the topic
expands a relation, so rendering each replayed event reads the database and the replay overlaps the
writes); the resumed stream must bring each write exactly once, with strictly increasing ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.conftest import Client, bearer, create_collection, create_record, records_path
from tests.realtime.sse import REALTIME, Stream, data

RECORDS = 50
"""Records each write (a bulk update) changes: one event each."""
ROUNDS_BEFORE = 6
"""Writes made while the client is away, before it resumes (300 events to replay)."""
ROUNDS = 16
"""Writes in all: the writer goes on through the replay and after it (800 events; below the queue's 1,000)."""
TOPIC = "posts/*?expand=author"
"""Expanded: each event's rendering reads the database, so the replay lasts while writes go on."""


class RawStream:
    """`GET /api/v1/realtime` over a plain socket: HTTP/1.1 chunked body, SSE parsed here, nothing dropped."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.events: list[dict[str, str]] = []
        self._text = b""

    @classmethod
    async def open(cls, host: str, port: int, query: str, last_event_id: str) -> RawStream:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET {REALTIME}?{query} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
                     f"Last-Event-ID: {last_event_id}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"transfer-encoding: chunked" in head.lower(), head
        return cls(reader, writer)

    async def read_until(self, done: Callable[[list[dict[str, str]]], bool], timeout_s: float) -> None:
        """Read chunks until `done(self.events)` or the time-out (which fails)."""
        async with asyncio.timeout(timeout_s):
            while not done(self.events):
                size = int((await self.reader.readline()).strip(), 16)
                assert size, "the stream ended"
                chunk = await self.reader.readexactly(size + 2)
                self._parse(chunk[:-2])

    def _parse(self, chunk: bytes) -> None:
        self._text += chunk
        *blocks, self._text = self._text.split(b"\n\n")
        for block in blocks:
            event: dict[str, str] = {}
            for line in block.decode().split("\n"):
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                event[name] = value
            if event:
                self.events.append(event)

    def close(self) -> None:
        self.writer.close()


def position(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.rpartition(":")[2].partition("-")
    return int(ms), int(seq)


async def test_a_resume_during_writes_brings_each_write_exactly_once_in_increasing_order(
        client: Client, admin_token: str, streams: Callable[[], Stream]) -> None:
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}],
                                      list_rule="", view_rule="")
    await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": authors["id"], "max_select": 1}],
        list_rule="", view_rule="")
    author = await create_record(client, admin_token, "authors", {"name": "ann"})
    ids = [(await create_record(client, admin_token, "posts", {"title": "start", "author": author["id"]}))["id"]
           for _ in range(RECORDS)]
    stream = streams()
    await stream.open()
    assert (await stream.subscribe([TOPIC])).status_code == 204
    marker = await create_record(client, admin_token, "posts", {"title": "marker"})
    seen = await stream.next()
    assert data(seen)["record"]["id"] == marker["id"]
    await stream.close()  # the client goes away

    rounds_done = 0
    away = asyncio.Event()

    async def write() -> None:
        nonlocal rounds_done
        for round_number in range(ROUNDS):
            response = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                                         json={"record_ids": ids, "data": {"title": f"r{round_number}"}})
            assert response.status == 200, await response.text()
            rounds_done += 1
            if rounds_done == ROUNDS_BEFORE:
                away.set()
            await asyncio.sleep(0)

    writer = asyncio.create_task(write())
    raw: RawStream | None = None
    try:
        await asyncio.wait_for(away.wait(), 60)
        assert client.port is not None
        raw = await RawStream.open(client.host, client.port, f"client_id={stream.client_id}", seen.id)
        during = rounds_done
        await raw.read_until(lambda events: len(events) > 1, 30)  # connect, then the replay is under way
        await asyncio.wait_for(writer, 120)
        assert during < ROUNDS and rounds_done == ROUNDS  # the writes ran through the replay
        expected = Counter((record_id, f"r{r}") for r in range(ROUNDS) for record_id in ids)
        await raw.read_until(lambda events: len(events) > len(expected), 60)
        with contextlib.suppress(TimeoutError):  # a repeat after the last write would come now
            await raw.read_until(lambda events: False, 1.0)
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, AssertionError):
            await writer
        if raw is not None:
            raw.close()

    connect, *events = raw.events
    assert connect["event"] == "connect" and connect["id"] == seen.id
    received: list[tuple[str, Any]] = []
    for event in events:
        body = json.loads(event["data"])
        assert event["event"] == TOPIC and body["action"] == "update", event
        assert body["record"]["expand"]["author"]["name"] == "ann"
        received.append((body["record"]["id"], body["record"]["title"]))
    repeats = [item for item, count in Counter(received).items() if count > 1]
    assert not repeats, f"{len(repeats)} events arrived more than once, e.g. {repeats[:3]}"
    assert Counter(received) == expected, "a gap: not every write arrived"
    positions = [position(seen.id)] + [position(e["id"]) for e in events]
    assert all(a < b for a, b in zip(positions, positions[1:], strict=False)), "ids not strictly increasing"
    assert [title for _, title in received] == sorted((title for _, title in received), key=lambda t: int(t[1:]))
