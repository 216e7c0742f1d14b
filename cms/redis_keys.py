"""Every Redis key name of the service, spelled once, as functions of the database name (`MONGODB_DB`),
so services of several databases can share one Redis (docs/operations/scaling.md, "Processes").

The strings are fixed: deployments hold data under them (counters, rate-limit windows), so a change
here is a migration. `tests/test_counters.py` pins each one.

The module sits below every layer that names a key (services, cms/observability's dashboard minutes
and request log, the admin UI's shared refreshes, cms/infra.py's client name) and imports nothing.

Not here: the arq queue, named by `QUEUE_NAME` (default `cms.config.QUEUE_NAME`, `cms:queue`), and
the keys arq derives from it and from job ids (`arq:job:<id>`, `arq:result:<id>`, ...).
"""

from __future__ import annotations

ROOT = "cms"
"""The first part of every key and of the Redis client name."""


def client_name(db: str) -> str:
    """The name (CLIENT SETNAME, not a key) of every Redis connection of a process on database `db`:
    `cms:<db>`."""
    return f"{ROOT}:{db}"


def settings_version(db: str) -> str:
    """The settings version counter of database `db` (on the queue's Redis): `cms:settings:version:<db>`."""
    return f"{ROOT}:settings:version:{db}"


def session_epoch(db: str) -> str:
    """The session epoch (logouts, revocations, auth-collection changes, restores) of database `db`,
    on the cache Redis: `cms:sessions:epoch:<db>`."""
    return f"{ROOT}:sessions:epoch:{db}"


def read_cache_prefix(db: str) -> str:
    """The prefix of the read cache's keys of database `db`, on the cache Redis: `cms:rc:<db>`."""
    return f"{ROOT}:rc:{db}"


def read_cache_epoch(prefix: str) -> str:
    """The epoch of a read cache whose keys start with `prefix`: `<prefix>:epoch`. Under
    `read_cache_prefix(db)` it is the catalog epoch (`catalog_epoch`)."""
    return f"{prefix}:epoch"


def read_cache_version(prefix: str, collection: str) -> str:
    """The version counter of `collection` (its name) in a read cache under `prefix`: `<prefix>:v:<name>`."""
    return f"{prefix}:v:{collection}"


def read_cache_entry(prefix: str, entry: str) -> str:
    """A cached body under `prefix`; `entry` is `read_cache.entry_key`'s hash: `<prefix>:e:<entry>`."""
    return f"{prefix}:e:{entry}"


def read_cache_changes(prefix: str, collection: str) -> str:
    """The change log of `collection` (its name) in a read cache under `prefix`: a list of the record ids
    each version bump changed (`change_log`): `<prefix>:ch:<name>`."""
    return f"{prefix}:ch:{collection}"


def read_cache_ids(prefix: str, collection: str) -> str:
    """The index of the result sets of `collection` (its name) in a read cache under `prefix`: a hash
    of the entries kept under its current stamp and their sizes (`result_sets`): `<prefix>:ids:<name>`."""
    return f"{prefix}:ids:{collection}"


def catalog_epoch(db: str) -> str:
    """The catalog epoch of database `db` (every collection change, webhook change and restore): the
    read cache's epoch, `cms:rc:<db>:epoch`, so one bump makes both caches stale."""
    return read_cache_epoch(read_cache_prefix(db))


def rate_limit_prefix(db: str) -> str:
    """The prefix the rate limiter (the `limits` library) puts before its window keys for database
    `db`: `cms:ratelimit:<db>`."""
    return f"{ROOT}:ratelimit:{db}"


def admin_ui_refresh(db: str, token_digest: str) -> str:
    """Where the admin UI leaves the sealed result of one refresh for other replicas (database `db`,
    `token_digest` the spent refresh token's SHA-256 hex): `cms:admin-ui:refresh:<db>:<digest>`."""
    return f"{ROOT}:admin-ui:refresh:{db}:{token_digest}"


