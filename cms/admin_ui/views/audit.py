"""Audit log (`/_/audit`): the entries of `GET /api/v1/audit`, newest first, with each of its filters
(event type, severity, user, IP address, date range) and paging, and the security view of
`GET /api/v1/audit/security` (`/_/audit/security`: warning and critical entries, or one severity)
with the counts of `GET /api/v1/audit/statistics`. The query is checked by the API's own schemas
and the entries come from the same AuditService calls, with the same principal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from marshmallow import Schema

from cms.admin_ui.common import PREFIX, ErrorMessage, admin_page, error_message, render
from cms.errors import ValidationFailed
from cms.models import Principal
from cms.services.operations.audit import DEFAULT_LIMIT, MAX_LIMIT, SEVERITIES, SEVERITY_LEVELS, AuditPage
from cms.web.context import load, services
from cms.web.schemas import AuditListQuerySchema, AuditSecurityQuerySchema

FILTERS = ("event_type", "severity", "user_id", "ip_address", "from_date", "to_date")
PAGE_SIZES = (20, 50, 100, MAX_LIMIT)
SECURITY_SHORTCUTS = (
    ("login_failed", "Failed logins"), ("rate_limited", "Rate limited"), ("otp_failed", "Failed one-time codes"),
    ("mfa_failed", "Failed 2FA codes"), ("refresh_token_reuse", "Refresh token reuse"),
    ("password_changed", "Password changes"), ("setting_changed", "Setting changes"),
    ("backup_restored", "Restores"),
)


def _query(request: web.Request, names: tuple[str, ...]) -> dict[str, str]:
    """The non-empty query values among `names`, limit and offset (an empty form field is no filter)."""
    return {name: request.query[name].strip() for name in (*names, "limit", "offset")
            if request.query.get(name, "").strip()}


def _parse(schema: Schema, query: Mapping[str, str]) -> tuple[dict[str, Any], ErrorMessage | None]:
    try:
        return load(schema, dict(query)), None
    except ValidationFailed as exc:
        return {}, error_message(exc)


def _links(path: str, query: dict[str, str], page: AuditPage | None) -> dict[str, str | None]:
    """The URLs of the previous and next page (None at either end), keeping the filters."""
    if page is None:
        return {"previous": None, "next": None}

    def at(offset: int) -> str:
        return path + "?" + urlencode({**query, "offset": str(offset), "limit": str(page.limit)})

    previous = at(max(0, page.offset - page.limit)) if page.offset > 0 else None
    following = at(page.offset + page.limit) if page.offset + page.limit < page.total else None
    return {"previous": previous, "next": following}


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/audit: the audit log with the filters of `GET /api/v1/audit`."""
    query = _query(request, FILTERS)
    parsed, error = _parse(AuditListQuerySchema(), query)
    page = None if error else await services(request).audit.list(principal, **parsed)
    return await render(request, "audit/index.html", status=422 if error else 200, view="list", query=query,
                        page=page, error=error, links=_links(PREFIX + "/audit", query, page),
                        event_types=sorted(SEVERITIES), severities=SEVERITY_LEVELS, page_sizes=PAGE_SIZES,
                        default_limit=DEFAULT_LIMIT, shortcuts=SECURITY_SHORTCUTS, statistics=None)


@admin_page
async def security(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/audit/security: warning and critical entries (or one `severity`), with the counts of
    `GET /api/v1/audit/statistics` and shortcuts to failed logins, rate limits, ..."""
    query = _query(request, ("severity",))
    parsed, error = _parse(AuditSecurityQuerySchema(), query)
    audit = services(request).audit
    page = None if error else await audit.security(principal, **parsed)
    statistics = await audit.statistics(principal)
    return await render(request, "audit/index.html", status=422 if error else 200, view="security", query=query,
                        page=page, error=error, links=_links(PREFIX + "/audit/security", query, page),
                        event_types=sorted(SEVERITIES), severities=SEVERITY_LEVELS, page_sizes=PAGE_SIZES,
                        default_limit=DEFAULT_LIMIT, shortcuts=SECURITY_SHORTCUTS, statistics=statistics)


def routes() -> list[web.RouteDef]:
    """The audit log screen's routes."""
    return [web.get(PREFIX + "/audit", index, name="admin_ui.audit"),
            web.get(PREFIX + "/audit/security", security, name="admin_ui.audit_security")]
