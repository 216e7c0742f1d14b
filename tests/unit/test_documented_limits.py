"""Every limit the docs (docs/) or decisions.md state as a number, pinned as that number.

The behaviour tests exercise each limit through the code's own constant (so they follow it); this
table holds the documented figure as a literal, so changing a constant without the documentation
(or the other way round) fails here. Each row: the code's value, the documented number, and where
it is documented."""

from __future__ import annotations

from typing import Any

import pytest

from cms.admin_ui.views import relations as ui_relations
from cms.api import realtime as realtime_api
from cms.config import SLOW_QUERY_MS, Config
from cms.filters import grouping, mongo
from cms.infra import MONGODB_CONNECT_TIMEOUT_S, REDIS_MAX_CONNECTIONS
from cms.observability import metrics, recorder, request_log, timeline
from cms.security import codes, json_input
from cms.security.tokens import VERIFIED_TOKENS_KEPT
from cms.services.caching import counters, definition_cache, read_cache, result_sets
from cms.services.content import (
    aggregates,
    batch,
    collections,
    csv_io,
    envelope,
    expansion,
    group_commit,
    index_sync,
    orphans,
    records,
    relations,
    releases,
    slow_queries,
    slow_query_board,
)
from cms.services.content.schema_snapshot import FORMAT
from cms.services.content.views import groups as view_groups
from cms.services.delivery import webhook_outbox, webhook_sender, webhooks
from cms.services.delivery.realtime import connections as realtime_connections
from cms.services.delivery.realtime import stream as realtime_stream
from cms.services.delivery.realtime import topics as realtime_topics
from cms.services.identity import otp
from cms.services.operations import audit, rate_limits
from cms.services.operations.settings import SETTINGS_DEFAULTS, SETTINGS_RANGES, VERSION_CHECK_INTERVAL_S
from cms.services.representation import record_view
from cms.store import query_shapes, scan_line
from cms.web import schema_snapshot
from workers import liveness
from workers import settings as worker_settings

MIB = 1024 * 1024

