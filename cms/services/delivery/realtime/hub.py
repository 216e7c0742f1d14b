"""Realtime in one process (decisions.md, Realtime; issues 27 and 37): the `RealtimeHub` every process that
serves HTTP runs, which opens, resumes and serves its streams and sets subscriptions.

The parts: `connections` (the streams held, found by client and by collection), `binding` (a topic bound
to its subscriber through `cms.services.access`), `rendering` (the decision per event and the one
rendering shared by subscribers who see it the same way), `fanout` (one event to the connections, with
their credentials checked), `replay` (a resume: what it is sent first, the missed events), `reader` (the
one reader of the shared `stream`), `housekeeping` (keep-alive, trimming). The hub hands the HTTP layer
neutral `messages.Message`s, in batches; the HTTP layer frames them as server-sent events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from cms.clock import Clock, new_id, utcnow
from cms.errors import Forbidden, NotFound, ServiceUnavailable
from cms.models import Principal
from cms.observability.signals import Signals
from cms.services.caching.catalog import Catalog
from cms.services.delivery.realtime.client_state import ClientState, owner_of
from cms.services.delivery.realtime.connections import Connection, ConnectionRegistry
from cms.services.delivery.realtime.fanout import Fanout
from cms.services.delivery.realtime.housekeeping import keep_house
from cms.services.delivery.realtime.messages import CLIENT_ID, CONNECT, Message, message, resync, split_event_id
from cms.services.delivery.realtime.reader import StreamReader
from cms.services.delivery.realtime.replay import WRITE_BATCH_BYTES, first_messages, replay, written_since
from cms.services.delivery.realtime.stream import REDIS_DOWN, ClientBound, EventStream
from cms.services.delivery.realtime.topics import check_topics
from cms.services.identity.authn import Authenticator, CredentialRef
from cms.store.records import RecordRepository

log = logging.getLogger("cms.realtime")

Send = Callable[[list[Message]], Awaitable[None]]
"""What `serve` hands a stream's messages to, in order, a batch at a time (the HTTP layer frames them)."""
NOT_FOUND = "Realtime client not found; open GET /api/v1/realtime first"
NOT_YOURS = "This realtime client belongs to another principal"


