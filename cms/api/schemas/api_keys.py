"""The request body of an API key create (spec: API key)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate


class ApiKeyCreateSchema(Schema):
    """Body of an API key create: `{name, scopes, expires_at?}`."""

    name = fields.String(required=True, validate=validate.Length(min=1, max=100))
    scopes = fields.List(fields.String(validate=validate.OneOf(["read", "write"])), required=True,
                         validate=validate.Length(min=1, max=2))
    expires_at = fields.DateTime(load_default=None, allow_none=True,
                                 metadata={"description": "ISO 8601; without a zone it is UTC; must be in the future"})
