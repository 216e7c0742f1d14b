"""One pipelined Redis connection per process for the short commands on every request's path
(issue 31, item 3: a leaner hot path).

redis-py's asyncio pool costs about 70 us of CPU per command on this project's hot path: a lock, a
health poll of the socket (`asyncio.timeout(0)` around a read, cancelled every time), a task for
`wait_for` around the write and a timer around the read, and it never sends the commands of
concurrent requests together. A warm `GET .../records/{id}` is one `MGET`, so that cost was a third
of the request. `CommandPipe` keeps one connection per process and event loop, writes the commands
of every request that asks in the same turn of the loop in one write, and matches the replies in
order (Redis answers the commands of one connection in the order they were sent). On the
benchmark of `docs/performance.md` ("Hot path") an aiohttp handler doing one `MGET` went from about
9,000 to 27,000 requests a second on two processes.

Only the commands of `PIPED_COMMANDS` take this path (short, never blocking, one reply each); all
others, and pipelines, transactions, pub/sub and blocking reads, keep redis-py's pool. The replies
are parsed by hiredis (redis-py's own parser, with redis-py's error classes: a `NOSCRIPT` reply is
`NoScriptError`, so `Script` objects reload themselves as before) and go through the client's own
response callbacks, so a caller sees exactly what redis-py returns.

Failures keep redis-py's contract: a command that gets no reply within the pool's socket time-out
(`DATABASE_TIMEOUT_S`) raises `redis.exceptions.TimeoutError`, and so does every command waiting
behind it, and the connection is aborted (what it had not written is dropped; one timer per
connection watches the oldest command, not one per command: timers were a tenth of a warm get's
CPU); a lost connection fails every command in flight with `redis.exceptions.ConnectionError`; the
next command connects again (connect time-out as the pool's). The connection is opened by a task
of its own that every caller waits for, so a caller that gives up (its own `asyncio.timeout`)
fails nobody else, and leaves the connection usable: its reply is read and dropped. At most
MAX_IN_FLIGHT commands and MAX_BUFFERED_BYTES bytes wait per connection; beyond that a command
fails at once with `ConnectionError` (a stalled Redis never grows a process's memory without bound).

Used for `redis://` and `unix://` URLs whose pool sets a socket time-out and neither decodes
replies, speaks RESP3 nor takes a credential provider. `rediss://` (TLS) and the other cases keep
redis-py's pool for every command, and so does a process with tracing on (cms.infra:
OpenTelemetry's Redis instrumentation makes a span of each command of the pool,
docs/operations/traces.md).
"""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.connection import ConnectionPool, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

PIPED_COMMANDS = frozenset({"GET", "MGET", "SET", "GETRANGE", "STRLEN", "INCR", "INCRBY", "EXISTS", "EVALSHA",
                            "DEL", "EXPIRE", "PEXPIRE"})
"""The commands `PipedRedis` sends on its pipelined connection: short, never blocking, one reply
each, without options that change how redis-py reads the reply."""
MAX_IN_FLIGHT = 10_000
"""Commands that may wait for their reply on one pipelined connection at once."""
MAX_BUFFERED_BYTES = 32 * 1024 * 1024
"""Bytes of commands that may wait to be taken by the socket of one pipelined connection (a Redis
that stops reading never grows a process's memory beyond this)."""
# redis-py's option names (redis.asyncio.client) that change how a reply is read
EMPTY_RESPONSE = "EMPTY_RESPONSE"
NEVER_DECODE = "NEVER_DECODE"
DEFAULT_TIMEOUT_S = 5.0
"""Seconds to connect, or to wait for a reply, when the pool sets no time-out of its own."""


