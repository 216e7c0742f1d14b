"""Handlers of `/api/v1/audit` (spec: Audit logs): admin tokens only (401 without, 403 otherwise)."""

from __future__ import annotations

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.services import representation as represent
from cms.web.context import parse_query, services
from cms.web.schemas import AuditListQuerySchema, AuditSecurityQuerySchema


async def list_audit(request: web.Request) -> web.Response:
    """GET /api/v1/audit: `{items, total, limit, offset}`, newest first, filtered by the query."""
    principal = signed_in_principal(request)
    query = parse_query(request, AuditListQuerySchema())
    page = await services(request).audit.list(principal, **query)
    return json_response(represent.audit_page(page))


async def security_audit(request: web.Request) -> web.Response:
    """GET /api/v1/audit/security: warning and critical entries (or `severity`), newest first."""
    principal = signed_in_principal(request)
    query = parse_query(request, AuditSecurityQuerySchema())
    page = await services(request).audit.security(principal, **query)
    return json_response(represent.audit_page(page))


async def audit_statistics(request: web.Request) -> web.Response:
    """GET /api/v1/audit/statistics: `{total, by_event_type, by_severity, last_24h}`."""
    principal = signed_in_principal(request)
    statistics = await services(request).audit.statistics(principal)
    return json_response(represent.audit_statistics(statistics))
