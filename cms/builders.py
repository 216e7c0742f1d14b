"""The per-feature builders of `open_services` (cms/wiring.py), each wiring one feature on one `Infra`
(cms/infra.py), in the order they depend on each other: the platform (queue, events, audit, settings,
sessions, mail, rate limits), content (collections, the records' store, the one record writer),
identity (both user systems, API keys, the authenticator), webhooks, the read cache, realtime, files,
system figures, metrics and backups. A builder that subscribes to the event bus does so as it runs, so
the order `open_services` calls them in is the order subscribers run in.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cms import redis_keys as keys
from cms.errors import Conflict
from cms.infra import Infra
from cms.jobs import JobQueue
from cms.observability.signals import Signals
from cms.security.tokens import TokenCodec
from cms.services.caching.catalog import Catalog
from cms.services.caching.definition_cache import DefinitionCache
from cms.services.caching.read_cache import DEFAULT_TTL_S as READ_CACHE_TTL_S
from cms.services.caching.read_cache import ReadCache
from cms.services.caching.result_sets import ResultSetCache
from cms.services.content.collections import CollectionService
from cms.services.content.draft_reads import DraftReads
from cms.services.content.draft_stores import DraftStores
from cms.services.content.drafts import WorkingCopies
from cms.services.content.file_downloads import FileDownloads
from cms.services.content.file_fields import FileRefs
from cms.services.content.file_intake import FileIntake
from cms.services.content.file_tokens import FileTokens
from cms.services.content.files import FileService
from cms.services.content.image_pool import ImagePool
from cms.services.content.index_sync import IndexSync
from cms.services.content.publishing import Publisher
from cms.services.content.record_writer import RecordWriter
from cms.services.content.releases import ReleaseService
from cms.services.content.scheduling import Scheduler
from cms.services.content.schema_run import RunDeps
from cms.services.content.schema_service import SCHEMA_LOCK_TTL_S, SchemaService
from cms.services.content.slow_queries import SlowQueryService, SlowQueryWatch
from cms.services.content.slow_query_board import SlowQueryBoard
from cms.services.content.thumbnails import Thumbnails
from cms.services.content.versions import RecordVersions
from cms.services.delivery.events import CollectionEvent, EventBus
from cms.services.delivery.mail import Mailer
from cms.services.delivery.realtime import EventStream, RealtimeHub, RealtimePublisher
from cms.services.delivery.webhook_outbox import WebhookOutbox
from cms.services.delivery.webhook_sender import WebhookSender, address_check
from cms.services.delivery.webhooks import WebhookService
from cms.services.identity import Identity
from cms.services.identity.api_keys import ApiKeyService
from cms.services.identity.authn import Authenticator
from cms.services.identity.credentials import Credentials
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.email_change import EmailChange
from cms.services.identity.login import Login
from cms.services.identity.mfa import TwoFactor
from cms.services.identity.oauth import OAuthLogin
from cms.services.identity.one_time_tokens import OneTimeTokens
from cms.services.identity.otp import OtpService
from cms.services.identity.password_reset import PasswordReset
from cms.services.identity.registration import Registration
from cms.services.identity.session_tokens import SessionService
from cms.services.identity.sessions import UserSessions
from cms.services.identity.systems import UserSystems
from cms.services.identity.verification import Verification
from cms.services.operations.audit import AuditService
from cms.services.operations.backups import BackupService
from cms.services.operations.rate_limits import LIMITER_TIMEOUT_S, RateLimitService
from cms.services.operations.settings import SettingsService
from cms.services.operations.shared_lock import SharedLock
from cms.store.admin_users import AdminUserRepository
from cms.store.api_keys import ApiKeyRepository
from cms.store.audit import AuditRepository
from cms.store.backups import DumpRepository
from cms.store.collection_users import CollectionUserRepository
from cms.store.collections import CollectionRepository
from cms.store.files import FileRepository
from cms.store.mfa import MfaRepository
from cms.store.oauth_identities import OAuthIdentityRepository
from cms.store.one_time_tokens import OneTimeTokenRepository
from cms.store.otp_codes import OtpCodeRepository
from cms.store.record_versions import RecordVersionRepository
from cms.store.records import RecordRepository
from cms.store.releases import ReleaseRepository
from cms.store.scan_line import ScanLine
from cms.store.schedules import ScheduleRepository
from cms.store.schema_journal import SchemaJournalRepository
from cms.store.sessions import SessionRepository
from cms.store.settings import SettingsRepository
from cms.store.transactions import Transactions
from cms.store.webhooks import DeliveryLog, DeliveryOutbox, WebhookRepository
from cms.store.working_copies import WorkingCopyRepository


def _setting_on(settings: SettingsService, key: str) -> Callable[[], Awaitable[bool]]:
    """A switch that reads the boolean setting `key` (cached by the settings service)."""

    async def on() -> bool:
        return bool(await settings.value(key))

    return on


@dataclass(frozen=True)
class Platform:
    """What every feature builds on: the job queue, the event bus, audit, settings, sessions,
    mail and one-time tokens."""

    jobs: JobQueue
    events: EventBus
    audit: AuditService
    settings: SettingsService
    codec: TokenCodec
    sessions: SessionService
    mailer: Mailer
    one_time: OneTimeTokens
    rate_limits: RateLimitService
    definitions: DefinitionCache
    """Collection definitions and webhook lists (the catalog epoch)."""
    signals: Signals
    """What this process reports about itself (cms.observability.signals), for every sink."""


async def build_platform(infra: Infra) -> Platform:
    """The platform services; applies the audit retention setting and subscribes the audit log to
    the bus (audit and session events).
    Sessions and definitions are cached in-process under two Redis epochs read in one `MGET`."""
    config, db, clock = infra.config, infra.db, infra.clock
    jobs = JobQueue(infra.redis, config.queue_name)
    events = EventBus()
    audit = AuditService(AuditRepository(db), clock=clock)
    settings = SettingsService(SettingsRepository(db), infra.redis, events,
                               version_key=keys.settings_version(config.mongodb_db))
    settings.on_change("audit_retention_days", audit.apply_retention)
    await audit.apply_retention(int((await settings.values())["audit_retention_days"]))
    audit.subscribe_to(events)  # the one writer of the audit log: audit and session events
    codec = TokenCodec(config.secret_key, clock=clock)
    catalog_epoch, session_epoch = keys.catalog_epoch(config.mongodb_db), keys.session_epoch(config.mongodb_db)
    signals = infra.signals
    validity = DefinitionCache(infra.cache_redis, session_epoch, companions=(catalog_epoch,),
                               on_lookup=functools.partial(signals.cache, "session"))
    rate_limits = RateLimitService(infra.redis, settings, key_prefix=keys.rate_limit_prefix(config.mongodb_db),
                                   window_s=config.rate_limit_window_s,
                                   timeout_s=min(LIMITER_TIMEOUT_S, config.database_timeout_s), events=events,
                                   signals=signals)
    return Platform(jobs=jobs, events=events, audit=audit, settings=settings, codec=codec,
                    sessions=SessionService(SessionRepository(db), codec, clock=clock, events=events,
                                            validity=validity),
                    definitions=DefinitionCache(infra.cache_redis, catalog_epoch, companions=(session_epoch,),
                                                on_lookup=functools.partial(signals.cache, "definition")),
                    mailer=Mailer(jobs, config.base_url),
                    one_time=OneTimeTokens(OneTimeTokenRepository(db), clock=clock), rate_limits=rate_limits,
                    signals=signals)


@dataclass(frozen=True)
class Drafts:
    """Drafts and scheduled publishing (decisions.md, Drafts, versions and scheduled publishing): the
    working copies' writes (`copies`, which `RecordService` routes the writes of collections with
    drafts to), the `?draft=true` reads, publishing (`publisher`: `on_published` is the seam of
    versions, `publish_many` that of releases), the schedules (`scheduler.run_due`: the worker job) and
    the releases (`releases`: many records published together, now or scheduled)."""

    copies: WorkingCopies
    reads: DraftReads
    publisher: Publisher
    scheduler: Scheduler
    releases: ReleaseService


@dataclass(frozen=True)
class Content:
    """Collections (look-ups in the catalog, writes in the service), the records' store and the one
    record writer (REST, register, CSV import, the admin UI), the slow query watch on that store and
    the admins' view of it, the start-up sync of record indexes, and drafts."""

    record_repository: RecordRepository
    file_repository: FileRepository
    transactions: Transactions
    writer: RecordWriter
    versions: RecordVersions
    catalog: Catalog
    collections: CollectionService
    definitions: DefinitionCache
    slow_query_watch: SlowQueryWatch
    slow_queries: SlowQueryService
    index_sync: IndexSync
    drafts: Drafts
    collection_repository: CollectionRepository


