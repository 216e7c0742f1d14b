"""The request schemas both the API and the admin UI load (decisions.md, Limits: every
client-controlled size has a bound): sign-in and its 2FA step, collection create and update, and
the audit log queries. The API also documents them (/docs); the admin UI loads its forms with them,
so a form accepts exactly what the REST endpoint accepts."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from cms.filters.grammar import MAX_FILTER_LENGTH
from cms.filters.rules import ACTIONS
from cms.services.content.value_fields import IsoDateTime, StrictBoolean
from cms.services.content.versions import MAX_VERSIONS
from cms.services.identity.credentials import normalize_email
from cms.services.operations.audit import DEFAULT_LIMIT, MAX_LIMIT, SEVERITIES, SEVERITY_LEVELS
from cms.services.representation.content import rule_description

MAX_PASSWORD = 256
"""Longest password accepted, in characters (argon2 hashes anything; this bounds the work)."""
MAX_CODE = 64
"""Longest `code` accepted (a TOTP code is 6 digits, a recovery code 10 hex digits and a dash)."""


MAX_EMAIL = 254
"""Longest email address accepted, in characters (RFC 5321's path limit)."""


# --- sign-in ---------------------------------------------------------------------------------


class EmailText(fields.String):
    """An email address in a body, loaded as `normalize_email` makes it (trimmed, lower-cased), at
    most MAX_EMAIL characters. Every endpoint reads its addresses through this field, so the rate-limit
    keys, the look-up and registration all see one form of an address: " A@x.test" and "a@x.test"
    share one budget."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(validate=validate.Length(max=MAX_EMAIL), **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        return normalize_email(super()._deserialize(value, attr, data, **kwargs))


class EmailAddress(EmailText, fields.Email):
    """An `EmailText` that must also look like an address (a new address: register, email change);
    checked once normalised."""


class LoginSchema(Schema):
    """Body of a password sign-in: `{email, password}` (bounds only; the service checks them)."""

    email = EmailText(required=True)
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD))


class TwoFactorVerifySchema(Schema):
    """Body of the second sign-in step: `{mfa_token, code}` (a TOTP or recovery code)."""

    mfa_token = fields.String(required=True, validate=validate.Length(min=1, max=4096))
    code = fields.String(required=True, validate=validate.Length(min=1, max=MAX_CODE),
                         metadata={"description": "A TOTP code or a recovery code"})


# --- collections -----------------------------------------------------------------------------

RULE_NAMES = (*(f"{action}_rule" for action in ACTIONS), "email_view_rule")
"""The rule attributes of a collection, in order: the five of records, then auth collections'
`email_view_rule`."""


def rule_field(action: str) -> fields.String:
    """The schema field of the `action` rule (list, view, create, update, delete): a string up to
    MAX_FILTER_LENGTH characters or null."""
    return fields.String(allow_none=True, validate=validate.Length(max=MAX_FILTER_LENGTH),
                         metadata={"description": rule_description(action)})


SCHEMA_DOC = {
    "description": "List of fields, or {fields: [...]}",
    "anyOf": [{"type": "array", "items": {"type": "object"}},
              {"type": "object", "properties": {"fields": {"type": "array", "items": {"type": "object"}}},
               "required": ["fields"]}],
}
"""The OpenAPI shape of a collection's `schema` in requests: a list of field objects or `{fields}`."""


INDEXES_DOC = {
    "description": "Declared indexes: at most 16 of {fields: 1 to 8 names of schema fields or id, created, "
                   "updated, '-' prefix for descending; unique: false by default}. The service's automatic "
                   "indexes (relation fields, fields rules compare with @request.auth.*) are not listed",
    "type": "array",
    "maxItems": 16,
    "items": {"type": "object", "required": ["fields"], "additionalProperties": False,
              "properties": {"fields": {"type": "array", "minItems": 1, "maxItems": 8, "items": {"type": "string"}},
                             "unique": {"type": "boolean", "default": False}}},
}
"""The OpenAPI shape of a collection's `indexes` in requests (`content.indexes.parse_indexes` checks it)."""


VERSIONS_DOC = {
    "description": "Versions kept per record (0: none): each create and update stores one, the newest are kept",
    "type": "integer", "minimum": 0, "maximum": MAX_VERSIONS, "default": 0,
}
"""The OpenAPI shape of a collection's `versions` in requests (`content.versions.check_versions` checks it)."""

DRAFTS_DOC = ("Base collections: records have a published copy (what readers see) and a working copy (publish, "
              "unpublish, schedule); default false. Turned on, existing records are published; turned off, nothing "
              "is published or discarded")


VIEW_DOC = {
    "description": "Type view only, instead of schema and indexes (decisions.md, Aggregation and view collections): "
                   "the groups of the records of `source` (a base or auth collection) matching `filter`, keyed by "
                   "`group_by`, with `aggregates`; each string as the aggregate endpoint's parameter",
    "type": "object", "required": ["source"], "additionalProperties": False,
    "properties": {"source": {"type": "string"}, "filter": {"type": "string", "nullable": True},
                   "group_by": {"type": "string", "nullable": True, "example": "published,created:month"},
                   "aggregates": {"type": "string", "nullable": True, "example": "count(),sum(views)"}},
}
"""The OpenAPI shape of a view collection's `view` in requests (`content.views.definition.parse_view`)."""


class CollectionCreateSchema(Schema):
    """Body of a collection create: name, type (`base`/`auth`/`view`), schema (a view: `view`), declared
    indexes, drafts, auth options and the five rules."""

    name = fields.String(required=True)
    type = fields.String(load_default="base", metadata={"enum": ["base", "auth", "view"]})
    schema = fields.Raw(load_default=list, metadata=SCHEMA_DOC)
    indexes = fields.Raw(load_default=None, metadata=INDEXES_DOC)
    drafts = StrictBoolean(load_default=None, metadata={"description": DRAFTS_DOC})
    view = fields.Raw(load_default=None, metadata=VIEW_DOC)
    otp_enabled = StrictBoolean(load_default=None)
    mfa_enabled = StrictBoolean(load_default=None)
    oauth_enabled = StrictBoolean(load_default=None)
    versions = fields.Raw(load_default=0, metadata=VERSIONS_DOC)
    list_rule = rule_field("list")
    view_rule = rule_field("view")
    create_rule = rule_field("create")
    update_rule = rule_field("update")
    delete_rule = rule_field("delete")
    email_view_rule = rule_field("email_view")


class CollectionUpdateSchema(Schema):
    """Body of a collection update: any subset of the create body but `type`."""

    name = fields.String()
    schema = fields.Raw(metadata=SCHEMA_DOC)
    indexes = fields.Raw(metadata=INDEXES_DOC)
    drafts = StrictBoolean(metadata={"description": DRAFTS_DOC})
    view = fields.Raw(metadata=VIEW_DOC)
    otp_enabled = StrictBoolean()
    mfa_enabled = StrictBoolean()
    oauth_enabled = StrictBoolean()
    versions = fields.Raw(metadata=VERSIONS_DOC)
    list_rule = rule_field("list")
    view_rule = rule_field("view")
    create_rule = rule_field("create")
    update_rule = rule_field("update")
    delete_rule = rule_field("delete")
    email_view_rule = rule_field("email_view")


# --- audit -----------------------------------------------------------------------------------

MAX_AUDIT_OFFSET = 1_000_000_000
"""Highest audit `offset` accepted."""
_LIMIT_DESCRIPTION = f"1..{MAX_LIMIT}, default {DEFAULT_LIMIT}; larger values are clamped to {MAX_LIMIT}"


class AuditPageQuerySchema(Schema):
    """The paging of an audit query: `limit` (1.., clamped by the service) and `offset` (0..MAX_AUDIT_OFFSET)."""

    limit = fields.Integer(load_default=DEFAULT_LIMIT, validate=validate.Range(min=1),
                           metadata={"description": _LIMIT_DESCRIPTION})
    offset = fields.Integer(load_default=0, validate=validate.Range(min=0, max=MAX_AUDIT_OFFSET))


class AuditListQuerySchema(AuditPageQuerySchema):
    """Query of the audit log: paging plus event type, severity, user, IP and a date range `[from, to)`."""

    event_type = fields.String(load_default=None, validate=validate.OneOf(sorted(SEVERITIES)))
    severity = fields.String(load_default=None, validate=validate.OneOf(SEVERITY_LEVELS))
    user_id = fields.String(load_default=None, validate=validate.Length(min=1, max=128))
    ip_address = fields.String(load_default=None, validate=validate.Length(min=1, max=64))
    from_date = IsoDateTime(load_default=None, metadata={"description": "ISO 8601, inclusive (naive = UTC)"})
    to_date = IsoDateTime(load_default=None, metadata={"description": "ISO 8601, exclusive (naive = UTC)"})


class AuditSecurityQuerySchema(AuditPageQuerySchema):
    """Query of the security view of the audit log: paging plus one severity."""

    severity = fields.String(load_default=None, validate=validate.OneOf(SEVERITY_LEVELS),
                             metadata={"description": "only this severity (default: warning and critical)"})
