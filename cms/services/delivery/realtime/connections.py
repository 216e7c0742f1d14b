"""The streams one process holds (decisions.md, Realtime): each `Connection` with its queue of messages,
and the `ConnectionRegistry` that finds them by client id and by the collections they have topics on.

A connection's messages wait in a queue of at most MAX_QUEUE; a client that lets it fill is closed (it
can resume). A client id is a secret: log lines name a client by `client_tag`."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from cms.models import Principal
from cms.observability.signals import Signals
from cms.services.delivery.realtime.binding import Subscription
from cms.services.delivery.realtime.client_state import ClientState, client_tag
from cms.services.delivery.realtime.messages import Message
from cms.services.delivery.realtime.stream import EventStream
from cms.services.delivery.realtime.topics import parse_topic
from cms.services.identity.authn import CredentialRef

log = logging.getLogger("cms.realtime")

MAX_QUEUE = 1_000
"""Messages one connection may have waiting; a client that lets more pile up is closed (decisions.md)."""


class Connection:
    """One open stream: the client's id, this stream's `conn_id`, the credential reference behind its
    subscriptions (None: anonymous) and the principal last checked under `checked_epoch` (`refused` once
    it is no longer valid); the messages waiting (`queue` of (entry order, Message)); what the stream
    sends first (`first`), and for a resume the position its replay starts after (`replay_from`) and the
    order of the last entry replayed (`replayed_through`: live messages up to it were sent already)."""

    __slots__ = ("client_id", "conn_id", "ref", "principal", "checked_epoch", "refused", "subscriptions",
                 "queue", "wake", "closed", "reason", "first", "replay_from", "replayed_through", "abort")

    def __init__(self, client_id: str, conn_id: str) -> None:
        self.client_id = client_id
        self.conn_id = conn_id
        self.ref: CredentialRef | None = None
        self.principal: Principal | None = None
        self.checked_epoch: str | None = None
        self.refused = False
        self.subscriptions: list[Subscription] = []
        self.queue: deque[tuple[tuple[int, int], Message]] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.reason = ""
        self.first: list[Message] = []
        self.replay_from: str | None = None
        self.replayed_through = (0, 0)
        self.abort: Callable[[], None] | None = None
        """Drops the connection at once (set by the HTTP layer): for a client that stopped reading,
        whose writes would otherwise wait for it."""

    def push(self, order: tuple[int, int], message: Message) -> None:
        """Queue `message` of the entry `order`; a full queue closes the connection instead."""
        if self.closed:
            return
        if len(self.queue) >= MAX_QUEUE:
            log.info("realtime client %s closed: more than %d events waiting", client_tag(self.client_id), MAX_QUEUE)
            self.close("slow")
            if self.abort is not None:
                self.abort()
            return
        self.queue.append((order, message))
        self.wake.set()

    def close(self, reason: str) -> None:
        """End the stream (the client may resume); its subscriptions stay in Redis."""
        if not self.closed:
            self.closed = True
            self.reason = reason
            self.wake.set()

    def collections(self) -> set[str]:
        """The collection names this connection has topics on."""
        return {s.topic.collection for s in self.subscriptions}

    def apply_state(self, state: ClientState) -> None:
        """Take the subscriptions and credential of `state` (topics that no longer parse are dropped);
        the principal is checked again at the next event."""
        subscriptions: list[Subscription] = []
        for text in state.topics:
            try:
                subscriptions.append(Subscription(parse_topic(text)))
            except ValueError:
                continue
        self.subscriptions, self.ref = subscriptions, state.ref
        self.principal, self.checked_epoch, self.refused = None, None, False


class ConnectionRegistry:
    """This process's connections by client id (`connections`) and by the collections they have topics on
    (`holders`). `stream`: told when a client's last stream here ends (its state is kept CLIENT_TTL_S from
    then); `signals`: told the number of connections whenever it changes."""

    def __init__(self, stream: EventStream, signals: Signals | None) -> None:
        self._stream = stream
        self._signals = signals
        self.connections: dict[str, Connection] = {}
        self._index: dict[str, set[Connection]] = {}
        self._background: set[asyncio.Task[Any]] = set()

    def holders(self, collection: str) -> set[Connection] | None:
        """The connections with a topic on `collection` (None: none)."""
        return self._index.get(collection)

    def register(self, conn: Connection) -> None:
        """Hold `conn`; an older connection of its client here is closed ("taken over")."""
        older = self.connections.get(conn.client_id)
        if older is not None:
            older.close("taken over")
            self._unindex(older)
        self.connections[conn.client_id] = conn
        self._count()

    def unregister(self, conn: Connection) -> None:
        """Close and forget `conn` (its client's state is kept CLIENT_TTL_S from now)."""
        conn.close(conn.reason or "closed")
        self._unindex(conn)
        if self.connections.get(conn.client_id) is conn:
            del self.connections[conn.client_id]
            self.later(self._stream.touch([conn.client_id]))
            self._count()

    def apply_state(self, conn: Connection, state: bytes) -> None:
        """Give `conn` the subscriptions and credential of a stored client state, and index it by them."""
        self._unindex(conn)
        conn.apply_state(ClientState.decode(state, conn.client_id))
        if self.connections.get(conn.client_id) is conn:
            for name in conn.collections():
                self._index.setdefault(name, set()).add(conn)

    def later(self, work: Awaitable[Any]) -> None:
        """Run the Redis call `work` in the background; a failure is logged."""
        async def run() -> None:
            try:
                await work
            except Exception as exc:
                log.warning("realtime: background Redis call failed (%r)", exc)

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _unindex(self, conn: Connection) -> None:
        for name in conn.collections():
            holders = self._index.get(name)
            if holders is not None:
                holders.discard(conn)
                if not holders:
                    del self._index[name]

    def _count(self) -> None:
        if self._signals is not None:
            self._signals.realtime_connections(len(self.connections))
