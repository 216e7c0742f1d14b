"""The line of list queries of one process (issue 31, item 2: cold queries stay bounded; issue 37,
item 4: the line shares fairly).

On the embedded server every list query but an `_id` look-up reads every document of its collection,
and scans slow each other down almost linearly; on MongoDB an unindexed filter does the same. So a
process runs at most `slots` scans at once (`LIST_SCAN_SLOTS`, default SCAN_SLOTS), lets at most
`max_waiting` more wait, and refuses the rest at once with 503 `service_unavailable` and a
`Retry-After` header: when the line is full, or when the wait it predicts would pass `max_wait_s`; a
caller that waits anyway gives up after `max_wait_s`. Clients are told to come back instead of
queueing for seconds behind scans whose callers have most likely given up. Point reads (`get`,
`find_by_ids`) take no slot and are never refused here, nor the related records of an `expand`
(`find_related(indexed=True)`: by `_id`, or by a relation field its `auto_relation_<field>` index
serves; issue 38), whose cost is the records they match, not the collection.

The line is shared fairly between clients (the caller's `client` key: the services pass the signed-in
user, else the client's address). One client holds at most `max_per_client` places (running and
waiting; `LIST_SCAN_PER_CLIENT`, default SCAN_PER_CLIENT) and is refused past them, whatever the rest
of the line holds; and a freed slot goes to the clients in turn (round robin between the clients'
own queues, first come first served within one), not to the oldest waiter overall. So a client
flooding the line with cold queries waits behind its own queries, and another client's query is
served after at most one of the flooder's. The predicted wait follows that order: the caller's own
waiting queries, plus, of every other client's, as many as get a turn before it (as many as the
caller's own, one more for a client whose turn comes first), times the running mean scan time, over
the slots. A key of None (no client:
realtime fan-out, maintenance) is one more queue in the turns, without the per-client bound.

A client is tracked only while it holds a place, so at most `slots + max_waiting` are
(`max_clients`). The line is per process: behind several replicas each has its own, and a client's
share is per replica.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from cms.errors import ServiceUnavailable

SCAN_SLOTS = 4
"""Scans (list `find`s and `count`s) one process runs at once by default (`LIST_SCAN_SLOTS`)."""
SCAN_MAX_WAITING = 16
"""Callers that may wait for a slot at once; the next is refused at once (503)."""
SCAN_PER_CLIENT = 8
"""Places in the line (running and waiting scans) one client may hold at once by default
(`LIST_SCAN_PER_CLIENT`); its next scan is refused at once (503)."""
SCAN_MAX_WAIT_S = 2.0
"""Longest wait for a slot, in seconds: a caller whose predicted wait is longer is refused at once,
and one that waited this long gives up (503)."""
SCAN_TIME_WEIGHT = 0.2
"""Weight of the latest scan in the running mean of scan times (exponentially weighted)."""


@dataclass
class _Client:
    """One client's places in the line: its running scans and its waiters, oldest first."""

    running: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)

    @property
    def places(self) -> int:
        return self.running + len(self.waiters)


