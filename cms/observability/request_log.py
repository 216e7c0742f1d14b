"""The request log (issue 30, item 4): the last N answered requests of every replica, newest first, for
`/_/logs`.

`RequestLogBuffer` is a `Sink` holding this process's requests since the last flush (at most the
log's size); the recorder (cms.observability.recorder) writes them with `write` in its pipeline: LPUSH
onto one list per database (`keys.request_log`), LTRIM to the `request_log_size` setting, and the route
templates seen into a small sorted set (`keys.request_log_routes`, the page's route filter). An entry
holds the time, method, route template, status, duration, client IP and the caller's principal label:
never a path with ids, a query string or a body. A size of 0 turns the log off: nothing is held or
written, and the list is deleted.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from cms import redis_keys as keys
from cms.errors import ValidationFailed
from cms.observability.signals import RequestSample, Sink

DEFAULT_SIZE = 1_000
"""The default of the `request_log_size` setting."""
MAX_SIZE = 100_000
"""The highest `request_log_size` (entries kept across replicas)."""
PER_PAGE = 50
"""Entries one page of `/_/logs` shows."""
SCAN_CHUNK = 1_000
"""Entries read from Redis at a time while filtering (each read is one LRANGE)."""
MAX_ROUTES = 200
"""Route templates remembered for the route filter (the most recently seen)."""
LOG_TTL_S = 7 * 24 * 3600
"""The log and its routes expire this long (seconds) after their last write (a database no longer served)."""
READ_TIMEOUT_S = 5.0
"""How long reading one page may take, in seconds (TimeoutError past it)."""
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
MAX_ROUTE_LENGTH = 200
ROUTE_TEXT = re.compile(r"[A-Za-z0-9_/{}.:*+\-]+")
"""What a route filter may be: a route template's characters (`/api/v1/collections/{name}`, `unmatched`)."""


@dataclass(frozen=True)
class LogEntry:
    """One logged request: `at_s` epoch seconds, `duration_ms` milliseconds, `principal` the caller's label
    (`admin:<user id>`, ...) or None for an anonymous one."""

    at_s: float
    method: str
    route: str
    status: int
    duration_ms: float
    client_ip: str
    principal: str | None


@dataclass(frozen=True)
class LogPage:
    """One page of the log, newest first: `entries` (at most PER_PAGE), `page` (1-based), `has_next`."""

    entries: list[LogEntry]
    page: int
    has_next: bool


def encode(sample: RequestSample) -> str:
    """The stored form of `sample`: compact JSON of LogEntry's fields (duration in ms, 0.1 ms precision)."""
    return json.dumps({"at": round(sample.at, 3), "method": sample.method, "route": sample.route,
                       "status": sample.status, "ms": round(sample.duration_s * 1000, 1),
                       "ip": sample.client_ip, "user": sample.principal}, separators=(",", ":"))


def decode(raw: bytes | str) -> LogEntry | None:
    """The entry stored as `raw` (see `encode`), or None when it is not one."""
    try:
        data: Any = json.loads(raw)
        return LogEntry(at_s=float(data["at"]), method=str(data["method"]), route=str(data["route"]),
                        status=int(data["status"]), duration_ms=float(data["ms"]), client_ip=str(data["ip"]),
                        principal=None if data["user"] is None else str(data["user"]))
    except (ValueError, KeyError, TypeError):
        return None


def parse_status_class(raw: str | None) -> str | None:
    """A `?status=` filter: None (empty: any) or one of STATUS_CLASSES. Raises ValidationFailed."""
    if not raw:
        return None
    if raw not in STATUS_CLASSES:
        raise ValidationFailed("Unknown status class",
                               errors={"status": [f"Must be one of {', '.join(STATUS_CLASSES)}."]})
    return raw


def parse_route(raw: str | None) -> str | None:
    """A `?route=` filter: None (empty: any) or a route template (ROUTE_TEXT, at most MAX_ROUTE_LENGTH
    characters). Raises ValidationFailed."""
    if not raw:
        return None
    if len(raw) > MAX_ROUTE_LENGTH or not ROUTE_TEXT.fullmatch(raw):
        raise ValidationFailed("Not a route template",
                               errors={"route": [f"A route template of at most {MAX_ROUTE_LENGTH} characters."]})
    return raw


