"""The request body of a setting change (spec: System, Setting)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from cms.services.operations.settings import SETTINGS_DEFAULTS


class SettingUpdateSchema(Schema):
    """Body of a setting change: `{key, value, category?}`."""

    key = fields.String(required=True, validate=validate.Length(min=1, max=100),
                        metadata={"enum": sorted(SETTINGS_DEFAULTS)})
    value = fields.Raw(required=True, metadata={
        "description": "a JSON boolean or integer, or its string form (`\"true\"`, `\"8\"`), of the key's type",
        "anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "string"}]})
    category = fields.String(load_default=None, metadata={
        "description": "optional; must be the key's category",
        "enum": sorted({category for _, category in SETTINGS_DEFAULTS.values()})})
