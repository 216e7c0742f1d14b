"""The result-set cache (issue 31, item 1): the ordered ids of a list query's whole result, in Redis
next to the read cache's answers and under the same stamp, so every page of the query is a slice of
them plus one `_id $in` look-up, and its `total` is their count.

An entry is one Redis string, `keys.read_cache_entry(prefix, entry_key(collection, "ids", ...))`:
a HEADER_BYTES header (`<stamp>|<kind>|<width>|`, space-padded; the stamp is the collection's
`<epoch>.<version>` of `ReadCache.lookup`) and the ids, each in `width` bytes: kind `u` (every id is
a canonical UUID: its 16 bytes) or `s` (UTF-8, NUL-padded to the longest, at most MAX_ID_BYTES);
kind `x` (no ids) says the result has more than RESULT_SET_MAX_IDS ids. A page reads only its slice
(`GETRANGE`), so serving page 1,000 moves 30 ids, not the list.

Exactness is the read cache's: an entry is used only while its stamp is current (any record write to
the collection bumps its version; a collection change or restore bumps the epoch). The id list does
not depend on `expand` or `fields`, so the related collections' versions are not part of its stamp
(the answers built from it keep them).

Memory is bounded per collection: `keys.read_cache_ids(prefix, collection)` is a hash naming the
collection's entries of one stamp and their sizes; one Lua script stores an entry only while they stay
within RESULT_SET_MAX_BYTES, and the first store under a new stamp deletes the entries of the old one.
Entries also expire after the read cache's TTL. Redis failures never fail a read: the slice is a miss
and the store is skipped (logged at most once a minute).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.services.caching.counters import REDIS_TIMEOUT_S, FailOpen

log = logging.getLogger("cms.read_cache")

RESULT_SET_MAX_IDS = 100_000
"""Most ids one result set keeps; a larger result is paged by the database (`skip` and `limit`, and a
count), and its entry says so (kind `x`) so the next request goes there at once."""
RESULT_SET_MAX_BYTES = 8 * 1024 * 1024
"""Most bytes of result sets one collection keeps in Redis (about 500,000 UUID ids); a result set that
would pass it is used for the request that computed it and not kept."""
MAX_ID_BYTES = 64
"""Longest record id (UTF-8 bytes) a result set keeps in its `s` form; a result with a longer one, or
with an id that is not a string, is not kept."""
HEADER_BYTES = 64
"""Size of an entry's header (`<stamp>|<kind>|<width>|`, space-padded)."""
UUID_BYTES = 16

_UUIDS = re.compile(r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})*")

