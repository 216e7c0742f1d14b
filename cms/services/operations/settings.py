"""Settings: the spec's defaults overlaid with stored values (spec: Authentication, settings table).

Every process keeps the settings in memory; a change bumps a version counter in Redis (the
scheme of `cms.services.caching.counters`: a missing counter starts at a random value, so one lost
in a Redis restart never comes back with a value a process saw before), and each process compares
that counter at most every VERSION_CHECK_INTERVAL_S seconds (one Redis MGET), so
a change made through any replica is seen by every replica within about half a second, and the
hot path (the rate limiter, on every request) never reads MongoDB.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from cms.errors import ValidationFailed
from cms.models import DEFAULT_LOCALES, Locales, Principal
from cms.observability import request_log
from cms.security import oauth
from cms.security.passwords import PasswordPolicy
from cms.services import access
from cms.services.caching.counters import bump_counters, read_counters
from cms.services.content import locales
from cms.services.content.csv_io import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS
from cms.services.delivery.events import AuditEvent, EventBus
from cms.store.settings import SettingsRepository

log = logging.getLogger("cms.settings")

# key -> (lowest, highest) for integer settings; values outside would break logins or the limiter
SETTINGS_RANGES: dict[str, tuple[int, int]] = {
    "password_min_length": (1, 256),
    "token_expiry_hours": (1, 24 * 365),
    "refresh_token_expiry_days": (1, 3650),
    "refresh_reuse_interval_s": (0, 600),
    "rate_limit_per_minute": (1, 1_000_000),
    "max_upload_mb": (1, 10_240),
    "audit_retention_days": (1, 3650),
    "csv_import_max_rows": (1, 1_000_000),
    "csv_import_max_mb": (1, 1024),
    "bulk_max_ids": (1, 100_000),
    "batch_max_requests": (1, 1_000),
    "realtime_max_connections": (0, 1_000_000),
    "request_log_size": (0, request_log.MAX_SIZE),
}

# key -> (default, category)
SETTINGS_DEFAULTS: dict[str, tuple[Any, str]] = {
    "password_auth_enabled": (True, "auth"),
    "oauth_enabled": (True, "auth"),
    # a JSON list of OAuth2 / OIDC providers (cms.security.oauth); client secrets read as "********"
    "oauth_providers": ("[]", "auth"),
    "otp_enabled": (False, "auth"),
    "mfa_enabled": (False, "auth"),
    "password_min_length": (8, "auth"),
    "password_require_upper": (False, "auth"),
    "password_require_number": (False, "auth"),
    "password_require_special": (False, "auth"),
    "token_expiry_hours": (24, "auth"),
    "refresh_token_expiry_days": (7, "auth"),
    # 0 = off: a spent refresh token always revokes its session (decisions.md)
    "refresh_reuse_interval_s": (0, "auth"),
    "rate_limit_enabled": (True, "security"),
    "rate_limit_per_minute": (600, "security"),
    "audit_retention_days": (90, "security"),
    "max_upload_mb": (25, "files"),
    # decisions.md, Limits; the records code still uses its constants (cms.services.content.csv_io, records)
    "csv_import_max_rows": (MAX_IMPORT_ROWS, "limits"),
    "csv_import_max_mb": (MAX_IMPORT_BYTES // (1024 * 1024), "limits"),
    "bulk_max_ids": (1_000, "limits"),  # records.MAX_BULK_IDS (not imported: records imports this module)
    # requests of one POST /api/v1/batch, all in one transaction (content.batch.DEFAULT_MAX_REQUESTS)
    "batch_max_requests": (50, "limits"),
    # realtime streams (GET /api/v1/realtime) one server process holds; past it 503 (0: realtime off)
    "realtime_max_connections": (10_000, "limits"),
    # the Redis response cache of record reads (cms.services.caching.read_cache); false: every read queries
    "read_cache_enabled": (True, "performance"),
    # requests kept for /_/logs across replicas (cms.observability.request_log; 0: the log is off)
    "request_log_size": (request_log.DEFAULT_SIZE, "limits"),
    # decisions.md, Localized fields: a JSON list of {code, fallback?}, the first the default locale
    "locales": (locales.locales_text(DEFAULT_LOCALES), "content"),
}

VERSION_CHECK_INTERVAL_S = 0.5
"""How often (seconds) a process asks Redis whether the settings changed."""
VERSION_READ_TIMEOUT_S = 1.0
"""How long a version read may wait for Redis, in seconds, before settings fall back to REDIS_DOWN_RELOAD_S."""
REDIS_DOWN_RELOAD_S = 5.0
"""Without Redis, settings are re-read from MongoDB at most this often (seconds)."""
INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,12}")
_UNKNOWN = object()  # the version when Redis could not be asked

SettingListener = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True)
class RecordLimits:
    """The limits of bulk changes and CSV imports (settings `bulk_max_ids`, `csv_import_max_rows`,
    `csv_import_max_mb`); `import_max_bytes` in bytes."""

    bulk_max_ids: int
    import_max_rows: int
    import_max_bytes: int


@dataclass(frozen=True)
class AuthSettings:
    """The settings a login, registration or refresh needs; lifetimes in seconds.

    `refresh_reuse_interval_s` (0..600, 0 = off) is how long the refresh token spent by a
    session's last rotation may be presented again without revoking the session."""

    password_policy: PasswordPolicy
    access_lifetime_s: int
    refresh_lifetime_s: int
    otp_enabled: bool
    mfa_enabled: bool
    refresh_reuse_interval_s: int = 0
    oauth_enabled: bool = True