class ScanLine:
    """`slots` scans at once with a bounded, time-limited queue shared fairly between clients (see
    the module docstring). `clock` gives monotonic seconds. Per process; safe for the coroutines of
    one event loop."""

    def __init__(self, slots: int = SCAN_SLOTS, *, max_waiting: int = SCAN_MAX_WAITING,
                 max_per_client: int = SCAN_PER_CLIENT, max_wait_s: float = SCAN_MAX_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.max_waiting = max_waiting
        self.max_per_client = max_per_client
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._running = 0  # slots taken (scans and `hold`); while some are free, nobody waits
        self._waiting = 0
        self._clients: dict[str | None, _Client] = {}
        self._turns: deque[str | None] = deque()  # the clients with waiters, the next to be served first
        self._mean_scan_s: float | None = None

    @property
    def waiting(self) -> int:
        """How many callers wait for a slot now (monitoring, tests)."""
        return self._waiting

    @property
    def clients(self) -> int:
        """How many clients hold a place in the line now (monitoring, tests)."""
        return len(self._clients)

    @property
    def max_clients(self) -> int:
        """The most clients ever tracked at once: each holds a place, and the line has
        `slots + max_waiting` of them."""
        return self.slots + self.max_waiting

    @property
    def mean_scan_s(self) -> float | None:
        """The running mean of scan times in seconds (None before the first scan ended)."""
        return self._mean_scan_s

    def predicted_wait_s(self, client: str | None = None) -> float:
        """How long a caller of `client` arriving now would wait for a slot, in seconds: 0 when one
        is free, else the scans served before it (its client's waiters, and of every other client's
        as many, one more for a client whose turn comes first; and itself) times the mean scan time,
        over the slots."""
        if self._running < self.slots:
            return 0.0
        own = self._clients.get(client)
        mine = len(own.waiters) if own is not None else 0
        turn = {key: n for n, key in enumerate(self._turns)}  # a client without waiters comes last
        last = len(turn)
        ahead = mine + sum(min(len(other.waiters), mine + (turn.get(key, last) < turn.get(client, last)))
                           for key, other in self._clients.items() if key != client)
        return (ahead + 1) * (self._mean_scan_s or 0.0) / self.slots

    def busy(self, wait_s: float) -> ServiceUnavailable:
        """The refusal of a caller who would wait about `wait_s` seconds: 503 with `Retry-After`
        (whole seconds, at least 1)."""
        error = ServiceUnavailable("The database is busy with other list queries; retry shortly")
        error.headers["Retry-After"] = str(max(1, math.ceil(wait_s)))
        return error

    @asynccontextmanager
    async def slot(self, client: str | None = None) -> AsyncIterator[None]:
        """Hold one slot for the block (a scan of `client`: its share's key, None for no client),
        timing it. Raises ServiceUnavailable (503, `Retry-After`) when `client` holds
        `max_per_client` places already, when `max_waiting` callers wait already, when the
        predicted wait passes `max_wait_s`, or when no slot came within `max_wait_s`."""
        state = self._clients.get(client)
        if client is not None and state is not None and state.places >= self.max_per_client:
            raise self.busy(self.predicted_wait_s(client) or self._mean_scan_s or self.max_wait_s)
        if self._running < self.slots:
            self._running += 1
            state = self._clients.setdefault(client, _Client())
            state.running += 1
        else:
            predicted = self.predicted_wait_s(client)
            if self._waiting >= self.max_waiting or predicted > self.max_wait_s:
                raise self.busy(predicted or self.max_wait_s)
            state = await self._wait(client)
        started = self._clock()
        try:
            yield
        finally:
            state.running -= 1
            self._forget_if_idle(client, state)
            self._pass_on()
            elapsed = self._clock() - started
            mean = self._mean_scan_s
            self._mean_scan_s = elapsed if mean is None else mean + SCAN_TIME_WEIGHT * (elapsed - mean)

    async def _wait(self, client: str | None) -> _Client:
        """Wait in `client`'s queue until `_pass_on` hands it a slot (counted in its `running`).
        Raises ServiceUnavailable after `max_wait_s`; a cancelled caller leaves the line as well."""
        state = self._clients.setdefault(client, _Client())
        if not state.waiters:
            self._turns.append(client)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiters.append(turn)
        self._waiting += 1
        try:
            async with asyncio.timeout(self.max_wait_s):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled():  # handed a slot just as it gave up: pass it on
                state.running -= 1
                self._pass_on()
            else:
                turn.cancel()
                if turn in state.waiters:  # else `_pass_on` met it cancelled and dropped it
                    state.waiters.remove(turn)
                    self._waiting -= 1
                if not state.waiters and client in self._turns:
                    self._turns.remove(client)
            self._forget_if_idle(client, state)
            if isinstance(exc, TimeoutError):
                raise self.busy(self.predicted_wait_s(client) or self.max_wait_s) from None
            raise
        return state

    def _pass_on(self) -> None:
        """A slot was freed: hand it to the oldest waiter of the next client in turn (that client
        goes to the back of the turns if it has more), else leave it free."""
        while self._turns:
            client = self._turns.popleft()
            state = self._clients.get(client)
            while state is not None and state.waiters:
                turn = state.waiters.popleft()
                self._waiting -= 1
                if turn.done():  # cancelled, its caller not yet woken to leave the line
                    continue
                state.running += 1
                if state.waiters:
                    self._turns.append(client)
                turn.set_result(None)
                return
        self._running -= 1

    def _forget_if_idle(self, client: str | None, state: _Client) -> None:
        """Drop `client` once it holds no place, so only clients in the line are tracked."""
        if state.places == 0 and self._clients.get(client) is state:
            del self._clients[client]  # with no waiters, it is not in the turns either

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Take every free slot for the block, so scans that start meanwhile wait (bounded as in
        `slot`) until it ends: for maintenance that needs the database to itself for a moment, and
        for tests that hold queries."""
        held = self.slots - self._running
        self._running = self.slots
        try:
            yield
        finally:
            for _ in range(held):
                self._pass_on()
