"""Configuration: one frozen `Config`, read once from the environment (decisions.md, Running it).

`Config.from_env(environ)` is the only reader of environment variables; it validates every
value and raises `ConfigError` naming the variable, which the CLI prints as one line.
Tests build their own `Config(...)` directly.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from argon2 import Parameters

from cms.security.passwords import DEFAULT_MEMORY_KIB, DEFAULT_PARALLELISM, DEFAULT_TIME_COST, argon2id

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
QUEUE_NAME = "cms:queue"
"""The arq queue (a Redis sorted set) when `QUEUE_NAME` is not set."""
MAX_QUEUE_NAME_LENGTH = 100
EMBEDDED_COLD_PAGE_RECORDS = 1_000
"""Records in one collection from which, on the embedded server, a cold list page (a query no cache
holds) takes more than 250 ms on a 2-core machine: measured by `scripts/bench/bench_envelope.py`
(docs/performance.md, The embedded server's envelope). Past it, `cms serve` warns at start-up and the
admin UI's records page says so (cms.services.content.envelope)."""
METRICS_TOKEN_MIN_LENGTH = 16
SLOW_QUERY_MS = 200
"""`SLOW_QUERY_MS` when unset: list queries of records that take longer are slow (issue 38, item 3)."""
MAX_SLOW_QUERY_MS = 600_000
PASSWORD_HASH_MAX_MEMORY_KIB = 4 * 1024 * 1024
"""The most memory one password hash may take (4 GiB): a bound on a typing slip, not a recommendation."""


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


@dataclass(frozen=True)
class Config:
    """Every setting the processes need. Secrets are kept out of `repr`.

    `mongodb_url` / `redis_url` are None until embedded servers fill them in (see `cms.cli`).
    Sizes are bytes, times are seconds unless the name says otherwise.
    """

    secret_key: str = field(repr=False)
    mongodb_url: str | None = None
    mongodb_db: str = "cms"
    redis_url: str | None = None
    cache_redis_url: str | None = None
    """`CACHE_REDIS_URL`: a Redis for the response cache and the definition and session epochs only,
    which may evict (`allkeys-lru`); None keeps them in `redis_url` (the queue's, which must not)."""
    host: str = "127.0.0.1"
    port: int = 8090
    data_dir: Path = Path("cms_data")
    public_url: str | None = None
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_user: str | None = None
    smtp_password: str | None = field(default=None, repr=False)
    smtp_from_email: str = "noreply@localhost"
    smtp_from_name: str = "CMS"
    smtp_starttls: bool = True
    smtp_timeout_s: float = 30.0
    admin_email: str | None = None
    admin_password: str | None = field(default=None, repr=False)
    log_level: str = "INFO"
    log_format: str = "text"
    """`text` (one human-readable line per record) or `json` (one JSON object per line), `LOG_FORMAT`."""
    shutdown_timeout_s: int = 10
    """Seconds a stopping process gives in-flight requests (web) or running jobs (worker) to finish
    after SIGTERM or SIGINT before cancelling them (`SHUTDOWN_TIMEOUT_S`)."""
    cors_origins: tuple[str, ...] = ("*",)
    embedded: bool = False
    max_json_bytes: int = 1024 * 1024
    queue_name: str = QUEUE_NAME
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    rate_limit_window_s: int = 60
    webhook_allow_private: bool = False
    worker_max_jobs: int = 20
    """Jobs one worker runs at once (`WORKER_MAX_JOBS`)."""
    worker_poll_delay_s: float = 0.05
    """Seconds a worker waits between looks at the queue (`WORKER_POLL_DELAY_S`, in milliseconds
    there): arq starts at most `worker_max_jobs` jobs per look, so this bounds its rate."""
    webhook_timeout_s: float = 10.0
    """Time-out of one webhook delivery request, in seconds (decisions.md: 10 s)."""
    """Deliver webhooks to loopback, link-local and private addresses in production mode too
    (`WEBHOOK_ALLOW_PRIVATE`); embedded mode always allows them."""
    database_timeout_s: int = 20
    """Seconds a MongoDB or Redis operation may wait for the server (`DATABASE_TIMEOUT_S`): a stalled
    server then gives 503 `service_unavailable`, not a hung request (after at most about three such
    waits: the read, the driver's one retry and a new connection's handshake). Long operations are
    many short round trips (batches), each bounded by this."""
    embedded_cold_page_records: int = EMBEDDED_COLD_PAGE_RECORDS
    """The embedded server's envelope in records per collection (`EMBEDDED_COLD_PAGE_RECORDS`, default
    the measured EMBEDDED_COLD_PAGE_RECORDS): past it, embedded mode warns. Set it to what
    `scripts/bench/bench_envelope.py` measures on another machine."""
    metrics_enabled: bool = True
    """`METRICS_ENABLED` (default true): the Prometheus sink and `GET /metrics`; false adds no sink, no
    MongoDB command listener, and `/metrics` answers 404 (decisions.md, Metrics)."""
    metrics_token: str | None = field(default=None, repr=False)
    """`METRICS_TOKEN`: a bearer token that may read `/metrics` (and `cms worker`'s METRICS_PORT)
    besides admins; at least METRICS_TOKEN_MIN_LENGTH characters. None: admins only (and the
    worker's port unauthenticated)."""
    metrics_port: int | None = None
    """`METRICS_PORT`: the port on which `cms worker` serves its own `/metrics` (all interfaces);
    None serves none. `cms serve` ignores it (its metrics are at `/metrics` on the API port)."""
    metrics_multiprocess_dir: Path | None = None
    """prometheus-client's multiprocess directory: `cms serve --workers N` makes a fresh temporary one
    and hands it to its web processes here and as PROMETHEUS_MULTIPROC_DIR (which prometheus-client
    reads when imported), so one scrape covers them all. Not read from the environment."""
    list_scan_slots: int = 4
    """List queries (scans) one process runs at once (`LIST_SCAN_SLOTS`, 1..64); a few more may wait
    up to 2 s, the rest get 503 `service_unavailable` with `Retry-After` (`cms.store.scan_line`)."""
    list_scan_per_client: int = 8
    """Places in that line (running and waiting list queries) one client, the signed-in user or else
    the client's address, may hold at once (`LIST_SCAN_PER_CLIENT`, 1..80); its next list query that
    needs a scan gets 503 at once, so one client cannot fill the line for the others."""
    password_time_cost: int = DEFAULT_TIME_COST
    """argon2id passes of a new password hash (`PASSWORD_HASH_TIME_COST`, 1..100)."""
    password_memory_kib: int = DEFAULT_MEMORY_KIB
    """argon2id memory of a new password hash in KiB (`PASSWORD_HASH_MEMORY_KIB`, 1,024..4 GiB and at
    least 8 per lane). The default with the two others is OWASP's minimum (docs/concepts/auth.md)."""
    password_parallelism: int = DEFAULT_PARALLELISM
    """argon2id lanes (threads) of a new password hash (`PASSWORD_HASH_PARALLELISM`, 1..64). Hashes made
    with other parameters verify, and are rehashed with these at the user's next successful login."""
    slow_query_ms: int = SLOW_QUERY_MS
    """A list query of records that takes longer than this many milliseconds is slow (`SLOW_QUERY_MS`,
    0..MAX_SLOW_QUERY_MS; 0: every one): logged once per shape an hour, counted in `/metrics`, listed for
    admins with a suggested index (cms.services.content.slow_queries)."""
    backup_dir: Path | None = None
    """Where backups are written (`BACKUP_DIR`); None means `<data_dir>/backups` (see `backups_path`)."""
    schema_file: Path | None = None
    """A schema snapshot `cms serve` applies at start-up (`SCHEMA_FILE`; decisions.md, Schema as code), once
    across replicas started together; None applies nothing."""
    schema_allow_data_loss: bool = False
    """Whether the start-up apply of `schema_file` may lose data (`SCHEMA_ALLOW_DATA_LOSS`, default false:
    a snapshot that deletes or converts stored data stops the start-up)."""

    @property
    def backups_path(self) -> Path:
        """The backup directory: `BACKUP_DIR`, else `<data_dir>/backups`."""
        return self.backup_dir or self.data_dir / "backups"

    @property
    def password_parameters(self) -> Parameters:
        """The argon2id parameters of new password hashes (`password_time_cost`, `password_memory_kib`,
        `password_parallelism`)."""
        return argon2id(self.password_time_cost, self.password_memory_kib, self.password_parallelism)

    @property
    def base_url(self) -> str:
        """Base of links in emails: `PUBLIC_URL`, else `http://HOST:PORT` (no trailing slash)."""
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    def with_urls(self, *, mongodb_url: str | None, redis_url: str | None) -> Config:
        """A copy with the embedded servers' URLs filled in where the environment gave none."""
        return replace(self, mongodb_url=self.mongodb_url or mongodb_url, redis_url=self.redis_url or redis_url)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        *,
        host: str | None = None,
        port: int | None = None,
        data_dir: Path | None = None,
    ) -> Config:
        """Build and validate a Config from `environ` plus CLI overrides (`host`, `port`, `data_dir`).

        Embedded mode is on when `MONGODB_URL` or `REDIS_URL` is missing; then `SECRET_KEY` may be
        omitted and is generated once into `<data_dir>/secret_key`. Raises ConfigError naming the
        first bad variable.
        """
        env = {k: v for k, v in environ.items() if v != ""}
        data_dir = data_dir or Path(env.get("CMS_DATA_DIR", "cms_data"))
        mongodb_url, redis_url, cache_redis_url = _server_urls(env)
        embedded = mongodb_url is None or redis_url is None
        secret_key = _secret_key(env, embedded, data_dir)
        log_level, log_format = _log_settings(env)
        admin_email, admin_password = _admin_bootstrap(env)
        public_url = env.get("PUBLIC_URL")
        if public_url is not None and not public_url.startswith(("http://", "https://")):
            raise ConfigError("PUBLIC_URL must start with http:// or https://")
        trusted_proxies = _networks(env, "TRUSTED_PROXIES")
        worker = WorkerOptions.from_env(env)
        origins = tuple(o.strip() for o in env.get("CORS_ORIGINS", "*").split(",") if o.strip())
        return cls(
            secret_key=secret_key,
            mongodb_url=mongodb_url,
            mongodb_db=_name(env, "MONGODB_DB", "cms"),
            redis_url=redis_url,
            cache_redis_url=cache_redis_url,
            host=host or "127.0.0.1",
            port=port or 8090,
            data_dir=data_dir,
            public_url=public_url,
            smtp_host=env.get("SMTP_HOST"),
            smtp_port=_int(env, "SMTP_PORT", 587, 1, 65535),
            smtp_user=env.get("SMTP_USER"),
            smtp_password=env.get("SMTP_PASSWORD"),
            smtp_from_email=env.get("SMTP_FROM_EMAIL", "noreply@localhost"),
            smtp_from_name=env.get("SMTP_FROM_NAME", "CMS"),
            smtp_starttls=_bool(env, "SMTP_STARTTLS", True),
            admin_email=admin_email,
            admin_password=admin_password,
            log_level=log_level,
            log_format=log_format,
            shutdown_timeout_s=worker.shutdown_timeout_s,
            queue_name=worker.queue_name,
            cors_origins=origins or ("*",),
            embedded=embedded,
            trusted_proxies=trusted_proxies,
            webhook_allow_private=_bool(env, "WEBHOOK_ALLOW_PRIVATE", False),
            worker_max_jobs=worker.max_jobs,
            worker_poll_delay_s=worker.poll_delay_s,
            backup_dir=Path(env["BACKUP_DIR"]) if "BACKUP_DIR" in env else None,
            schema_file=Path(env["SCHEMA_FILE"]) if env.get("SCHEMA_FILE") else None,  # empty: none
            schema_allow_data_loss=_bool(env, "SCHEMA_ALLOW_DATA_LOSS", False),
            database_timeout_s=_int(env, "DATABASE_TIMEOUT_S", 20, 1, 600),
            embedded_cold_page_records=_int(env, "EMBEDDED_COLD_PAGE_RECORDS", EMBEDDED_COLD_PAGE_RECORDS,
                                            1, 1_000_000_000),
            **_metrics_settings(env),
            list_scan_slots=_int(env, "LIST_SCAN_SLOTS", 4, 1, 64),
            list_scan_per_client=_int(env, "LIST_SCAN_PER_CLIENT", 8, 1, 80),
            slow_query_ms=_int(env, "SLOW_QUERY_MS", SLOW_QUERY_MS, 0, MAX_SLOW_QUERY_MS),
            **_password_settings(env),
        )