LIMITS: dict[str, tuple[Any, Any]] = {
    # decisions.md, Limits
    "json-body-1-mib": (Config.__dataclass_fields__["max_json_bytes"].default, 1 * MIB),
    "file-upload-25-mib": (SETTINGS_DEFAULTS["max_upload_mb"][0], 25),
    "csv-import-10-mib": (csv_io.MAX_IMPORT_BYTES, 10 * MIB),
    "csv-import-50000-rows": (csv_io.MAX_IMPORT_ROWS, 50_000),
    "bulk-1000-ids": (records.MAX_BULK_IDS, 1_000),
    "bulk-setting-1000-ids": (SETTINGS_DEFAULTS["bulk_max_ids"][0], 1_000),
    # decisions.md, Batch writes (the range: docs/concepts/batch.md)
    "batch-50-requests": ((SETTINGS_DEFAULTS["batch_max_requests"][0], batch.DEFAULT_MAX_REQUESTS), (50, 50)),
    "batch-setting-1-to-1000": (SETTINGS_RANGES["batch_max_requests"], (1, 1_000)),
    # decisions.md, Drafts, versions and scheduled publishing: Releases (the name: docs/concepts/releases.md)
    "release-1000-items": (releases.MAX_RELEASE_ITEMS, 1_000),
    "release-name-200-chars": (releases.MAX_RELEASE_NAME, 200),
    # decisions.md, Relations in one request (the parameter length: docs/concepts/expand.md)
    "expand-6-levels": (record_view.MAX_EXPAND_DEPTH, 6),
    "expand-10-paths": (record_view.MAX_EXPAND_PATHS, 10),
    "back-relations-1000-per-record": (expansion.MAX_BACK_RELATIONS, 1_000),
    "expand-and-fields-1000-chars": (record_view.MAX_VIEW_PARAMETER_LENGTH, 1_000),
    "fields-100-names": (record_view.MAX_FIELD_NAMES, 100),
    "auth-rate-10-per-minute": ((rate_limits.AUTH_LIMIT, rate_limits.DEFAULT_WINDOW_S), (10, 60)),
    "general-rate-600-per-minute": (SETTINGS_DEFAULTS["rate_limit_per_minute"][0], 600),
    "otp-6-digits": (codes.OTP_DIGITS, 6),
    "otp-10-minutes": (otp.OTP_LIFETIME_S, 10 * 60),
    "otp-5-wrong-tries": (otp.OTP_MAX_ATTEMPTS, 5),
    "webhook-timeout-10-s": (webhook_sender.REQUEST_TIMEOUT_S, 10),
    "webhook-response-kept-2-kib": (webhook_sender.MAX_RESPONSE_BYTES, 2 * 1024),
    "deliveries-max-200": (webhooks.MAX_LOG_PAGE, 200),
    "audit-limit-50-max-200": ((audit.DEFAULT_LIMIT, audit.MAX_LIMIT), (50, 200)),
    # decisions.md, Realtime
    "realtime-1000-topics": (realtime_topics.MAX_TOPICS, 1_000),
    "realtime-topic-2500-chars": (realtime_topics.MAX_TOPIC_LENGTH, 2_500),
    "realtime-kept-10-minutes-100000-events": (
        (realtime_stream.RETENTION_S, realtime_stream.RETENTION_EVENTS), (10 * 60, 100_000)),
    "realtime-client-forgotten-after-10-minutes": (realtime_stream.CLIENT_TTL_S, 10 * 60),
    "realtime-queue-1000-events": (realtime_connections.MAX_QUEUE, 1_000),
    "realtime-ping-20-s": (realtime_api.PING_INTERVAL_S, 20),
    # docs/ (the concept, API and operations pages)
    "mail-1-a-minute": ((rate_limits.MAIL_PER_MINUTE, rate_limits.MAIL_MINUTE_WINDOW_S), (1, 60)),
    "mail-5-an-hour": ((rate_limits.MAIL_PER_HOUR, rate_limits.MAIL_HOUR_WINDOW_S), (5, 3600)),
    "json-depth-64": (json_input.MAX_JSON_DEPTH, 64),
    "json-integer-100-digits": (json_input.MAX_JSON_INT_DIGITS, 100),
    "regex-512-chars": (mongo.MAX_REGEX_LENGTH, 512),
    "per-page-max-100": (records.MAX_PER_PAGE, 100),  # STYLE rule 4 too
    "relation-picker-10-records-100-chars": ((ui_relations.PICK_RESULTS, ui_relations.MAX_PICK_QUERY_CHARS), (10, 100)),
    "cascade-10000-records": (relations.MAX_CASCADE_RECORDS, 10_000),
    "read-cache-entries-300-s": (read_cache.DEFAULT_TTL_S, 300),
    "read-cache-bodies-1-mib": (read_cache.MAX_ENTRY_BYTES, 1 * MIB),
    "read-cache-redis-0.5-s": (counters.REDIS_TIMEOUT_S, 0.5),
    "definitions-5-s": (definition_cache.MAX_AGE_S, 5),
    "signatures-kept-4096": (VERIFIED_TOKENS_KEPT, 4096),
    "rate-limiter-gives-up-2-s": (rate_limits.LIMITER_TIMEOUT_S, 2),
    "group-of-100": (group_commit.MAX_GROUP, 100),
    "4-list-queries": ((scan_line.SCAN_SLOTS, Config.__dataclass_fields__["list_scan_slots"].default), (4, 4)),
    "list-query-waits-2-s": (scan_line.SCAN_MAX_WAIT_S, 2),
    "16-list-queries-wait": (scan_line.SCAN_MAX_WAITING, 16),
    # docs/operations/scaling.md, configuration.md and api/conventions.md (issue 37)
    "8-list-query-places-per-client": (
        (scan_line.SCAN_PER_CLIENT, Config.__dataclass_fields__["list_scan_per_client"].default), (8, 8)),
    "result-set-100000-ids": (result_sets.RESULT_SET_MAX_IDS, 100_000),
    "result-sets-8-mib-per-collection": (result_sets.RESULT_SET_MAX_BYTES, 8 * MIB),
    "orphan-sweep-waits-5-minutes": (orphans.ORPHAN_CONFIRM_S, 5 * 60),
    "restore-staging-an-hour": (orphans.RESTORE_STAGING_MAX_S, 3600),
    "webhook-50-at-a-time-per-batch": (webhook_sender.SEND_CONCURRENCY, 50),
    "webhook-100-per-worker": (webhook_sender.CONNECTION_LIMIT, 100),
    "webhook-batch-starts-within-60-s": (webhook_outbox.BATCH_START_WITHIN_S, 60),
    # docs/operations/faults.md, A worker dies
    "job-lock-15-s-refreshed-every-3-s": ((liveness.LOCK_TTL_S, liveness.LOCK_REFRESH_EVERY_S), (15, 3)),
    "arq-own-lock-130-s": (worker_settings.JOB_TIMEOUT_S + 10, 130),
    "redis-200-connections": (REDIS_MAX_CONNECTIONS, 200),
    "mongodb-found-within-10-s": (MONGODB_CONNECT_TIMEOUT_S, 10),
    "settings-version-every-0.5-s": (VERSION_CHECK_INTERVAL_S, 0.5),
    "realtime-stream-1000000-events": (realtime_stream.MAX_STREAM_EVENTS, 1_000_000),
    "realtime-10000-connections-per-process": (SETTINGS_DEFAULTS["realtime_max_connections"][0], 10_000),
    "realtime-setting-0-to-1000000": (SETTINGS_RANGES["realtime_max_connections"], (0, 1_000_000)),
    # docs/operations/dashboard.md
    "request-log-1000-entries": (SETTINGS_DEFAULTS["request_log_size"][0], 1_000),
    "request-log-setting-0-to-100000": (SETTINGS_RANGES["request_log_size"], (0, 100_000)),
    "request-log-50-a-page": (request_log.PER_PAGE, 50),
    "dashboard-flush-every-5-s": (recorder.FLUSH_INTERVAL_S, 5),
    "dashboard-minutes-kept-24-h": (timeline.WINDOW_MINUTES, 24 * 60),
    # docs/concepts/indexes.md (issue 38)
    "slow-query-200-ms": ((SLOW_QUERY_MS, Config.__dataclass_fields__["slow_query_ms"].default), (200, 200)),
    "slow-queries-200-entries-7-days": ((slow_query_board.MAX_SLOW_QUERIES, slow_query_board.SLOW_QUERY_RETENTION_S),
                                        (200, 7 * 24 * 3600)),
    "slow-query-logged-once-an-hour-64-at-a-time": ((slow_queries.LOG_WINDOW_S, slow_queries.MAX_PENDING_NOTES),
                                                    (3600, 64)),
    "slow-query-labels-50-collections-20-shapes": ((metrics.MAX_SLOW_COLLECTIONS, metrics.MAX_SLOW_SHAPES), (50, 20)),
    "query-shape-400-chars": (query_shapes.MAX_SHAPE_LENGTH, 400),
    "index-sync-3-attempts-stops-within-5-s": ((collections.RESYNC_ATTEMPTS, index_sync.STOP_GRACE_S), (3, 5)),
    # decisions.md and docs/concepts/aggregation.md, Aggregation and view collections
    "aggregate-10-keys-10-aggregates-1-distinct": (
        (grouping.MAX_GROUP_FIELDS, grouping.MAX_AGGREGATES, grouping.MAX_COUNT_DISTINCT), (10, 10, 1)),
    "aggregate-10-s-per-page-100": ((aggregates.AGGREGATE_MAX_TIME_MS, aggregates.MAX_PER_PAGE), (10_000, 100)),
    "view-10000-groups-mirror-100000-records-8-views": (
        (view_groups.MAX_VIEW_GROUPS, view_groups.MIRROR_MAX_RECORDS, view_groups.MIRRORS_KEPT), (10_000, 100_000, 8)),
    # docs/performance.md, The embedded server's envelope
    "embedded-cold-page-1000-records": (Config.__dataclass_fields__["embedded_cold_page_records"].default, 1_000),
    "envelope-250-ms-estimate-5-minutes-2-s": (
        (envelope.COLD_PAGE_BUDGET_MS, envelope.ESTIMATE_TTL_S, envelope.ESTIMATE_TIMEOUT_MS), (250, 5 * 60, 2_000)),
    # docs/concepts/schema-as-code.md and api/conventions.md
    "snapshot-8-mib-1000-collections": ((schema_snapshot.MAX_SNAPSHOT_BYTES, schema_snapshot.MAX_SNAPSHOT_COLLECTIONS),
                                        (8 * MIB, 1_000)),
    "snapshot-format-1": (FORMAT, 1),
}


@pytest.mark.parametrize("value, documented", list(LIMITS.values()), ids=list(LIMITS))
def test_the_code_keeps_the_documented_limit(value: Any, documented: Any) -> None:
    assert value == documented
