"""The AsyncMongoClient lifecycle, capability detection and index set-up."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.monitoring import (
    CommandFailedEvent,
    CommandListener,
    CommandStartedEvent,
    CommandSucceededEvent,
    ServerDescriptionChangedEvent,
    ServerListener,
)

log = logging.getLogger("cms.store")

Database = AsyncDatabase[dict[str, Any]]


@dataclass(frozen=True)
class Capabilities:
    """What the connected server supports; detected by trying, never by server name."""

    text_index: bool
    transactions: bool = False
    background_index_builds: bool = False
    """`createIndexes` accepts `background: true`: MongoDB before 4.2 then builds without blocking
    writes (4.2 and later build so whatever the option, and accept it)."""
    index_sorts: bool = False
    """The server walks an index for the sort of a filtered query (`{a: 1}` sorted by `b` over an index
    `{a: 1, b: 1}` has no blocking SORT stage in its plan): MongoDB does, the embedded SecantusDB sorts
    in memory. The index advice puts sort keys in a suggested index only then."""


class DriverTrouble(ServerListener):
    """Logs, at WARNING, when the driver loses a server it knew (its description turns Unknown,
    with the error why): until its monitor finds the server again, every operation waits in server
    selection (at least `minHeartbeatFrequencyMS`, 500 ms), which shows as latency with idle CPUs."""

    def opened(self, event: Any) -> None:
        """Nothing to log."""

    def closed(self, event: Any) -> None:
        """Nothing to log."""

    def description_changed(self, event: ServerDescriptionChangedEvent) -> None:
        """Log a known server turning Unknown."""
        new, previous = event.new_description, event.previous_description
        if new.server_type_name == "Unknown" and previous.server_type_name != "Unknown":
            log.warning("MongoDB server %s:%s is unreachable for the driver (%s); operations wait for it",
                        *event.server_address, new.error)


CommandReport = Callable[[str, float, bool], None]
"""Told of each finished command: its name (`find`, `insert`, ...), its duration in seconds and
whether it succeeded."""


class CommandTimer(CommandListener):
    """Driver command monitoring (issue 30): reports each finished command's name, duration and
    success to `report` (`Signals.mongo_command`), never its arguments. Runs on the driver's path
    (the event loop), so `report` must be cheap and must not block."""

    def __init__(self, report: CommandReport) -> None:
        self._report = report

    def started(self, event: CommandStartedEvent) -> None:
        """Nothing to report yet (the finished event carries the duration)."""

    def succeeded(self, event: CommandSucceededEvent) -> None:
        """Report a command that succeeded."""
        self._report(event.command_name, event.duration_micros / 1e6, True)

    def failed(self, event: CommandFailedEvent) -> None:
        """Report a command that failed."""
        self._report(event.command_name, event.duration_micros / 1e6, False)


def open_client(url: str, *, timeout_s: float = 10.0, operation_timeout_s: float | None = None,
                on_command: CommandReport | None = None) -> AsyncMongoClient[dict[str, Any]]:
    """A client returning aware UTC datetimes, with explicit time-outs (seconds): `timeout_s` to
    find and connect to a server, `operation_timeout_s` (None: none) for any one read from a
    connection, so a server that stops answering fails the operation (`NetworkTimeout`) instead
    of holding it forever. `on_command`: told of every finished command (`CommandTimer`); None
    registers no command listener, so the driver builds no command events at all.

    `retryWrites=false` is forced for the embedded server, whose retryable-write bookkeeping
    slows every write; real MongoDB accepts it too.
    """
    listeners: list[Any] = [DriverTrouble()]
    if on_command is not None:
        listeners.append(CommandTimer(on_command))
    return AsyncMongoClient(
        url,
        tz_aware=True,
        tzinfo=UTC,
        retryWrites=False,
        serverSelectionTimeoutMS=int(timeout_s * 1000),
        connectTimeoutMS=int(timeout_s * 1000),
        socketTimeoutMS=None if operation_timeout_s is None else int(operation_timeout_s * 1000),
        uuidRepresentation="standard",
        appname="cms",
        event_listeners=listeners,
    )


async def detect_capabilities(db: Database) -> Capabilities:
    """Try what the server supports on a scratch collection: a text index (servers without text
    search refuse), an index built with `background: true` (a server that does not know the option
    refuses) and a multi-document transaction (a standalone server refuses)."""
    probe = db["_capability_probe"]
    try:
        await probe.create_index([("t", "text")], name="probe_text")
        text_index = True
    except OperationFailure:
        text_index = False
    try:
        await probe.create_index([("b", 1)], name="probe_background", background=True)
        background_index_builds = True
    except OperationFailure:
        background_index_builds = False
    index_sorts = await _sorts_with_index(db, probe)
    try:
        async with db.client.start_session() as session:
            await session.start_transaction()
            await probe.insert_one({"t": "probe"}, session=session)
            await session.commit_transaction()
        transactions = True
    except PyMongoError:
        transactions = False
    finally:
        await probe.drop()
    log.info("MongoDB capabilities: text_index=%s transactions=%s background_index_builds=%s index_sorts=%s",
             text_index, transactions, background_index_builds, index_sorts)
    return Capabilities(text_index=text_index, transactions=transactions,
                        background_index_builds=background_index_builds, index_sorts=index_sorts)


async def _sorts_with_index(db: Database, probe: AsyncCollection[dict[str, Any]]) -> bool:
    """Whether the server's plan of `{a: 1}` sorted by `b`, over an index `{a: 1, b: 1}` of the probe
    collection, has no blocking SORT stage (`Capabilities.index_sorts`); False when it cannot tell."""
    try:
        await probe.create_index([("a", 1), ("b", 1)], name="probe_sort")
        answer = await db.command("explain", {"find": probe.name, "filter": {"a": 1}, "sort": {"b": 1}},
                                  verbosity="queryPlanner")
    except OperationFailure:
        return False
    winning = (answer.get("queryPlanner") or {}).get("winningPlan")
    return isinstance(winning, dict) and not any(node.get("stage") == "SORT" for node in plan_nodes(winning))


def plan_nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every object of an explain plan tree, in whatever nesting the server uses (stages under
    `inputStage`, `inputStages`, `queryPlan`, `shards`, ...), depth first, each before what it holds."""
    nodes: list[Any] = [plan]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(reversed(node))
        elif isinstance(node, dict):
            yield node
            nodes.extend(reversed([v for v in node.values() if isinstance(v, dict | list)]))


