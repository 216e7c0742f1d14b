"""The AsyncMongoClient lifecycle, capability detection and index set-up."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure

log = logging.getLogger("cms.store")

Database = AsyncDatabase[dict[str, Any]]


@dataclass(frozen=True)
class Capabilities:
    """What the connected server supports; detected by trying, never by server name."""

    text_index: bool


def open_client(url: str, *, timeout_s: float = 10.0) -> AsyncMongoClient[dict[str, Any]]:
    """A client returning aware UTC datetimes, with explicit time-outs (seconds).

    `retryWrites=false` is forced for the embedded server, whose retryable-write bookkeeping
    slows every write; real MongoDB accepts it too.
    """
    return AsyncMongoClient(
        url,
        tz_aware=True,
        tzinfo=UTC,
        retryWrites=False,
        serverSelectionTimeoutMS=int(timeout_s * 1000),
        connectTimeoutMS=int(timeout_s * 1000),
        uuidRepresentation="standard",
        appname="cms",
    )


async def detect_capabilities(db: Database) -> Capabilities:
    """Try to build a text index on a scratch collection: servers without text search refuse."""
    probe = db["_capability_probe"]
    try:
        await probe.create_index([("t", "text")], name="probe_text")
        text_index = True
    except OperationFailure:
        text_index = False
    finally:
        await probe.drop()
    log.info("MongoDB capabilities: text_index=%s", text_index)
    return Capabilities(text_index=text_index)


async def ensure_indexes(db: Database) -> None:
    """Create the indexes of the service's own collections (idempotent)."""
    await db.admin_users.create_index("email", unique=True)
    await db.admin_users.create_index("role")
    await db.sessions.create_index([("user_id", 1), ("audience", 1)])
    await db.one_time_tokens.create_index("expires_at", expireAfterSeconds=7 * 24 * 3600)
    await db.collections.create_index("name_lower", unique=True)
    await db.settings.create_index("key", unique=True)
    await db.audit_log.create_index([("created", -1)])
    await db.audit_log.create_index([("event_type", 1), ("created", -1)])


async def database_stats(db: Database) -> dict[str, Any]:
    """Figures from `dbStats`: collections, objects, data and index sizes (bytes)."""
    stats = await db.command("dbStats")
    return {k: stats.get(k) for k in ("collections", "objects", "dataSize", "indexSize")}
