"""Schema changes that records already hold values for (decisions.md: Records;
docs/concepts/collections.md: Schema changes).

A `PATCH /collections/{id}` with a new `schema` must not leave records holding values the new
schema refuses: the collection's own CSV export would no longer import. For every field present in
both schemas whose definition changed (`required` and `unique` aside), each stored value is either

- *converted*, when the type or the multiplicity changed. A value converts when it is lossless: its
  export cell under the old field (`render_cell`) imports under the new field (`parse_cell`) to a
  value the new field accepts and that exports to the same cell (a formula-guard `'` aside). Failing
  that, when the field goes from one value to a list (`max_select` 1 -> more), the value becomes a
  one-item list; from a list to one value, a list's only item is taken (no item: no value). The item
  converts by the same rule (a text or json field tries its JSON text first); or
- *checked*, when only the rules changed (select `values`, `min`, `max`, `pattern`, `max_select`):
  the value is kept if the new field accepts it.

A field that becomes localized keeps each value as the default locale's (`{"en": value}`); one that stops
being localized keeps the default locale's value (the other locales' values are dropped); a localized
field that changes type converts each locale's value by the rules above (decisions.md, Localized fields).

A value that does neither blocks the change (unless the change may clear it: a schema apply with
`allow_data_loss` clears the values of a converting field that do not convert), and so do converted
values of a unique field that would collide (the text "12" and "12.0" both become the number 12) and
values of a field that becomes a relation, or points to another collection, that name no record there.
No value (null or absent) never blocks: a newly `required` field may keep records without a value. A
newly `unique` field is left to the index sync, which refuses duplicates.

The pure part (`field_changes`, `convert_value`, `convert_batch`) decides; `apply_schema_change` writes
through the RecordRepository, a bounded batch at a time. The checks made before a change (stored values
that block it) are in schema_checks.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from marshmallow import ValidationError
from marshmallow import fields as ma_fields

from cms.models import Collection, FieldSpec
from cms.services.content.csv_io import CellError, parse_cell, render_cell, unescape_formula
from cms.services.content.fields import MULTI_TYPES, is_multi, record_field, value_list
from cms.store.records import RecordRepository

log = logging.getLogger("cms.collections")

BATCH_SIZE = 1000
"""Records read per batch and written per bulk write while checking or converting."""

RecordValues = tuple[str, dict[str, Any]]
"""(record id, {field name: stored value}) for the fields a change touches."""
RecordUpdate = tuple[str, dict[str, Any], list[str]]
"""(record id, values to set, field names to unset)."""


class ValueRefused(ValueError):
    """A stored value that the new field definition refuses and that does not convert to it."""


@dataclass(frozen=True)
class FieldChange:
    """A field of both schemas (same name) whose stored values the new definition may refuse.

    `converts` is true when the type or the multiplicity (`is_multi`) changed: values are rewritten.
    Otherwise values are only checked and stay as stored."""

    old: FieldSpec
    new: FieldSpec
    default_locale: str = "en"
    """The default locale of the `locales` setting: a field that becomes localized, or stops being so,
    keeps its value as that locale's."""

    @property
    def name(self) -> str:
        """The field name (the same in both schemas)."""
        return self.new.name

    @property
    def converts(self) -> bool:
        """True when stored values are rewritten to the new type or shape."""
        return (self.old.type != self.new.type or is_multi(self.old) != is_multi(self.new)
                or self.old.localized != self.new.localized)

    @property
    def new_target(self) -> str | None:
        """The collection id whose records the values must now name: set when the field becomes a
        relation or its relation points to another collection; None otherwise."""
        if self.new.type != "relation":
            return None
        if self.old.type == "relation" and self.old.collection_id == self.new.collection_id:
            return None
        return self.new.collection_id


def changed_names(changes: Sequence[FieldChange]) -> list[str]:
    """The names of the changed fields, in order."""
    return [change.name for change in changes]


def _relaxed(spec: FieldSpec) -> FieldSpec:
    """`spec` without `required`, `unique`, `cascade_delete` and its rules: those never block a change here
    (nor convert stored values)."""
    return replace(spec, validation=replace(spec.validation, required=False, unique=False), cascade_delete=False,
                   view_rule="", write_rule="")


def field_changes(current: Collection, changed: Collection) -> list[FieldChange]:
    """The fields of `changed` that `current` has too, under the same name, with a definition
    that differs in anything but `required`, `unique`, `cascade_delete` and its rules, in the new schema's
    order."""
    changes: list[FieldChange] = []
    for new in changed.fields:
        old = current.field(new.name)
        if old is not None and _relaxed(old) != _relaxed(new):
            changes.append(FieldChange(old, new, current.locales.default))
    return changes


@lru_cache(maxsize=256)
def _value_checker(spec: FieldSpec) -> ma_fields.Field[Any]:
    """The marshmallow field validating a whole stored value of `spec` (a list for multi fields),
    `required` ignored. Cached: FieldSpec is frozen, and a built field holds no per-call state."""
    return record_field(_relaxed(spec))


def _accepted(spec: FieldSpec, value: Any) -> Any:
    """`value` as the field `spec` loads it. Raises ValueRefused with the field's message."""
    try:
        return _value_checker(spec).deserialize(value)
    except ValidationError as exc:
        raise ValueRefused(_first_message(exc.messages)) from None


