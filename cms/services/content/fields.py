"""Field types: parsing schema definitions and validating record values (spec: Collection;
decisions.md: Records).

`parse_schema(raw)` turns the client's `schema` (a list of field definitions or `{fields: [...]}`)
into `FieldSpec`s. `RecordSchemas` builds one marshmallow schema per collection version and
validates record `data` against it.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from cms.errors import ValidationFailed, flatten_errors
from cms.filters.conditions import ResolvedField
from cms.filters.grammar import MAX_FILTER_LENGTH
from cms.models import Collection, FieldSpec, Locales, Validation
from cms.security.patterns import MAX_PATTERN_LENGTH, PatternError, compile_pattern
from cms.services.content.file_fields import (
    MAX_FILE_SIZE,
    MAX_MIME_TYPES,
    MAX_THUMBS,
    MIME_ERROR,
    MIME_PATTERN,
    check_thumb,
)
from cms.services.content.value_fields import (
    REQUIRED_MESSAGE,
    FileId,
    IsoDateTime,
    JsonValue,
    LocalizedValues,
    StrictBoolean,
    StrictNumber,
    check_unicode,
    filled_first,
)
from cms.services.content.value_fields import held_values as held_values  # re-exported: callers name fields
from cms.services.content.value_fields import value_list as value_list

# `\Z`, not `$`: `$` also matches before a trailing newline ("posts\n").
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}\Z")
SYSTEM_FIELDS = frozenset({"id", "created", "updated"})
AUTH_FIELDS = frozenset({"password", "email", "verified"})
TEXT_TYPES = frozenset({"text", "editor", "email", "url"})
MULTI_TYPES = frozenset({"select", "relation", "file"})
FIELD_TYPES = ("text", "editor", "bool", "email", "url", "number", "date", "select", "json", "relation", "file")
MAX_FIELDS = 100
MAX_SELECT_VALUES = 100
SCHEMA_CACHE_SIZE = 512
# --- schema definitions --------------------------------------------------------------------


class _ValidationDefinition(Schema):
    required = fields.Boolean(load_default=False)
    min = fields.Float(load_default=None, allow_nan=False)
    max = fields.Float(load_default=None, allow_nan=False)
    pattern = fields.String(load_default=None, validate=[validate.Length(max=MAX_PATTERN_LENGTH), check_unicode])
    unique = fields.Boolean(load_default=False)


_RULE_TEXT: list[Callable[[Any], Any]] = [validate.Length(max=MAX_FILTER_LENGTH), check_unicode]


class _FieldDefinition(Schema):
    id = fields.String()  # accepted and ignored, as clients echo back what they read
    name = fields.String(required=True, validate=validate.Regexp(NAME_PATTERN, error="Invalid field name."))
    type = fields.String(required=True, validate=validate.OneOf(FIELD_TYPES))
    # A callable default: a plain `dict` would skip the nested load defaults (required, min, ...).
    validation = fields.Nested(_ValidationDefinition, load_default=lambda: _ValidationDefinition().load({}))
    values = fields.List(
        fields.String(validate=[validate.Length(min=1, max=200), check_unicode]),
        validate=validate.Length(min=1, max=MAX_SELECT_VALUES),
        load_default=None,
    )
    max_select = fields.Integer(strict=True, validate=validate.Range(min=1, max=1000), load_default=None)
    collection_id = fields.String(load_default=None, validate=[validate.Length(min=1, max=64), check_unicode])
    cascade_delete = fields.Boolean(load_default=False)
    view_rule = fields.String(allow_none=True, load_default="", validate=_RULE_TEXT)
    write_rule = fields.String(allow_none=True, load_default="", validate=_RULE_TEXT)
    localized = fields.Boolean(load_default=False)
    # file fields (file_fields.py checks them)
    max_size = fields.Integer(strict=True, validate=validate.Range(min=1, max=MAX_FILE_SIZE), load_default=None)
    mime_types = fields.List(fields.String(validate=validate.Regexp(MIME_PATTERN, error=MIME_ERROR)),
                             validate=validate.Length(max=MAX_MIME_TYPES), load_default=None)
    thumbs = fields.List(fields.String(validate=check_thumb), validate=validate.Length(max=MAX_THUMBS),
                         load_default=None)
    protected = StrictBoolean(load_default=False)


def parse_schema(raw: Any, *, auth: bool = False) -> tuple[FieldSpec, ...]:
    """Parse a schema given as a list of field definitions or as `{"fields": [...]}`.

    Each definition is `{name, type, validation?: {required, min, max, pattern, unique},
    values?, max_select?, collection_id?, cascade_delete?, view_rule?, write_rule?, localized?}`, a file field's
    also `{max_size?, mime_types?, thumbs?, protected?}` (ignored on other types). Raises ValidationFailed (422)
    with `errors: {"schema": [...]}` on any problem, or dotted keys for a bad definition
    (`{"schema.0.name": [...]}`, `{"schema.1.validation.min": [...]}`; `cascade_delete` applies to relations and is
    ignored elsewhere): bad shape, unknown type, invalid or duplicate
    name, reserved name (`id`, `created`, `updated`; in auth collections also `password`,
    `email`, `verified`), a select without `values`, a relation without `collection_id`, a bad
    regex pattern, `min` above `max`, or a localized relation field.
    """
    if isinstance(raw, dict):
        if set(raw) - {"fields"}:
            raise _schema_error("schema object takes only the key 'fields'")
        raw = raw.get("fields", [])
    if not isinstance(raw, list):
        raise _schema_error("schema must be a list of fields or an object with 'fields'")
    if len(raw) > MAX_FIELDS:
        raise _schema_error(f"a collection has at most {MAX_FIELDS} fields")
    try:
        definitions = _FieldDefinition(many=True, unknown=RAISE).load(raw)
    except ValidationError as exc:
        raise ValidationFailed("Invalid schema", errors=flatten_errors(exc.messages, prefix="schema")) from None
    specs: list[FieldSpec] = []
    seen: set[str] = set()
    reserved = SYSTEM_FIELDS | AUTH_FIELDS if auth else SYSTEM_FIELDS
    for position, d in enumerate(definitions):
        name = d["name"]
        where = f"field {position} ('{name}')"
        if name in reserved:
            raise _schema_error(f"{where}: the name is reserved")
        if name.lower() in seen:
            raise _schema_error(f"{where}: duplicate name")
        seen.add(name.lower())
        specs.append(_to_spec(d, where))
    return tuple(specs)


def _to_spec(d: dict[str, Any], where: str) -> FieldSpec:
    v = d["validation"]
    kind = d["type"]
    if v["min"] is not None and v["max"] is not None and v["min"] > v["max"]:
        raise _schema_error(f"{where}: min is above max")
    if v["pattern"] is not None:
        if kind not in ("text", "editor", "email", "url"):
            raise _schema_error(f"{where}: pattern applies to text fields only")
        try:
            compile_pattern(v["pattern"])
        except PatternError as exc:
            raise _schema_error(f"{where}: invalid pattern (the linear-time RE2 syntax): {exc}") from None
    if kind == "select" and not d["values"]:
        raise _schema_error(f"{where}: a select field needs 'values'")
    if kind == "relation" and not d["collection_id"]:
        raise _schema_error(f"{where}: a relation field needs 'collection_id'")
    if v["unique"] and kind in ("bool", "json"):
        raise _schema_error(f"{where}: {kind} fields cannot be unique")
    if d["localized"] and kind == "relation":
        raise _schema_error(f"{where}: a relation field cannot be localized")
    return FieldSpec(
        name=d["name"],
        type=kind,
        validation=Validation(**v),
        values=tuple(d["values"]) if kind == "select" else None,
        max_select=d["max_select"] if kind in MULTI_TYPES else None,
        collection_id=d["collection_id"] if kind == "relation" else None,
        cascade_delete=d["cascade_delete"] if kind == "relation" else False,
        view_rule=d["view_rule"],
        write_rule=d["write_rule"],
        localized=d["localized"],
        max_size=d["max_size"] if kind == "file" else None,
        mime_types=tuple(d["mime_types"]) if kind == "file" and d["mime_types"] else None,
        thumbs=tuple(dict.fromkeys(d["thumbs"])) if kind == "file" and d["thumbs"] else None,
        protected=d["protected"] if kind == "file" else False,
    )


def _schema_error(message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid schema: {message}", errors={"schema": [message]})


SYSTEM_RESOLUTIONS = {
    "id": ResolvedField(path="_id", type="id"),
    "created": ResolvedField(path="created", type="datetime"),
    "updated": ResolvedField(path="updated", type="datetime"),
}


AUTH_RESOLUTIONS = {"email": ResolvedField(path="email", type="email"),
                    "verified": ResolvedField(path="verified", type="bool")}
"""The fields every auth collection's records have besides their schema's."""


class CollectionFields:
    """FieldResolver over a collection: system fields plus schema fields (and, in an auth collection,
    `email` and `verified`), nothing else. A localized field resolves through `chain` (a locale and its
    fallbacks; default: the default locale's chain, what rules read)."""

    def __init__(self, collection: Collection, chain: tuple[str, ...] | None = None) -> None:
        locales = chain if chain is not None else collection.locales.chain(collection.locales.default)
        self._fields = {f.name: ResolvedField(path=f.name, type=f.type, locales=locales if f.localized else ())
                        for f in collection.fields}
        if collection.type == "auth":  # a user's address and flag are fields of its record
            self._fields.update(AUTH_RESOLUTIONS)

    def resolve(self, name: str) -> ResolvedField | None:
        """The stored path and type of field `name`, or None when the collection has no such field."""
        return SYSTEM_RESOLUTIONS.get(name) or self._fields.get(name)


def text_field_names(collection: Collection) -> list[str]:
    """Names of the fields a text index covers: text, editor, email and url, not localized (a `search`
    over a localized field resolves its locale, which no text index can)."""
    return [f.name for f in collection.fields if f.type in TEXT_TYPES and not f.localized]


def unique_field_names(collection: Collection) -> list[str]:
    """The paths that unique indexes hold (decisions.md, Localized fields: `unique` holds per locale):
    each field with `validation.unique`, a localized one as `<name>.<code>` for every configured code."""
    return [path for f in collection.fields if f.validation.unique
            for path in ([f"{f.name}.{code}" for code in collection.locales.codes] if f.localized else [f.name])]


def is_multi(spec: FieldSpec) -> bool:
    """True when the field holds a list of values: a select, relation or file field with
    `max_select` above 1. Other fields hold one value."""
    return spec.type in MULTI_TYPES and (spec.max_select or 1) > 1


# --- record values ---------------------------------------------------------------------------


def _pattern_check(pattern: str) -> Callable[[str], None]:
    """A validator: the value must contain a match of `pattern` (search semantics, as in JSON
    Schema and PocketBase; anchor with `^...$` for a whole-value match), run by RE2 in linear
    time. A stored pattern RE2 refuses (one accepted before RE2 was used) matches nothing."""
    try:
        regex = compile_pattern(pattern)
    except PatternError:
        def refuse(value: str) -> None:
            raise ValidationError("The field's pattern is not valid RE2 syntax; an admin must fix the schema.")
        return refuse

    def check(value: str) -> None:
        if regex.search(value) is None:
            raise ValidationError("Does not match the pattern.")

    return check


def _value_field(spec: FieldSpec) -> fields.Field[Any]:
    """The marshmallow field for one value of `spec` (no required/null handling)."""
    v = spec.validation
    checks: list[Any] = []
    kind = spec.type
    if kind in TEXT_TYPES:
        low = max(int(v.min or 0), 1 if v.required else 0)
        high = int(v.max) if v.max is not None else None
        checks.append(validate.Length(min=low, max=high))
        checks.append(check_unicode)
        if v.pattern:
            checks.append(_pattern_check(v.pattern))
        if kind == "email":
            return fields.Email(validate=checks)
        if kind == "url":
            return fields.Url(require_tld=False, validate=checks)
        return fields.String(validate=checks)
    if kind == "number":
        if v.min is not None or v.max is not None:
            checks.append(validate.Range(min=v.min, max=v.max))
        return StrictNumber(validate=checks)
    if kind == "bool":
        return StrictBoolean()
    if kind == "date":
        return IsoDateTime()
    if kind == "json":
        return JsonValue()
    if kind == "select":
        return fields.String(validate=validate.OneOf(spec.values or ()))
    id_field = FileId if kind == "file" else fields.String  # relation and file: ids
    return id_field(validate=[validate.Length(min=1, max=64), check_unicode])


def record_field(spec: FieldSpec) -> fields.Field[Any]:
    """The marshmallow field validating the value of `spec` in a record's `data`: a list field for
    a many-value field, required/nullable by `validation.required` (a required field null, or empty
    with no `min` set, says REQUIRED_MESSAGE)."""
    item = _value_field(spec)
    required = spec.validation.required
    field: fields.Field[Any] = item
    if is_multi(spec):
        field = fields.List(item, validate=validate.Length(min=1 if required else 0, max=spec.max_select))
    field.required, field.allow_none = required, not required
    field.error_messages = {**field.error_messages, "null": REQUIRED_MESSAGE}
    if required and spec.type in MULTI_TYPES | TEXT_TYPES and not spec.validation.min:
        field.validators = [filled_first(field.validators)]  # empty says "required", not "Shorter than ..."
    return field


DEFAULT_LOCALE, OTHER_LOCALE, ALL_LOCALES = "default", "other", "*"
"""How a write's values of localized fields are read (decisions.md, Localized fields): values of the
default locale (`required` holds), of another locale (never required: null removes that locale's
value), or objects of locale to value (`?locale=*`)."""


def build_record_schema(collection: Collection, mode: str = DEFAULT_LOCALE, *, working: bool = False) -> Schema:
    """A marshmallow schema validating the `data` of a record of `collection` (unknown keys raise),
    its localized fields read as `mode` says (DEFAULT_LOCALE, OTHER_LOCALE or ALL_LOCALES); `working`:
    of a working copy (drafts), whose fields are all optional (types and lengths checked)."""
    specs = collection.fields
    if working:
        specs = tuple(replace(spec, validation=replace(spec.validation, required=False)) for spec in specs)
    declared = {spec.name: _localized_field(spec, collection, mode) if spec.localized else record_field(spec)
                for spec in specs}
    schema_class = Schema.from_dict(declared, name=f"Record_{collection.name}")
    return schema_class(unknown=RAISE)


def _localized_field(spec: FieldSpec, collection: Collection, mode: str) -> fields.Field[Any]:
    if mode == DEFAULT_LOCALE:
        return record_field(spec)
    optional = record_field(replace(spec, validation=replace(spec.validation, required=False)))
    if mode == OTHER_LOCALE:
        return optional
    locales = collection.locales
    return LocalizedValues(optional, locales.codes, locales.default, required=spec.validation.required)


class RecordSchemas:
    """Validates record data with one cached marshmallow schema per (collection id, version).

    A collection updated through another replica has a new version, so its schema is rebuilt
    on first use here; old versions fall out of the bounded LRU cache.
    """

    def __init__(self, size: int = SCHEMA_CACHE_SIZE) -> None:
        self._cache: OrderedDict[tuple[str, int, Locales, str, bool], Schema] = OrderedDict()
        self._size = size

    def schema_for(self, collection: Collection, mode: str = DEFAULT_LOCALE, *, working: bool = False) -> Schema:
        """The schema of this collection version, locales and `mode` (`build_record_schema`; `working`:
        of its working copies), built once."""
        key = (collection.id, collection.version, collection.locales, mode, working)
        schema = self._cache.get(key)
        if schema is None:
            schema = build_record_schema(collection, mode, working=working)
            self._cache[key] = schema
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return schema

    def load(self, collection: Collection, data: Any, *, partial: bool, mode: str = DEFAULT_LOCALE,
             working: bool = False) -> dict[str, Any]:
        """Validate `data` (an object of field values); `partial` for updates; localized fields read as
        `mode` says (`build_record_schema`); `working` for a working copy (drafts: no field is required,
        any may be cleared).

        Returns the validated values (a localized field's as given: one locale's value, or its object),
        with None for fields to clear. Raises ValidationFailed with `errors: {field: [message]}` (unknown
        fields, wrong types, rule violations; `field.<code>` for a locale of an object), also for a
        create in another locale than the default of a collection with a required localized field."""
        if not isinstance(data, dict):
            raise ValidationFailed("'data' must be an object", errors={"data": ["Must be an object."]})
        try:
            loaded: dict[str, Any] = self.schema_for(collection, mode, working=working).load(data, partial=partial)
        except ValidationError as exc:
            raise ValidationFailed("Record validation failed",
                                   errors=flatten_errors(exc.messages, root_key="data")) from None
        if mode == OTHER_LOCALE and not partial:
            missing = {spec.name: [f"Missing data for required field: a value in the default locale "
                                   f"({collection.locales.default}) is required; create the record with that "
                                   "locale or ?locale=*."]
                       for spec in collection.fields if spec.localized and spec.validation.required}
            if missing:
                raise ValidationFailed("Record validation failed", errors=missing)
        return loaded


def to_json_value(value: Any) -> Any:
    """A stored value as JSON: datetimes as ISO 8601 with `Z` and milliseconds."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return value
