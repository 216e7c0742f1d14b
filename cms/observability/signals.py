"""Signals: the one place where the service says what it did, for every sink that records it.

Call sites (the request frame, the read, definition and session caches, the webhook outbox's
delivery step, the rate limits, the realtime hub, the MongoDB driver's command monitoring, the slow
query watch) report
facts through the process's `Signals` (`Services.signals`, made with the process's clients in
`cms.infra`); sinks (Prometheus metrics, the dashboard's per-minute counters in Redis, the request
log) subscribe with `Signals.add`. A call site never knows which sinks exist, and a sink that fails
never fails the request: its exception is logged once per sink and signal name, and swallowed.

Signals are synchronous and cheap: a sink that must do I/O (Redis) buffers and flushes from its
own task. With no sink added, a signal costs one empty loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("cms.observability")

UNMATCHED_ROUTE = "unmatched"
"""The route label of a request that matched no route (decisions.md, Metrics)."""


@dataclass(frozen=True, slots=True)
class RequestSample:
    """One answered request.

    `route` is the route template (`/api/v1/collections/{name}/records`, never a path with ids or
    a query string; `UNMATCHED_ROUTE` when none matched); `duration_s` the handling time in seconds
    (to the handler's answer; a stream's whole life for SSE); `at` the wall-clock time it was
    answered (epoch seconds); `client_ip` as the rate limits see it (TRUSTED_PROXIES honoured);
    `principal` a short non-secret description of the caller (`admin:<user id>`,
    `<collection>:<user id>`, `api_key:<user id>`) or None for an anonymous one."""

    at: float
    method: str
    route: str
    status: int
    duration_s: float
    client_ip: str
    principal: str | None


class Sink:
    """A recorder of signals. Every method is a no-op here; a sink overrides those it records.
    Methods run on the caller's path (the event loop): they must not block or await."""

    def request(self, sample: RequestSample) -> None:
        """A request was answered."""

    def cache(self, cache: str, hit: bool) -> None:
        """A look-up in the cache named `cache` (`read`, `definition`, `session`) hit or missed."""

    def delivery(self, outcome: str, duration_s: float) -> None:
        """A webhook delivery attempt ended with `outcome` (`delivered`, `failed`, `retrying`, ...)
        after `duration_s` seconds."""

    def rate_limited(self, limit: str) -> None:
        """A request was refused by the rate limit named `limit`."""

    def realtime_sent(self, events: int) -> None:
        """`events` realtime events were written to subscribers' streams."""

    def realtime_connections(self, count: int) -> None:
        """This process now holds `count` realtime streams (reported by the hub on every change)."""

    def thumbnail(self, outcome: str, duration_s: float) -> None:
        """A thumbnail was asked for and answered by `outcome`: `generated` (this process made it, in
        `duration_s` seconds, reading the source and storing the result included), `stored` (read
        from GridFS, made earlier or by another replica) or `memory` (this process's cache)."""

    def mongo_command(self, command: str, duration_s: float, ok: bool) -> None:
        """The MongoDB driver finished the command named `command` (`find`, `insert`, ...: the
        driver's command name, never its arguments) after `duration_s` seconds; `ok` is False when
        it failed."""

    def slow_query(self, collection: str, shape: str, duration_s: float) -> None:
        """A list query of `collection` (its name) took `duration_s` seconds, past SLOW_QUERY_MS;
        `shape` is its filter's and sort's shape (field names and operators, never values:
        cms.store.query_shapes)."""


class Signals:
    """The process's signal dispatcher: `add(sink)`, then call the signal methods (same names and
    arguments as `Sink`'s). Never raises from a signal."""

    def __init__(self) -> None:
        self._sinks: list[Sink] = []
        self._failed: set[tuple[int, str]] = set()

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks signals are recorded in now, in the order they were added."""
        return tuple(self._sinks)

    def add(self, sink: Sink) -> None:
        """Record every later signal in `sink` too."""
        self._sinks.append(sink)

    def remove(self, sink: Sink) -> None:
        """Stop recording in `sink` (no error when it was not added)."""
        if sink in self._sinks:
            self._sinks.remove(sink)

    def _failure(self, sink: Sink, name: str) -> None:
        key = (id(sink), name)
        if key not in self._failed:
            self._failed.add(key)
            log.exception("observability: sink %s failed on %s (logged once)", type(sink).__name__, name)

    def request(self, sample: RequestSample) -> None:
        """Dispatch `Sink.request` to every sink."""
        for sink in self._sinks:
            try:
                sink.request(sample)
            except Exception:
                self._failure(sink, "request")

    def cache(self, cache: str, hit: bool) -> None:
        """Dispatch `Sink.cache` to every sink."""
        for sink in self._sinks:
            try:
                sink.cache(cache, hit)
            except Exception:
                self._failure(sink, "cache")

    def delivery(self, outcome: str, duration_s: float) -> None:
        """Dispatch `Sink.delivery` to every sink."""
        for sink in self._sinks:
            try:
                sink.delivery(outcome, duration_s)
            except Exception:
                self._failure(sink, "delivery")

    def rate_limited(self, limit: str) -> None:
        """Dispatch `Sink.rate_limited` to every sink."""
        for sink in self._sinks:
            try:
                sink.rate_limited(limit)
            except Exception:
                self._failure(sink, "rate_limited")

    def realtime_sent(self, events: int) -> None:
        """Dispatch `Sink.realtime_sent` to every sink."""
        for sink in self._sinks:
            try:
                sink.realtime_sent(events)
            except Exception:
                self._failure(sink, "realtime_sent")

    def realtime_connections(self, count: int) -> None:
        """Dispatch `Sink.realtime_connections` to every sink."""
        for sink in self._sinks:
            try:
                sink.realtime_connections(count)
            except Exception:
                self._failure(sink, "realtime_connections")

    def thumbnail(self, outcome: str, duration_s: float) -> None:
        """Dispatch `Sink.thumbnail` to every sink."""
        for sink in self._sinks:
            try:
                sink.thumbnail(outcome, duration_s)
            except Exception:
                self._failure(sink, "thumbnail")

    def mongo_command(self, command: str, duration_s: float, ok: bool) -> None:
        """Dispatch `Sink.mongo_command` to every sink (the driver's command listener calls it)."""
        for sink in self._sinks:
            try:
                sink.mongo_command(command, duration_s, ok)
            except Exception:
                self._failure(sink, "mongo_command")

    def slow_query(self, collection: str, shape: str, duration_s: float) -> None:
        """Dispatch `Sink.slow_query` to every sink."""
        for sink in self._sinks:
            try:
                sink.slow_query(collection, shape, duration_s)
            except Exception:
                self._failure(sink, "slow_query")