def _first_message(messages: Any) -> str:
    while isinstance(messages, dict | list) and messages:
        messages = next(iter(messages.values())) if isinstance(messages, dict) else messages[0]
    return str(messages)


def _round_trip(old: FieldSpec, new: FieldSpec, value: Any) -> Any:
    """`value` of `old` as the value of `new` its export cell imports to, if that exports to the
    same cell. Raises ValueRefused."""
    try:
        cell = render_cell(old, value)
    except (TypeError, ValueError):
        raise ValueRefused("The value has no export cell.") from None
    try:
        parsed = parse_cell(new, cell)
    except CellError as exc:
        raise ValueRefused(str(exc)) from None
    converted = _accepted(new, parsed)
    # Only the formula guard may differ: -5 exports as `-5`, the text "-5" as `'-5`.
    if unescape_formula(render_cell(new, converted)) != unescape_formula(cell):
        raise ValueRefused("The value would change.")
    return converted


def _one_value(spec: FieldSpec) -> FieldSpec:
    """`spec` holding one value (a select, relation or file with `max_select` 1)."""
    return replace(spec, max_select=None) if is_multi(spec) else spec


def convert_value(old: FieldSpec, new: FieldSpec, value: Any, default_locale: str = "en") -> Any:
    """The value to store under `new` for `value` stored under `old` (see the module docstring);
    None means no value. Same type and shape: `value` itself, once `new` accepts it. A localized
    field's value is an object of locale to value; `default_locale` is the locale a value keeps when
    the field becomes localized, or the one kept when it stops being so.

    Raises ValueRefused when the value neither converts losslessly nor is accepted."""
    if value is None:
        return None
    if old.localized or new.localized:
        return _convert_localized(old, new, value, default_locale)
    old_multi, new_multi = is_multi(old), is_multi(new)
    if old.type == new.type and old_multi == new_multi:
        _accepted(new, value)
        return value
    if old_multi == new_multi:
        return _round_trip(old, new, value)
    # A text or json field can hold a list as its JSON text; a select, relation or file id cannot.
    if (old if new_multi else new).type not in MULTI_TYPES:
        try:
            return _round_trip(old, new, value)
        except ValueRefused:
            pass
    if new_multi:
        item = _round_trip(old, _one_value(new), value)
        return None if item is None else _accepted(new, [item])
    items = value_list(value)
    if len(items) > 1:
        raise ValueRefused(f"The list holds {len(items)} values; the field holds one.")
    return _round_trip(_one_value(old), new, items[0]) if items else None


def _convert_localized(old: FieldSpec, new: FieldSpec, value: Any, default_locale: str) -> Any:
    plain_old, plain_new = replace(old, localized=False), replace(new, localized=False)
    # a value stored before the field was localized reads as the default locale's
    stored = value if old.localized and isinstance(value, dict) else {default_locale: value}
    if not new.localized:
        return convert_value(plain_old, plain_new, stored.get(default_locale))
    converted = {code: convert_value(plain_old, plain_new, item) for code, item in stored.items()}
    return {code: item for code, item in converted.items() if item is not None} or None


def _same(stored: Any, converted: Any) -> bool:
    return type(stored) is type(converted) and stored == converted


def convert_batch(changes: Sequence[FieldChange], batch: Sequence[RecordValues],
                  clearing: frozenset[str] = frozenset()) -> tuple[list[RecordUpdate], list[tuple[str, str, Any]]]:
    """The updates that convert the values of one batch of records: per record that needs one,
    (record id, {field: new value}, [fields whose value becomes none]). Values that do not convert
    are cleared when their field is in `clearing`, else left as stored; either way they are returned
    as (field name, record id, value)."""
    updates: list[RecordUpdate] = []
    refused: list[tuple[str, str, Any]] = []
    for record_id, values in batch:
        set_values: dict[str, Any] = {}
        unset: list[str] = []
        for change in changes:
            if change.name not in values or values[change.name] is None:
                continue
            stored = values[change.name]
            try:
                converted = convert_value(change.old, change.new, stored, change.default_locale)
            except ValueRefused:
                refused.append((change.name, record_id, stored))
                if change.name in clearing:
                    unset.append(change.name)
                continue
            if converted is None:
                unset.append(change.name)
            elif not _same(stored, converted):
                set_values[change.name] = converted
        if set_values or unset:
            updates.append((record_id, set_values, unset))
    return updates, refused


async def apply_schema_change(records: RecordRepository, collection_id: str, changes: Sequence[FieldChange]) -> int:
    """Rewrite the values of the converting `changes` (after the new schema is stored), BATCH_SIZE
    records per bulk write; `updated` is not touched and no record events are emitted. Returns how
    many records were rewritten. A value that no longer converts (written under the old schema
    after the check) is logged and left as stored. Raises AlreadyExists on a unique-index clash."""
    converting = [c for c in changes if c.converts]
    if not converting:
        return 0
    rewritten = 0
    async for batch in records.stream_field_values(collection_id, changed_names(converting), batch_size=BATCH_SIZE):
        updates, refused = await asyncio.to_thread(convert_batch, converting, batch)
        for name, record_id, _value in refused:
            log.warning("collection %s: record %s keeps a value of %s that does not convert",
                        collection_id, record_id, name)
        rewritten += await records.set_field_values(collection_id, updates)
    return rewritten