async def build_content(infra: Infra, platform: Platform) -> Content:
    """The collection service on the records' store and the one record writer (its writes run in a
    transaction when the bus's outbox wants the collection's events, where the server has them);
    fills in default access rules of collections stored before rules existed. The writer stores record
    versions (`RecordVersions`), which forget a deleted collection's versions (event subscriber). The
    store's list queries past SLOW_QUERY_MS go to the slow query board in the queue's Redis; the index
    sync's lock is there too."""
    config, capabilities = infra.config, infra.capabilities
    definitions = platform.definitions
    collection_repository = CollectionRepository(infra.db)
    catalog = Catalog(collection_repository, definitions, locales=platform.settings.stored_locales)
    board = SlowQueryBoard(infra.redis, config.mongodb_db)
    watch = SlowQueryWatch(board, catalog, platform.signals, threshold_ms=config.slow_query_ms,
                           index_sorts=capabilities.index_sorts)
    record_repository = RecordRepository(infra.db, capabilities, scans=ScanLine(
        config.list_scan_slots, max_per_client=config.list_scan_per_client), watch=watch)
    working = WorkingCopyRepository(infra.db, capabilities, scans=record_repository.scans)
    schedules = ScheduleRepository(infra.db)
    await schedules.ensure_indexes()
    collections = CollectionService(collection_repository, record_repository, platform.settings,
                                    platform.events, catalog=catalog, clock=infra.clock,
                                    drafts=DraftStores(record_repository, working, schedules, infra.clock))
    platform.settings.on_change("locales", collections.locales_changed)
    await collections.fill_default_rules()
    transactions = Transactions(infra.mongo, enabled=capabilities.transactions)
    file_repository = FileRepository(infra.db)
    version_repository = RecordVersionRepository(infra.db)
    await version_repository.ensure_indexes()
    versions = RecordVersions(version_repository)
    platform.events.subscribe(versions.on_collection_events, CollectionEvent)
    writer = RecordWriter(catalog, record_repository, platform.events, clock=infra.clock,
                          transactions=transactions, group_commit=True, versions=versions,
                          file_refs=FileRefs(file_repository))
    copies = WorkingCopies(catalog, record_repository, working, writer, schedules, events=platform.events,
                           transactions=transactions)
    publisher = Publisher(copies)
    scheduler = Scheduler(copies, publisher, platform.events, batches=transactions.enabled)
    release_repository = ReleaseRepository(infra.db)
    await release_repository.ensure_indexes()
    drafts = Drafts(copies=copies, reads=DraftReads(catalog, copies), publisher=publisher, scheduler=scheduler,
                    releases=ReleaseService(release_repository, copies, publisher, scheduler, platform.events))
    return Content(record_repository=record_repository, file_repository=file_repository, transactions=transactions,
                   writer=writer,
                   versions=versions, catalog=catalog, collections=collections, definitions=definitions,
                   slow_query_watch=watch,
                   slow_queries=SlowQueryService(board, catalog, collections, index_sorts=capabilities.index_sorts,
                                                 clock=infra.clock),
                   index_sync=IndexSync(collections, SharedLock(infra.redis, keys.index_sync_lock(config.mongodb_db))),
                   drafts=drafts, collection_repository=collection_repository)