async def ensure_indexes(db: Database) -> None:
    """Create the indexes of the service's own collections (idempotent)."""
    await db.admin_users.create_index("email", unique=True)
    await db.admin_users.create_index("role")
    await db.sessions.create_index([("user_id", 1), ("audience", 1)])
    await db.one_time_tokens.create_index("expires_at", expireAfterSeconds=7 * 24 * 3600)
    await db.collections.create_index("name_lower", unique=True)
    await db.settings.create_index("key", unique=True)
    # `created` alone is the audit TTL index (cms.store.audit.AuditRepository.ensure_retention)
    await db.audit_log.create_index([("event_type", 1), ("created", -1)])
    await db.audit_log.create_index([("severity", 1), ("created", -1)])
    await db.audit_log.create_index([("user_id", 1), ("created", -1)])


SERVER_STATUS_SKIP = ("metrics", "locks", "wiredTiger", "tcmalloc", "repl", "transactions")
"""serverStatus sections left out: large, and not shown by the stats endpoint."""


async def database_stats(db: Database) -> dict[str, Any]:
    """Figures for admins' `/api/v1/stats`:

    - from `dbStats`: `collections`, `objects`, `dataSize`, `indexSize` (bytes);
    - `pool`: this client's connection pool settings (`max_size`, `min_size`, `max_connecting`,
      `max_idle_time_s`, `wait_queue_timeout_s`; None = no limit) and `topology` (type, servers);
    - `server`: from `serverStatus` when the server has it (`version`, `uptime_s`, `connections`
      `{current, available, totalCreated}`, `opcounters`, `mem` (MiB), `network` (bytes)); absent
      when the server refuses or lacks the command (detected by trying, never by name).
    Raises driver errors of `dbStats` (the caller reports them per dependency)."""
    stats = await db.command("dbStats")
    figures: dict[str, Any] = {k: stats.get(k) for k in ("collections", "objects", "dataSize", "indexSize")}
    client = db.client
    options = client.options.pool_options
    topology = client.topology_description
    figures["pool"] = {
        "max_size": options.max_pool_size,
        "min_size": options.min_pool_size,
        "max_connecting": options.max_connecting,
        "max_idle_time_s": options.max_idle_time_seconds,
        "wait_queue_timeout_s": options.wait_queue_timeout,
        "topology": topology.topology_type_name,
        "servers": len(topology.server_descriptions()),
    }
    server = await _server_status(db)
    if server is not None:
        figures["server"] = server
    return figures


async def _server_status(db: Database) -> dict[str, Any] | None:
    try:
        command: dict[str, Any] = {"serverStatus": 1, **{name: 0 for name in SERVER_STATUS_SKIP}}
        status = await db.client.admin.command(command)
    except OperationFailure:  # no such command, or not authorized for it
        return None
    return {
        "version": status.get("version"),
        "uptime_s": status.get("uptime"),
        "connections": status.get("connections"),
        "opcounters": status.get("opcounters"),
        "mem": status.get("mem"),
        "network": {k: v for k, v in (status.get("network") or {}).items()
                    if k in ("bytesIn", "bytesOut", "numRequests")},
    }
