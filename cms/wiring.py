"""open_services(config): the services of one process, built on one `Infra` (cms/infra.py).

Used by the web app (cleanup_ctx), the worker (on_startup), the CLI and tests. `open_infra` opens
and closes the network clients; the builders of cms/builders.py each wire one feature on top of it,
called here in the order they depend on each other: the platform (queue, events, audit, settings,
sessions, mail, rate limits), content (collections, the records' store), identity (both user systems,
API keys, the authenticator), webhooks, the read cache, realtime, files, then records, system figures
and backups. Event subscribers are registered in that order and run in it. `recording` attaches the
dashboard's recorder to the services of a process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from arq.connections import ArqRedis

from cms.builders import (
    Drafts,
    build_backups,
    build_content,
    build_files,
    build_identity,
    build_platform,
    build_read_cache,
    build_realtime,
    build_schema,
    build_webhooks,
)
from cms.clock import Clock, utcnow
from cms.config import Config
from cms.infra import open_infra
from cms.jobs import JobQueue
from cms.observability import timeline
from cms.observability.metrics import PrometheusMetrics
from cms.observability.recorder import Recorder
from cms.observability.signals import Signals
from cms.services.caching.catalog import Catalog
from cms.services.content.batch import BatchService
from cms.services.content.collections import CollectionService
from cms.services.content.envelope import Envelope
from cms.services.content.files import FileService
from cms.services.content.index_sync import IndexSync
from cms.services.content.records import RecordService
from cms.services.content.schema_service import SchemaService
from cms.services.content.slow_queries import SlowQueryService, SlowQueryWatch
from cms.services.content.version_history import VersionService
from cms.services.delivery.events import EventBus
from cms.services.delivery.realtime import RealtimeHub
from cms.services.delivery.webhook_outbox import WebhookOutbox
from cms.services.delivery.webhooks import WebhookService
from cms.services.identity import Identity
from cms.services.identity.api_keys import ApiKeyService
from cms.services.identity.authn import Authenticator
from cms.services.identity.session_tokens import SessionService
from cms.services.operations.audit import AuditService
from cms.services.operations.backups import BackupService
from cms.services.operations.rate_limits import RateLimitService
from cms.services.operations.settings import SettingsService
from cms.services.operations.system import SystemService
from cms.system_builders import build_metrics, build_system, redis_stats


@dataclass(frozen=True)
class Services:
    """Every service of one process; handlers and jobs take the one they need."""

    config: Config
    redis: ArqRedis
    jobs: JobQueue
    events: EventBus
    settings: SettingsService
    audit: AuditService
    rate_limits: RateLimitService
    sessions: SessionService
    catalog: Catalog
    collections: CollectionService
    schema: SchemaService
    """Schema as code: snapshots of the collections, their diff and apply."""
    records: RecordService
    versions: VersionService
    """Record versions: list, read, restore (their writes go through the record writer)."""
    drafts: Drafts
    """Working copies, `?draft=true` reads, publishing and scheduled publishing (collections with drafts)."""
    system: SystemService
    identity: Identity
    webhooks: WebhookService
    webhook_outbox: WebhookOutbox
    backups: BackupService
    api_keys: ApiKeyService
    authenticator: Authenticator
    files: FileService
    batch: BatchService
    realtime: RealtimeHub
    """This process's realtime streams; started by the web app only (`RealtimeHub.start`)."""
    signals: Signals
    """What this process reports about itself, for metrics, the dashboard and the request log."""
    envelope: Envelope
    """Which collections are large for the embedded server (start-up warning, admin UI notice)."""
    slow_queries: SlowQueryService
    """The slow query board every replica reports to (admins list it, create its suggested indexes)."""
    slow_query_watch: SlowQueryWatch
    """This process's watch of slow list queries (tests wait for it to record: `idle`)."""
    index_sync: IndexSync
    """The sync of every collection's record indexes; started by the web app (`IndexSync.start`)."""
    metrics: PrometheusMetrics | None = None
    """The Prometheus sink on `signals` (`GET /metrics`), or None when METRICS_ENABLED is false."""



