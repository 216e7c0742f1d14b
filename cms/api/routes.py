"""Every route in one table, each with its policy (who may call it) and rate-limit class: the
principal middleware (`guards.py`) and the rate-limit middleware enforce them, and `openapi.py`
documents the same table."""

from __future__ import annotations

import functools

from aiohttp import web
from marshmallow import Schema

from cms.api import (
    admin_auth,
    aggregates,
    api_keys,
    audit,
    backups,
    batch,
    batch_schemas,
    collection_auth,
    collections,
    drafts,
    files,
    metrics,
    realtime,
    records,
    releases,
    schema,
    settings,
    slow_queries,
    system,
    user_auth,
    versions,
    webhooks,
)
from cms.api import schemas as s
from cms.api.guards import ROUTE_TABLE
from cms.api.ratelimit import RateLimit
from cms.api.route import Route
from cms.api.schemas.aggregates import AggregateQuerySchema
from cms.services.access import Policy
from cms.services.representation.aggregates import AggregatePageSchema
from cms.web import schemas as ws
from cms.web.schema_snapshot import MAX_SNAPSHOT_BYTES, SchemaApplySchema, SnapshotSchema

V1 = "/api/v1"
RECORDS = V1 + "/collections/{collection_name}/records"
RELEASES = V1 + "/releases"
OPTIONAL, PRINCIPAL = Policy.OPTIONAL, Policy.PRINCIPAL
ADMIN_USER, COLLECTION_USER, ADMIN = Policy.ADMIN_USER, Policy.COLLECTION_USER, Policy.ADMIN
COLLECTION_AUTH = V1 + "/collections/{collection_name}/auth"
collection_auth_route = functools.partial(Route, tag="collection auth")
"""A route of an auth collection's users (`/collections/{collection_name}/auth/...`)."""
API_KEYS = V1 + "/api-keys"
WEBHOOKS = V1 + "/webhooks"
api_key_route = functools.partial(Route, tag="api keys", policy=PRINCIPAL)
"""A route of the API keys resource: every one is for a signed-in principal (the service then allows
admin-table users only: `access.require_admin_table`)."""
webhook_route = functools.partial(Route, tag="webhooks", policy=PRINCIPAL)
"""A route of the webhooks resource: every one is for a signed-in principal (admin-table users and
ownership: `access.py`)."""

