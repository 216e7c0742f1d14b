"""Settings: the spec's defaults overlaid with stored values (spec: Authentication, settings table)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from cms.errors import ValidationFailed
from cms.security.passwords import PasswordPolicy
from cms.store.settings import SettingsRepository

# key -> (lowest, highest) for integer settings; values outside would break logins or the limiter
SETTINGS_RANGES: dict[str, tuple[int, int]] = {
    "password_min_length": (1, 256),
    "token_expiry_hours": (1, 24 * 365),
    "refresh_token_expiry_days": (1, 3650),
    "refresh_reuse_interval_s": (0, 600),
    "rate_limit_per_minute": (1, 1_000_000),
    "max_upload_mb": (1, 10_240),
}

# key -> (default, category)
SETTINGS_DEFAULTS: dict[str, tuple[Any, str]] = {
    "password_auth_enabled": (True, "auth"),
    "oauth_enabled": (True, "auth"),
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
    "max_upload_mb": (25, "files"),
}


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


CACHE_TTL_S = 5.0


class SettingsService:
    """Reads settings (stored value, else the default).

    Reads are cached in-process for `cache_ttl_s` seconds, so hot paths (the rate limiter runs on
    every request) cost no database round trip; a change made through another replica is seen
    within that time, one made here at once."""

    def __init__(self, repository: SettingsRepository, *, cache_ttl_s: float = CACHE_TTL_S) -> None:
        self._repository = repository
        self._cache_ttl_s = cache_ttl_s
        self._cached: dict[str, Any] | None = None
        self._cached_at = 0.0

    async def values(self) -> dict[str, Any]:
        """Every known setting as {key: value}, defaults filled in."""
        now = time.monotonic()
        if self._cached is None or now - self._cached_at > self._cache_ttl_s:
            stored = await self._repository.all()
            self._cached = {key: stored.get(key, default) for key, (default, _) in SETTINGS_DEFAULTS.items()}
            self._cached_at = now
        return dict(self._cached)

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
        )

    async def set(self, key: str, value: Any) -> None:
        """Store one setting. Raises ValidationFailed for an unknown key, a value whose type
        differs from the default's (bool for bool, int for int), or an integer out of its range."""
        if key not in SETTINGS_DEFAULTS:
            raise ValidationFailed(f"Unknown setting '{key}'", errors={"key": ["Unknown setting."]})
        default, category = SETTINGS_DEFAULTS[key]
        if type(value) is not type(default):
            raise ValidationFailed(
                f"Setting '{key}' takes a {type(default).__name__}", errors={"value": ["Wrong type."]}
            )
        low, high = SETTINGS_RANGES.get(key, (None, None))
        if low is not None and high is not None and not low <= value <= high:
            raise ValidationFailed(
                f"Setting '{key}' must be between {low} and {high}", errors={"value": [f"Must be {low}..{high}."]}
            )
        await self._repository.put(key, value, category)
        self._cached = None
