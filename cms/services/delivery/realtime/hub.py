"""Realtime fan-out in one process (decisions.md, Realtime; issue 27): the streams this process holds,
one reader of the shared event stream, and the in-memory decision of what each subscriber receives.

Every process that serves HTTP runs one `RealtimeHub`. Its reader reads each entry of the stream
(`stream.EventStream`) once, in order, and hands record entries to the local connections that have a
topic on the record's collection. What a subscriber receives is decided in memory, without a
database query: the topic's rule (list rule for `<collection>/*`, view rule for one record) bound to
the subscriber's principal, and its filter, are decided by `access.Access` and the topic's
`Condition` against the record before and after the write, so an update that makes a record leave
a subscriber's view reaches it as `delete` and one that makes it enter as `create`. Principals are
checked again whenever the session epoch moves (a logout, revocation or API key deletion anywhere),
and an access token's expiry is checked for every event. Rendering (`expand`, `fields`) is shared by every subscriber
that sees the event the same way; a plain topic costs no query at all.

A connection's messages wait in a queue of at most MAX_QUEUE; a client that lets it fill is closed
(it can resume). A resume (`open` with a client id and Last-Event-ID) replays what the client
missed from the stream, then goes live without a gap or a repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from cms.clock import Clock, new_id, utcnow
from cms.errors import CmsError, Forbidden, NotFound, ServiceUnavailable, Unauthorized
from cms.models import Collection, Principal, Record
from cms.observability.signals import Signals
from cms.services.access import Access, Condition, check, record_document, refused
from cms.services.caching.catalog import Catalog
from cms.services.caching.definition_cache import request_scope
from cms.services.content.expansion import NOTHING, Expansion, resolve
from cms.services.delivery.realtime.client_state import ClientState, client_tag, owner_of
from cms.services.delivery.realtime.stream import (
    CONNECT,
    LOST,
    RECORD,
    REDIS_DOWN,
    SUBSCRIPTIONS,
    TAKEOVER,
    ClientBound,
    Entry,
    EventStream,
    entry_order,
)
from cms.services.delivery.realtime.topics import Topic, check_topics, parse_topic
from cms.services.identity.authn import Authenticator, CredentialRef
from cms.services.representation import records as represent
from cms.services.representation.record_view import RecordView
from cms.store.records import RecordRepository

log = logging.getLogger("cms.realtime")

MAX_QUEUE = 1_000
"""Messages one connection may have waiting; a client that lets more pile up is closed (decisions.md)."""
READ_COUNT = 500
"""Entries one read of the stream takes (live and replay)."""
TOUCH_INTERVAL_S = 60.0
"""How often, in seconds, the clients this process holds are kept alive in Redis and the stream trimmed."""
RETRY_S = 1.0
"""Seconds between tries of the reader while Redis does not answer."""
CLIENT_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
"""What a client id may look like (ours are UUIDs)."""
MAX_SCAN = 10_000
"""Entries `written_since` looks at; past them it answers "maybe" (True)."""

CREATE, UPDATE, DELETE = "create", "update", "delete"
AFTER, BEFORE = "after", "before"
LATER = object()
"""What `_Fanout.ready_message` answers when the message needs I/O to render."""
WRITE_BATCH_BYTES = 256 * 1024
"""Most bytes of waiting messages one write to a stream joins (one syscall for a burst of events)."""


@dataclass
class _Bound:
    """A subscription bound to one collection definition and one principal: the rule's decision,
    the filter's condition, the expansion, and the key naming how records are rendered for it."""

    collection: Collection
    principal: Principal | None
    access: Access
    condition: Condition | None
    expansion: Expansion
    view: RecordView
    render_key: str

    def shows(self, document: dict[str, Any]) -> bool:
        """Whether the subscriber may see the stored `document` and it matches the filter (a query
        shape the in-memory matcher lacks shows nothing, and is logged)."""
        try:
            return self.access.allows_document(document) and (
                self.condition is None or self.condition.matches(document))
        except ValueError as exc:
            log.error("realtime: a rule or filter of %s cannot be matched in memory (%s)", self.collection.name, exc)
            return False


class Subscription:
    """One topic of a connection, with its binding (recomputed when the collection's definition or
    the principal changes)."""

    __slots__ = ("topic", "bound")

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.bound: _Bound | None = None