class _Protocol(asyncio.Protocol):
    """The pipelined connection: writes what `send` is given, hands each reply to the oldest
    waiting future."""

    def __init__(self, timeout_s: float) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.sent_at: collections.deque[float] = collections.deque()  # loop time of each waiting command
        self.reader = hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)
        self.closed = False
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.flush_scheduled = False
        self.timeout_s = timeout_s
        self.watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not asyncio.Transport instances

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiting = self.waiting
        while waiting:
            reply = self.reader.gets()
            if reply is False:
                return
            future = waiting.popleft()
            self.sent_at.popleft()
            if future.done():  # its caller gave up (cancelled); the reply is dropped
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(RedisConnectionError(f"Connection to Redis lost: {exc!r}" if exc else "Connection to Redis closed"))

    def fail(self, error: Exception) -> None:
        """Fail every command still waiting with `error`."""
        self.sent_at.clear()
        self.pending.clear()
        self.pending_bytes = 0
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)

    def buffered_bytes(self) -> int:
        """Bytes written or queued but not yet taken by the socket."""
        transport = self.transport
        return self.pending_bytes + (transport.get_write_buffer_size() if transport is not None else 0)

    def send(self, packed: bytes, future: asyncio.Future[Any]) -> None:
        """Queue one packed command; the commands queued in one turn of the loop go out in one write.
        On a closed connection the future fails at once (ConnectionError)."""
        if self.closed:
            future.set_exception(RedisConnectionError("Connection to Redis closed"))
            return
        loop = future.get_loop()
        self.waiting.append(future)
        self.sent_at.append(loop.time())
        self.pending.append(packed)
        self.pending_bytes += len(packed)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            loop.call_soon(self.flush)
        if self.watchdog is None:
            self.watchdog = loop.call_later(self.timeout_s, self.check)

    def check(self) -> None:
        """The time-out of every command, one timer per connection (not one per command): when
        the oldest command still waiting was sent `timeout_s` ago, the connection is stuck: every
        waiting command fails with TimeoutError and the connection is aborted (what it had not
        written yet is dropped)."""
        self.watchdog = None
        if not self.sent_at or self.closed:
            return
        loop = asyncio.get_running_loop()
        due = self.sent_at[0] + self.timeout_s
        if loop.time() < due:
            self.watchdog = loop.call_at(due, self.check)
            return
        self.close(RedisTimeoutError(f"Redis did not answer within {self.timeout_s} s"))

    def flush(self) -> None:
        self.flush_scheduled = False
        pending, self.pending = self.pending, []
        self.pending_bytes = 0
        if not self.closed and self.transport is not None:
            self.transport.writelines(pending)

    def close(self, error: Exception | None = None) -> None:
        """Abort the connection (its unwritten bytes are dropped, nothing waits for them) and fail
        every command still waiting with `error` (ConnectionError by default)."""
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True
        self.fail(error or RedisConnectionError("Connection to Redis closed"))


class CommandPipe:
    """The pipelined connection of one process to the Redis of `pool` (its URL's host, port or
    Unix socket, password, database and client name; its connect and socket time-outs, seconds).
    `call(*args)` sends one command and returns hiredis's reply (bytes, int, list, None); see the
    module docstring for its errors."""

    def __init__(self, pool: ConnectionPool) -> None:
        kwargs = pool.connection_kwargs
        self._unix_path: str | None = kwargs.get("path") if issubclass(pool.connection_class,
                                                                        UnixDomainSocketConnection) else None
        self._host = kwargs.get("host", "localhost")
        self._port = int(kwargs.get("port", 6379))
        self._username: str | None = kwargs.get("username")
        self._password: str | None = kwargs.get("password")
        self._db = int(kwargs.get("db", 0) or 0)
        self._client_name: str | None = kwargs.get("client_name")
        self._connect_timeout_s: float = kwargs.get("socket_connect_timeout") or DEFAULT_TIMEOUT_S
        self._timeout_s: float = kwargs.get("socket_timeout") or DEFAULT_TIMEOUT_S
        self._protocol: _Protocol | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = os.getpid()
        self._connecting: asyncio.Task[_Protocol] | None = None
        self._generation = 0  # bumped by close(): a connection opened for an older one is closed at once

    async def call(self, *args: Any) -> Any:
        """Send one command (`args`: its name and arguments, str, bytes, int or float) and return
        its reply. Raises redis-py's ResponseError (and subclasses) for an error reply,
        TimeoutError, ConnectionError (also at once when MAX_IN_FLIGHT commands or
        MAX_BUFFERED_BYTES bytes wait); TypeError for an argument hiredis cannot pack."""
        packed = hiredis.pack_command(args)
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if protocol is None or protocol.closed or self._loop is not loop or self._pid != os.getpid():
            protocol = await self._connect()
        if len(protocol.waiting) >= MAX_IN_FLIGHT or protocol.buffered_bytes() + len(packed) > MAX_BUFFERED_BYTES:
            raise RedisConnectionError("Too many Redis commands waiting on the pipelined connection")
        future: asyncio.Future[Any] = loop.create_future()
        protocol.send(packed, future)  # on a connection closed meanwhile: ConnectionError at once
        return await future  # bounded by the connection's watchdog (`_Protocol.check`)

    async def _connect(self) -> _Protocol:
        """The connection, opened by one task that every caller waits for (a caller that gives up
        does not fail the others): connect, authenticate, select the database, name it, within
        the connect time-out. Raises ConnectionError or TimeoutError."""
        loop = asyncio.get_running_loop()
        task = self._connecting
        if task is None or task.get_loop() is not loop or self._pid != os.getpid():
            if self._protocol is not None and self._pid == os.getpid() and self._loop is loop:
                self._protocol.close()  # (one of another loop or process is left to it: its loop may be closed)
            self._protocol = None
            self._loop = loop
            self._pid = os.getpid()
            task = loop.create_task(self._open_and_keep(self._generation))
            task.add_done_callback(_retrieved)
            self._connecting = task
        return await asyncio.shield(task)

    async def _open_and_keep(self, generation: int) -> _Protocol:
        try:
            protocol = await self._open(asyncio.get_running_loop())
        finally:
            if self._connecting is asyncio.current_task():
                self._connecting = None
        if generation != self._generation:  # closed while it connected
            protocol.close()
            raise RedisConnectionError("The Redis client was closed")
        self._protocol = protocol
        return protocol

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Protocol:
        protocol: _Protocol | None = None
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                def made() -> _Protocol:
                    return _Protocol(self._timeout_s)

                if self._unix_path is not None:
                    _, protocol = await loop.create_unix_connection(made, self._unix_path)
                else:
                    _, protocol = await loop.create_connection(made, self._host, self._port)
                handshake: list[tuple[Any, ...]] = []
                if self._password is not None:
                    handshake.append(("AUTH", self._username, self._password) if self._username
                                     else ("AUTH", self._password))
                if self._db:
                    handshake.append(("SELECT", self._db))
                if self._client_name:
                    handshake.append(("CLIENT", "SETNAME", self._client_name))
                futures = []
                for command in handshake:
                    future: asyncio.Future[Any] = loop.create_future()
                    protocol.send(hiredis.pack_command(command), future)
                    futures.append(future)
                for reply in await asyncio.gather(*futures, return_exceptions=True):
                    if isinstance(reply, BaseException):
                        raise RedisConnectionError(f"Redis refused the connection's set-up: {reply}") from reply
        except BaseException as exc:  # (re-raised: cancellation and exits too)
            if protocol is not None:
                protocol.close()
            if isinstance(exc, TimeoutError):
                raise RedisTimeoutError("Timed out connecting to Redis") from None
            if isinstance(exc, OSError):
                raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
            raise
        return protocol

    @property
    def connected(self) -> bool:
        """Whether this process holds the pipelined connection open now."""
        return self._protocol is not None and not self._protocol.closed and self._pid == os.getpid()

    def close(self) -> None:
        """Close the connection (commands in flight fail with ConnectionError); one being opened
        is closed as soon as it is. A later command connects again."""
        self._generation += 1
        if self._protocol is not None and self._pid == os.getpid():
            try:
                self._protocol.close()
            except RuntimeError:  # its event loop is closed already: so is the socket
                pass
        self._protocol = None


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a connect task's failure as seen (every caller may have given up before it ended)."""
    if not task.cancelled():
        task.exception()