def build_schema(infra: Infra, platform: Platform, content: Content) -> SchemaService:
    """Schema as code: export, diff and apply of snapshots, one apply at a time across replicas (the
    schema lock in the queue's Redis; a second is refused with 409), journaled in MongoDB."""
    deps = RunDeps(collections=content.collection_repository, records=content.record_repository,
                   journal=SchemaJournalRepository(infra.db), service=content.collections, catalog=content.catalog,
                   transactions=content.transactions, events=platform.events, clock=infra.clock)
    lock = SharedLock(infra.redis, keys.schema_lock(infra.config.mongodb_db), ttl_s=SCHEMA_LOCK_TTL_S,
                      renew_every_s=SCHEMA_LOCK_TTL_S / 3, refusal=Conflict)
    return SchemaService(deps, lock)


def build_read_cache(infra: Infra, platform: Platform) -> tuple[ReadCache, ResultSetCache]:
    """The read cache and the result sets beside it (same Redis, prefix, lifetime and switch: the
    `read_cache_enabled` setting); the read cache subscribes to record and collection events last, so
    a version is bumped after every other subscriber's writes."""
    prefix = keys.read_cache_prefix(infra.config.mongodb_db)
    switch = _setting_on(platform.settings, "read_cache_enabled")
    read_cache = ReadCache(infra.cache_redis, prefix=prefix, switch=switch,
                           on_lookup=functools.partial(platform.signals.cache, "read"))
    platform.events.subscribe(read_cache.on_record_events)
    platform.events.subscribe(read_cache.on_collection_events, CollectionEvent)
    return read_cache, ResultSetCache(infra.cache_redis, prefix=prefix, ttl_s=READ_CACHE_TTL_S, switch=switch)