def _password_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """`password_time_cost`, `password_memory_kib` and `password_parallelism` from PASSWORD_HASH_TIME_COST,
    PASSWORD_HASH_MEMORY_KIB and PASSWORD_HASH_PARALLELISM. Raises ConfigError naming the variable."""
    time_cost = _int(env, "PASSWORD_HASH_TIME_COST", DEFAULT_TIME_COST, 1, 100)
    memory_kib = _int(env, "PASSWORD_HASH_MEMORY_KIB", DEFAULT_MEMORY_KIB, 1024, PASSWORD_HASH_MAX_MEMORY_KIB)
    # at least 1,024 KiB over at most 64 lanes: argon2's floor of 8 KiB per lane always holds
    parallelism = _int(env, "PASSWORD_HASH_PARALLELISM", DEFAULT_PARALLELISM, 1, 64)
    return {"password_time_cost": time_cost, "password_memory_kib": memory_kib, "password_parallelism": parallelism}


def _metrics_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """`metrics_enabled`, `metrics_token` and `metrics_port` from METRICS_ENABLED, METRICS_TOKEN and
    METRICS_PORT. Raises ConfigError naming the variable."""
    token = env.get("METRICS_TOKEN")
    if token is not None and (len(token) < METRICS_TOKEN_MIN_LENGTH or not token.isprintable() or " " in token):
        raise ConfigError(f"METRICS_TOKEN must be at least {METRICS_TOKEN_MIN_LENGTH} printable characters "
                          "without spaces")
    port = _int(env, "METRICS_PORT", 0, 1, 65535) if "METRICS_PORT" in env else None
    return {"metrics_enabled": _bool(env, "METRICS_ENABLED", True), "metrics_token": token, "metrics_port": port}


