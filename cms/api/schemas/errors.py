"""The error model every failure answers with (STYLE rule 6; decisions.md, Errors), as documented."""

from __future__ import annotations

from marshmallow import Schema, fields


class ErrorSchema(Schema):
    """Every error answer: `{detail, code}`, plus `errors` on 422."""

    detail = fields.String(required=True, metadata={"description": "Human-readable message"})
    code = fields.String(required=True, metadata={"description": "Stable snake_case error code"})
    errors = fields.Dict(metadata={"description": "422 only: field name -> list of messages"})
