"""Settings (`/_/settings`): every setting of `GET /api/v1/settings`, grouped by category, each with
an input of its type (a checkbox for booleans, a number with its range for integers, a textarea
for text settings, whose write-only secrets are shown masked as the API shows them). A change goes
through `SettingsService.change`, the call of `POST /api/v1/settings`, with the caller's address
and user agent (so it is audited the same way); a refused value is shown next to its input."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from cms.admin_ui.common import PREFIX, ErrorMessage, admin_page, error_message, flash_redirect, render
from cms.errors import CmsError
from cms.models import Principal
from cms.services.operations.settings import SETTINGS_DEFAULTS, SETTINGS_RANGES, TEXT_SETTINGS, Setting
from cms.web.context import services
from cms.web.uploads import read_form

CATEGORY_TITLES = {
    "auth": "Authentication", "security": "Security", "files": "Files", "limits": "Limits",
    "performance": "Performance", "content": "Content",
}

HELP = {
    "password_auth_enabled": "Password login (the default of new auth collections; admins can always use a password).",
    "oauth_enabled": "OAuth2 / OpenID Connect sign-in with the providers below.",
    "oauth_providers": "A JSON list of providers ({name, client_id, client_secret, discovery_url, ...}). "
                       "Client secrets are write-only.",
    "otp_enabled": "Email-code login (the default of new auth collections).",
    "mfa_enabled": "Two-factor authentication (TOTP) for admin-table users and new auth collections.",
    "password_min_length": "Minimum password length.",
    "password_require_upper": "Passwords need an uppercase letter.",
    "password_require_number": "Passwords need a digit.",
    "password_require_special": "Passwords need a special character.",
    "token_expiry_hours": "Access token lifetime, in hours.",
    "refresh_token_expiry_days": "Refresh token lifetime, in days.",
    "refresh_reuse_interval_s": "Seconds a just-rotated refresh token may be presented again (0: never).",
    "rate_limit_enabled": "The general rate limit per client address.",
    "rate_limit_per_minute": "Requests per minute per client address.",
    "audit_retention_days": "Days audit entries are kept.",
    "max_upload_mb": "Largest file upload, in MiB.",
    "csv_import_max_rows": "Rows one CSV import may hold.",
    "csv_import_max_mb": "Size of one CSV import, in MiB.",
    "bulk_max_ids": "Records one bulk update or delete may name.",
    "batch_max_requests": "Requests one batch (POST /api/v1/batch) may hold, all in one transaction.",
    "realtime_max_connections": "Realtime streams one server process holds (past it: 503; 0 turns realtime off).",
    "read_cache_enabled": "The Redis cache of record reads (off: every read queries MongoDB).",
    "request_log_size": "Requests kept for the request log (/_/logs) across replicas (0 turns the log off).",
    "locales": 'The locales of localized fields: a JSON list of {"code", "fallback"?}, the first the default '
               '(e.g. [{"code": "en"}, {"code": "de", "fallback": "en"}]); fallbacks may not form a cycle.',
}
"""A line of help under each setting's name."""


@dataclass(frozen=True)
class SettingRow:
    """A setting as the page shows it: its `kind` (boolean, integer or text), the range of an
    integer, the `value` to put in the input and the error of a refused change."""

    key: str
    value: str
    category: str
    kind: str
    low: int | None = None
    high: int | None = None
    error: ErrorMessage | None = None
    help: str = ""


def _kind(key: str) -> str:
    default, _ = SETTINGS_DEFAULTS[key]
    if key in TEXT_SETTINGS or isinstance(default, str):
        return "text"
    return "boolean" if isinstance(default, bool) else "integer"


def _row(setting: Setting, *, value: str | None = None, error: ErrorMessage | None = None) -> SettingRow:
    low, high = SETTINGS_RANGES.get(setting.key, (None, None))
    return SettingRow(key=setting.key, value=setting.value if value is None else value, category=setting.category,
                      kind=_kind(setting.key), low=low, high=high, error=error,
                      help=HELP.get(setting.key, ""))


def _grouped(rows: list[SettingRow]) -> list[tuple[str, str, list[SettingRow]]]:
    groups: dict[str, list[SettingRow]] = {}
    for row in rows:
        groups.setdefault(row.category, []).append(row)
    return [(category, CATEGORY_TITLES.get(category, category.capitalize()), items)
            for category, items in groups.items()]


async def _page(request: web.Request, principal: Principal, *, status: int = 200, failed: str | None = None,
                value: str | None = None, error: ErrorMessage | None = None) -> web.Response:
    settings = await services(request).settings.list(principal)
    rows = [_row(s, value=value, error=error) if s.key == failed else _row(s) for s in settings]
    return await render(request, "settings/index.html", status=status, groups=_grouped(rows), error=error,
                        failed=failed)


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/settings: every setting, grouped by category."""
    return await _page(request, principal)


@admin_page
async def change(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/settings: change one setting (`key`, `value`; a checkbox sends a hidden `false` and,
    when ticked, `true` after it: the last value counts)."""
    form = await read_form(request)
    key = str(form.get("key", ""))
    values = [str(v) for v in form.getall("value", [])]
    raw = values[-1] if values else ""
    try:
        setting = await services(request).settings.change(principal, key, raw)
    except CmsError as exc:
        if key not in SETTINGS_DEFAULTS:
            raise
        return await _page(request, principal, status=exc.status, failed=key, value=raw, error=error_message(exc))
    return flash_redirect(request, f"{PREFIX}/settings#setting-{setting.key}", f"Saved {setting.key}")


def routes() -> list[web.RouteDef]:
    """The settings screen's routes."""
    return [web.get(PREFIX + "/settings", index, name="admin_ui.settings"),
            web.post(PREFIX + "/settings", change)]
