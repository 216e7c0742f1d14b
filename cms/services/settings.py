"""Settings: the spec's defaults overlaid with stored values (spec: Authentication, settings table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cms.security.passwords import PasswordPolicy
from cms.store.settings import SettingsRepository

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
    "rate_limit_enabled": (True, "security"),
    "rate_limit_per_minute": (600, "security"),
    "max_upload_mb": (25, "files"),
}


@dataclass(frozen=True)
class AuthSettings:
    """The settings a login or registration needs; lifetimes in seconds."""

    password_policy: PasswordPolicy
    access_lifetime_s: int
    refresh_lifetime_s: int
    otp_enabled: bool
    mfa_enabled: bool


class SettingsService:
    """Reads settings (stored value, else the default)."""

    def __init__(self, repository: SettingsRepository) -> None:
        self._repository = repository

    async def values(self) -> dict[str, Any]:
        """Every known setting as {key: value}, defaults filled in."""
        stored = await self._repository.all()
        return {key: stored.get(key, default) for key, (default, _) in SETTINGS_DEFAULTS.items()}

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
        )