def matches(entry: LogEntry, status_class: str | None, route: str | None) -> bool:
    """Whether `entry` passes the filters (None: any)."""
    if status_class is not None and f"{entry.status // 100}xx" != status_class:
        return False
    return route is None or entry.route == route


class RequestLogBuffer(Sink):
    """This process's requests since the last flush, oldest first, at most `size` (the setting; older
    ones are dropped); none at size 0. `resize` follows the setting."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._samples: deque[RequestSample] = deque(maxlen=max(size, 1))

    def resize(self, size: int) -> None:
        """Follow a new `request_log_size` (0..MAX_SIZE); held samples beyond it are dropped."""
        if size != self.size:
            self.size = size
            self._samples = deque(self._samples if size else (), maxlen=max(size, 1))

    def request(self, sample: RequestSample) -> None:
        """Hold `sample` for the next flush (not at size 0)."""
        if self.size:
            self._samples.append(sample)

    def drain(self) -> list[RequestSample]:
        """The held samples, oldest first, which are cleared."""
        samples = list(self._samples)
        self._samples.clear()
        return samples


def write(pipe: Pipeline, db: str, samples: Sequence[RequestSample], size: int) -> None:
    """Queue on `pipe` the commands that add `samples` (oldest first) to database `db`'s log, keep its
    newest `size` entries and remember their routes; size 0 deletes the log instead."""
    log_key, routes_key = keys.request_log(db), keys.request_log_routes(db)
    if size <= 0:
        pipe.delete(log_key)
        return
    if not samples:
        return
    pipe.lpush(log_key, *(encode(s) for s in samples[-size:]))  # the last pushed is the head: newest first
    pipe.ltrim(log_key, 0, size - 1)
    pipe.expire(log_key, LOG_TTL_S)
    pipe.zadd(routes_key, {s.route: round(s.at, 3) for s in samples})
    pipe.zremrangebyrank(routes_key, 0, -(MAX_ROUTES + 1))
    pipe.expire(routes_key, LOG_TTL_S)


async def read_page(redis: Redis, db: str, *, size: int, status_class: str | None = None, route: str | None = None,
                    page: int = 1, per_page: int = PER_PAGE) -> LogPage:
    """Page `page` (1-based) of database `db`'s log, newest first, of the entries that match the filters
    (see `matches`), looking at the newest `size` entries (the setting) in chunks of SCAN_CHUNK. Raises
    redis errors, or TimeoutError after READ_TIMEOUT_S."""
    return await asyncio.wait_for(_read_page(redis, db, size, status_class, route, page, per_page), READ_TIMEOUT_S)


async def _read_page(redis: Redis, db: str, size: int, status_class: str | None, route: str | None,
                     page: int, per_page: int) -> LogPage:
    skip = (page - 1) * per_page
    found: list[LogEntry] = []
    start = 0
    while start < size and len(found) <= per_page:
        reading = redis.lrange(keys.request_log(db), start, min(start + SCAN_CHUNK, size) - 1)
        chunk = await cast(Awaitable[list[Any]], reading)
        for raw in chunk:
            entry = decode(raw)
            if entry is None or not matches(entry, status_class, route):
                continue
            if skip:
                skip -= 1
            else:
                found.append(entry)
                if len(found) > per_page:
                    break
        if len(chunk) < SCAN_CHUNK:
            break
        start += SCAN_CHUNK
    return LogPage(entries=found[:per_page], page=page, has_next=len(found) > per_page)


async def routes_seen(redis: Redis, db: str) -> list[str]:
    """The route templates of database `db`'s log (at most MAX_ROUTES), sorted. Raises redis errors."""
    names: list[Any] = await asyncio.wait_for(redis.zrange(keys.request_log_routes(db), 0, -1), READ_TIMEOUT_S)
    return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names)