class RealtimeHub:
    """The realtime streams of one process (module docstring).

    `stream`: the shared event stream; `catalog`, `records`: collection definitions and the records'
    store (expansions only); `authenticator`: re-checks credentials; `session_epoch()`: the session
    epoch (None when Redis failed); `max_connections()`: the `realtime_max_connections` setting;
    `clock`: aware UTC time for token expiry; `block_ms`: how long one read of the stream waits;
    `signals`: told of the events written to streams (`Signals.realtime_sent`) and of the number of
    streams held whenever it changes (`Signals.realtime_connections`)."""

    def __init__(self, stream: EventStream, catalog: Catalog, records: RecordRepository,
                 authenticator: Authenticator, *, session_epoch: Callable[[], Awaitable[str | None]],
                 max_connections: Callable[[], Awaitable[int]], clock: Clock = utcnow,
                 block_ms: int = 5_000, signals: Signals | None = None) -> None:
        self._stream = stream
        self._catalog = catalog
        self._max_connections = max_connections
        self._clock = clock
        self._signals = signals
        self._registry = ConnectionRegistry(stream, signals)
        self._fanout = Fanout(catalog, records, authenticator, session_epoch=session_epoch, clock=clock)
        self._reader = StreamReader(stream, self._registry, self._fanout, block_ms=block_ms)
        self._tasks: list[asyncio.Task[None]] = []
        self.sent = 0
        """Record events written to this process's streams."""

    @property
    def connections(self) -> dict[str, Connection]:
        """The streams held, by client id."""
        return self._registry.connections

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start reading the stream from its end, and the housekeeping; a no-op when started already."""
        if self._tasks:
            return
        await self._reader.start()
        self._tasks = [
            asyncio.create_task(self._reader.read_forever(), name="realtime-reader"),
            asyncio.create_task(keep_house(self._stream, self._registry, self._reader, self._clock),
                                name="realtime-housekeeping")]

    async def stop(self) -> None:
        """Close every stream (clients reconnect elsewhere and resume) and stop reading."""
        for conn in list(self.connections.values()):
            conn.close("shutdown")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # --- what the admin UI asks --------------------------------------------------------------------

    async def watch_from(self) -> str:
        """Keep record history from now on (realtime is marked in use, `EventStream.activate`), then
        the id of the newest stream entry this process has read and handed out ("0-0" before the
        first). A record entry is appended after its write committed and the read cache learnt of
        it, so a read that starts after this shows every write up to the returned position, and
        `written_since` sees every later one. A Redis failure is logged (`written_since` then answers
        "changed")."""
        try:
            await self._stream.activate()
        except REDIS_DOWN as exc:
            log.warning("realtime: could not mark realtime in use (%r)", exc)
        return self._reader.position

    async def written_since(self, collection: str, after: str) -> tuple[bool, str]:
        """`replay.written_since` on this process's stream. Raises ServiceUnavailable when Redis does
        not answer."""
        try:
            return await written_since(self._stream, collection, after)
        except REDIS_DOWN as exc:
            raise ServiceUnavailable("Realtime is unavailable: Redis does not answer") from exc

    def expires_in_s(self, ref: CredentialRef | None) -> float | None:
        """Seconds until events under `ref` stop for good (its access token's expiry, by the hub's
        clock; 0 when past); None when it has no expiry (anonymous, an API key)."""
        if ref is None or ref.expires_at is None:
            return None
        return max(0.0, (ref.expires_at - self._clock()).total_seconds())

    # --- streams ---------------------------------------------------------------------------------

    def release(self, conn: Connection) -> None:
        """Close and forget `conn` when its stream will not be served (`serve` does this itself)."""
        self._registry.unregister(conn)

    async def open(self, client_id: str | None, last_event_id: str | None,
                   principal: Principal | None = None) -> Connection:
        """A new stream: a new client, or with `client_id` (and `last_event_id`) the resume of a known
        one, whose missed events `serve` replays first (or that gets `resync` when they are no longer
        all in the stream, or it gave no id). A `last_event_id` of ours names its client
        (`messages.event_id`): alone, it resumes that client. `principal` is the resume's credentials'
        (None: it carried none). Raises Forbidden (a client bound to another principal: nothing changes),
        ServiceUnavailable past `realtime_max_connections` in this process, or when Redis does not answer."""
        limit = await self._max_connections()
        if len(self.connections) >= limit:
            raise ServiceUnavailable(f"This server holds its maximum of {limit} realtime connections; "
                                     "retry, another replica may have room")
        named, entry_id = split_event_id(last_event_id)
        client_id = client_id or named
        try:
            if client_id is not None and CLIENT_ID.match(client_id) is not None:
                conn = await self._resume(client_id, entry_id, principal)
                if conn is not None:
                    return conn
            return await self._connect(resync_reason="unknown client" if client_id is not None else None)
        except REDIS_DOWN as exc:
            raise ServiceUnavailable("Realtime is unavailable: Redis does not answer") from exc

    async def _connect(self, *, resync_reason: str | None) -> Connection:
        conn = Connection(new_id(), new_id())
        self._registry.register(conn)
        try:
            entry_id = await self._stream.connect(conn.client_id, ClientState().encode())
        except BaseException:
            self._registry.unregister(conn)
            raise
        conn.first = [message(CONNECT, entry_id, {"client_id": conn.client_id})]
        if resync_reason is not None:
            conn.first.append(resync(entry_id, resync_reason))
        return conn

    async def _resume(self, client_id: str, last_event_id: str | None,
                      principal: Principal | None) -> Connection | None:
        presenter = None if principal is None else owner_of(principal)
        # asked before this process's older stream of the client is closed (`register`): a refused
        # resume leaves it open; the take-over decides again, atomically with what it changes
        if presenter is not None and await self._stream.refuses(client_id, presenter):
            raise Forbidden(NOT_YOURS)
        conn = Connection(client_id, new_id())
        self._registry.register(conn)
        try:
            taken = await self._stream.take_over(client_id, orjson.dumps({"client": client_id, "conn": conn.conn_id}),
                                                 presenter)
        except ClientBound:
            self._registry.unregister(conn)
            raise Forbidden(NOT_YOURS) from None
        except BaseException:
            self._registry.unregister(conn)
            raise
        if taken is None:
            self._registry.unregister(conn)
            return None
        state, takeover_id, floor = taken
        self._registry.apply_state(conn, state)
        conn.first, conn.replay_from = first_messages(client_id, last_event_id, takeover_id, floor)
        return conn

    async def serve(self, conn: Connection, send: Send) -> None:
        """Hand `conn`'s messages to `send`, in order, in batches of at most about WRITE_BATCH_BYTES, until
        it is closed (by `close`, a takeover, a full queue or shutdown) or `send` raises (the client went
        away): first `conn.first`, then a resume's replay, then live messages (those the replay covered
        dropped)."""
        try:
            await send(conn.first)
            if conn.replay_from is not None:
                self._count_sent(await replay(self._stream, self._fanout, conn, conn.replay_from, send))
            while not conn.closed:
                if not conn.queue:
                    conn.wake.clear()
                    await conn.wake.wait()
                    continue
                batch: list[Message] = []
                size = 0
                while conn.queue and size < WRITE_BATCH_BYTES:
                    order, queued = conn.queue.popleft()
                    if order > conn.replayed_through:
                        batch.append(queued)
                        size += len(queued.data)
                if batch:
                    await send(batch)
                    self._count_sent(len(batch))
        finally:
            self._registry.unregister(conn)

    def _count_sent(self, events: int) -> None:
        self.sent += events
        if self._signals is not None:
            self._signals.realtime_sent(events)

    # --- subscriptions ---------------------------------------------------------------------------

    async def subscribe(self, client_id: Any, texts: Any, principal: Principal | None,
                        ref: CredentialRef | None) -> None:
        """Replace the subscriptions of client `client_id` with the topics `texts`, under the
        credential `ref` of `principal` (None: anonymous); in force on every replica for every write
        that starts after this returns. The first POST with credentials binds the client to its
        principal (`client_state`). Raises NotFound (a client that is not connected or was forgotten),
        Forbidden (a client bound to another principal, anonymous included: nothing changes),
        ValidationFailed (422: a bad topic, naming it; more than MAX_TOPICS) or ServiceUnavailable (Redis)."""
        if not isinstance(client_id, str) or CLIENT_ID.match(client_id) is None:
            raise NotFound(NOT_FOUND)
        topics = await check_topics(self._catalog, texts, principal)
        owner = owner_of(principal)
        state = ClientState(tuple(dict.fromkeys(t.text for t in topics)), ref, owner).encode()
        try:
            entry = await self._stream.set_subscriptions(
                client_id, state, orjson.dumps({"client": client_id, "state": orjson.loads(state)}), owner)
        except ClientBound:
            raise Forbidden(NOT_YOURS) from None
        except REDIS_DOWN as exc:
            raise ServiceUnavailable("Realtime is unavailable: Redis does not answer") from exc
        if entry is None:
            raise NotFound(NOT_FOUND)