def user_system_routes(prefix: str, tag: str, user: type[Schema], login: type[Schema],
                       signed_in: Policy) -> tuple[Route, ...]:
    """The endpoints both user systems share (one handler each, `cms/api/user_auth.py`) under
    `prefix` (`/api/v1/auth` or `/api/v1/collections/{collection_name}/auth`); `user` and `login`
    are the system's shapes of a user and of the login response, `signed_in` the policy of the
    endpoints of a signed-in user (ADMIN_USER or COLLECTION_USER: another system's token is 401)."""
    return (
        Route("POST", prefix + "/login", user_auth.login, "Log in with email and password", tag,
              body=ws.LoginSchema, response=login),
        Route("POST", prefix + "/refresh", user_auth.refresh, "Spend a refresh token for a new token pair", tag,
              body=s.RefreshSchema, response=s.TokenSchema),
        Route("GET", prefix + "/me", user_auth.me, "The signed-in user", tag, policy=signed_in, response=user),
        Route("POST", prefix + "/resend-verification", user_auth.resend_verification,
              "Send a new verification email", tag, policy=signed_in, response=s.MessageSchema),
        Route("POST", prefix + "/me/change-password", user_auth.change_password,
              "Change the password (other sessions are revoked)", tag, policy=signed_in,
              body=s.ChangePasswordSchema, response=s.MessageSchema),
        Route("GET", prefix + "/sessions", user_auth.list_sessions, "The caller's active sessions", tag,
              policy=signed_in, response=s.SessionSchema, many=True),
        # `all` before `{session_id}`: routes match in the order they are added
        Route("DELETE", prefix + "/sessions/all", user_auth.revoke_all_sessions,
              "Revoke every session of the caller (log out all devices)", tag, policy=signed_in, status=204),
        Route("DELETE", prefix + "/sessions/{session_id}", user_auth.revoke_session,
              "Revoke one of the caller's sessions", tag, policy=signed_in, status=204),
        Route("POST", prefix + "/2fa/setup", user_auth.two_factor_setup,
              "Start two-factor setup: a TOTP secret, its otpauth URL and QR code (SVG)", tag, policy=signed_in,
              response=s.TwoFactorSetupSchema),
        Route("POST", prefix + "/2fa/enable", user_auth.two_factor_enable,
              "Turn two-factor login on with a code; returns the recovery codes once", tag, policy=signed_in,
              body=s.TwoFactorCodeSchema, response=s.RecoveryCodesSchema),
        Route("POST", prefix + "/2fa/disable", user_auth.two_factor_disable,
              "Turn two-factor login off (password and a code)", tag, policy=signed_in,
              body=s.TwoFactorDisableSchema, response=s.MessageSchema),
        Route("POST", prefix + "/2fa/verify", user_auth.two_factor_verify,
              "Complete a login that requires 2FA: mfa_token and a code", tag,
              body=ws.TwoFactorVerifySchema, response=login),
        Route("GET", prefix + "/oauth2/providers", user_auth.oauth_providers,
              "OAuth2 / OIDC providers with authorization URLs (state, PKCE S256)", tag,
              query=s.OAuthProvidersQuerySchema, response=s.OAuthProviderSchema, many=True),
        Route("POST", prefix + "/oauth2/callback", user_auth.oauth_callback,
              "Complete an OAuth2 / OIDC login with the provider's code", tag,
              body=s.OAuthCallbackSchema, response=login),
    )


SNAPSHOT_TOO_LARGE = f"The body is over {MAX_SNAPSHOT_BYTES // 2**20} MiB (MAX_SNAPSHOT_BYTES)"

