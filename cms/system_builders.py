"""The builders of the process's system figures (`/api/v1/stats`, health pings) and its Prometheus sink,
part of `open_services` (cms/wiring.py) beside the per-feature builders of cms/builders.py."""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis

from cms.infra import Infra
from cms.observability.metrics import PrometheusMetrics, SampledGauge
from cms.services.delivery.webhook_outbox import WebhookOutbox
from cms.services.operations.system import SystemService
from cms.store.client import database_stats

REDIS_INFO_FIGURES = (
    "redis_version", "uptime_in_seconds", "connected_clients", "blocked_clients", "maxclients",
    "used_memory", "used_memory_peak", "maxmemory", "total_connections_received", "rejected_connections",
    "total_commands_processed", "instantaneous_ops_per_sec", "keyspace_hits", "keyspace_misses",
    "evicted_keys", "expired_keys",
)


async def redis_stats(pool: ArqRedis, queue_name: str) -> dict[str, Any]:
    """Figures from Redis INFO (REDIS_INFO_FIGURES: clients, memory in bytes, uptime in seconds,
    command and keyspace counters; None when the server lacks one) and `queue_depth`, the number of
    arq jobs waiting in `queue_name` (ZCARD of the queue's sorted set)."""
    info = await pool.info()
    figures: dict[str, Any] = {k: info.get(k) for k in REDIS_INFO_FIGURES}
    figures["queue_depth"] = await queue_depth(pool, queue_name)
    return figures


async def queue_depth(pool: ArqRedis, queue_name: str) -> int:
    """The number of arq jobs waiting in `queue_name` (ZCARD of the queue's sorted set)."""
    return int(await pool.zcard(queue_name))


def build_system(infra: Infra, outbox: WebhookOutbox) -> SystemService:
    """Health pings and the figures of /stats: MongoDB, Redis (with the queue depth) and the
    webhook outbox backlog."""
    config, db, redis = infra.config, infra.db, infra.redis

    async def webhook_stats() -> dict[str, Any]:
        return {"outbox_backlog": await outbox.backlog()}

    return SystemService(
        pings={"mongodb": lambda: infra.mongo.admin.command("ping"), "redis": redis.ping},
        stats={"mongodb": lambda: database_stats(db), "redis": lambda: redis_stats(redis, config.queue_name),
               "webhooks": webhook_stats},
    )


def build_metrics(infra: Infra, outbox: WebhookOutbox) -> PrometheusMetrics | None:
    """The Prometheus sink, added to the process's signals, unless METRICS_ENABLED is false (None:
    no sink). The job queue's depth and the webhook outbox's backlog are read when scraped."""
    config = infra.config
    if not config.metrics_enabled:
        return None
    metrics = PrometheusMetrics(multiprocess_dir=config.metrics_multiprocess_dir, sampled=(
        SampledGauge("cms_job_queue_depth", "Jobs waiting in the queue (all processes)",
                     lambda: queue_depth(infra.redis, config.queue_name)),
        SampledGauge("cms_webhook_outbox_backlog", "Webhook deliveries written but not finished (all processes)",
                     outbox.backlog),
    ))
    infra.signals.add(metrics)
    return metrics
