"""marshmallow schemas: they validate requests and, through apispec, document the API (/docs).

Response schemas dump `cms.models` dataclasses; timestamps are ISO 8601 UTC with `Z`.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from cms.services.content.fields import to_json_value
from cms.services.content.records import DEFAULT_PER_PAGE
from cms.services.operations.audit import SEVERITY_LEVELS
from cms.services.operations.settings import SETTINGS_DEFAULTS
from cms.web.schemas import MAX_CODE, MAX_PASSWORD, rule_field

NEW_PASSWORD_DOC = {
    "minLength": SETTINGS_DEFAULTS["password_min_length"][0],
    "description": "checked against the password policy: the settings `password_min_length` (default "
                   f"{SETTINGS_DEFAULTS['password_min_length'][0]}) and `password_require_*`",
}
"""OpenAPI only: the default policy's length. The service checks the current policy (422)."""


class Timestamp(fields.Field[Any]):
    """An aware datetime rendered as ISO 8601 UTC with milliseconds and `Z`."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return to_json_value(value) if value is not None else None


# --- errors and messages ---------------------------------------------------------------------


class ErrorSchema(Schema):
    detail = fields.String(required=True, metadata={"description": "Human-readable message"})
    code = fields.String(required=True, metadata={"description": "Stable snake_case error code"})
    errors = fields.Dict(metadata={"description": "422 only: field name -> list of messages"})


class MessageSchema(Schema):
    message = fields.String(required=True)


# --- admin auth ------------------------------------------------------------------------------


class RegisterSchema(Schema):
    email = fields.Email(required=True, validate=validate.Length(max=254))
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD), metadata=NEW_PASSWORD_DOC)
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))
    name = fields.String(load_default="", validate=validate.Length(max=200))


class RefreshSchema(Schema):
    refresh_token = fields.String(required=True, validate=validate.Length(max=4096))


class TokenBodySchema(Schema):
    token = fields.String(required=True, validate=validate.Length(min=1, max=512))


class AdminUserSchema(Schema):
    id = fields.String()
    email = fields.String()
    role = fields.String()
    verified = fields.Boolean()
    name = fields.String()
    created = Timestamp()
    updated = Timestamp()


class TokenSchema(Schema):
    access_token = fields.String()
    refresh_token = fields.String()
    token_type = fields.String()
    expires_in = fields.Integer(metadata={"description": "Access-token lifetime in seconds"})


class _LoginAnswer(Schema):
    """What every login response carries besides its user system's `user`."""

    token = fields.Nested(TokenSchema, allow_none=True)
    message = fields.String(allow_none=True)
    requires_2fa = fields.Boolean()
    mfa_token = fields.String(metadata={"description": "With requires_2fa only: what 2fa/verify takes (5 minutes, "
                                                       "single use); `user` is then only {id, email}"})


class LoginResponseSchema(_LoginAnswer):
    user = fields.Nested(AdminUserSchema)


class RegisterResponseSchema(Schema):
    user = fields.Nested(AdminUserSchema)
    message = fields.String()


# --- collections -----------------------------------------------------------------------------


class FieldValidationSchema(Schema):
    required = fields.Boolean()
    min = fields.Raw(allow_none=True, metadata={"type": "number"})
    max = fields.Raw(allow_none=True, metadata={"type": "number"})
    pattern = fields.String(allow_none=True)
    unique = fields.Boolean()


class FieldSpecSchema(Schema):
    name = fields.String()
    type = fields.String(metadata={"enum": ["text", "editor", "bool", "email", "url", "number", "date",
                                            "select", "json", "relation", "file"]})
    validation = fields.Nested(FieldValidationSchema)
    values = fields.List(fields.String(), allow_none=True)
    max_select = fields.Integer(allow_none=True)
    collection_id = fields.String(allow_none=True)
    cascade_delete = fields.Boolean(metadata={"description": "relation: deleting a target record deletes the "
                                              "records pointing to it (else the reference is removed)"})


class CollectionSchemaSchema(Schema):
    fields_ = fields.List(fields.Nested(FieldSpecSchema), data_key="fields", attribute="fields")


class CollectionSchema(Schema):
    id = fields.String()
    name = fields.String()
    type = fields.String()
    schema = fields.Function(lambda c: CollectionSchemaSchema().dump(c))
    otp_enabled = fields.Boolean()
    mfa_enabled = fields.Boolean()
    oauth_enabled = fields.Boolean()
    list_rule = rule_field("list", dump=True)
    view_rule = rule_field("view", dump=True)
    create_rule = rule_field("create", dump=True)
    update_rule = rule_field("update", dump=True)
    delete_rule = rule_field("delete", dump=True)
    created = Timestamp()
    updated = Timestamp()


