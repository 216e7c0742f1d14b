"""open_services(config): the one place that opens clients and builds the services.

Used by the web app (cleanup_ctx), the worker (on_startup), the CLI and tests. Each process
gets one AsyncMongoClient and one ArqRedis pool, closed in reverse order on exit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from cms.clock import Clock, utcnow
from cms.config import Config
from cms.jobs import JobQueue
from cms.models import Session
from cms.security.tokens import TokenCodec
from cms.services.accounts import AccountService
from cms.services.audit import AuditService
from cms.services.collection_auth import CollectionAuthService
from cms.services.collections import CollectionService
from cms.services.email_verification import EmailVerificationService
from cms.services.events import EventDispatcher
from cms.services.fields import RecordSchemas
from cms.services.mail import Mailer
from cms.services.one_time_tokens import OneTimeTokens
from cms.services.otp import OtpService
from cms.services.password_resets import PasswordResetService
from cms.services.rate_limits import RateLimitService
from cms.services.records import RecordService
from cms.services.sessions import SessionService
from cms.services.settings import SettingsService
from cms.services.system import SystemService
from cms.store.admin_users import AdminUserRepository
from cms.store.audit import AuditRepository
from cms.store.client import database_stats, detect_capabilities, ensure_indexes, open_client
from cms.store.collection_users import CollectionUserRepository
from cms.store.collections import CollectionRepository
from cms.store.one_time_tokens import OneTimeTokenRepository
from cms.store.otp_codes import OtpCodeRepository
from cms.store.records import RecordRepository
from cms.store.sessions import SessionRepository
from cms.store.settings import SettingsRepository


@dataclass
class Services:
    """Every service of one process; handlers and jobs take the one they need."""

    config: Config
    redis: ArqRedis
    jobs: JobQueue
    events: EventDispatcher
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


def redis_settings(url: str) -> RedisSettings:
    """arq connection settings for a redis:// URL, with explicit time-outs (seconds)."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_timeout = 5
    settings.conn_retries = 3
    return settings


async def redis_stats(pool: ArqRedis) -> dict[str, Any]:
    """A few figures from Redis INFO: clients, memory (bytes), uptime (seconds)."""
    info = await pool.info()
    return {k: info.get(k) for k in ("connected_clients", "used_memory", "uptime_in_seconds", "redis_version")}


@asynccontextmanager
async def open_services(config: Config, *, clock: Clock = utcnow) -> AsyncIterator[Services]:
    """Open MongoDB and Redis, ensure indexes, and yield the wired services.

    `config.mongodb_url` and `config.redis_url` must be set (embedded servers fill them in).
    Raises ValueError if they are not; driver errors propagate when a server does not answer."""
    if not config.mongodb_url or not config.redis_url:
        raise ValueError("open_services needs mongodb_url and redis_url")
    client = open_client(config.mongodb_url)
    try:
        db = client[config.mongodb_db]
        await ensure_indexes(db)
        capabilities = await detect_capabilities(db)
        pool = await create_pool(redis_settings(config.redis_url), default_queue_name=config.queue_name)
        try:
            jobs = JobQueue(pool, config.queue_name)
            events = EventDispatcher()
            settings = SettingsService(SettingsRepository(db))
            audit = AuditService(AuditRepository(db), clock=clock)

            async def on_refresh_reuse(session: Session) -> None:
                await audit.record("refresh_token_reuse", user_id=session.user_id,
                                   details={"session_id": session.id, "audience": session.audience})

            sessions = SessionService(SessionRepository(db), TokenCodec(config.secret_key, clock=clock), clock=clock,
                                      on_reuse=on_refresh_reuse)
            mailer = Mailer(jobs, config.base_url)
            one_time = OneTimeTokens(OneTimeTokenRepository(db), clock=clock)
            record_repository = RecordRepository(db, capabilities)
            collections = CollectionService(CollectionRepository(db), record_repository, settings, audit, clock=clock)
            schemas = RecordSchemas()
            accounts = AccountService(AdminUserRepository(db), sessions, one_time, mailer, settings, audit, clock=clock)
            collection_users = CollectionUserRepository(db)
            otp_codes = OtpCodeRepository(db)
            await collection_users.ensure_indexes()
            await otp_codes.ensure_indexes()
            collection_auth = CollectionAuthService(
                collections, collection_users, record_repository, schemas, sessions, one_time, mailer, settings,
                audit, events, clock=clock,
            )
            events.subscribe(collection_auth.on_record_events)
            collections.on_deleted(collection_auth.forget_collection)
            yield Services(
                config=config,
                redis=pool,
                jobs=jobs,
                events=events,
                settings=settings,
                audit=audit,
                rate_limits=RateLimitService(
                    config.redis_url, settings, key_prefix=f"cms:ratelimit:{config.mongodb_db}",
                    window_s=config.rate_limit_window_s,
                ),
                sessions=sessions,
                accounts=accounts,
                collections=collections,
                records=RecordService(collections, record_repository, schemas, events, clock=clock),
                system=SystemService(
                    pings={"mongodb": lambda: client.admin.command("ping"), "redis": pool.ping},
                    stats={"mongodb": lambda: database_stats(db), "redis": lambda: redis_stats(pool)},
                ),
                collection_auth=collection_auth,
                email_verification=EmailVerificationService(accounts, collection_auth, one_time),
                password_resets=PasswordResetService(accounts, collection_auth, one_time, jobs, mailer, settings, audit),
                otp=OtpService(collection_auth, otp_codes, jobs, mailer, audit, clock=clock),
            )
        finally:
            await pool.aclose()
    finally:
        await client.close()