def build_realtime(infra: Infra, platform: Platform, content: Content, authenticator: Authenticator) -> RealtimeHub:
    """The realtime stream on the queue's Redis, its publisher (subscribed after the read cache, so a
    client that reads on an event never gets the answer from before it) and this process's hub."""
    stream = EventStream(infra.redis, infra.config.mongodb_db)
    platform.events.subscribe(RealtimePublisher(stream).on_record_events)

    async def max_connections() -> int:
        return int((await platform.settings.values())["realtime_max_connections"])

    return RealtimeHub(stream, content.catalog, content.record_repository, authenticator,
                       session_epoch=platform.sessions.epoch, max_connections=max_connections, clock=infra.clock,
                       block_ms=max(100, min(5_000, (infra.config.database_timeout_s - 1) * 1000)),
                       signals=platform.signals)


async def build_files(infra: Infra, platform: Platform, content: Content, authenticator: Authenticator,
                      read_cache: ReadCache) -> FileService:
    """The file service with its image workers (started at first use, stopped by `FileService.close`),
    thumbnails (their makers' locks in the queue's Redis) and file tokens; deleting a record or
    collection deletes its files, and a write that takes files out of a file field deletes them
    (event subscribers). The files' existence is kept in `read_cache` (thumbnail downloads)."""
    file_repository = content.file_repository
    await file_repository.ensure_indexes()
    pool = ImagePool()
    thumbnails = Thumbnails(file_repository, pool, infra.redis, infra.config.mongodb_db, signals=platform.signals,
                            clock=infra.clock)
    tokens = FileTokens(platform.codec, authenticator)
    downloads = FileDownloads(file_repository, content.catalog, content.record_repository, thumbnails=thumbnails,
                              tokens=tokens, read_cache=read_cache, drafts=content.drafts.copies)
    files = FileService(file_repository, content.catalog, content.record_repository, platform.settings,
                        intake=FileIntake(file_repository, pool), downloads=downloads, tokens=tokens, pool=pool,
                        read_cache=read_cache, clock=infra.clock)
    platform.events.subscribe(files.on_record_events)
    platform.events.subscribe(files.on_collection_events, CollectionEvent)
    return files