# --- records ---------------------------------------------------------------------------------


class RecordWriteSchema(Schema):
    data = fields.Dict(required=True, metadata={"description": "Field values of the record"})


class RecordSchema(Schema):
    """A record: system fields plus the collection's own fields (flat)."""

    class Meta:
        unknown = "include"  # marshmallow.INCLUDE: the collection's fields sit beside the system fields

    id = fields.String()
    created = fields.String()
    updated = fields.String()


class RecordPageSchema(Schema):
    items = fields.List(fields.Nested(RecordSchema))
    total = fields.Integer()
    page = fields.Integer()
    per_page = fields.Integer()


class RecordListQuerySchema(Schema):
    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(load_default=DEFAULT_PER_PAGE, validate=validate.Range(min=1),
                              metadata={"description": "1..100; larger values are clamped to 100"})
    sort = fields.String(load_default=None, metadata={"description": "e.g. `-created,title`"})
    filter = fields.String(load_default=None, metadata={"description": "e.g. `status=published && views>10`"})
    search = fields.String(load_default=None, validate=validate.Length(max=500))
    skip_total = fields.Boolean(load_default=False, truthy={"true", "1"}, falsy={"false", "0"},
                                metadata={"description": "true: do not count the matches (`total` is -1)"})


# --- records: bulk and CSV (issue 4) ----------------------------------------------------------


class BulkDeleteSchema(Schema):
    record_ids = fields.List(
        fields.String(validate=validate.Length(min=1, max=64)), required=True,
        metadata={"description": "1..1,000 distinct record ids (the `bulk_max_ids` setting); all or nothing",
                  "minItems": 1, "uniqueItems": True},
    )


class BulkUpdateSchema(BulkDeleteSchema):
    data = fields.Dict(required=True, metadata={"description": "Field values set on every record"})


class BulkDeletedSchema(Schema):
    deleted = fields.Integer()


class BulkUpdatedSchema(Schema):
    updated = fields.Integer()


class RecordExportQuerySchema(Schema):
    sort = fields.String(load_default=None, metadata={"description": "e.g. `-created,title`"})
    filter = fields.String(load_default=None, metadata={"description": "e.g. `status=published && views>10`"})
    search = fields.String(load_default=None, validate=validate.Length(max=500))


class CsvImportFailureSchema(Schema):
    row = fields.Integer(metadata={"description": "1-based data-row number (the header is not counted)"})
    errors = fields.Dict(metadata={"description": "field name (or `_row`) -> list of messages"})


class CsvImportResultSchema(Schema):
    imported = fields.Integer()
    failed = fields.List(fields.Nested(CsvImportFailureSchema))


# --- end records: bulk and CSV


# --- password reset and auth collections (issue 3) ---------------------------------------------


class PasswordResetRequestSchema(Schema):
    email = fields.String(required=True, validate=validate.Length(max=254))
    collection = fields.String(
        load_default=None, validate=validate.Length(min=1, max=63),
        metadata={"description": "Name of an auth collection; omit for admin-table users"},
    )


class ForgotPasswordSchema(Schema):
    email = fields.String(required=True, validate=validate.Length(max=254))


class ResetPasswordSchema(Schema):
    token = fields.String(required=True, validate=validate.Length(min=1, max=512))
    new_password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD), metadata=NEW_PASSWORD_DOC)
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))


AUTH_REGISTER_KEYS = ("email", "password", "password_confirm")


class CollectionRegisterSchema(Schema):
    """`email`, `password`, optional `password_confirm`, plus the collection's schema fields."""

    class Meta:
        unknown = "include"  # marshmallow.INCLUDE: the schema fields are checked by the collection's schema

    email = fields.Email(required=True, validate=validate.Length(max=254))
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD))
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))


class ChangePasswordSchema(Schema):
    old_password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD))
    new_password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD), metadata=NEW_PASSWORD_DOC)
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))


class EmailChangeRequestSchema(Schema):
    new_email = fields.Email(required=True, validate=validate.Length(max=254))
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD),
                             metadata={"description": "The current password"})


class OtpRequestSchema(Schema):
    email = fields.String(required=True, validate=validate.Length(max=254))


class OtpVerifySchema(Schema):
    email = fields.String(required=True, validate=validate.Length(max=254))
    code = fields.String(required=True, validate=validate.Regexp(r"^[0-9]{6}\Z", error="Must be 6 digits."))


class CollectionUserSchema(Schema):
    """A user of an auth collection: its record (flat, with the schema fields), never a password."""

    id = fields.String()
    email = fields.String()
    verified = fields.Boolean()
    created = fields.String()
    updated = fields.String()