@dataclass(frozen=True)
class Setting:
    """A setting as the API shows it (spec: Setting): `value` is always a string (`"true"`, `"8"`)."""

    key: str
    value: str
    category: str


@dataclass(frozen=True)
class TextSetting:
    """How a text setting is checked and shown: `normalized(raw)` is the value to store (ValueError
    with a message for the client), `shown(stored)` what reads (API, audit) show, and
    `merged(new, stored)` what a change stores given the stored value (write-only parts kept)."""

    normalized: Callable[[str], str]
    shown: Callable[[str], str]
    merged: Callable[[str, str], str]


TEXT_SETTINGS: dict[str, TextSetting] = {
    "oauth_providers": TextSetting(normalized=oauth.normalized, shown=oauth.masked, merged=oauth.merged),
    "locales": TextSetting(normalized=locales.normalized, shown=str, merged=lambda new, _stored: new),
}
"""Every setting whose default is text, with its rules."""


def render_value(value: Any, key: str = "") -> str:
    """A setting value as its API string: booleans as `true`/`false`, integers in decimal, text as
    its TEXT_SETTINGS rule shows it (secrets masked)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return TEXT_SETTINGS[key].shown(str(value)) if key in TEXT_SETTINGS else str(value)


def _value_error(message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid value: {message}", errors={"value": [message]})


def _check_key(key: str) -> tuple[Any, str]:
    if key not in SETTINGS_DEFAULTS:
        raise ValidationFailed(f"Unknown setting '{key}'", errors={"key": ["Unknown setting."]})
    return SETTINGS_DEFAULTS[key]


def parse_value(key: str, raw: Any) -> bool | int | str:
    """The typed value of setting `key` from what a client sent: a JSON bool or integer, or its
    string form (`"true"`, `"false"`, `"8"`); for a text setting (TEXT_SETTINGS) a string, checked
    and normalised by its rule. Raises ValidationFailed (422): `errors.key` for an unknown key,
    `errors.value` (a list of strings) for a wrong type, an integer out of range or a bad text value."""
    default, _ = _check_key(key)
    if key in TEXT_SETTINGS:
        if not isinstance(raw, str):
            raise _value_error("Must be a string.")
        try:
            return TEXT_SETTINGS[key].normalized(raw)
        except ValueError as exc:
            raise _value_error(str(exc)) from exc
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise _value_error("Must be true or false.")
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and INTEGER_TEXT.fullmatch(raw.strip()):
        value = int(raw.strip())
    else:
        raise _value_error("Must be a whole number.")
    _check_range(key, value)
    return value


def _check_range(key: str, value: int) -> None:
    low, high = SETTINGS_RANGES.get(key, (None, None))
    if low is not None and high is not None and not low <= value <= high:
        raise _value_error(f"Must be between {low} and {high}.")


class SettingsService:
    """Reads and changes settings (stored value, else the default).

    `redis` holds the version counter `version_key` (`keys.settings_version`; a counter of
    `cms.services.caching.counters`, bumped on every change); a process re-reads
    MongoDB only when that counter moved, checking it at most every `check_interval_s` seconds.
    A change made here is seen here at once. Listeners registered with `on_change` run after a
    change of their key is stored (the audit TTL index follows `audit_retention_days`)."""

    def __init__(self, repository: SettingsRepository, redis: Redis, events: EventBus, *,
                 version_key: str,
                 check_interval_s: float = VERSION_CHECK_INTERVAL_S) -> None:
        self._repository = repository
        self._redis = redis
        self._events = events
        self._version_key = version_key
        self._check_interval_s = check_interval_s
        self._cached: dict[str, Any] | None = None
        self._version: Any = _UNKNOWN
        self._checked_at = 0.0
        self._loaded_at = 0.0
        self._lock = asyncio.Lock()
        self._listeners: dict[str, list[SettingListener]] = {}

    async def values(self) -> dict[str, Any]:
        """Every known setting as {key: value}, defaults filled in. Costs nothing most of the time,
        one Redis GET every `check_interval_s`, and a MongoDB read only after a change."""
        return dict(await self._current())

    async def value(self, key: str) -> Any:
        """One setting's value, as `values()[key]` but without copying every setting (the rate limit
        and the read cache ask on every request). Raises KeyError for a key that is not a setting."""
        return (await self._current())[key]

    async def _current(self) -> dict[str, Any]:
        cached = self._cached
        if cached is None or time.monotonic() - self._checked_at >= self._check_interval_s:
            cached = await self._refresh()
        return cached

    async def _refresh(self) -> dict[str, Any]:
        if self._lock.locked() and self._cached is not None:
            return self._cached  # another request is checking; this one need not wait
        async with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._checked_at < self._check_interval_s:
                return self._cached
            version = await self._read_version()
            stale = self._cached is None or version != self._version
            if version is _UNKNOWN:
                stale = stale or now - self._loaded_at >= REDIS_DOWN_RELOAD_S
            if stale or self._cached is None:
                stored = await self._repository.all()
                self._cached = {key: stored.get(key, default) for key, (default, _) in SETTINGS_DEFAULTS.items()}
                self._loaded_at = now
            self._version = version
            self._checked_at = now
            return self._cached

    async def _read_version(self) -> Any:
        try:
            return (await read_counters(self._redis, [self._version_key], 1, VERSION_READ_TIMEOUT_S))[0]
        except Exception:  # without Redis, fall back to a time-based reload
            if self._version is not _UNKNOWN:
                log.warning("settings version unavailable; re-reading settings every %s s", REDIS_DOWN_RELOAD_S,
                            exc_info=True)
            return _UNKNOWN

    async def record_limits(self) -> RecordLimits:
        """The bulk and CSV limits snapshot (one read)."""
        v = await self.values()
        return RecordLimits(bulk_max_ids=int(v["bulk_max_ids"]), import_max_rows=int(v["csv_import_max_rows"]),
                            import_max_bytes=int(v["csv_import_max_mb"]) * 1024 * 1024)

    async def auth(self) -> AuthSettings:
        """The auth settings snapshot (one read)."""
        v = await self.values()
        return AuthSettings(
            password_policy=PasswordPolicy(
                min_length=int(v["password_min_length"]),
                require_upper=bool(v["password_require_upper"]),
                require_number=bool(v["password_require_number"]),
                require_special=bool(v["password_require_special"]),
            ),
            access_lifetime_s=int(v["token_expiry_hours"]) * 3600,
            refresh_lifetime_s=int(v["refresh_token_expiry_days"]) * 86400,
            otp_enabled=bool(v["otp_enabled"]),
            mfa_enabled=bool(v["mfa_enabled"]),
            refresh_reuse_interval_s=int(v["refresh_reuse_interval_s"]),
            oauth_enabled=bool(v["oauth_enabled"]),
        )

    def on_change(self, key: str, listener: SettingListener) -> None:
        """Call `listener(new value)` after every change of `key` made through this process."""
        self._listeners.setdefault(key, []).append(listener)

    async def set(self, key: str, value: Any) -> None:
        """Store one setting and tell every replica (version INCR). Raises ValidationFailed for an
        unknown key, a value whose type differs from the default's (bool for bool, int for int), or
        an integer out of its range; Redis and listener errors propagate (the value is stored; the
        same call can be repeated)."""
        default, category = _check_key(key)
        if type(value) is not type(default):
            kind = {bool: "boolean", int: "whole number", str: "string"}[type(default)]
            raise _value_error(f"Must be a {kind}.")
        if isinstance(value, int) and not isinstance(value, bool):
            _check_range(key, value)
        await self._repository.put(key, value, category)
        self._cached = None
        await bump_counters(self._redis, [self._version_key], timeout_s=None)
        for listener in self._listeners.get(key, []):
            await listener(value)

    async def invalidate(self) -> None:
        """Make every replica re-read the settings from MongoDB (a version INCR), e.g. after a
        restore replaced them. Redis errors propagate."""
        self._cached = None
        await bump_counters(self._redis, [self._version_key], timeout_s=None)

    async def list(self, principal: Principal) -> list[Setting]:
        """Every setting, in a fixed order, read from MongoDB (not the cache). Raises Forbidden
        unless `principal` is an admin."""
        access.require_admin(principal)
        stored = await self._repository.all()
        return [Setting(key, render_value(stored.get(key, default), key), category)
                for key, (default, category) in SETTINGS_DEFAULTS.items()]

    async def change(self, principal: Principal, key: str, raw_value: Any, *,
                     category: str | None = None) -> Setting:
        """Upsert one setting from what a client sent (see `parse_value`) and audit it
        (`setting_changed` with the old and new value, from the request's origin). A given
        `category` must be the key's. Returns the stored setting. Raises Forbidden (not an admin)
        or ValidationFailed (422: `errors.key`, `errors.value` or `errors.category`)."""
        access.require_admin(principal)
        value = parse_value(key, raw_value)
        default, key_category = SETTINGS_DEFAULTS[key]
        if category is not None and category != key_category:
            raise ValidationFailed(f"Setting '{key}' is in category '{key_category}'",
                                   errors={"category": [f"Must be '{key_category}'."]})
        old_value = await self._repository.get(key)
        if key in TEXT_SETTINGS:  # write-only parts (secrets) written back masked are kept
            try:
                value = TEXT_SETTINGS[key].merged(str(value), str(old_value or default))
            except ValueError as exc:
                raise _value_error(str(exc)) from exc
        await self.set(key, value)
        await self._events.emit([AuditEvent(
            "setting_changed", user_id=principal.user_id,
            details={"key": key, "old_value": render_value(default if old_value is None else old_value, key),
                     "new_value": render_value(value, key)},
        )])
        return Setting(key, render_value(value, key), key_category)

    async def stored_locales(self) -> Locales:
        """The `locales` setting read from MongoDB now (not this process's copy): what the catalog loads
        once per catalog epoch and attaches to the definitions (decisions.md, Localized fields)."""
        return locales.stored_locales(await self._repository.get("locales"))

    async def oauth_providers(self) -> builtins.list[oauth.ProviderConfig]:
        """The configured OAuth2 / OIDC providers, secrets included (cached like every setting)."""
        try:
            return oauth.parse_providers(str((await self.values())["oauth_providers"]))
        except oauth.ProviderConfigError:
            log.warning("stored oauth_providers is not valid; no provider is offered", exc_info=True)
            return []
