"""Record value types of marshmallow that the record schemas and the API's request schemas share:
strict booleans and numbers, ISO 8601 datetimes, bounded JSON values, and the check that a text is
valid Unicode (spec: Collection; decisions.md: Records)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from marshmallow import ValidationError, fields

from cms.models import FieldSpec

MAX_JSON_FIELD_DEPTH = 32
"""Deepest nesting of arrays and objects in the value of a `json` field."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""BSON integers are signed 64-bit; a larger JSON integer would fail in the driver (500)."""


def check_unicode(value: str) -> None:
    """A validator: the text must be encodable as UTF-8. JSON can carry a lone surrogate
    (`"\\ud800"`), which BSON cannot store (it would fail in the driver as a 500)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("Not valid Unicode text (lone surrogate).") from None


REQUIRED_MESSAGE = "Missing data for required field."
"""What a required field left out, null or empty says (marshmallow's own words for a missing key)."""


def filled_first(checks: list[Callable[[Any], Any]]) -> Callable[[Any], None]:
    """One validator for a required text, id or list field without a minimum: an empty value says
    REQUIRED_MESSAGE alone (not "Shorter than minimum length 1." nor "Not a valid email address.",
    issue 44); any other value runs `checks`, every message collected as marshmallow does."""

    def check(value: str | list[Any]) -> None:
        if len(value) == 0:
            raise ValidationError(REQUIRED_MESSAGE)
        messages: list[Any] = []
        for each in checks:
            try:
                each(value)
            except ValidationError as error:
                messages.extend(error.messages if isinstance(error.messages, list) else [error.messages])
        if messages:
            raise ValidationError(messages)

    return check


class StrictBoolean(fields.Boolean):
    """A JSON boolean only (no "true" strings, no 0/1)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise ValidationError("Not a valid boolean.")
        return value


class StrictNumber(fields.Field[int | float]):
    """A finite JSON number (int or float, not a boolean, not a string)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int | float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError("Not a valid number.")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError("Not a finite number.")
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            raise ValidationError("Number is out of range (64-bit integers).")
        return value


class IsoDateTime(fields.Field[datetime]):
    """An ISO 8601 date or date-time string (naive means UTC), stored as an aware UTC datetime."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> datetime:
        if isinstance(value, datetime):
            parsed = value
        elif isinstance(value, str) and 0 < len(value) <= 40:
            try:
                parsed = datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValidationError("Not a valid ISO 8601 date.") from None
        else:
            raise ValidationError("Not a valid ISO 8601 date.")
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        try:
            parsed = parsed.astimezone(UTC)
        except OverflowError:  # an offset pushes it past year 1..9999
            raise ValidationError("Date is out of range.") from None
        return parsed.replace(microsecond=parsed.microsecond // 1000 * 1000)


class FileId(fields.String):
    """The value of a single-value file field (max_select 1): one file id, and `[]` read as null, which
    clears the field as a list field's `[]` does (decisions.md, Files in records, thumbnails and file
    tokens); a required field given either says REQUIRED_MESSAGE."""

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        """marshmallow's `deserialize`, `[]` read as None first."""
        return super().deserialize(None if value == [] else value, attr, data, **kwargs)


class JsonValue(fields.Field[Any]):
    """Any JSON value; object keys may not start with `$` or contain `.` or NUL, integers must
    fit in 64 bits (what BSON stores), numbers must be finite (no NaN in JSON output) and text
    must be valid Unicode."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        _check_json(value, depth=0)
        return value


def _check_json(value: Any, depth: int) -> None:
    if depth > MAX_JSON_FIELD_DEPTH:
        raise ValidationError("JSON nested too deeply.")
    if isinstance(value, dict):
        for key, item in value.items():
            if key.startswith("$") or "." in key or "\x00" in key:
                raise ValidationError(f"JSON keys may not start with '$' or contain '.' or NUL: {key!r}")
            check_unicode(key)
            _check_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, depth + 1)
    elif isinstance(value, str):
        check_unicode(value)
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise ValidationError("JSON integer is out of range (64-bit integers).")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValidationError("JSON numbers must be finite.")


class LocalizedValues(fields.Field[dict[str, Any] | None]):
    """The value of a localized field written with `?locale=*` (decisions.md, Localized fields): an
    object of configured locale code (`codes`) to a value that `inner` loads (null: none). `required`:
    the `default` locale's value must be there. Loads the object without its nulls; an empty one loads
    as None (the field has no value). Errors are keyed by locale code (`title.de`)."""

    def __init__(self, inner: fields.Field[Any], codes: tuple[str, ...], default: str, *, required: bool) -> None:
        super().__init__(required=required, allow_none=not required)
        self.inner = inner
        self.codes = codes
        self.default = default
        self.default_required = required

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            raise ValidationError("Must be an object of locale code to value (the write has ?locale=*).")
        errors: dict[str, Any] = {}
        loaded: dict[str, Any] = {}
        for code, item in value.items():
            if code not in self.codes:
                errors[str(code)[:40]] = [f"Unknown locale; the configured locales are {', '.join(self.codes)}."]
            elif item is not None:
                try:
                    value = self.inner.deserialize(item)
                except ValidationError as exc:
                    errors[code] = exc.messages
                else:
                    if value is not None:  # a single file field's `[]` is null too (FileId)
                        loaded[code] = value
        if self.default_required and loaded.get(self.default) is None and self.default not in errors:
            errors[self.default] = ["Missing data for required field (the default locale's value is required)."]
        if errors:
            raise ValidationError(errors)
        return {code: loaded[code] for code in self.codes if code in loaded} or None


def held_values(spec: FieldSpec, value: Any) -> list[Any]:
    """The values a stored field value holds, as a list (`value_list`); a localized field's object gives
    the values of every locale."""
    if spec.localized and isinstance(value, dict):
        return [item for held in value.values() for item in value_list(held)]
    return value_list(value)


def value_list(value: Any) -> list[Any]:
    """A field value as a list of values: a list as is, None as [], anything else as [value]."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