class CollectionLoginResponseSchema(_LoginAnswer):
    user = fields.Nested(CollectionUserSchema)


# --- two-factor login (decisions.md, Two-factor login) ----------------------------------------------

class TwoFactorSetupSchema(Schema):
    secret = fields.String(metadata={"description": "Base32 TOTP secret (RFC 6238, 30 s, 6 digits, SHA-1)"})
    otpauth_url = fields.String()
    qr_svg = fields.String(metadata={"description": "The otpauth URL as a QR code, SVG text"})


class TwoFactorCodeSchema(Schema):
    code = fields.String(required=True, validate=validate.Length(min=1, max=MAX_CODE))


class RecoveryCodesSchema(Schema):
    recovery_codes = fields.List(fields.String(), metadata={"description": "Shown once; each works once"})


class TwoFactorDisableSchema(Schema):
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD))
    code = fields.String(required=True, validate=validate.Length(min=1, max=MAX_CODE),
                         metadata={"description": "A TOTP code or a recovery code"})


# --- OAuth2 / OpenID Connect login --------------------------------------------------------------------

_REDIRECT_URI = [validate.Length(min=1, max=2048), validate.Regexp(r"^https?://", error="Must be an http(s) URL.")]


class OAuthProvidersQuerySchema(Schema):
    redirect_uri = fields.String(load_default=None, validate=_REDIRECT_URI,
                                 metadata={"description": "Where the provider sends the user back; without "
                                                          "it auth_url ends in `&redirect_uri=` for the client"})


class OAuthProviderSchema(Schema):
    name = fields.String()
    auth_url = fields.String(metadata={"description": "Send the user here (PKCE S256, state and nonce included)"})
    state = fields.String(metadata={"description": "Compare with the state the provider sends back; post it to "
                                                   "oauth2/callback (valid 10 minutes)"})
    code_verifier = fields.String(metadata={"description": "Keep it; post it to oauth2/callback"})
    code_challenge = fields.String()
    code_challenge_method = fields.String()