async def build_identity(infra: Infra, platform: Platform, content: Content) -> tuple[Identity, ApiKeyService,
                                                                                     Authenticator]:
    """Both user systems with every identity flow, API keys and the one authenticator; the user
    systems clean up after deleted auth collections and user records (event subscribers)."""
    db, clock, p = infra.db, infra.clock, platform
    admin_users = AdminUserRepository(db)
    api_key_repository = ApiKeyRepository(db)
    collection_users = CollectionUserRepository(db)
    otp_codes = OtpCodeRepository(db)
    factors = MfaRepository(db)
    identities = OAuthIdentityRepository(db)
    for repository in (api_key_repository, collection_users, otp_codes, factors, identities):
        await repository.ensure_indexes()
    systems = UserSystems(admin_users, collection_users, content.writer, content.catalog, p.sessions, p.settings,
                          clock=clock)
    p.events.subscribe(systems.on_record_events)
    p.events.subscribe(systems.on_collection_events, CollectionEvent)
    deps = IdentityDeps(systems=systems, sessions=p.sessions, settings=p.settings, events=p.events,
                        one_time_tokens=p.one_time, mailer=p.mailer, jobs=p.jobs, clock=clock)
    credentials = Credentials(deps)
    verification = Verification(deps)
    two_factor = TwoFactor(deps, factors, p.codec, credentials)
    systems.on_forgotten(two_factor.forget_audience)
    login = Login(deps, two_factor)
    oauth = OAuthLogin(deps, login, two_factor, identities, infra.http, infra.config.secret_key)
    systems.on_forgotten(oauth.forget_audience)
    sessions = UserSessions(deps)
    identity = Identity(
        systems=systems,
        credentials=credentials,
        registration=Registration(deps, credentials, verification),
        login=login,
        two_factor=two_factor,
        oauth=oauth,
        otp=OtpService(deps, login, otp_codes),
        verification=verification,
        password_reset=PasswordReset(deps, credentials),
        email_change=EmailChange(deps, credentials, identities),
        sessions=sessions,
    )
    api_keys = ApiKeyService(api_key_repository, admin_users, p.events, clock=clock,
                             on_revoked=p.sessions.invalidate)
    return identity, api_keys, Authenticator(p.codec, sessions, api_keys)


async def build_webhooks(infra: Infra, platform: Platform, content: Content,
                         identity: Identity) -> tuple[WebhookService, WebhookOutbox]:
    """The webhook service and its outbox, attached to the event bus; the SSRF rule is on in
    production mode unless WEBHOOK_ALLOW_PRIVATE."""
    config, db = infra.config, infra.db
    allow_private = config.embedded or config.webhook_allow_private
    webhook_repository, delivery_outbox, delivery_log = WebhookRepository(db), DeliveryOutbox(db), DeliveryLog(db)
    for repository in (webhook_repository, delivery_outbox, delivery_log):
        await repository.ensure_indexes()
    sender = WebhookSender(infra.http, timeout_s=config.webhook_timeout_s)
    outbox = WebhookOutbox(webhook_repository, delivery_outbox, delivery_log, content.catalog, platform.jobs,
                           sender, clock=infra.clock, creator=identity.systems.admin.principal_of,
                           definitions=content.definitions, signals=platform.signals)
    webhooks = WebhookService(webhook_repository, delivery_log, content.catalog, outbox,
                              address_check(allow_private=allow_private), clock=infra.clock,
                              definitions=content.definitions)
    platform.events.attach_outbox(outbox)
    platform.events.subscribe(webhooks.on_collection_events, CollectionEvent)
    return webhooks, outbox


def build_backups(infra: Infra, platform: Platform, read_cache: ReadCache) -> BackupService:
    """Backups and restores into BACKUPS_PATH, one at a time across replicas (the lock in the queue's
    Redis); a restore bumps every read-cache version and drops the cached settings and sessions."""
    config = infra.config
    return BackupService(DumpRepository(infra.db), platform.events, config.backups_path,
                         SharedLock(infra.redis, keys.backup_lock(config.mongodb_db)), clock=infra.clock,
                         on_restored=[read_cache.bump_all, platform.settings.invalidate,
                                      platform.sessions.invalidate])
