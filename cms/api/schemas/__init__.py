"""The marshmallow schemas of the API, one module per resource: request bodies and queries here
(validated by `cms.web.context.parse_body`/`parse_query`), response shapes in
`cms.services.representation` (they dump the answers). This package gathers both under one name
for the route table (`from cms.api import schemas as s`), which apispec documents (/openapi.json).
"""

from __future__ import annotations

from cms.api.schemas.api_keys import ApiKeyCreateSchema
from cms.api.schemas.auth import (
    AUTH_REGISTER_KEYS,
    NEW_PASSWORD_DOC,
    ChangePasswordSchema,
    CollectionRegisterSchema,
    EmailChangeRequestSchema,
    ForgotPasswordSchema,
    OAuthCallbackSchema,
    OAuthProvidersQuerySchema,
    OtpRequestSchema,
    OtpVerifySchema,
    PasswordResetRequestSchema,
    RefreshSchema,
    RegisterSchema,
    ResetPasswordSchema,
    TokenBodySchema,
    TwoFactorCodeSchema,
    TwoFactorDisableSchema,
)
from cms.api.schemas.errors import ErrorSchema
from cms.api.schemas.files import FileDownloadQuerySchema
from cms.api.schemas.realtime import RealtimeStreamQuerySchema, RealtimeSubscribeSchema
from cms.api.schemas.records import (
    BulkDeleteSchema,
    BulkUpdateSchema,
    RecordExportQuerySchema,
    RecordGetQuerySchema,
    RecordListQuerySchema,
    RecordLocaleQuerySchema,
    RecordPublishSchema,
    RecordViewQuerySchema,
    RecordWriteSchema,
    VersionListQuerySchema,
)
from cms.api.schemas.releases import (
    ReleaseCreateSchema,
    ReleaseListQuerySchema,
    ReleasePublishSchema,
    ReleaseUpdateSchema,
)
from cms.api.schemas.settings import SettingUpdateSchema
from cms.api.schemas.webhooks import (
    MAX_DELIVERY_SKIP,
    DeliveryQuerySchema,
    WebhookCreateSchema,
    WebhookListQuerySchema,
    WebhookUpdateSchema,
)
from cms.services.representation.content import CollectionSchema, FileSchema, FileTokenSchema, SlowQuerySchema
from cms.services.representation.delivery import DeliveryPageSchema, RedeliverySchema, WebhookSchema
from cms.services.representation.identity import (
    AdminUserSchema,
    ApiKeyCreatedSchema,
    ApiKeySchema,
    CollectionLoginResponseSchema,
    CollectionRegisterResponseSchema,
    CollectionUserSchema,
    LoginResponseSchema,
    OAuthProviderSchema,
    RecoveryCodesSchema,
    RegisterResponseSchema,
    SessionSchema,
    TokenSchema,
    TwoFactorSetupSchema,
)
from cms.services.representation.operations import (
    AuditPageSchema,
    AuditStatisticsSchema,
    BackupSchema,
    HealthSchema,
    MessageSchema,
    SettingSchema,
)
from cms.services.representation.records import (
    BulkDeletedSchema,
    BulkUpdatedSchema,
    CsvImportFailureSchema,
    CsvImportResultSchema,
    RecordPageSchema,
    RecordSchema,
)
from cms.services.representation.releases import ReleasePageSchema, ReleaseSchema
from cms.services.representation.schema import SchemaDiffSchema, SchemaSnapshotSchema
from cms.services.representation.versions import RecordVersionPageSchema, RecordVersionSchema

__all__ = [
    "AUTH_REGISTER_KEYS", "MAX_DELIVERY_SKIP", "NEW_PASSWORD_DOC",
    "AdminUserSchema", "ApiKeyCreateSchema", "ApiKeyCreatedSchema", "ApiKeySchema", "AuditPageSchema",
    "AuditStatisticsSchema", "BackupSchema", "BulkDeleteSchema", "BulkDeletedSchema", "BulkUpdateSchema",
    "BulkUpdatedSchema", "ChangePasswordSchema", "CollectionLoginResponseSchema", "CollectionRegisterResponseSchema",
    "CollectionRegisterSchema", "CollectionSchema", "CollectionUserSchema", "CsvImportFailureSchema",
    "CsvImportResultSchema", "DeliveryPageSchema", "DeliveryQuerySchema", "EmailChangeRequestSchema", "ErrorSchema",
    "RealtimeStreamQuerySchema", "RealtimeSubscribeSchema",
    "FileDownloadQuerySchema", "FileSchema", "FileTokenSchema", "ForgotPasswordSchema", "HealthSchema",
    "LoginResponseSchema", "MessageSchema",
    "SchemaDiffSchema", "SchemaSnapshotSchema",
    "OAuthCallbackSchema", "OAuthProviderSchema", "OAuthProvidersQuerySchema", "OtpRequestSchema", "OtpVerifySchema",
    "PasswordResetRequestSchema", "RecordExportQuerySchema", "RecordGetQuerySchema", "RecordListQuerySchema",
    "RecordLocaleQuerySchema", "RecordPageSchema", "RecordPublishSchema", "RecordSchema", "RecordVersionPageSchema",
    "RecordVersionSchema", "RecordViewQuerySchema", "RecordWriteSchema", "RecoveryCodesSchema", "RedeliverySchema",
    "ReleaseCreateSchema", "ReleaseListQuerySchema", "ReleasePageSchema",
    "ReleasePublishSchema", "ReleaseSchema", "ReleaseUpdateSchema",
    "RefreshSchema",
    "RegisterResponseSchema", "RegisterSchema", "ResetPasswordSchema", "SessionSchema", "SettingSchema",
    "SettingUpdateSchema", "SlowQuerySchema", "TokenBodySchema", "TokenSchema", "TwoFactorCodeSchema",
    "TwoFactorDisableSchema", "TwoFactorSetupSchema", "VersionListQuerySchema",
    "WebhookCreateSchema", "WebhookListQuerySchema", "WebhookSchema", "WebhookUpdateSchema",
]
