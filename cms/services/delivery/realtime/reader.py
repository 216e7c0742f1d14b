"""The one reader of the shared event stream in a process (decisions.md, Realtime): each entry read once,
in order, and handed on: a record event to the local connections with a topic on its collection
(`Fanout`), a client's new subscriptions or its takeover to its connection here, a loss of events to
every stream here (`resync`). It rides out Redis outages (and then tells the streams what was lost)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import orjson

from cms.services.caching.definition_cache import request_scope
from cms.services.delivery.realtime.connections import ConnectionRegistry
from cms.services.delivery.realtime.fanout import Fanout
from cms.services.delivery.realtime.messages import resync
from cms.services.delivery.realtime.rendering import collection_of
from cms.services.delivery.realtime.replay import LOST_REASON, READ_COUNT
from cms.services.delivery.realtime.stream import (
    CONNECT,
    LOST,
    RECORD,
    REDIS_DOWN,
    SUBSCRIPTIONS,
    TAKEOVER,
    Entry,
    EventStream,
    entry_order,
)

log = logging.getLogger("cms.realtime")

RETRY_S = 1.0
"""Seconds between tries of the reader while Redis does not answer."""


class StreamReader:
    """Reads `stream` from `position` (`start` sets it to the stream's end) and dispatches each entry to
    `registry`'s connections through `fanout`; `block_ms`: how long one read waits for an entry."""

    def __init__(self, stream: EventStream, registry: ConnectionRegistry, fanout: Fanout, *, block_ms: int) -> None:
        self._stream = stream
        self._registry = registry
        self._fanout = fanout
        self._block_ms = block_ms
        self.position = "0-0"
        """The id of the newest entry read and handed out ("0-0" before the first)."""

    async def start(self) -> None:
        """Read from the stream's end (from now, when Redis does not answer)."""
        try:
            self.position = await self._stream.last_id()
        except Exception as exc:  # Redis away at start: read from now on once it is back
            log.warning("realtime: the event stream could not be read at start (%r)", exc)
            self.position = f"{int(time.time() * 1000)}-0"

    async def read_forever(self) -> None:
        """Read and dispatch entries until cancelled."""
        failing = False
        while True:
            try:
                entries = await self._stream.read(self.position, count=READ_COUNT, block_ms=self._block_ms)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:
                    log.warning("realtime: reading the event stream failed (%r); retrying", exc)
                failing = True
                await asyncio.sleep(RETRY_S)
                continue
            if failing:
                failing = False
                with contextlib.suppress(*REDIS_DOWN):
                    await self._stream.report_lost()  # what this process could not publish meanwhile
                await self.check_history()
            if entries:
                await self._dispatch(entries)
                self.position = entries[-1].id

    async def _dispatch(self, entries: list[Entry]) -> None:
        with request_scope():
            for entry in entries:
                try:
                    await self._handle(entry)
                except Exception:
                    log.exception("realtime: entry %s could not be delivered", entry.id)
                await asyncio.sleep(0)  # the streams write and requests run between two entries

    async def _handle(self, entry: Entry) -> None:
        registry = self._registry
        if entry.kind == RECORD:
            holders = registry.holders(collection_of(entry.body))
            if holders:
                await self._fanout.deliver(entry, list(holders), replaying=False)
            return
        if entry.kind == CONNECT:
            return
        if entry.kind == LOST:
            log.warning("realtime: record events were lost before %s (Redis did not answer); streams resync", entry.id)
            for held in list(registry.connections.values()):
                held.push(entry.order, resync(entry.id, LOST_REASON))
            return
        body = orjson.loads(entry.body)
        conn = registry.connections.get(str(body.get("client")))
        if conn is None:
            return
        if entry.kind == SUBSCRIPTIONS:
            registry.apply_state(conn, orjson.dumps(body.get("state") or {}))
        elif entry.kind == TAKEOVER and body.get("conn") != conn.conn_id:
            conn.close("taken over")

    async def check_history(self) -> None:
        """After Redis came back, or when this reader fell behind the trimming: when events this process
        had not read are gone, every stream here gets `resync` and reading goes on after the gap."""
        try:
            floor = await self._stream.floor()
        except Exception:
            return
        if floor is not None and entry_order(floor) <= entry_order(self.position):
            return
        position = await self._stream.last_id()
        if floor is not None and entry_order(floor) > entry_order(position):
            position = floor  # an emptied stream: nothing before the floor can be read again
        connections = self._registry.connections
        if connections:  # without streams here nobody missed anything: say nothing
            log.warning("realtime: events after %s are lost (Redis lost or trimmed them); streams resync",
                        self.position)
        for conn in list(connections.values()):
            conn.push(entry_order(position), resync(position, LOST_REASON))
        self.position = position
