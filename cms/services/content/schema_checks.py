"""The checks of a schema change before it is made (decisions.md: Records; schema_changes.py has the
rules): the stored values that block it, read a bounded batch at a time, nothing changed. A value blocks
when it does not convert losslessly to the new field (unless the change may clear it: a schema apply with
`allow_data_loss`), when converted values of a unique field would collide, or when a relation value names
no record of its new target."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cms.errors import ValidationFailed
from cms.models import Collection, FieldSpec
from cms.services.content.fields import is_multi, to_json_value, value_list
from cms.services.content.schema_changes import (
    BATCH_SIZE,
    FieldChange,
    RecordValues,
    ValueRefused,
    convert_value,
    field_changes,
)
from cms.store.records import RecordRepository

EXAMPLE_CHARS = 40
"""Longest value shown as the example in a refusal message."""


@dataclass
class _Blockers:
    count: int = 0
    example: tuple[str, Any] | None = None

    def add(self, record_id: str, value: Any) -> None:
        self.count += 1
        if self.example is None:
            self.example = (record_id, value)


@dataclass
class ChangeCheck:
    """Counts, over batches of records, the ones that block `changes`: values that do not convert
    (unless their field is in `clearing`: they are cleared then, and only counted), and converted values
    of a unique field that would collide (12 and 12.0 are one number).

    Memory: one example per field, plus the converted values of converting unique fields."""

    changes: Sequence[FieldChange]
    clearing: frozenset[str] = frozenset()
    _refused: dict[str, _Blockers] = field(default_factory=dict)
    _duplicates: dict[str, _Blockers] = field(default_factory=dict)
    _seen: dict[str, set[Any]] = field(default_factory=dict)

    def add(self, batch: Sequence[RecordValues]) -> list[tuple[FieldChange, str, Any]]:
        """Check one batch of (record id, {field: stored value}). Returns the converted values
        whose relation ids the caller must look up (`FieldChange.new_target`): (change, record id,
        value); `refuse` those that name missing records."""
        lookups: list[tuple[FieldChange, str, Any]] = []
        for record_id, values in batch:
            for change in self.changes:
                stored = values.get(change.name)
                if stored is None:
                    continue
                try:
                    converted = convert_value(change.old, change.new, stored, change.default_locale)
                except ValueRefused:
                    self.refuse(change.name, record_id, stored)
                    continue
                if converted is None:
                    continue
                if change.converts and change.new.validation.unique:
                    self._check_unique(change.name, record_id, converted)
                if change.new_target is not None:
                    lookups.append((change, record_id, converted))
        return lookups

    def refuse(self, name: str, record_id: str, value: Any) -> None:
        """Count the value of field `name` in record `record_id` as blocking."""
        self._refused.setdefault(name, _Blockers()).add(record_id, value)

    def _check_unique(self, name: str, record_id: str, converted: Any) -> None:
        # A unique index on a list field compares items, so every item must be new (per locale).
        keys = ({(code, item) for code, held in converted.items() for item in value_list(held)}
                if isinstance(converted, dict) else set(value_list(converted)))
        seen = self._seen.setdefault(name, set())
        if not keys.isdisjoint(seen):
            self._duplicates.setdefault(name, _Blockers()).add(record_id, converted)
        seen.update(keys)

    def problems(self) -> list[str]:
        """One message per blocked field, in schema order; empty when the change may go ahead."""
        messages: list[str] = []
        for change in self.changes:
            refused = self._refused.get(change.name)
            if refused is not None and change.name not in self.clearing:
                messages.append(f"{change.name}: {_records(refused.count)} values that cannot be converted to "
                                f"{_describe(change.new)} ({_example(refused)})")
            duplicates = self._duplicates.get(change.name)
            if duplicates is not None:
                messages.append(f"{change.name}: {_records(duplicates.count)} values that would duplicate "
                                f"another record's once converted to {_describe(change.new)}, and the field "
                                f"is unique ({_example(duplicates)})")
        return messages


    def cleared(self) -> dict[str, int]:
        """How many values of each field in `clearing` do not convert (and are cleared), by field name."""
        return {name: blockers.count for name, blockers in self._refused.items() if name in self.clearing}


def _records(count: int) -> str:
    return "1 record holds" if count == 1 else f"{count} records hold"


def _describe(spec: FieldSpec) -> str:
    return f"{spec.type} (up to {spec.max_select} values)" if is_multi(spec) else spec.type


def _example(blockers: _Blockers) -> str:
    assert blockers.example is not None
    record_id, value = blockers.example
    text = json.dumps(to_json_value(value), ensure_ascii=False, separators=(",", ":"), default=str)
    if len(text) > EXAMPLE_CHARS:
        text = text[:EXAMPLE_CHARS - 1] + "…"
    return f"e.g. record {record_id}: {text}"


async def _check_targets(records: RecordRepository, check: ChangeCheck,
                         lookups: Sequence[tuple[FieldChange, str, Any]]) -> None:
    """Refuse the relation values among `lookups` that name no record of their new target."""
    by_target: dict[str, list[tuple[FieldChange, str, Any]]] = {}
    for lookup in lookups:
        by_target.setdefault(str(lookup[0].new_target), []).append(lookup)
    for target, items in by_target.items():
        wanted = sorted({record_id for _, _, value in items for record_id in value_list(value)})
        found = await records.existing_ids(target, wanted)
        for change, record_id, value in items:
            if not found.issuperset(value_list(value)):
                check.refuse(change.name, record_id, value)


async def check_schema_change(records: RecordRepository, current: Collection, changed: Collection) -> list[
        FieldChange]:
    """The field changes from `current` to `changed` (same collection id) once every stored value
    converts or is accepted; reads the records BATCH_SIZE at a time, changes nothing.

    Raises ValidationFailed (422) with `errors: {"schema": ["<field>: <n> records hold values that
    cannot be converted to <type> (e.g. record <id>: <value>)", ...]}` otherwise."""
    changes = field_changes(current, changed)
    problems = (await check_field_changes(records, current.id, changes)).problems()
    if problems:
        raise ValidationFailed("Existing records hold values the new schema refuses", errors={"schema": problems})
    return changes


async def check_field_changes(records: RecordRepository, collection_id: str, changes: Sequence[FieldChange], *,
                              clearing: frozenset[str] = frozenset(),
                              stored_names: Mapping[str, str] | None = None) -> ChangeCheck:
    """Read the stored values of `changes` (BATCH_SIZE records at a time; nothing is changed) and answer
    the finished `ChangeCheck` (its `problems`, its `cleared` counts for the fields in `clearing`).
    `stored_names` maps a field name of `changes` to the name its values are stored under, when that
    differs (a field renamed by the same change, not yet renamed in the records)."""
    check = ChangeCheck(changes, clearing)
    if not changes:
        return check
    stored_as = {change.name: (stored_names or {}).get(change.name, change.name) for change in changes}
    as_changed = {stored: name for name, stored in stored_as.items()}
    async for batch in records.stream_field_values(collection_id, list(stored_as.values()), batch_size=BATCH_SIZE):
        if stored_names:
            batch = [(record_id, {as_changed.get(k, k): v for k, v in values.items()}) for record_id, values in batch]
        lookups = await asyncio.to_thread(check.add, batch)  # marshmallow over 1,000 values: off the loop
        await _check_targets(records, check, lookups)
    return check