def admin_ui_refresh_lock(db: str, token_digest: str) -> str:
    """The lock the replica that performs that refresh holds: `<admin_ui_refresh(...)>:lock`."""
    return f"{admin_ui_refresh(db, token_digest)}:lock"


def realtime_stream(db: str) -> str:
    """The Redis Stream every replica appends its record events (and realtime control entries) to and
    reads them from, for database `db` (decisions.md, Realtime): `cms:rt:<db>:events`."""
    return f"{ROOT}:rt:{db}:events"


def realtime_floor(db: str) -> str:
    """The stream id below which realtime history may be missing (trimmed or lost with Redis): a
    resume from an older id gets `resync`: `cms:rt:<db>:floor`."""
    return f"{ROOT}:rt:{db}:floor"


def realtime_client(db: str, client_id: str) -> str:
    """The state of one realtime client (its subscriptions and the credential behind them), kept
    10 minutes past its last stream: `cms:rt:<db>:client:<client id>`."""
    return f"{ROOT}:rt:{db}:client:{client_id}"


def realtime_active(db: str) -> str:
    """Present while realtime is in use on database `db` (a client connected within 10 minutes): record
    events are appended to the stream only then: `cms:rt:<db>:active`."""
    return f"{ROOT}:rt:{db}:active"


def backup_lock(db: str) -> str:
    """The lock one backup or restore of database `db` holds while it runs, on the queue's Redis (shared
    by every replica; `cms.services.operations.shared_lock`): `cms:backups:lock:<db>`."""
    return f"{ROOT}:backups:lock:{db}"


def thumbnail_lock(db: str, thumb_id: str) -> str:
    """The lock of the replica making thumbnail `thumb_id` (`<file id>.<size>.<format>`) of database
    `db`, on the queue's Redis (`cms.services.content.thumbnails`): `cms:thumbs:lock:<db>:<thumb id>`."""
    return f"{ROOT}:thumbs:lock:{db}:{thumb_id}"


def schema_lock(db: str) -> str:
    """The lock one schema apply (or the completion of an interrupted one) on database `db` holds while it
    runs, on the queue's Redis (shared by every replica; `cms.services.operations.shared_lock`):
    `cms:schema:lock:<db>`."""
    return f"{ROOT}:schema:lock:{db}"


def dashboard_minute(db: str, minute: int) -> str:
    """The dashboard's counters of one minute (`minute`: epoch seconds // 60) of database `db`, a hash
    every replica adds to (cms.observability.timeline), on the queue's Redis: `cms:obs:<db>:m:<minute>`."""
    return f"{ROOT}:obs:{db}:m:{minute}"


def request_log(db: str) -> str:
    """The list of the last requests of database `db`, newest first, across replicas
    (cms.observability.request_log): `cms:obs:<db>:log`."""
    return f"{ROOT}:obs:{db}:log"


def request_log_routes(db: str) -> str:
    """The route templates seen in the request log of database `db` (a sorted set scored by when each
    was last seen): `cms:obs:<db>:routes`."""
    return f"{ROOT}:obs:{db}:routes"


def slow_queries(db: str) -> str:
    """The slow query shapes of database `db` that every replica reports (cms.services.content.slow_queries):
    a hash of entry id -> JSON entry, on the queue's Redis: `cms:slowq:<db>`."""
    return f"{ROOT}:slowq:{db}"


def slow_queries_seen(db: str) -> str:
    """When each entry of `slow_queries(db)` was last seen (a sorted set of entry ids scored by epoch
    seconds), which bounds the hash by dropping the oldest: `cms:slowq:<db>:seen`."""
    return f"{slow_queries(db)}:seen"


def index_sync_lock(db: str) -> str:
    """The lock the replica that syncs every collection's record indexes at start-up holds, on the
    queue's Redis (`cms.services.operations.shared_lock`): `cms:indexes:lock:<db>`."""
    return f"{ROOT}:indexes:lock:{db}"
