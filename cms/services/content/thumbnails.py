"""Thumbnails of images (decisions.md, Files in records, thumbnails and file tokens): made once,
whatever the number of concurrent requests and replicas, kept in GridFS, deleted with their file.

`Thumbnails.get(file, size, fmt)` answers the bytes of one thumbnail, looking in this order:

1. this process's memory (`MEMORY_CACHE_BYTES` of the thumbnails served last; a thumbnail never
   changes: its id names its file, size and format, and a file's bytes never change);
2. GridFS (`<file id>.<size>.<format>`, `FileRepository.read_thumb`);
3. else it is made, by one caller only: concurrent callers of one process share one flight
   (`SingleFlight`), and across replicas the maker holds a Redis lock (`SET NX PX`,
   `redis_keys.thumbnail_lock`, THUMB_LOCK_TTL_S); the others poll the lock (every THUMB_POLL_S)
   until it is released, then read GridFS. The maker reads the source, runs
   `imaging.make_thumbnail` in an image worker (`ImagePool`), stores the result and releases the
   lock. A lock whose holder died expires; a waiter then takes it. Redis not answering: the thumbnail
   is made here without the lock (still once per process).

An image that cannot be made into a thumbnail (Pillow cannot read it) answers None, remembered for
this process (`FAILED_KEPT` ids), and the caller serves the original file.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict

from redis.asyncio import Redis
from redis.exceptions import RedisError

from cms import redis_keys as keys
from cms.clock import Clock, utcnow
from cms.errors import ServiceUnavailable
from cms.models import StoredFile
from cms.observability.signals import Signals
from cms.services.caching.single_flight import SingleFlight
from cms.services.content import imaging
from cms.services.content.file_fields import ThumbSize
from cms.services.content.image_pool import IMAGE_JOB_TIMEOUT_S, ImagePool
from cms.store.files import FileRepository

log = logging.getLogger("cms.files")

THUMB_LOCK_TTL_S = IMAGE_JOB_TIMEOUT_S + 15.0
"""Seconds the maker's lock lives: past the image job's time-out, so it outlives any one making."""
THUMB_WAIT_S = THUMB_LOCK_TTL_S + 5.0
"""Seconds a waiter waits for another replica's thumbnail before answering 503."""
THUMB_POLL_S = 0.02
"""Seconds between a waiter's looks at the lock."""
MEMORY_CACHE_BYTES = 32 * 2**20
"""Bytes of thumbnails one process keeps in memory."""
MEMORY_ITEM_MAX_BYTES = 1 * 2**20
"""A thumbnail larger than this is not kept in memory."""
FAILED_KEPT = 1024
"""Thumbnail ids this process remembers as impossible to make."""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def thumb_id(file_id: str, size: ThumbSize, fmt: str) -> str:
    """The GridFS id of a thumbnail: `<file id>.<size>.<format>`."""
    return f"{file_id}.{size.spec}.{fmt}"


class _MemoryCache:
    """The thumbnails served last, at most `max_bytes` in all (least recently used go first)."""

    def __init__(self, max_bytes: int) -> None:
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max_bytes

    def get(self, key: str) -> bytes | None:
        data = self._items.get(key)
        if data is not None:
            self._items.move_to_end(key)
        return data

    def put(self, key: str, data: bytes) -> None:
        if len(data) > MEMORY_ITEM_MAX_BYTES or key in self._items:
            return
        self._items[key] = data
        self._bytes += len(data)
        while self._bytes > self._max_bytes:
            _, dropped = self._items.popitem(last=False)
            self._bytes -= len(dropped)