class Connection:
    """One open stream: the client's id, this stream's `conn_id`, the credential reference behind
    its subscriptions (None: anonymous) and the principal last checked under `checked_epoch`; the
    messages waiting (`queue` of (entry order, bytes)) and what the stream sends first."""

    __slots__ = ("client_id", "conn_id", "ref", "principal", "checked_epoch", "refused", "subscriptions",
                 "queue", "wake", "closed", "reason", "first", "replay_from", "replayed_through", "abort", "id_head")

    def __init__(self, client_id: str, conn_id: str) -> None:
        self.client_id = client_id
        self.conn_id = conn_id
        self.ref: CredentialRef | None = None
        self.principal: Principal | None = None
        self.checked_epoch: str | None = None
        self.refused = False
        self.subscriptions: list[Subscription] = []
        self.queue: deque[tuple[tuple[int, int], bytes]] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.reason = ""
        self.first: list[bytes] = []
        self.replay_from: str | None = None
        self.replayed_through = (0, 0)
        self.id_head = b"id: %s:" % client_id.encode()
        """The start of every event's `id` line on this stream (`event_id`)."""
        self.abort: Callable[[], None] | None = None
        """Drops the connection at once (set by the HTTP layer): for a client that stopped reading,
        whose writes would otherwise wait for it."""

    def push(self, order: tuple[int, int], message: bytes) -> None:
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


def event_id(client_id: str, entry_id: str) -> str:
    """The SSE id of stream entry `entry_id` on client `client_id`'s stream: `<client id>:<entry id>`,
    so a browser's EventSource, which sends back only `Last-Event-ID` when it reconnects to the URL it
    was opened with, resumes its client by itself (`split_event_id`)."""
    return f"{client_id}:{entry_id}"


def split_event_id(text: str | None) -> tuple[str | None, str | None]:
    """(client id, entry id) of a `Last-Event-ID`: `<client id>:<entry id>` as `event_id` makes them,
    or a bare entry id (client None); (None, None) for nothing usable."""
    if not text:
        return None, None
    client_id, colon, entry_id = text.strip().rpartition(":")
    if _order_or_none(entry_id) is None:
        return None, None
    if colon and CLIENT_ID.match(client_id) is None:
        return None, None
    return (client_id or None), entry_id


def sse_message(event: str, event_id_text: str, data: Any) -> bytes:
    """One server-sent event: `id`, `event` and one `data` line of compact JSON."""
    return b"id: %s\n%s" % (event_id_text.encode(), sse_tail(event, data))


def sse_tail(event: str, data: Any) -> bytes:
    """A server-sent event without its `id` line (shared by every stream that gets it)."""
    return b"event: %s\ndata: %s\n\n" % (event.encode(), orjson.dumps(data))


@dataclass
class _Change:
    """A decoded record entry: `collection` (name), `action`, `record_id`, `record` (the record's JSON
    after the write, or as it was for a delete; None when unknown) and `previous` (for an update,
    its JSON before; None when unknown)."""

    collection: str
    action: str
    record_id: str
    record: dict[str, Any] | None
    previous: dict[str, Any] | None

    @classmethod
    def decode(cls, body: bytes) -> _Change:
        """The change a RECORD entry's body holds. Raises ValueError, KeyError or TypeError."""
        raw = orjson.loads(body)
        return cls(collection=str(raw["n"]), action=str(raw["a"]), record_id=str(raw["i"]),
                   record=raw.get("r"), previous=raw.get("p"))