@asynccontextmanager
async def open_services(config: Config, *, clock: Clock = utcnow, redis: ArqRedis | None = None,
                        use_transactions: bool = True) -> AsyncIterator[Services]:
    """Open the infrastructure (`open_infra`), build every service on it and yield them; close
    everything on exit.

    `redis`: an open pool to share (an arq Worker's), left open on exit. `config.mongodb_url` and
    `config.redis_url` must be set (embedded servers fill them in): ValueError if not; driver
    errors propagate when a server does not answer. `use_transactions`: False runs as on a server
    without multi-document transactions (`open_infra`). On exit, a backup or restore of this process
    that is still under way (its caller gone) is waited for before anything closes."""
    async with open_infra(config, clock=clock, redis=redis, use_transactions=use_transactions) as infra:
        platform = await build_platform(infra)
        content = await build_content(infra, platform)
        identity, api_keys, authenticator = await build_identity(infra, platform, content)
        webhooks, webhook_outbox = await build_webhooks(infra, platform, content, identity)
        read_cache, result_sets = build_read_cache(infra, platform)
        realtime = build_realtime(infra, platform, content, authenticator)
        files = await build_files(infra, platform, content, authenticator, read_cache)
        backups = build_backups(infra, platform, read_cache)
        records = RecordService(content.catalog, content.record_repository, content.writer,
                                settings=platform.settings, cache=read_cache, result_sets=result_sets, files=files,
                                working_copies=content.drafts.copies)
        services = Services(
            config=config,
            redis=infra.redis,
            jobs=platform.jobs,
            events=platform.events,
            settings=platform.settings,
            audit=platform.audit,
            rate_limits=platform.rate_limits,
            sessions=platform.sessions,
            catalog=content.catalog,
            collections=content.collections,
            schema=build_schema(infra, platform, content),
            records=records,
            versions=VersionService(content.catalog, content.record_repository, content.versions.repository,
                                    write=records.update, working=content.drafts.copies),
            drafts=content.drafts,
            system=build_system(infra, webhook_outbox),
            identity=identity,
            webhooks=webhooks,
            webhook_outbox=webhook_outbox,
            backups=backups,
            api_keys=api_keys,
            authenticator=authenticator,
            files=files,
            batch=BatchService(records, platform.events, content.transactions, platform.settings,
                               writer=content.writer),
            realtime=realtime,
            signals=platform.signals,
            envelope=Envelope(content.catalog, content.record_repository, embedded=config.embedded,
                              threshold=config.embedded_cold_page_records, clock=infra.clock),
            metrics=build_metrics(infra, webhook_outbox),
            slow_queries=content.slow_queries,
            slow_query_watch=content.slow_query_watch,
            index_sync=content.index_sync,
        )
        try:
            yield services
        finally:
            await content.index_sync.stop()
            await content.slow_query_watch.close()
            try:
                await backups.wait_idle()  # a restore whose caller went away ends before the clients close
                await services.schema.wait_idle()  # so does a schema apply
            finally:
                await files.close()  # the image workers


@asynccontextmanager
async def recording(services: Services) -> AsyncIterator[Recorder]:
    """Record this process's figures for the dashboard and the request log (cms.observability.recorder)
    while the block runs: the recorder's sinks are added to `services.signals` and its flush task runs;
    on exit the task stops after a last flush and the sinks are removed. The gauges are the job queue
    depth (as `redis_stats` reads it) and this process's realtime connections; the log's size is the
    `request_log_size` setting. The web app and `cms worker` each hold one (cms/app.py, workers/settings.py)."""
    config = services.config

    async def log_size() -> int:
        return int((await services.settings.values())["request_log_size"])

    async def gauges() -> dict[str, int]:
        depth = (await redis_stats(services.redis, config.queue_name))["queue_depth"]
        return {timeline.QUEUE_DEPTH: int(depth), timeline.REALTIME_CONNECTIONS: len(services.realtime.connections)}

    recorder = Recorder(services.redis, config.mongodb_db, log_size=log_size, gauges=gauges)
    recorder.attach(services.signals)
    recorder.start()
    try:
        yield recorder
    finally:
        try:
            await recorder.stop()
        finally:
            recorder.detach(services.signals)