class PipedCommands:
    """A mixin for redis-py's asyncio `Redis` (and arq's `ArqRedis`): the commands of
    PIPED_COMMANDS go through one `CommandPipe` per client, the rest through the pool as before.
    Call `open_pipe()` once after construction."""

    _pipe: CommandPipe | None = None

    def open_pipe(self) -> None:
        """Make this client send PIPED_COMMANDS on a pipelined connection; not when the pool's
        connections use TLS, decode replies, speak RESP3, take a credential provider or have no
        socket time-out (then every command keeps the pool)."""
        pool: ConnectionPool = self.connection_pool  # type: ignore[attr-defined]
        kwargs = pool.connection_kwargs
        if (kwargs.get("ssl") or "ssl" in pool.connection_class.__name__.lower() or kwargs.get("decode_responses")
                or str(kwargs.get("protocol", 2)) != "2" or kwargs.get("credential_provider") is not None
                or not kwargs.get("socket_timeout")):
            return  # what the pipe does not do as the pool would: TLS, decoding, RESP3, credentials, no time-out
        self._pipe = CommandPipe(pool)

    @property
    def pipe_connections(self) -> int:
        """The pipelined connections this client holds open now: 0 or 1."""
        return int(self._pipe is not None and self._pipe.connected)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """redis-py's `execute_command`, through the pipelined connection for PIPED_COMMANDS."""
        pipe = self._pipe
        name = args[0]
        if pipe is None or name not in PIPED_COMMANDS or NEVER_DECODE in options:
            return await super().execute_command(*args, **options)  # type: ignore[misc]
        try:
            response = await pipe.call(*args)
        except TypeError:  # an argument hiredis does not pack (redis-py's encoder may)
            return await super().execute_command(*args, **options)  # type: ignore[misc]
        except ResponseError:
            if EMPTY_RESPONSE in options:
                return options[EMPTY_RESPONSE]
            raise
        options.pop(EMPTY_RESPONSE, None)
        options.pop("keys", None)
        callback = self.response_callbacks.get(name)  # type: ignore[attr-defined]
        return callback(response, **options) if callback is not None else response

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        """Close the pipelined connection, then the client as redis-py does."""
        if self._pipe is not None:
            self._pipe.close()
        await super().aclose(close_connection_pool)  # type: ignore[misc]


class PipedRedis(PipedCommands, Redis):  # type: ignore[misc]
    """redis-py's asyncio client with PIPED_COMMANDS on a pipelined connection (`PipedCommands`)."""