@dataclass
class _Fanout:
    """What one record entry looks like to each way of seeing it: documents for the rules, rendered
    bodies and whole messages, each computed once for every subscriber that shares it."""

    entry: Entry
    change: _Change
    collection: Collection
    records: RecordRepository
    _records: dict[str, Record | None] = field(default_factory=dict)
    _documents: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    _bodies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _messages: dict[tuple[str, str, str, str], bytes] = field(default_factory=dict)

    def json_of(self, which: str) -> dict[str, Any] | None:
        """The record's JSON `AFTER` the write (as it was, for a delete) or `BEFORE` an update."""
        return self.change.record if which == AFTER else self.change.previous

    def record(self, which: str) -> Record | None:
        """`json_of(which)` as a Record (None when unknown or unreadable)."""
        if which not in self._records:
            body = self.json_of(which)
            try:
                self._records[which] = None if body is None else represent.record_from_json(body, self.collection)
            except (KeyError, ValueError, TypeError):
                self._records[which] = None
        return self._records[which]

    def document(self, which: str) -> dict[str, Any] | None:
        """The record as stored, for the rules (None when unknown)."""
        if which not in self._documents:
            record = self.record(which)
            self._documents[which] = None if record is None else record_document(record)
        return self._documents[which]

    def decide(self, bound: _Bound, record_id: str | None) -> tuple[str, str] | None:
        """(action, which record) this subscriber receives, or None (decisions.md: leave and enter)."""
        change = self.change
        if record_id is not None and record_id != change.record_id:
            return None
        after = self.document(AFTER)
        if change.action == DELETE:
            if after is None:  # unknown record: only a subscriber who sees everything learns of it
                return (DELETE, AFTER) if bound.access.everything and bound.condition is None else None
            return (DELETE, AFTER) if bound.shows(after) else None
        shown_after = after is not None and bound.shows(after)
        if change.action == CREATE:
            return (CREATE, AFTER) if shown_after else None
        before = self.document(BEFORE)
        shown_before = shown_after if before is None else bound.shows(before)
        if shown_after:
            return (UPDATE, AFTER) if shown_before else (CREATE, AFTER)
        return (DELETE, BEFORE) if shown_before and before is not None else None

    def ready_message(self, topic: Topic, bound: _Bound) -> bytes | None | object:
        """The SSE message (without its `id` line) `topic`'s subscriber gets (None: nothing) when it
        needs no I/O, else LATER (`message` then renders it): the common path of a fan-out runs without awaiting."""
        decided = self.decide(bound, topic.record_id)
        if decided is None:
            return None
        action, which = decided
        key = (topic.text, action, which, bound.render_key)
        message = self._messages.get(key)
        if message is None:
            if bound.render_key:
                return LATER
            body = self.json_of(which) or {"id": self.change.record_id}
            message = self._messages[key] = sse_tail(topic.text, {"action": action, "record": body})
        return message

    async def message(self, topic: Topic, bound: _Bound) -> bytes | None:
        """The SSE message (without its `id` line) `topic`'s subscriber gets (None: nothing), rendered
        (`expand`, `fields`) once for every subscriber that sees it the same way."""
        ready = self.ready_message(topic, bound)
        if ready is not LATER:
            return ready  # type: ignore[return-value]
        action, which = self.decide(bound, topic.record_id) or (UPDATE, AFTER)
        body = await self._body(which, bound)
        key = (topic.text, action, which, bound.render_key)
        message = self._messages[key] = sse_tail(topic.text, {"action": action, "record": body})
        return message

    async def _body(self, which: str, bound: _Bound) -> dict[str, Any]:
        shown = self.json_of(which) or {"id": self.change.record_id}
        if not bound.render_key:
            return shown
        key = (which, bound.render_key)
        if key not in self._bodies:
            record = self.record(which)
            if record is None:
                self._bodies[key] = shown
            else:
                expanded: tuple[Any, ...] = ()
                if bound.expansion.segments:
                    try:
                        expanded = await bound.expansion.load(self.records, [record])
                    except CmsError as exc:
                        log.info("realtime expand of %s skipped: %s", self.change.record_id, exc.detail)
                self._bodies[key] = represent.record_json(record, bound.view, expanded)
        return self._bodies[key]