ROUTES: tuple[Route, ...] = (
    # admin auth
    Route("POST", V1 + "/auth/register", admin_auth.register, "Register an admin-table user (role user)", "auth",
          body=s.RegisterSchema, response=s.RegisterResponseSchema, status=201),
    Route("POST", V1 + "/auth/logout", user_auth.logout, "Revoke the current session", "auth",
          policy=ADMIN_USER, response=s.MessageSchema),
    Route("POST", V1 + "/auth/verify-email", admin_auth.verify_email, "Verify an email with the emailed token",
          "auth", body=s.TokenBodySchema, response=s.MessageSchema),
    *user_system_routes(V1 + "/auth", "auth", s.AdminUserSchema, s.LoginResponseSchema, ADMIN_USER),
    # collections
    Route("GET", V1 + "/collections", collections.list_collections, "List collections", "collections",
          response=s.CollectionSchema, many=True),
    Route("POST", V1 + "/collections", collections.create_collection, "Create a collection", "collections",
          policy=ADMIN, body=ws.CollectionCreateSchema, response=s.CollectionSchema, status=201),
    Route("GET", V1 + "/collections/{collection_id}", collections.get_collection, "Get a collection",
          "collections", response=s.CollectionSchema),
    Route("PATCH", V1 + "/collections/{collection_id}", collections.update_collection,
          "Change a collection's name, schema, otp_enabled, mfa_enabled, rules or versions", "collections",
          policy=ADMIN, body=ws.CollectionUpdateSchema, response=s.CollectionSchema),
    Route("DELETE", V1 + "/collections/{collection_id}", collections.delete_collection,
          "Delete a collection and its records", "collections", policy=ADMIN, status=204),
    # --- slow queries (issue 38): list queries over SLOW_QUERY_MS, with the index that would serve each
    Route("GET", V1 + "/slow-queries", slow_queries.list_slow_queries,
          "Slow query shapes every replica reported (field names and operators, never values), the most "
          "recently seen first, each with the index that would serve it", "collections", policy=ADMIN,
          response=s.SlowQuerySchema, many=True),
    Route("POST", V1 + "/slow-queries/{slow_query_id}/index", slow_queries.create_suggested_index,
          "Add the entry's suggested index to its collection's `indexes` (as a PATCH would) and drop the entry",
          "collections", policy=ADMIN, response=s.CollectionSchema),
    Route("DELETE", V1 + "/slow-queries/{slow_query_id}", slow_queries.dismiss_slow_query,
          "Drop a slow query entry (it comes back if the query is slow again)", "collections", policy=ADMIN,
          status=204),
    # --- schema as code (decisions.md: Schema as code)
    Route("GET", V1 + "/schema", schema.export_schema,
          "The schema snapshot: every collection by name (relations by name), canonical bytes and their hash",
          "schema", policy=ADMIN, response=s.SchemaSnapshotSchema,
          errors=((409, "A schema apply is running"),)),
    Route("POST", V1 + "/schema/diff", schema.diff_schema,
          "The changes a snapshot would make, and the current hash to apply them against", "schema",
          policy=ADMIN, body=SnapshotSchema, response=s.SchemaDiffSchema,
          errors=((409, "A schema apply is running"), (413, SNAPSHOT_TOO_LARGE))),
    Route("POST", V1 + "/schema/apply", schema.apply_schema,
          "Apply a snapshot, all or nothing, against the hash of a diff; answers the new snapshot", "schema",
          policy=ADMIN, body=SchemaApplySchema, response=s.SchemaSnapshotSchema,
          errors=((409, "The schema's hash is not the one sent (diff again), or another apply runs"),
                  (413, SNAPSHOT_TOO_LARGE))),
    # --- audit, settings (issue 9)
    Route("GET", V1 + "/audit", audit.list_audit,
          "Audit log entries, newest first (limit, offset, event_type, severity, user_id, ip_address, "
          "from_date, to_date)", "audit", policy=ADMIN, query=ws.AuditListQuerySchema, response=s.AuditPageSchema),
    Route("GET", V1 + "/audit/security", audit.security_audit,
          "Warning and critical audit entries (or one `severity`), newest first", "audit",
          policy=ADMIN, query=ws.AuditSecurityQuerySchema, response=s.AuditPageSchema),
    Route("GET", V1 + "/audit/statistics", audit.audit_statistics,
          "Audit entry counts: total, by event type, by severity, last 24 hours", "audit",
          policy=ADMIN, response=s.AuditStatisticsSchema),
    Route("GET", V1 + "/settings", settings.list_settings, "List every setting (values as strings)", "settings",
          policy=ADMIN, response=s.SettingSchema, many=True),
    Route("POST", V1 + "/settings", settings.update_setting,
          "Change one setting (value as a string or a JSON boolean or integer); audited", "settings",
          policy=ADMIN, body=s.SettingUpdateSchema, response=s.SettingSchema),
    # --- end audit, settings
    # --- backups (issue 9)
    Route("POST", V1 + "/backups", backups.create_backup,
          "Back up the whole database (mongodump layout in a .tar.gz); answers when it is written", "backups",
          policy=ADMIN, response=s.BackupSchema, status=201),
    Route("GET", V1 + "/backups", backups.list_backups, "List backups, newest first", "backups",
          policy=ADMIN, response=s.BackupSchema, many=True),
    Route("POST", V1 + "/backups/{filename}/restore", backups.restore_backup,
          "Replace every collection with the backup's contents (the archive is verified first)", "backups",
          policy=ADMIN, response=s.MessageSchema),
    Route("GET", V1 + "/backups/{filename}", backups.download_backup,
          "Download a backup archive (.tar.gz); audited", "backups", policy=ADMIN, produces="application/gzip"),
    Route("DELETE", V1 + "/backups/{filename}", backups.delete_backup, "Delete a backup", "backups",
          policy=ADMIN, status=204),
    # --- end backups
    # --- files (issue 9)
    Route("POST", V1 + "/files", files.upload_file,
          "Attach a file to a record: multipart/form-data with `collection` (name), `record_id`, optionally "
          "`field` (a file field: its checks apply, and the file may then be set as its value) and `file` last; "
          "at most `max_upload_mb` MiB (default 25)", "files",
          policy=OPTIONAL, response=s.FileSchema, status=201, upload_field="file",
          form_fields=("collection", "record_id"), optional_form_fields=("field",)),
    Route("POST", V1 + "/files/token", files.file_token,
          "A file token for `?token=` (2 minutes, bound to the caller): what an `<img>` needs for a protected "
          "field's files", "files", policy=PRINCIPAL, response=s.FileTokenSchema),
    Route("GET", V1 + "/files/{file_id}", files.get_file,
          "Download a file (ETag, If-None-Match, one byte range) or an image's thumbnail (`thumb`, `format`); "
          "visible like its record; a protected field's files need `token`", "files",
          policy=OPTIONAL, query=s.FileDownloadQuerySchema, produces="application/octet-stream"),
    Route("DELETE", V1 + "/files/{file_id}", files.delete_file, "Delete a file (the right to change its record)",
          "files", policy=OPTIONAL, status=204),
    # --- end files
    # records
    Route("GET", RECORDS, records.list_records,
          "List records (page, per_page, sort, filter, search, expand, fields; draft: the working copies)", "records",
          policy=OPTIONAL, query=s.RecordListQuerySchema, response=s.RecordPageSchema),
    Route("POST", RECORDS, records.create_record, "Create a record (JSON, or multipart/form-data with its files)",
          "records", policy=OPTIONAL, query=s.RecordViewQuerySchema, body=s.RecordWriteSchema, response=s.RecordSchema,
          status=201, record_form=True),
    Route("GET", RECORDS + "/{record_id}", records.get_record, "Get a record (draft: its working copy)", "records",
          policy=OPTIONAL, query=s.RecordGetQuerySchema, response=s.RecordSchema),
    Route("PATCH", RECORDS + "/{record_id}", records.update_record,
          "Change some fields of a record (JSON, or multipart/form-data with files)", "records",
          policy=OPTIONAL, query=s.RecordViewQuerySchema, body=s.RecordWriteSchema, response=s.RecordSchema,
          record_form=True),
    Route("DELETE", RECORDS + "/{record_id}", records.delete_record, "Delete a record", "records",
          policy=OPTIONAL, status=204),
    # --- drafts (decisions.md: Drafts, versions and scheduled publishing); the update rule decides
    Route("POST", RECORDS + "/{record_id}/publish", drafts.publish_record,
          "Publish the working copy (collections with drafts); with `at`, schedule the publish instead "
          "(replacing a pending one)", "records", policy=OPTIONAL, query=s.RecordViewQuerySchema,
          body=s.RecordPublishSchema, response=s.RecordSchema),
    Route("POST", RECORDS + "/{record_id}/unpublish", drafts.unpublish_record,
          "Turn a published record back into a draft (its content kept as the working copy)", "records",
          policy=OPTIONAL, query=s.RecordViewQuerySchema, response=s.RecordSchema),
    Route("DELETE", RECORDS + "/{record_id}/draft", drafts.discard_draft,
          "Drop the pending working copy (404 when there is none)", "records", policy=OPTIONAL, status=204),
    Route("DELETE", RECORDS + "/{record_id}/schedule", drafts.cancel_schedule,
          "Cancel the pending scheduled publish (404 when there is none)", "records", policy=OPTIONAL, status=204),
    # --- releases (decisions.md: Drafts, versions and scheduled publishing: Releases); admins only
    Route("POST", RELEASES, releases.create_release, "Create a release: records of collections with drafts to "
          "publish together (at most 1,000; a bad item is 422 naming `items.N`)", "releases", policy=ADMIN,
          body=s.ReleaseCreateSchema, response=s.ReleaseSchema, status=201),
    Route("GET", RELEASES, releases.list_releases, "List releases, newest first (page, per_page)", "releases",
          policy=ADMIN, query=s.ReleaseListQuerySchema, response=s.ReleasePageSchema),
    Route("GET", RELEASES + "/{release_id}", releases.get_release, "Get a release", "releases", policy=ADMIN,
          response=s.ReleaseSchema),
    Route("PATCH", RELEASES + "/{release_id}", releases.update_release, "Rename a release or replace its items "
          "(409 once published)", "releases", policy=ADMIN, body=s.ReleaseUpdateSchema, response=s.ReleaseSchema,
          errors=((409, "the release is published"),)),
    Route("DELETE", RELEASES + "/{release_id}", releases.delete_release, "Delete a release (and its schedule)",
          "releases", policy=ADMIN, status=204),
    Route("POST", RELEASES + "/{release_id}/publish", releases.publish_release, "Publish every item's working "
          "copy, all or nothing (422 naming `items.N`: nothing published); with `at`, schedule it instead",
          "releases", policy=ADMIN, body=s.ReleasePublishSchema, response=s.ReleaseSchema,
          errors=((409, "the release is published"),)),
    Route("DELETE", RELEASES + "/{release_id}/schedule", releases.cancel_release_schedule,
          "Cancel the release's scheduled publish (404 when there is none)", "releases", policy=ADMIN, status=204),
    # --- aggregation (decisions.md: Aggregation and view collections)
    Route("GET", V1 + "/collections/{collection_name}/aggregate", aggregates.aggregate,
          "Groups of the records a list shows the caller (filter, group_by, aggregates, sort, page, per_page): "
          "counts, sums, averages, minima, maxima and distinct counts; 503 with Retry-After past the time limit",
          "records", policy=OPTIONAL, query=AggregateQuerySchema, response=AggregatePageSchema),
    # --- records: bulk and CSV (issue 4)
    Route("POST", RECORDS + "/bulk-delete", records.bulk_delete_records,
          "Delete up to 1,000 records by id, all or nothing", "records",
          policy=PRINCIPAL, body=s.BulkDeleteSchema, response=s.BulkDeletedSchema),
    Route("POST", RECORDS + "/bulk-update", records.bulk_update_records,
          "Set the same fields on up to 1,000 records, all or nothing", "records",
          policy=PRINCIPAL, query=s.RecordLocaleQuerySchema, body=s.BulkUpdateSchema, response=s.BulkUpdatedSchema),
    Route("GET", RECORDS + "/export/csv", records.export_records_csv,
          "Download the records (filter, sort, search) as CSV", "records",
          policy=PRINCIPAL, query=s.RecordExportQuerySchema, produces="text/csv"),
    Route("POST", RECORDS + "/import/csv", records.import_records_csv,
          "Create records from a CSV file: multipart/form-data field `file`, UTF-8, header row, "
          "at most 10 MiB and 50,000 rows", "records",
          policy=PRINCIPAL, response=s.CsvImportResultSchema, upload_field="file"),
    # --- end records: bulk and CSV
    # --- record versions (decisions.md: Drafts, versions and scheduled publishing)
    Route("GET", RECORDS + "/{record_id}/versions", versions.list_versions,
          "List a record's versions, newest first (page, per_page); the view rule", "records",
          policy=OPTIONAL, query=s.VersionListQuerySchema, response=s.RecordVersionPageSchema),
    Route("GET", RECORDS + "/{record_id}/versions/{version}", versions.get_version,
          "Get one version of a record; the view rule", "records", policy=OPTIONAL, response=s.RecordVersionSchema),
    Route("POST", RECORDS + "/{record_id}/versions/{version}/restore", versions.restore_version,
          "Restore a version: write its data over the record as an update (the update rule, validated like one)",
          "records", policy=OPTIONAL, query=s.RecordViewQuerySchema, response=s.RecordSchema),
    # --- batch (decisions.md: Batch writes); anyone the records routes let in: each request runs under its rules
    Route("POST", V1 + "/batch", batch.run_batch,
          "Run up to `batch_max_requests` (50) record creates, changes and deletes in one transaction, in order, "
          "all or nothing; each counts against the rate limit; needs a replica set", "records",
          policy=OPTIONAL, body=batch_schemas.BatchSchema, response=batch_schemas.BatchAnswerSchema, many=True,
          failure=batch_schemas.BatchFailureSchema),
    # --- realtime (decisions.md: Realtime); the stream needs no credentials (a resume's, if sent, must be the
    # client's owner's), a subscription carries them and binds the client to its principal
    Route("GET", V1 + "/realtime", realtime.open_stream,
          "Open the realtime stream (server-sent events): `connect` with the `client_id`, then the events of "
          "the client's subscriptions (`id:` on every event, `: ping` every 20 s); resume with `?client_id=` and "
          "the `Last-Event-ID` header (403 when it carries credentials of another principal than the client's); "
          "503 past the server's connection limit", "realtime",
          policy=OPTIONAL, query=s.RealtimeStreamQuerySchema, produces="text/event-stream"),
    Route("POST", V1 + "/realtime", realtime.subscribe,
          "Set the client's subscriptions (replacing the previous set) under this request's credentials; "
          "204 once in force on every replica; 403 when the client is bound to another principal", "realtime",
          policy=OPTIONAL, body=s.RealtimeSubscribeSchema, status=204),
    # --- API keys (issue 9)
    api_key_route("POST", API_KEYS, api_keys.create_api_key,
                  "Create an API key (admin-table users); the secret `key` is returned only here",
                  body=s.ApiKeyCreateSchema, response=s.ApiKeyCreatedSchema, status=201),
    api_key_route("GET", API_KEYS, api_keys.list_api_keys, "List API keys (yours; an admin sees all)",
                  response=s.ApiKeySchema, many=True),
    api_key_route("DELETE", API_KEYS + "/{key_id}", api_keys.delete_api_key, "Revoke an API key", status=204),
    # --- webhooks (issue 8)
    webhook_route("POST", WEBHOOKS, webhooks.create_webhook, "Create a webhook (admin-table users)",
                  body=s.WebhookCreateSchema, response=s.WebhookSchema, status=201),
    webhook_route("GET", WEBHOOKS, webhooks.list_webhooks, "List webhooks (`?collection_name=`)",
                  query=s.WebhookListQuerySchema, response=s.WebhookSchema, many=True),
    webhook_route("GET", WEBHOOKS + "/deliveries/recent", webhooks.recent_deliveries,
                  "Recent delivery attempts of every webhook, newest first",
                  query=s.DeliveryQuerySchema, response=s.DeliveryPageSchema),
    webhook_route("GET", WEBHOOKS + "/{webhook_id}", webhooks.get_webhook, "Get a webhook",
                  response=s.WebhookSchema),
    webhook_route("PATCH", WEBHOOKS + "/{webhook_id}", webhooks.update_webhook,
                  "Change a webhook (url, collection_name, events, secret, retry_count, active)",
                  body=s.WebhookUpdateSchema, response=s.WebhookSchema),
    webhook_route("DELETE", WEBHOOKS + "/{webhook_id}", webhooks.delete_webhook, "Delete a webhook", status=204),
    webhook_route("GET", WEBHOOKS + "/{webhook_id}/deliveries", webhooks.webhook_deliveries,
                  "Delivery attempts of a webhook, newest first",
                  query=s.DeliveryQuerySchema, response=s.DeliveryPageSchema),
    webhook_route("POST", WEBHOOKS + "/deliveries/{delivery_id}/redeliver", webhooks.redeliver,
                  "Send a logged delivery again (same body, a new delivery id); `delivery_id` is a log entry's `id`",
                  response=webhooks.RedeliverySchema, status=202),
    # --- end webhooks
    # --- password reset and auth collections (issue 3)
    Route("POST", V1 + "/auth/request-password-reset", admin_auth.request_password_reset,
          "Email a password-reset link (admin-table user, or auth-collection user with `collection`)", "auth",
          body=s.PasswordResetRequestSchema, response=s.MessageSchema),
    Route("POST", V1 + "/auth/forgot-password", admin_auth.forgot_password,
          "Email a password-reset link to an admin-table user", "auth",
          body=s.ForgotPasswordSchema, response=s.MessageSchema),
    Route("POST", V1 + "/auth/reset-password", admin_auth.reset_password,
          "Set a new password with the emailed reset token (any user system)", "auth",
          body=s.ResetPasswordSchema, response=s.MessageSchema),
    collection_auth_route("POST", COLLECTION_AUTH + "/register", collection_auth.register,
                          "Register a user of an auth collection",
                          body=s.CollectionRegisterSchema, response=s.CollectionRegisterResponseSchema, status=201),
    collection_auth_route("POST", COLLECTION_AUTH + "/me/request-email-change", collection_auth.request_email_change,
                          "Email a confirmation link to a new address", policy=COLLECTION_USER,
                          body=s.EmailChangeRequestSchema, response=s.MessageSchema),
    collection_auth_route("POST", COLLECTION_AUTH + "/me/confirm-email-change", collection_auth.confirm_email_change,
                          "Confirm an email change with the emailed token", body=s.TokenBodySchema,
                          response=s.MessageSchema),
    collection_auth_route("POST", COLLECTION_AUTH + "/verify-email", collection_auth.verify_email,
                          "Verify an email with the emailed token", body=s.TokenBodySchema, response=s.MessageSchema),
    collection_auth_route("POST", COLLECTION_AUTH + "/otp/request", collection_auth.otp_request,
                          "Email a 6-digit login code", body=s.OtpRequestSchema, response=s.MessageSchema),
    collection_auth_route("POST", COLLECTION_AUTH + "/otp/verify", collection_auth.otp_verify,
                          "Log in with an emailed code", body=s.OtpVerifySchema,
                          response=s.CollectionLoginResponseSchema),
    *user_system_routes(COLLECTION_AUTH, "collection auth", s.CollectionUserSchema, s.CollectionLoginResponseSchema,
                        COLLECTION_USER),
    Route("GET", "/_/reset-password", system.reset_password_page, "Password reset page", "pages", in_docs=False),
    Route("GET", "/_/confirm-email-change", system.token_link_page, "Email change page", "pages",
          in_docs=False),
    # --- end password reset and auth collections
    # system
    Route("GET", "/health", system.health, "Health of the service and its dependencies", "system",
          response=s.HealthSchema, rate_limit=RateLimit.EXEMPT),
    Route("GET", V1 + "/health", system.health, "Health, as `/health` (for clients that call only `/api/v1`)",
          "system", response=s.HealthSchema, rate_limit=RateLimit.EXEMPT),
    Route("GET", V1 + "/stats", system.stats, "Statistics (HTTP and uptime; MongoDB and Redis for admins)",
          "system", policy=OPTIONAL),
    Route("GET", "/docs", system.docs, "API explorer", "system", in_docs=False, rate_limit=RateLimit.EXEMPT),
    Route("GET", "/metrics", metrics.scrape,
          "Prometheus metrics, text format 0.0.4 (admins, or `Authorization: Bearer $METRICS_TOKEN`); "
          "404 with METRICS_ENABLED=false", "system", policy=Policy.METRICS, rate_limit=RateLimit.EXEMPT,
          produces="text/plain"),
    Route("GET", "/_/verify-email", system.token_link_page, "Email verification page", "pages", in_docs=False),
)


def add_routes(app: web.Application) -> None:
    """Register every route of the table on `app`, and keep which aiohttp route is which entry
    (`guards.ROUTE_TABLE`, for the middlewares that enforce the policy and the rate-limit class)."""
    app[ROUTE_TABLE] = {app.router.add_route(route.method, route.path, route.handler): route for route in ROUTES}
