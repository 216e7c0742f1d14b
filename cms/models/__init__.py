"""Domain values passed between store, services and api: frozen dataclasses, no I/O.

Datetimes are aware UTC. Ids are UUID4 strings (`cms.clock.new_id`). The values are grouped by
domain: `identity` (principals, users, sessions, tokens, API keys), `content` (collections, rules,
records, pages, files), `delivery` (webhooks, deliveries) and `operations` (audit entries). They are
the shared vocabulary of every layer, so this package re-exports every name: import them from
`cms.models`.
"""

from cms.models.content import (
    AUTH_RULES,
    BASE_RULES,
    CHANGED,
    DEFAULT_LOCALES,
    DRAFT,
    OWN_RECORD_RULE,
    PUBLISHED,
    RELEASE_FAILED,
    RELEASE_PENDING,
    RELEASE_PUBLISHED,
    RELEASE_SCHEDULED,
    SIGNED_IN_RULE,
    VIEW_TYPE,
    AccessRules,
    Collection,
    DraftState,
    FieldSpec,
    IndexDeclaration,
    Locale,
    Locales,
    Page,
    QueryPlan,
    QueryShape,
    Record,
    RecordVersion,
    Release,
    ReleaseItem,
    SlowQuery,
    SortPath,
    SortSpec,
    StoredFile,
    Validation,
    ViewDefinition,
    default_rules,
)
from cms.models.delivery import DeliveryAttempt, Webhook, WebhookDelivery
from cms.models.identity import (
    ADMIN_AUDIENCE,
    ROLE_ADMIN,
    ROLE_USER,
    AdminUser,
    ApiKey,
    CollectionUser,
    LoginResult,
    OneTimeToken,
    OtpCode,
    Principal,
    PrincipalKind,
    Session,
    TokenPair,
    audience_collection_id,
    collection_audience,
)
from cms.models.operations import AuditEntry, RewriteBatch, SchemaJournal

__all__ = [
    "ADMIN_AUDIENCE", "AUTH_RULES", "BASE_RULES", "CHANGED", "DEFAULT_LOCALES", "DRAFT", "OWN_RECORD_RULE",
    "PUBLISHED",
    "RELEASE_FAILED", "RELEASE_PENDING", "RELEASE_PUBLISHED", "RELEASE_SCHEDULED", "ROLE_ADMIN", "ROLE_USER",
    "SIGNED_IN_RULE", "VIEW_TYPE", "AccessRules", "AdminUser", "ApiKey",
    "AuditEntry", "Collection", "CollectionUser", "DeliveryAttempt", "DraftState", "FieldSpec", "IndexDeclaration",
    "Locale", "Locales", "LoginResult", "OneTimeToken", "OtpCode", "Page", "Principal", "PrincipalKind", "QueryPlan",
    "QueryShape", "Record", "RecordVersion", "Release", "ReleaseItem", "RewriteBatch", "SchemaJournal",
    "Session", "SlowQuery", "SortPath", "SortSpec", "StoredFile",
    "TokenPair", "Validation", "ViewDefinition", "Webhook", "WebhookDelivery", "audience_collection_id",
    "collection_audience", "default_rules",
]