def _log_settings(env: Mapping[str, str]) -> tuple[str, str]:
    """`(LOG_LEVEL, LOG_FORMAT)`, defaults INFO and text. Raises ConfigError for another value."""
    log_level = env.get("LOG_LEVEL", "INFO").upper()
    if log_level not in LOG_LEVELS:
        raise ConfigError(f"LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
    log_format = env.get("LOG_FORMAT", "text").lower()
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
    return log_level, log_format


def _admin_bootstrap(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """`(ADMIN_EMAIL, ADMIN_PASSWORD)`, both set or both None. Raises ConfigError for one alone."""
    admin_email, admin_password = env.get("ADMIN_EMAIL"), env.get("ADMIN_PASSWORD")
    if (admin_email is None) != (admin_password is None):
        raise ConfigError("ADMIN_EMAIL and ADMIN_PASSWORD must be set together")
    return admin_email, admin_password


def _server_urls(env: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """`(MONGODB_URL, REDIS_URL, CACHE_REDIS_URL)`, each None when unset. Raises ConfigError for a
    URL of the wrong scheme."""
    mongodb_url = env.get("MONGODB_URL")
    redis_url = env.get("REDIS_URL")
    if mongodb_url is not None and not mongodb_url.startswith(("mongodb://", "mongodb+srv://")):
        raise ConfigError("MONGODB_URL must start with mongodb:// or mongodb+srv://")
    cache_redis_url = env.get("CACHE_REDIS_URL")
    for name, url in (("REDIS_URL", redis_url), ("CACHE_REDIS_URL", cache_redis_url)):
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"{name} must start with redis://, rediss:// or unix://")
    return mongodb_url, redis_url, cache_redis_url


def _secret_key(env: Mapping[str, str], embedded: bool, data_dir: Path) -> str:
    """SECRET_KEY (at least 32 characters); in embedded mode, when unset, the one kept in
    `data_dir`. Raises ConfigError."""
    secret_key = env.get("SECRET_KEY")
    if secret_key is None:
        if not embedded:
            raise ConfigError("SECRET_KEY is missing (required when MONGODB_URL and REDIS_URL are set)")
        return _stored_secret_key(data_dir)
    if len(secret_key) < 32:
        raise ConfigError("SECRET_KEY must be at least 32 characters")
    return secret_key


@dataclass(frozen=True)
class WorkerOptions:
    """The process settings a worker and the web app share (decisions.md, Running it): the arq
    queue's name, SHUTDOWN_TIMEOUT_S (seconds), WORKER_MAX_JOBS and WORKER_POLL_DELAY_MS (read
    into seconds). `arq workers.WorkerSettings` reads them without building a whole Config."""

    queue_name: str = QUEUE_NAME
    shutdown_timeout_s: int = 10
    max_jobs: int = 20
    poll_delay_s: float = 0.05

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> WorkerOptions:
        """Parse the variables above from `environ`; ConfigError names the first bad one."""
        env = {k: v for k, v in environ.items() if v != ""}
        return cls(queue_name=_queue_name(env), shutdown_timeout_s=_int(env, "SHUTDOWN_TIMEOUT_S", 10, 1, 3600),
                   max_jobs=_int(env, "WORKER_MAX_JOBS", 20, 1, 1000),
                   poll_delay_s=_int(env, "WORKER_POLL_DELAY_MS", 50, 1, 10_000) / 1000)


def _stored_secret_key(data_dir: Path) -> str:
    """Read `<data_dir>/secret_key`, creating it (mode 0600) with a random key on first use."""
    path = data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    path.write_text(key)
    path.chmod(0o600)
    return key


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _networks(
    env: Mapping[str, str], name: str
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    raw = env.get(name, "")
    try:
        return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in raw.split(",") if part.strip())
    except ValueError as exc:
        raise ConfigError(f"{name} must be comma-separated IP addresses or CIDRs: {exc}") from None


def _queue_name(env: Mapping[str, str]) -> str:
    """`QUEUE_NAME`: printable ASCII without spaces, at most MAX_QUEUE_NAME_LENGTH characters."""
    value = env.get("QUEUE_NAME", QUEUE_NAME)
    if len(value) > MAX_QUEUE_NAME_LENGTH or not all("!" <= char <= "~" for char in value):
        raise ConfigError(f"QUEUE_NAME must be 1 to {MAX_QUEUE_NAME_LENGTH} printable characters without "
                          f"spaces, got {value!r}")
    return value


def _name(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, default)
    if not value.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"{name} must contain only letters, digits, '_' and '-', got {value!r}")
    return value