class OAuthCallbackSchema(Schema):
    provider = fields.String(required=True, validate=validate.Length(min=1, max=32))
    code = fields.String(required=True, validate=validate.Length(min=1, max=4096))
    code_verifier = fields.String(required=True, validate=validate.Regexp(
        r"^[A-Za-z0-9._~-]{43,128}\Z", error="Must be 43 to 128 characters of A-Z a-z 0-9 . _ ~ - (RFC 7636)."))
    state = fields.String(required=True, validate=[validate.Length(min=1, max=2048), validate.Regexp(
        r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\Z", error="Must be a state from oauth2/providers.")])
    redirect_uri = fields.String(required=True, validate=_REDIRECT_URI)


class CollectionRegisterResponseSchema(Schema):
    user = fields.Nested(CollectionUserSchema)
    message = fields.String()


class SessionSchema(Schema):
    id = fields.String()
    created = Timestamp()
    last_used = Timestamp()
    user_agent = fields.String()
    ip = fields.String()
    current = fields.Boolean(metadata={"description": "True for the session of the token making the request"})


# --- end password reset and auth collections


# --- system ----------------------------------------------------------------------------------


class HealthSchema(Schema):
    status = fields.String()
    mongodb = fields.String()
    redis = fields.String()
    version = fields.String()


# --- webhooks --------------------------------------------------------------------------------------

_EVENT_KINDS = ["create", "update", "delete"]


class WebhookCreateSchema(Schema):
    url = fields.String(required=True, metadata={"description": "http or https URL receiving the POSTs"})
    collection_name = fields.String(required=True)
    events = fields.List(fields.String(validate=validate.OneOf(_EVENT_KINDS)), required=True,
                         validate=validate.Length(min=1, max=3))
    secret = fields.String(load_default=None, allow_none=True, validate=validate.Length(max=256),
                           metadata={"description": "signs deliveries; never returned"})
    retry_count = fields.Integer(strict=True, load_default=3, validate=validate.Range(min=0, max=10))


class WebhookUpdateSchema(Schema):
    url = fields.String()
    collection_name = fields.String()
    events = fields.List(fields.String(validate=validate.OneOf(_EVENT_KINDS)), validate=validate.Length(min=1, max=3))
    secret = fields.String(allow_none=True, validate=validate.Length(max=256))
    retry_count = fields.Integer(strict=True, validate=validate.Range(min=0, max=10))
    active = fields.Boolean()


class WebhookSchema(Schema):
    id = fields.String()
    url = fields.String()
    collection_name = fields.String()
    events = fields.List(fields.String())
    active = fields.Boolean()
    signed = fields.Boolean()
    retry_count = fields.Integer()
    created = Timestamp()
    updated = Timestamp()


class WebhookListQuerySchema(Schema):
    collection_name = fields.String(load_default=None)


MAX_DELIVERY_SKIP = 1_000_000_000
"""Largest `skip` of the delivery log (MongoDB's skip is a 64-bit integer: more would be a 500)."""


class DeliveryQuerySchema(Schema):
    skip = fields.Integer(load_default=0, validate=validate.Range(min=0, max=MAX_DELIVERY_SKIP))
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=200))


class DeliveryAttemptSchema(Schema):
    id = fields.String()
    webhook_id = fields.String()
    event_type = fields.String()
    record_id = fields.String()
    url = fields.String()
    status_code = fields.Integer(allow_none=True)
    response_body = fields.String()
    attempt = fields.Integer()
    success = fields.Boolean()
    duration_ms = fields.Integer()
    error = fields.String(allow_none=True)
    created = Timestamp()


class DeliveryPageSchema(Schema):
    items = fields.List(fields.Nested(DeliveryAttemptSchema))
    total = fields.Integer()


# --- audit and settings (issue 9) --------------------------------------------------------------

class AuditEntrySchema(Schema):
    id = fields.String()
    event_type = fields.String()
    severity = fields.String(metadata={"enum": list(SEVERITY_LEVELS)})
    user_id = fields.String(allow_none=True)
    ip_address = fields.String()
    user_agent = fields.String()
    details = fields.Dict()
    created = Timestamp()


class AuditPageSchema(Schema):
    items = fields.List(fields.Nested(AuditEntrySchema), metadata={"description": "newest first"})
    total = fields.Integer()
    limit = fields.Integer()
    offset = fields.Integer()


class AuditStatisticsSchema(Schema):
    total = fields.Integer()
    by_event_type = fields.Dict(keys=fields.String(), values=fields.Integer())
    by_severity = fields.Dict(keys=fields.String(), values=fields.Integer())
    last_24h = fields.Integer(metadata={"description": "entries written in the last 24 hours"})


class SettingSchema(Schema):
    key = fields.String()
    value = fields.String(metadata={"description": "always a string: `true`, `false`, `8`"})
    category = fields.String()


class SettingUpdateSchema(Schema):
    key = fields.String(required=True, validate=validate.Length(min=1, max=100),
                        metadata={"enum": sorted(SETTINGS_DEFAULTS)})
    value = fields.Raw(required=True, metadata={
        "description": "a JSON boolean or integer, or its string form (`\"true\"`, `\"8\"`), of the key's type",
        "anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "string"}]})
    category = fields.String(load_default=None, metadata={
        "description": "optional; must be the key's category",
        "enum": sorted({category for _, category in SETTINGS_DEFAULTS.values()})})


# --- end audit and settings


# --- backups (issue 9) ------------------------------------------------------------------------


class BackupSchema(Schema):
    filename = fields.String(metadata={"description": "`backup-YYYYmmdd-HHMMSS.tar.gz` (UTC)"})
    size = fields.Integer(metadata={"description": "bytes"})
    created = Timestamp(metadata={"description": "the time in the filename"})


# --- end backups


# --- API keys ---------------------------------------------------------------------------------------


class ApiKeyCreateSchema(Schema):
    name = fields.String(required=True, validate=validate.Length(min=1, max=100))
    scopes = fields.List(fields.String(validate=validate.OneOf(["read", "write"])), required=True,
                         validate=validate.Length(min=1, max=2))
    expires_at = fields.DateTime(load_default=None, allow_none=True,
                                 metadata={"description": "ISO 8601; without a zone it is UTC; must be in the future"})


class ApiKeySchema(Schema):
    id = fields.String()
    name = fields.String()
    scopes = fields.List(fields.String())
    expires_at = Timestamp(allow_none=True)
    created = Timestamp()
    last_used = Timestamp(allow_none=True)


class ApiKeyCreatedSchema(ApiKeySchema):
    key = fields.String(metadata={"description": "the secret, shown only in this answer"})


# --- files (issue 9) -----------------------------------------------------------------------------


class FileSchema(Schema):
    id = fields.String()
    filename = fields.String(metadata={"description": "the uploaded name without path parts or control "
                                                      "characters, at most 255 characters"})
    content_type = fields.String(metadata={"description": "from the part's Content-Type (`type/subtype`), "
                                                          "else application/octet-stream"})
    size = fields.Integer(metadata={"description": "bytes"})
    collection = fields.String(metadata={"description": "collection name"})
    record_id = fields.String()
    created = Timestamp()


# --- end files