# KEYS: the collection's index hash, the entry. ARGV: stamp, entry value, TTL (s), byte bound,
# '1' for a marker (kind `x`: stored whatever the bound, it is one header).
_STORE = """
if redis.call('HGET', KEYS[1], '.stamp') ~= ARGV[1] then
  for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(name, 1, 1) ~= '.' then redis.call('DEL', name) end
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], '.stamp', ARGV[1], '.bytes', 0)
end
local size = string.len(ARGV[2])
local used = tonumber(redis.call('HGET', KEYS[1], '.bytes')) - (tonumber(redis.call('HGET', KEYS[1], KEYS[2])) or 0)
if ARGV[5] ~= '1' and used + size > tonumber(ARGV[4]) then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('HSET', KEYS[1], KEYS[2], size, '.bytes', used + size)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


@dataclass(frozen=True)
class IdSlice:
    """A slice of a cached result set: `ids` (the requested positions, in order; fewer past the end)
    and `total` (how many ids the whole result has)."""

    ids: list[str]
    total: int


OVER_BOUND = IdSlice([], -1)
"""What `ResultSetCache.slice` returns for a result known to have more than RESULT_SET_MAX_IDS ids."""


def base_stamp(stamp: str) -> str:
    """The collection's own part `<epoch>.<version>` of a read cache stamp (which may go on with the
    versions of expanded collections)."""
    return ".".join(stamp.split(".", 2)[:2])


def pack(stamp: str, ids: Sequence[Any] | None) -> bytes | None:
    """An entry's value: the header for `stamp` and `ids` packed (see the module docstring); `ids`
    None packs the over-the-bound marker. None when the ids cannot be kept (not strings, longer than
    MAX_ID_BYTES, holding a NUL) or the stamp does not fit the header."""
    if ids is None:
        return _header(stamp, "x", 0)
    if not all(isinstance(i, str) for i in ids):
        return None
    joined = "".join(ids)
    if len(joined) == 36 * len(ids) and _UUIDS.fullmatch(joined):
        header = _header(stamp, "u", UUID_BYTES)
        return None if header is None else header + bytes.fromhex(joined.replace("-", ""))
    encoded = [i.encode() for i in ids]
    width = max((len(e) for e in encoded), default=1)
    header = _header(stamp, "s", width)
    if header is None or width > MAX_ID_BYTES or "\0" in joined:
        return None
    return header + b"".join(e.ljust(width, b"\0") for e in encoded)


def _header(stamp: str, kind: str, width: int) -> bytes | None:
    text = f"{stamp}|{kind}|{width}|".encode()
    return text.ljust(HEADER_BYTES) if len(text) <= HEADER_BYTES else None


def _unpack(kind: str, width: int, data: bytes) -> list[str]:
    chunks = [data[i:i + width] for i in range(0, len(data) - width + 1, width)]
    if kind == "u":
        return [f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}" for h in (c.hex() for c in chunks)]
    return [c.rstrip(b"\0").decode() for c in chunks]


class ResultSetCache:
    """Result sets in Redis (see the module docstring), beside the read cache under `prefix`
    (`keys.read_cache_prefix`), kept `ttl_s` seconds at most. `switch()` is the read cache's
    (`read_cache_enabled`): while it says False, nothing is read or kept."""

    def __init__(self, redis: Redis, *, prefix: str, ttl_s: int,
                 switch: Callable[[], Awaitable[bool]] | None = None, max_bytes: int = RESULT_SET_MAX_BYTES) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._switch = switch
        self._max_bytes = max_bytes
        self._store_script = redis.register_script(_STORE)
        self._failures = FailOpen(log, "result-set cache %s failed (lists are paged by the database): %r")

    async def enabled(self) -> bool:
        """Whether result sets are read and kept now (the read cache's switch)."""
        return self._switch is None or await self._switch()

    async def slice(self, key: str, stamp: str, start: int, stop: int) -> IdSlice | None:
        """Positions `start` to `stop` (0-based, `stop` excluded) of the result set under `key` if it
        was computed under `stamp` (`base_stamp`), and its length; OVER_BOUND for a result known to be
        over RESULT_SET_MAX_IDS; None on a miss or when Redis failed. One round trip (two for ids
        that are not UUIDs)."""
        name = keys.read_cache_entry(self._prefix, key)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                # three short commands sent together (on the pipelined connection, cms.redis_pipe)
                header, data, length = await asyncio.gather(
                    self._redis.getrange(name, 0, HEADER_BYTES - 1),
                    self._redis.getrange(name, HEADER_BYTES + start * UUID_BYTES, HEADER_BYTES + stop * UUID_BYTES - 1),
                    self._redis.strlen(name))
                parts = bytes(header).decode().split("|")
                if len(parts) != 4 or parts[0] != stamp:
                    return None
                kind, width = parts[1], int(parts[2])
                if kind == "x":
                    return OVER_BOUND
                if width != UUID_BYTES:
                    data = await self._redis.getrange(name, HEADER_BYTES + start * width,
                                                      HEADER_BYTES + stop * width - 1)
        except Exception as exc:  # the database still answers: never fail a read on the cache
            self._failures.failed("read", exc)
            return None
        return IdSlice(_unpack(kind, width, bytes(data)), (int(length) - HEADER_BYTES) // width)

    async def store(self, collection: str, key: str, stamp: str, ids: Sequence[Any] | None) -> bool:
        """Keep `ids` (None: the over-the-bound marker) under `key` for `stamp` (`base_stamp`), within
        the collection's RESULT_SET_MAX_BYTES. Returns whether it was kept (False: not packable,
        over the bound, switched off, or Redis failed; the failure is logged)."""
        value = pack(stamp, ids)
        if value is None or not await self.enabled():
            return False
        index = keys.read_cache_ids(self._prefix, collection)
        entry = keys.read_cache_entry(self._prefix, key)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                kept = await self._store_script(keys=[index, entry], args=[
                    stamp, value, self._ttl_s, self._max_bytes, "1" if ids is None else "0"])
        except Exception as exc:
            self._failures.failed("write", exc)
            return False
        return bool(kept)
