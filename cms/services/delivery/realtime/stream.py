"""The realtime event stream: one Redis Stream per database that every replica appends to and reads
(decisions.md, Realtime; issue 27, item 2). Its entry ids are the SSE event ids.

Entries are of five kinds, each a JSON body: RECORD (a record event, appended by the bus subscriber of
every process after the write committed and before it is answered), CONNECT (a new client),
SUBSCRIPTIONS (a client's new subscription set), TAKEOVER (a resumed client's new stream) and LOST
(record events of some process could not be appended while Redis did not answer: appended by that
process as soon as Redis answers again, it tells every stream the entry reaches, live or replayed, to
`resync`). Control
entries travel in the same stream as record events so that every replica applies a client's new
subscriptions, or closes its old stream, exactly between the writes before and after it.

Client state (`keys.realtime_client`) lives in Redis beside the stream, so a subscription POST or a
resume may reach any replica: every change of it and its control entry are written by one Lua script
(atomic). Record events are appended only while a client connected within the last CLIENT_TTL_S
(`keys.realtime_active`, set with every connect, resume and keep-alive): no client could resume from
before that. The floor (`keys.realtime_floor`) is the id above which the history is complete; trimming
(`trim`) raises it, and a Redis that lost its data has none (a resume from before it gets `resync`).

Retention: entries go only when older than RETENTION_S and beyond the newest RETENTION_EVENTS, or
beyond MAX_STREAM_EVENTS whatever their age (a memory bound; the floor then says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cms import redis_keys as keys

RECORD, CONNECT, SUBSCRIPTIONS, TAKEOVER, LOST = "r", "c", "s", "t", "l"
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError, TimeoutError)
"""What a call of the stream raises when Redis does not answer (redis-py's errors are not the builtins)."""
RETENTION_S = 600
"""Entries younger than this many seconds are never trimmed (decisions.md: at least 10 minutes)."""
RETENTION_EVENTS = 100_000
"""The newest this many entries are never trimmed (decisions.md: at least 100,000 events)."""
MAX_STREAM_EVENTS = 1_000_000
"""Beyond this many entries the oldest go whatever their age (Redis memory bound)."""
CLIENT_TTL_S = 600
"""A client not reconnected within this many seconds of its last stream is forgotten."""
TRIM_STEP = 10_000
"""Entries one trim call looks at (one Lua call must stay short: Redis runs nothing else meanwhile)."""

_APPEND = """
if (ARGV[1] == 'r' or ARGV[1] == 'l') and redis.call('EXISTS', KEYS[3]) == 0 then return {} end
local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'k', ARGV[1], 'b', ARGV[i])
end
redis.call('SET', KEYS[2], ids[1], 'NX')
return ids
"""
_CONNECT = """
redis.call('SET', KEYS[3], ARGV[2], 'EX', ARGV[1])
redis.call('SET', KEYS[4], '1', 'EX', ARGV[1])
local id = redis.call('XADD', KEYS[1], '*', 'k', 'c', 'b', ARGV[3])
redis.call('SET', KEYS[2], id, 'NX')
return id
"""
_OWNER = """
local function refuses(state, owner)
  local ok, decoded = pcall(cjson.decode, state)
  if not ok or type(decoded) ~= 'table' then return true end
  local bound = decoded['owner']
  return type(bound) == 'string' and bound ~= owner
end
"""
"""Lua: whether a client of `state` refuses `owner` ('' for anonymous): it is bound to another owner, or
its state is unreadable (client_state.ClientState)."""
_TAKEOVER = _OWNER + """
local state = redis.call('GET', KEYS[3])
if not state then return false end
if ARGV[3] == '1' and refuses(state, ARGV[4]) then return -1 end
redis.call('EXPIRE', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], '1', 'EX', ARGV[1])
local id = redis.call('XADD', KEYS[1], '*', 'k', 't', 'b', ARGV[2])
redis.call('SET', KEYS[2], id, 'NX')
return {state, id, redis.call('GET', KEYS[2])}
"""
_SUBSCRIBE = _OWNER + """
local state = redis.call('GET', KEYS[3])
if not state then return false end
if refuses(state, ARGV[3]) then return -1 end
redis.call('SET', KEYS[3], ARGV[1], 'KEEPTTL')
local id = redis.call('XADD', KEYS[1], '*', 'k', 's', 'b', ARGV[2])
redis.call('SET', KEYS[2], id, 'NX')
return id
"""
_TRIM = """
local len = redis.call('XLEN', KEYS[1])
local over = len - tonumber(ARGV[1])
if over <= 0 then return 0 end
local hard = len - tonumber(ARGV[3])
local entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', math.min(over, tonumber(ARGV[4])))
local last = nil
local count = 0
for i, e in ipairs(entries) do
  local ms = tonumber(string.match(e[1], '^(%d+)'))
  if i <= hard or ms < tonumber(ARGV[2]) then last = e[1]; count = i else break end
end
if not last then return 0 end
local ms, seq = string.match(last, '^(%d+)-(%d+)$')
redis.call('XTRIM', KEYS[1], 'MINID', ms .. '-' .. string.format('%d', tonumber(seq) + 1))
redis.call('SET', KEYS[2], last)
return count
"""


class ClientBound(Exception):
    """The client is bound to another owner (client_state): a POST or a credentialed resume that changes nothing."""


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (`<ms>-<seq>`) as a pair that sorts as Redis orders them. Raises ValueError
    for anything else."""
    ms, _, seq = entry_id.partition("-")
    if not ms.isdigit() or not seq.isdigit() or len(entry_id) > 41:
        raise ValueError(f"not a stream id: {entry_id[:50]!r}")
    return int(ms), int(seq)


@dataclass(frozen=True)
class Entry:
    """One stream entry: `id` (`<ms>-<seq>`), `kind` (RECORD, CONNECT, SUBSCRIPTIONS, TAKEOVER, LOST) and
    its JSON `body` (bytes)."""

    id: str
    kind: str
    body: bytes

    @property
    def order(self) -> tuple[int, int]:
        """`entry_order(id)`."""
        return entry_order(self.id)


class EventStream:
    """The stream, the floor and the client states of database `db` on `redis` (module docstring)."""

    def __init__(self, redis: Redis, db: str) -> None:
        self._redis = redis
        self._db = db
        self._stream = keys.realtime_stream(db)
        self._floor = keys.realtime_floor(db)
        self._active = keys.realtime_active(db)
        self._append = redis.register_script(_APPEND)
        self._connect = redis.register_script(_CONNECT)
        self._takeover = redis.register_script(_TAKEOVER)
        self._subscribe = redis.register_script(_SUBSCRIBE)
        self._trim = redis.register_script(_TRIM)
        self._lost = False
        """Whether record events of this process were not appended (Redis did not answer) and no LOST
        entry says so yet."""

    def _client(self, client_id: str) -> str:
        return keys.realtime_client(self._db, client_id)

    async def append(self, kind: str, bodies: list[bytes]) -> list[str]:
        """Append one entry of `kind` per body, in order, in one round trip; returns their ids. RECORD
        entries are appended only while realtime is in use (`keys.realtime_active`: a client connected
        within CLIENT_TTL_S), so a deployment without realtime clients keeps no history in Redis."""
        if not bodies:
            return []
        try:
            if kind == RECORD:
                await self.report_lost()
            ids = await self._append(keys=[self._stream, self._floor, self._active], args=[kind, *bodies])
        except REDIS_DOWN:
            self._lost = self._lost or kind == RECORD
            raise
        return [_text(i) for i in ids]

    async def report_lost(self) -> None:
        """If record events of this process could not be appended since the last call, append one LOST
        entry (only while realtime is in use, as RECORD entries). Called before the next RECORD append
        and by the hub's reader once Redis answers again; raises while Redis does not answer."""
        if self._lost:
            await self._append(keys=[self._stream, self._floor, self._active], args=[LOST, b"{}"])
            self._lost = False

    async def connect(self, client_id: str, state: bytes) -> str:
        """Store a new client's `state` (forgotten CLIENT_TTL_S later unless touched) and append its
        CONNECT entry; returns the entry id (the stream position the client starts at)."""
        entry = await self._connect(keys=[self._stream, self._floor, self._client(client_id), self._active],
                                    args=[CLIENT_TTL_S, state, client_id.encode()])
        return _text(entry)

    async def take_over(self, client_id: str, body: bytes,
                        presenter: str | None) -> tuple[bytes, str, str | None] | None:
        """Resume `client_id`: refresh its state's life and append a TAKEOVER entry (`body`) that closes
        its older streams on every replica. Returns (its state, the entry id, the floor: None when
        history is unknown), or None for a forgotten client. `presenter` is the owner of the resume's
        credentials (None: it carried none, and may resume any client); raises ClientBound, having
        changed nothing, when the client is bound to another owner."""
        answer = await self._takeover(keys=[self._stream, self._floor, self._client(client_id), self._active],
                                      args=[CLIENT_TTL_S, body, "0" if presenter is None else "1", presenter or ""])
        if answer == -1:
            raise ClientBound()
        if not answer:
            return None
        state, entry, floor = answer
        return bytes(state), _text(entry), None if floor is None else _text(floor)

    async def set_subscriptions(self, client_id: str, state: bytes, body: bytes, owner: str | None) -> str | None:
        """Replace a known client's `state` and append its SUBSCRIPTIONS entry (`body`); returns the
        entry id, or None for a client that is not known (never connected, or forgotten). `owner` is the
        POST's (None: anonymous); raises ClientBound, having changed nothing, when the client is bound
        to another owner."""
        entry = await self._subscribe(keys=[self._stream, self._floor, self._client(client_id)],
                                      args=[state, body, owner or ""])
        if entry == -1:
            raise ClientBound()
        return None if not entry else _text(entry)

    async def refuses(self, client_id: str, owner: str) -> bool:
        """Whether client `client_id` is bound to an owner other than `owner` (the check the scripts
        make, read-only: a resume asks before it touches this process's streams)."""
        state = await self._redis.get(self._client(client_id))
        if state is None:
            return False
        try:
            bound = orjson.loads(state).get("owner")
        except (ValueError, AttributeError):
            return True
        return isinstance(bound, str) and bound != owner

    async def touch(self, client_ids: list[str]) -> None:
        """Keep the states of `client_ids` for CLIENT_TTL_S more seconds (one round trip)."""
        if not client_ids:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for client_id in client_ids:
                pipe.expire(self._client(client_id), CLIENT_TTL_S)
            pipe.set(self._active, b"1", ex=CLIENT_TTL_S)
            await pipe.execute()

    async def activate(self) -> None:
        """Mark realtime as in use for CLIENT_TTL_S: record events are appended from now on."""
        await self._redis.set(self._active, b"1", ex=CLIENT_TTL_S)

    async def last_id(self) -> str:
        """The id of the newest entry ("0-0" for an empty or missing stream)."""
        newest = await self._redis.xrevrange(self._stream, count=1)
        return _text(newest[0][0]) if newest else "0-0"

    async def read(self, after: str, *, count: int, block_ms: int) -> list[Entry]:
        """Up to `count` entries after `after`, waiting up to `block_ms` milliseconds for one."""
        answer = await self._redis.xread({self._stream: after}, count=count, block=block_ms)
        return [_entry(item) for _, items in answer for item in items] if answer else []

    async def range(self, after: str, *, count: int) -> list[Entry]:
        """Up to `count` entries after `after` (exclusive), oldest first, without waiting."""
        return [_entry(item) for item in await self._redis.xrange(self._stream, min=f"({after}", count=count)]

    async def floor(self) -> str | None:
        """The id above which the history is complete; None when unknown (a Redis without it)."""
        value = await self._redis.get(self._floor)
        return None if value is None else _text(value)

    async def trim(self, now_ms: int) -> int:
        """Drop entries past the retention (module docstring), at most TRIM_STEP; returns how many."""
        dropped = await self._trim(keys=[self._stream, self._floor],
                                   args=[RETENTION_EVENTS, now_ms - RETENTION_S * 1000, MAX_STREAM_EVENTS, TRIM_STEP])
        return int(dropped)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(item: Any) -> Entry:
    entry_id, values = item
    return Entry(_text(entry_id), _text(values.get(b"k", b"")), bytes(values.get(b"b", b"")))
