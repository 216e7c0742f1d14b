"""How each resource becomes JSON: one function per shape, used by every caller (REST handlers,
the read cache, record events and webhook payloads, the admin UI), so a resource looks the same
wherever it is shown.

Each fixed shape is a `Representation` schema (base.py) that both dumps the models and is what
`/openapi.json` documents (cms/api/routes.py names the same classes), so the document and the
bytes cannot drift; tests/api/test_representation.py validates real answers against the document.
Modules per group: identity (users, login and register answers, tokens, sessions, 2FA, OAuth2
providers, API keys), content (collections, files, slow queries), records (records, their pages and cached bytes,
record events as delivered, bulk and CSV answers), delivery (webhooks, deliveries), operations
(audit, settings, backups, health, `{message}`).

    from cms.services import representation as represent
    return json_response(represent.webhook(webhook), status=201)
"""

from __future__ import annotations

from cms.services.representation.content import (
    collection,
    collections,
    file,
    file_token,
    slow_queries,
    slow_query,
)
from cms.services.representation.delivery import deliveries, redelivery, webhook, webhooks
from cms.services.representation.identity import (
    ADMIN_USERS,
    COLLECTION_USERS,
    UserShape,
    admin_user,
    api_key_created,
    api_keys,
    collection_user,
    oauth_providers,
    recovery_codes,
    sessions,
    token,
    two_factor_setup,
)
from cms.services.representation.operations import (
    audit_page,
    audit_statistics,
    backup,
    backups,
    health,
    message,
    setting,
    settings,
)
from cms.services.representation.record_view import FULL, RecordView
from cms.services.representation.records import (
    bulk_deleted,
    bulk_updated,
    csv_import,
    event_body,
    read_record,
    read_record_page,
    record_bytes,
    record_json,
    record_page,
    record_page_bytes,
)
from cms.services.representation.releases import release, release_page
from cms.services.representation.schema import schema_diff, snapshot_bytes
from cms.services.representation.versions import record_version, record_version_page

__all__ = [
    "ADMIN_USERS", "COLLECTION_USERS", "FULL", "RecordView", "UserShape", "admin_user", "api_key_created",
    "api_keys", "audit_page", "audit_statistics", "backup", "backups", "bulk_deleted", "bulk_updated", "collection",
    "collection_user", "collections", "csv_import", "deliveries", "event_body", "file", "file_token", "health",
    "message",
    "oauth_providers", "read_record", "read_record_page", "record_bytes", "record_json", "record_page",
    "record_page_bytes", "record_version", "record_version_page", "recovery_codes", "redelivery", "release",
    "release_page", "schema_diff",
    "sessions", "setting", "settings", "slow_queries", "slow_query", "snapshot_bytes", "token",
    "two_factor_setup", "webhook", "webhooks",
]