class RealtimeHub:
    """The realtime streams of one process (module docstring).

    `stream`: the shared event stream; `catalog`, `records`: collection definitions and the records'
    store (expansions only); `authenticator`: re-checks credentials; `session_epoch()`: the session
    epoch (None when Redis failed); `max_connections()`: the `realtime_max_connections` setting;
    `clock`: aware UTC time for token expiry; `signals`: told of the events written to streams
    (`Signals.realtime_sent`) and of the number of streams held whenever it changes
    (`Signals.realtime_connections`)."""

    def __init__(self, stream: EventStream, catalog: Catalog, records: RecordRepository,
                 authenticator: Authenticator, *, session_epoch: Callable[[], Awaitable[str | None]],
                 max_connections: Callable[[], Awaitable[int]], clock: Clock = utcnow,
                 block_ms: int = 5_000, signals: Signals | None = None) -> None:
        self._signals = signals
        self._stream = stream
        self._catalog = catalog
        self._records = records
        self._authenticator = authenticator
        self._session_epoch = session_epoch
        self._max_connections = max_connections
        self._clock = clock
        self._block_ms = block_ms
        self.connections: dict[str, Connection] = {}
        self._index: dict[str, set[Connection]] = {}
        self._position = "0-0"
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self.sent = 0

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start reading the stream from its end, and the housekeeping (keep-alive, trim); a no-op
        when started already."""
        if self._tasks:
            return
        try:
            self._position = await self._stream.last_id()
        except Exception as exc:  # Redis away at start: read from now on once it is back
            log.warning("realtime: the event stream could not be read at start (%r)", exc)
            self._position = f"{int(time.time() * 1000)}-0"
        self._tasks = [asyncio.create_task(self._read_forever(), name="realtime-reader"),
                       asyncio.create_task(self._housekeeping(), name="realtime-housekeeping")]

    async def stop(self) -> None:
        """Close every stream (clients reconnect elsewhere and resume) and stop reading."""
        for conn in list(self.connections.values()):
            conn.close("shutdown")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # --- connections -----------------------------------------------------------------------------

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
        return self._position

    async def written_since(self, collection: str, after: str) -> tuple[bool, str]:
        """(Whether a record of `collection` may have been written since stream entry `after`, the
        newest entry id that answer covers). True also when that can no longer be told: `after` is
        not a stream id, entries after it were trimmed or lost, or more than MAX_SCAN follow it.
        `after` "0-0" (the `position` of a hub that started on an empty stream and has read nothing
        yet) looks at the stream from its start. Raises ServiceUnavailable when Redis does not answer."""
        try:
            floor = await self._stream.floor()
            after = split_event_id(after)[1] or after
            order = _order_or_none(after)
            if floor is None or order is None or (order != (0, 0) and order < entry_order(floor)):
                return True, await self._stream.last_id()
            seen, scanned = after, 0
            while scanned < MAX_SCAN:
                entries = await self._stream.range(seen, count=READ_COUNT)
                if not entries:
                    return False, seen
                seen, scanned = entries[-1].id, scanned + len(entries)
                if any(e.kind == RECORD and _collection_of(e.body) == collection for e in entries):
                    return True, seen
            return True, seen
        except REDIS_DOWN as exc:
            raise ServiceUnavailable("Realtime is unavailable: Redis does not answer") from exc

    def expires_in_s(self, ref: CredentialRef | None) -> float | None:
        """Seconds until events under `ref` stop for good (its access token's expiry, by the hub's
        clock; 0 when past); None when it has no expiry (anonymous, an API key)."""
        if ref is None or ref.expires_at is None:
            return None
        return max(0.0, (ref.expires_at - self._clock()).total_seconds())

    def release(self, conn: Connection) -> None:
        """Close and forget `conn` when its stream will not be served (`serve` does this itself)."""
        self._unregister(conn)

    async def open(self, client_id: str | None, last_event_id: str | None,
                   principal: Principal | None = None) -> Connection:
        """A new stream: a new client, or with `client_id` (and `last_event_id`) the resume of a known
        one, whose missed events `serve` replays first (or that gets `resync` when they are no longer
        all in the stream, or it gave no id). A `last_event_id` of ours names its client
        (`event_id`): alone, it resumes that client. `principal` is the resume's credentials' (None:
        it carried none). Raises Forbidden (a client bound to another principal: nothing changes),
        ServiceUnavailable past `realtime_max_connections` in this process, or when Redis does not answer."""
        limit = await self._max_connections()
        if len(self.connections) >= limit:
            raise ServiceUnavailable(f"This server holds its maximum of {limit} realtime connections; "
                                     "retry, another replica may have room")
        named, entry_id = split_event_id(last_event_id)
        client_id = client_id or named
        resuming = client_id is not None and CLIENT_ID.match(client_id) is not None
        try:
            if resuming:
                assert client_id is not None
                conn = await self._resume(client_id, entry_id, principal)
                if conn is not None:
                    return conn
            return await self._connect(resync=client_id is not None)
        except REDIS_DOWN as exc:
            raise ServiceUnavailable("Realtime is unavailable: Redis does not answer") from exc

    async def _connect(self, *, resync: bool) -> Connection:
        conn = Connection(new_id(), new_id())
        self._register(conn)
        try:
            entry_id = await self._stream.connect(conn.client_id, ClientState().encode())
        except BaseException:
            self._unregister(conn)
            raise
        shown = event_id(conn.client_id, entry_id)
        conn.first = [sse_message("connect", shown, {"client_id": conn.client_id})]
        if resync:
            conn.first.append(sse_message("resync", shown, {"reason": "unknown client"}))
        return conn

    async def _resume(self, client_id: str, last_event_id: str | None,
                      principal: Principal | None) -> Connection | None:
        presenter = None if principal is None else owner_of(principal)
        # asked before this process's older stream of the client is closed (`_register`): a refused
        # resume leaves it open; the take-over decides again, atomically with what it changes
        if presenter is not None and await self._stream.refuses(client_id, presenter):
            raise Forbidden("This realtime client belongs to another principal")
        conn = Connection(client_id, new_id())
        self._register(conn)
        try:
            taken = await self._stream.take_over(client_id, orjson.dumps({"client": client_id, "conn": conn.conn_id}),
                                                 presenter)
        except ClientBound:
            self._unregister(conn)
            raise Forbidden("This realtime client belongs to another principal") from None
        except BaseException:
            self._unregister(conn)
            raise
        if taken is None:
            self._unregister(conn)
            return None
        state, entry_id, floor = taken
        self._apply_state(conn, state)
        last = _order_or_none(last_event_id)
        if last is not None and floor is not None and entry_order(floor) <= last <= entry_order(entry_id):
            assert last_event_id is not None
            conn.first = [sse_message("connect", event_id(client_id, last_event_id), {"client_id": client_id})]
            conn.replay_from = last_event_id
        else:
            reason = "no Last-Event-ID" if last is None else "missed events are no longer kept"
            shown = event_id(client_id, entry_id)
            conn.first = [sse_message("connect", shown, {"client_id": client_id}),
                          sse_message("resync", shown, {"reason": reason})]
        return conn

    async def serve(self, conn: Connection, write: Callable[[bytes], Awaitable[None]]) -> None:
        """Send `conn`'s stream through `write` until it is closed (by `close`, a takeover, a full
        queue or shutdown) or `write` raises (the client went away)."""
        try:
            for message in conn.first:
                await write(message)
            if conn.replay_from is not None:
                await self._replay(conn, conn.replay_from, write)
            while not conn.closed:
                if not conn.queue:
                    conn.wake.clear()
                    await conn.wake.wait()
                    continue
                batch: list[bytes] = []
                size = 0
                while conn.queue and size < WRITE_BATCH_BYTES:
                    order, message = conn.queue.popleft()
                    if order > conn.replayed_through:
                        batch.append(message)
                        size += len(message)
                if batch:
                    await write(b"".join(batch))
                    self._count_sent(len(batch))
        finally:
            self._unregister(conn)

    async def _replay(self, conn: Connection, after: str, write: Callable[[bytes], Awaitable[None]]) -> None:
        while not conn.closed:
            entries = await self._stream.range(after, count=READ_COUNT)
            if not entries:
                return
            with request_scope():
                for entry in entries:
                    if entry.kind == RECORD:
                        for message in await self._fan_out(entry, [conn], replaying=True):
                            await write(message)
                            self._count_sent(1)
                    elif entry.kind == LOST:
                        await write(_lost_message(conn, entry))
                    conn.replayed_through = entry.order
            after = entries[-1].id

    def _count_sent(self, events: int) -> None:
        self.sent += events
        if self._signals is not None:
            self._signals.realtime_sent(events)

    def _register(self, conn: Connection) -> None:
        older = self.connections.get(conn.client_id)
        if older is not None:
            older.close("taken over")
            self._unindex(older)
        self.connections[conn.client_id] = conn
        if self._signals is not None:
            self._signals.realtime_connections(len(self.connections))

    def _unregister(self, conn: Connection) -> None:
        conn.close(conn.reason or "closed")
        self._unindex(conn)
        if self.connections.get(conn.client_id) is conn:
            del self.connections[conn.client_id]
            self._later(self._stream.touch([conn.client_id]))  # forgotten CLIENT_TTL_S from now
            if self._signals is not None:
                self._signals.realtime_connections(len(self.connections))

    def _later(self, work: Awaitable[Any]) -> None:
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

    def _apply_state(self, conn: Connection, state: bytes) -> None:
        """Give `conn` the subscriptions and credential of a stored client state (`ClientState`)."""
        decoded = ClientState.decode(state, conn.client_id)
        ref = decoded.ref
        topics: list[Subscription] = []
        for text in decoded.topics:
            try:
                topics.append(Subscription(parse_topic(text)))
            except ValueError:
                continue
        self._unindex(conn)
        conn.subscriptions, conn.ref = topics, ref
        conn.principal, conn.checked_epoch, conn.refused = None, None, False
        if self.connections.get(conn.client_id) is conn:
            for name in conn.collections():
                self._index.setdefault(name, set()).add(conn)

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
            raise NotFound("Realtime client not found; open GET /api/v1/realtime first")
        topics = await check_topics(self._catalog, texts, principal)
        unique = list(dict.fromkeys(t.text for t in topics))
        owner = owner_of(principal)
        state = ClientState(tuple(unique), ref, owner).encode()
        try:
            entry = await self._stream.set_subscriptions(
                client_id, state, orjson.dumps({"client": client_id, "state": orjson.loads(state)}), owner)
        except ClientBound:
            raise Forbidden("This realtime client belongs to another principal") from None
        except REDIS_DOWN as exc:
            raise ServiceUnavailable("Realtime is unavailable: Redis does not answer") from exc
        if entry is None:
            raise NotFound("Realtime client not found; open GET /api/v1/realtime first")

    # --- the reader ------------------------------------------------------------------------------

    async def _read_forever(self) -> None:
        failing = False
        while True:
            try:
                entries = await self._stream.read(self._position, count=READ_COUNT, block_ms=self._block_ms)
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
                await self._check_history()
            if entries:
                await self._dispatch(entries)
                self._position = entries[-1].id

    async def _dispatch(self, entries: list[Entry]) -> None:
        with request_scope():
            for entry in entries:
                try:
                    await self._handle(entry)
                except Exception:
                    log.exception("realtime: entry %s could not be delivered", entry.id)
                await asyncio.sleep(0)  # the streams write and requests run between two entries

    async def _handle(self, entry: Entry) -> None:
        if entry.kind == RECORD:
            change_conns = self._index.get(_collection_of(entry.body))
            if change_conns:
                await self._fan_out(entry, list(change_conns), replaying=False)
            return
        if entry.kind == CONNECT:
            return
        if entry.kind == LOST:
            self._resync_all(entry)
            return
        body = orjson.loads(entry.body)
        conn = self.connections.get(str(body.get("client")))
        if conn is None:
            return
        if entry.kind == SUBSCRIPTIONS:
            self._apply_state(conn, orjson.dumps(body.get("state") or {}))
        elif entry.kind == TAKEOVER and body.get("conn") != conn.conn_id:
            conn.close("taken over")

    def _resync_all(self, entry: Entry) -> None:
        """A LOST entry: record events before it never reached the stream; every stream here resyncs."""
        log.warning("realtime: record events were lost before %s (Redis did not answer); streams resync", entry.id)
        for held in list(self.connections.values()):
            held.push(entry.order, _lost_message(held, entry))

    async def _fan_out(self, entry: Entry, conns: Iterable[Connection], *, replaying: bool) -> list[bytes]:
        """Deliver one record entry to `conns` (pushed to their queues; for a replay, returned)."""
        try:
            change = _Change.decode(entry.body)
            collection = await self._catalog.by_name(change.collection)
        except NotFound:
            return []
        except (ValueError, KeyError, TypeError):
            log.warning("realtime: unreadable entry %s skipped", entry.id)
            return []
        fanout = _Fanout(entry, change, collection, self._records)
        epoch = await self._session_epoch()
        now = self._clock()
        order = entry.order
        id_tail = b"%s\n" % entry.id.encode()
        out: list[bytes] = []
        for conn in conns:
            if conn.closed or (not replaying and conn.replay_from is not None and order <= conn.replayed_through):
                continue
            ref = conn.ref
            if ref is None:
                principal = None
            elif conn.refused or (ref.expires_at is not None and now >= ref.expires_at):
                continue
            elif epoch is not None and conn.checked_epoch == epoch:
                principal = conn.principal
            elif not await self._revalidate(conn, epoch):
                continue
            else:
                principal = conn.principal
            for subscription in conn.subscriptions:
                topic = subscription.topic
                if topic.collection != change.collection:
                    continue
                bound = subscription.bound
                if bound is None or bound.collection is not collection or bound.principal is not principal:
                    bound = subscription.bound = await self._bind(subscription.topic, collection, principal)
                message = fanout.ready_message(topic, bound)
                if message is LATER:
                    message = await fanout.message(topic, bound)
                if message is None:
                    continue
                assert isinstance(message, bytes)
                whole = conn.id_head + id_tail + message
                if replaying:
                    out.append(whole)
                else:
                    conn.push(order, whole)
        return out

    async def _revalidate(self, conn: Connection, epoch: str | None) -> bool:
        """Check `conn`'s credential again (the session epoch moved, or could not be read): its
        principal now, kept as checked under `epoch`; False (and no more events until a new POST)
        once the credential is no longer valid."""
        assert conn.ref is not None
        try:
            conn.principal = await self._authenticator.revalidate(conn.ref)
        except Unauthorized:
            conn.refused = True
            log.info("realtime client %s: its credential is no longer valid; events stop", client_tag(conn.client_id))
            return False
        conn.checked_epoch = epoch
        return True

    async def _bind(self, topic: Topic, collection: Collection, principal: Principal | None) -> _Bound:
        """`topic` bound to `collection`'s definition and `principal`: its rule's decision, filter query,
        expansion and rendering key (a topic that no longer fits the collection shows nothing)."""
        access = check(principal, collection, topic.action)
        try:
            condition = topic.condition(collection, principal)
            expansion = await resolve(self._catalog, collection, topic.view, principal)
        except CmsError:  # the collection changed since: the topic no longer fits it, it shows nothing
            access, condition, expansion = refused(principal, collection, topic.action), None, NOTHING
        render_key = "" if topic.view.full else orjson.dumps(
            [topic.view.parts(), expansion.key_parts()], default=repr, option=orjson.OPT_SORT_KEYS).decode()
        return _Bound(collection, principal, access, condition, expansion, topic.view, render_key)

    async def _check_history(self) -> None:
        """After Redis came back, or when this reader fell behind the trimming: when events this
        process had not read are gone, every stream here gets `resync`."""
        try:
            floor = await self._stream.floor()
        except Exception:
            return
        if floor is not None and entry_order(floor) <= entry_order(self._position):
            return
        position = await self._stream.last_id()
        if floor is not None and entry_order(floor) > entry_order(position):
            position = floor  # an emptied stream: nothing before the floor can be read again
        if self.connections:  # without streams here nobody missed anything: say nothing
            log.warning("realtime: events after %s are lost (Redis lost or trimmed them); streams resync",
                        self._position)
        for conn in list(self.connections.values()):
            conn.push(entry_order(position), sse_message("resync", event_id(conn.client_id, position),
                                                         {"reason": "events were lost"}))
        self._position = position

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(TOUCH_INTERVAL_S)
            try:
                await self._stream.touch(list(self.connections))
                while await self._stream.trim(int(self._clock().timestamp() * 1000)):
                    await asyncio.sleep(0)
                await self._check_history()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("realtime: housekeeping failed (%r)", exc)


def _lost_message(conn: Connection, entry: Entry) -> bytes:
    """The `resync` a LOST entry sends to `conn` (record events before it never reached the stream)."""
    return sse_message("resync", event_id(conn.client_id, entry.id), {"reason": "events were lost"})


def _order_or_none(entry_id: str | None) -> tuple[int, int] | None:
    if entry_id is None:
        return None
    try:
        return entry_order(entry_id.strip())
    except ValueError:
        return None


_COLLECTION = re.compile(rb'"n":"((?:[^"\\]|\\.)*)"')


def _collection_of(body: bytes) -> str:
    """The collection name of a RECORD entry's body, without decoding the rest (most entries go to
    no local subscriber)."""
    found = _COLLECTION.search(body)
    return "" if found is None else orjson.loads(b'"' + found.group(1) + b'"')
