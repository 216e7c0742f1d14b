"""open_services(config): the one place that opens clients and builds the services.

Used by the web app (cleanup_ctx), the worker (on_startup), the CLI and tests. Each process
gets one AsyncMongoClient and one ArqRedis pool, closed in reverse order on exit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from cms.clock import Clock, utcnow
from cms.config import Config
from cms.jobs import JobQueue
from cms.security.tokens import TokenCodec
from cms.services.accounts import AccountService
from cms.services.api_keys import ApiKeyService
from cms.services.audit import AuditService
from cms.services.authn import Authenticator
from cms.services.backups import BackupService
from cms.services.collection_auth import CollectionAuthService
from cms.services.collections import CollectionService
from cms.services.email_verification import EmailVerificationService
from cms.services.events import CollectionEvent, EventBus, SessionEvent
from cms.services.fields import RecordSchemas
from cms.services.files import FileService
from cms.services.mail import Mailer
from cms.services.one_time_tokens import OneTimeTokens
from cms.services.otp import OtpService
from cms.services.password_resets import PasswordResetService
from cms.services.rate_limits import LIMITER_TIMEOUT_S, RateLimitService
from cms.services.read_cache import ReadCache
from cms.services.records import RecordService
from cms.services.sessions import SessionService
from cms.services.settings import SettingsService
from cms.services.system import SystemService
from cms.services.webhook_sender import WebhookSender, address_check
from cms.services.webhook_sender import connector as webhook_connector
from cms.services.webhooks import WebhookService
from cms.store.admin_users import AdminUserRepository
from cms.store.api_keys import ApiKeyRepository
from cms.store.audit import AuditRepository
from cms.store.backups import DumpRepository
from cms.store.client import Database, database_stats, detect_capabilities, ensure_indexes, open_client
from cms.store.collection_users import CollectionUserRepository
from cms.store.collections import CollectionRepository
from cms.store.files import FileRepository
from cms.store.one_time_tokens import OneTimeTokenRepository
from cms.store.otp_codes import OtpCodeRepository
from cms.store.records import RecordRepository
from cms.store.sessions import SessionRepository
from cms.store.settings import SettingsRepository
from cms.store.transactions import Transactions
from cms.store.webhooks import DeliveryLog, DeliveryOutbox, WebhookRepository


@dataclass
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
    accounts: AccountService
    collections: CollectionService
    records: RecordService
    system: SystemService
    collection_auth: CollectionAuthService
    email_verification: EmailVerificationService
    password_resets: PasswordResetService
    otp: OtpService
    webhooks: WebhookService
    backups: BackupService
    api_keys: ApiKeyService
    authenticator: Authenticator
    files: FileService


def redis_settings(url: str) -> RedisSettings:
    """arq connection settings for a redis:// URL, with explicit time-outs (seconds)."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_timeout = 5
    settings.conn_retries = 3
    return settings


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
    figures["queue_depth"] = await pool.zcard(queue_name)
    return figures


async def _webhook_service(db: Database, config: Config, collections: CollectionService, jobs: JobQueue,
                           http: aiohttp.ClientSession, clock: Clock, accounts: AccountService) -> WebhookService:
    """The webhook service; the SSRF rule is on in production mode unless WEBHOOK_ALLOW_PRIVATE."""
    allow_private = config.embedded or config.webhook_allow_private
    webhooks, outbox, delivery_log = WebhookRepository(db), DeliveryOutbox(db), DeliveryLog(db)
    for repository in (webhooks, outbox, delivery_log):
        await repository.ensure_indexes()
    return WebhookService(webhooks, outbox, delivery_log, collections, jobs,
                          WebhookSender(http, allow_private=allow_private, timeout_s=config.webhook_timeout_s),
                          address_check(allow_private=allow_private), clock=clock, creator=accounts.principal_of)


async def _webhook_stats(webhooks: WebhookService) -> dict[str, Any]:
    """`{outbox_backlog}`: deliveries written but not yet finished."""
    return {"outbox_backlog": await webhooks.backlog()}


def _setting_on(settings: SettingsService, key: str) -> Callable[[], Awaitable[bool]]:
    """A switch that reads the boolean setting `key` (cached by the settings service)."""

    async def on() -> bool:
        return bool((await settings.values())[key])

    return on