class Thumbnails:
    """Thumbnails of one database (module docstring): GridFS through `files`, image work in `pool`,
    the makers' locks on `redis` under `keys.thumbnail_lock(db, ...)`; `signals` hears every answer."""

    def __init__(self, files: FileRepository, pool: ImagePool, redis: Redis, db: str, *,
                 signals: Signals | None = None, clock: Clock = utcnow,
                 memory_bytes: int = MEMORY_CACHE_BYTES) -> None:
        self._files = files
        self._pool = pool
        self._redis = redis
        self._db = db
        self._signals = signals or Signals()
        self._clock = clock
        self._memory = _MemoryCache(memory_bytes)
        self._flights = SingleFlight()
        self._failed: OrderedDict[str, None] = OrderedDict()
        self._release = redis.register_script(_RELEASE)

    async def get(self, file: StoredFile, size: ThumbSize, fmt: str) -> bytes | None:
        """The thumbnail of the image `file` at `size` as `fmt` (an `imaging.FORMATS` key), or None
        when it cannot be made (Pillow cannot read the image). Raises ServiceUnavailable (another
        replica's making took past THUMB_WAIT_S, or the image workers are busy)."""
        key = thumb_id(file.id, size, fmt)
        data = self._memory.get(key)
        if data is not None:
            self._signals.thumbnail("memory", 0.0)
            return data
        if key in self._failed:
            return None
        made = await self._flights.run(key, lambda: self._obtain(file, size, fmt, key))
        if made is None:
            self._failed[key] = None
            if len(self._failed) > FAILED_KEPT:
                self._failed.popitem(last=False)
        else:
            self._memory.put(key, made)
        return made

    async def _obtain(self, file: StoredFile, size: ThumbSize, fmt: str, key: str) -> bytes | None:
        """GridFS, else made under the lock, else waited for (module docstring, steps 2 and 3)."""
        lock_key = keys.thumbnail_lock(self._db, key)
        deadline = time.monotonic() + THUMB_WAIT_S
        while True:
            data = await self._stored(key)
            if data is not None:
                return data
            holder = secrets.token_hex(16)
            try:
                taken = bool(await self._redis.set(lock_key, holder, nx=True, px=int(THUMB_LOCK_TTL_S * 1000)))
            except RedisError as exc:
                log.warning("thumbnail %s made without its lock: Redis does not answer (%r)", key, exc)
                return await self._make(file, size, fmt, key)
            if taken:
                try:
                    data = await self._stored(key)  # stored between the look above and the lock
                    return data if data is not None else await self._make(file, size, fmt, key)
                finally:
                    await self._unlock(lock_key, holder)
            await self._wait_released(lock_key, deadline)

    async def _stored(self, key: str) -> bytes | None:
        data = await self._files.read_thumb(key)
        if data is not None:
            self._signals.thumbnail("stored", 0.0)
        return data

    async def _make(self, file: StoredFile, size: ThumbSize, fmt: str, key: str) -> bytes | None:
        """Read the source, make the thumbnail in a worker, store it; None when Pillow cannot read
        the source (or it is gone). A thumbnail whose file was deleted meanwhile is deleted again."""
        started = time.monotonic()
        source = await self._files.read_all(file.id, file.size)
        if source is None:
            return None
        try:
            data = await self._pool.run(imaging.make_thumbnail, source, size.width, size.height, size.mode, fmt)
        except imaging.ImageRefused as exc:
            log.info("no thumbnail %s: %s", key, exc.reason)
            return None
        await self._files.store_thumb(key, file, imaging.MEDIA_TYPES[fmt], data, self._clock())
        if await self._files.get(file.id) is None:
            await self._files.delete(key)
        self._signals.thumbnail("generated", time.monotonic() - started)
        return data

    async def _unlock(self, lock_key: str, holder: str) -> None:
        try:
            await self._release(keys=[lock_key], args=[holder])
        except RedisError as exc:
            log.warning("could not release the thumbnail lock %s (it expires by itself): %r", lock_key, exc)

    async def _wait_released(self, lock_key: str, deadline: float) -> None:
        """Wait until the lock `lock_key` is gone. Raises ServiceUnavailable past `deadline`."""
        while True:
            try:
                if not await self._redis.exists(lock_key):
                    return
            except RedisError:
                return  # look in GridFS again, then make it without the lock
            if time.monotonic() >= deadline:
                raise ServiceUnavailable("The thumbnail is still being made; retry shortly")
            await asyncio.sleep(THUMB_POLL_S)