@asynccontextmanager
async def open_services(config: Config, *, clock: Clock = utcnow) -> AsyncIterator[Services]:
    """Open MongoDB and Redis, ensure indexes, and yield the wired services.

    `config.mongodb_url` and `config.redis_url` must be set (embedded servers fill them in).
    Raises ValueError if they are not; driver errors propagate when a server does not answer."""
    if not config.mongodb_url or not config.redis_url:
        raise ValueError("open_services needs mongodb_url and redis_url")
    client = open_client(config.mongodb_url, timeout_s=min(10, config.database_timeout_s),
                         operation_timeout_s=config.database_timeout_s)
    try:
        db = client[config.mongodb_db]
        await ensure_indexes(db)
        capabilities = await detect_capabilities(db)
        pool = await create_pool(redis_settings(config.redis_url), default_queue_name=config.queue_name)
        # arq sets no read time-out: bound every command, so a stalled Redis fails fast (503)
        pool.connection_pool.connection_kwargs["socket_timeout"] = config.database_timeout_s
        allow_private = config.embedded or config.webhook_allow_private
        http = aiohttp.ClientSession(connector=webhook_connector(allow_private=allow_private))
        try:
            jobs = JobQueue(pool, config.queue_name)
            events = EventBus()
            audit = AuditService(AuditRepository(db), clock=clock)
            settings = SettingsService(SettingsRepository(db), pool, audit,
                                       version_key=f"cms:settings:version:{config.mongodb_db}")
            settings.on_change("audit_retention_days", audit.apply_retention)
            await audit.apply_retention(int((await settings.values())["audit_retention_days"]))

            async def on_session_events(batch: Sequence[SessionEvent]) -> None:
                for event in batch:
                    await audit.record(event.event, user_id=event.session.user_id,
                                       details={"session_id": event.session.id, "audience": event.session.audience})

            events.subscribe(on_session_events, SessionEvent)
            codec = TokenCodec(config.secret_key, clock=clock)
            sessions = SessionService(SessionRepository(db), codec, clock=clock,
                                      events=events)
            mailer = Mailer(jobs, config.base_url)
            one_time = OneTimeTokens(OneTimeTokenRepository(db), clock=clock)
            record_repository = RecordRepository(db, capabilities)
            collections = CollectionService(CollectionRepository(db), record_repository, settings, audit, events,
                                            clock=clock)
            await collections.fill_default_rules()
            schemas = RecordSchemas()
            admin_users = AdminUserRepository(db)
            accounts = AccountService(admin_users, sessions, one_time, mailer, settings, audit, clock=clock)
            api_key_repository = ApiKeyRepository(db)
            await api_key_repository.ensure_indexes()
            api_keys = ApiKeyService(api_key_repository, admin_users, audit, clock=clock)
            collection_users = CollectionUserRepository(db)
            otp_codes = OtpCodeRepository(db)
            await collection_users.ensure_indexes()
            await otp_codes.ensure_indexes()
            collection_auth = CollectionAuthService(
                collections, collection_users, record_repository, schemas, sessions, one_time, mailer, settings,
                audit, events, clock=clock,
            )
            events.subscribe(collection_auth.on_record_events)
            events.subscribe(collection_auth.on_collection_events, CollectionEvent)
            webhooks = await _webhook_service(db, config, collections, jobs, http, clock, accounts)
            events.attach_outbox(webhooks)
            events.subscribe(webhooks.on_collection_events, CollectionEvent)
            read_cache = ReadCache(pool, prefix=f"cms:rc:{config.mongodb_db}",
                                   switch=_setting_on(settings, "read_cache_enabled"))
            events.subscribe(read_cache.on_record_events)
            events.subscribe(read_cache.on_collection_events, CollectionEvent)
            file_repository = FileRepository(db)
            await file_repository.ensure_indexes()
            files = FileService(file_repository, collections, record_repository, settings, clock=clock)
            events.subscribe(files.on_record_events)
            events.subscribe(files.on_collection_events, CollectionEvent)
            yield Services(
                config=config,
                redis=pool,
                jobs=jobs,
                events=events,
                settings=settings,
                audit=audit,
                rate_limits=RateLimitService(
                    config.redis_url, settings, key_prefix=f"cms:ratelimit:{config.mongodb_db}",
                    window_s=config.rate_limit_window_s, timeout_s=min(LIMITER_TIMEOUT_S, config.database_timeout_s),
                ),
                sessions=sessions,
                accounts=accounts,
                collections=collections,
                records=RecordService(collections, record_repository, schemas, events, clock=clock,
                                      transactions=Transactions(client, enabled=capabilities.transactions),
                                      needs_transaction=webhooks.wants, settings=settings, cache=read_cache),
                system=SystemService(
                    pings={"mongodb": lambda: client.admin.command("ping"), "redis": pool.ping},
                    stats={"mongodb": lambda: database_stats(db), "redis": lambda: redis_stats(pool, config.queue_name),
                           "webhooks": lambda: _webhook_stats(webhooks)},
                ),
                collection_auth=collection_auth,
                email_verification=EmailVerificationService(accounts, collection_auth, one_time),
                password_resets=PasswordResetService(accounts, collection_auth, one_time, jobs, mailer, settings,
                                                     audit),
                otp=OtpService(collection_auth, otp_codes, jobs, mailer, audit, clock=clock),
                webhooks=webhooks,
                api_keys=api_keys,
                authenticator=Authenticator(codec, accounts, collection_auth, api_keys),
                backups=BackupService(DumpRepository(db), audit, config.backups_path, clock=clock,
                                      on_restored=[settings.invalidate, read_cache.bump_all]),
                files=files,
            )
        finally:
            await http.close()
            await pool.aclose()
    finally:
        await client.close()
