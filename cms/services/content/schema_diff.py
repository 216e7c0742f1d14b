"""The changes between an instance's schema and a snapshot (decisions.md, Schema as code): what
`POST /schema/diff` answers and what an apply writes to the audit log. Pure: no I/O.

One change is `{"op": "create" | "update" | "delete", "collection": <name>, "field": <name> or None,
"from": ..., "to": ..., "data_loss": bool}`:

- a collection created or deleted is one change with `field` None and the whole snapshot entry as `to`
  (create) or `from` (delete); deleting one loses its records (`data_loss`);
- an updated collection gives one change with `field` None for its own attributes (rules, indexes,
  switches, ...: `from` and `to` hold the attributes that differ; `field_order` when only the order of its
  fields changed), then one per field created, changed (a field renamed with `renamed_from` is a change
  of the field under its new name, `from` showing the old name) or deleted, in the new schema's order,
  deleted ones last;
- `data_loss` is true for a deleted field and for a field whose stored values may not all survive
  (`loses_data`: its type or whether it holds a list changes, or it stops being localized): values that
  do not convert losslessly are cleared, which `allow_data_loss` must accept. A view collection stores
  nothing (its records are computed groups), so no change of one loses data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cms.models import VIEW_TYPE, Collection
from cms.services.content.fields import is_multi
from cms.services.content.schema_changes import FieldChange, field_changes
from cms.services.content.schema_snapshot import entry, field_entries

CREATE, UPDATE, DELETE = "create", "update", "delete"
FIELD_ORDER = "field_order"
"""The attribute an update change names when a collection's fields only moved."""


@dataclass(frozen=True)
class CollectionPlan:
    """One collection's part of an apply: `before` as stored (None: the snapshot creates it), `after` as it
    will be stored (None: the snapshot deletes it), and the fields renamed on the way: `renames` maps a
    new field name to the old one whose values it keeps."""

    before: Collection | None
    after: Collection | None
    renames: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The collection's name (the new one when it changes case)."""
        named = self.after or self.before
        assert named is not None
        return named.name

    @property
    def collection_id(self) -> str:
        """The collection's id (kept by an update; chosen before a create)."""
        held = self.after or self.before
        assert held is not None
        return held.id

    def renamed_before(self) -> Collection | None:
        """`before` with each renamed field under its new name (what the records hold once renamed)."""
        if self.before is None:
            return None
        old_to_new = {old: new for new, old in self.renames.items()}
        return replace(self.before, fields=tuple(replace(f, name=old_to_new.get(f.name, f.name))
                                                 for f in self.before.fields))

    def field_changes(self) -> list[FieldChange]:
        """The fields of both schemas (renames followed) whose definitions differ, as schema_changes sees
        them: what the stored values are checked or converted against."""
        renamed = self.renamed_before()
        if renamed is None or self.after is None:
            return []
        return field_changes(renamed, self.after)

    def dropped_fields(self) -> list[str]:
        """The (old) names of the fields `before` has and `after` drops, renames aside."""
        if self.before is None or self.after is None:
            return []
        kept = {f.name for f in self.after.fields} | set(self.renames.values())
        return [f.name for f in self.before.fields if f.name not in kept]


def _change(op: str, collection: str, field_name: str | None, before: Any, after: Any,
            data_loss: bool) -> dict[str, Any]:
    return {"op": op, "collection": collection, "field": field_name, "from": before, "to": after,
            "data_loss": data_loss}


def diff(plans: Sequence[CollectionPlan], names_before: Mapping[str, str],
         names_after: Mapping[str, str]) -> list[dict[str, Any]]:
    """The changes `plans` make, by collection name; `names_before` / `names_after` map collection ids to
    names in the instance before and after (relations are shown by name). No change: []."""
    changes: list[dict[str, Any]] = []
    for plan in sorted(plans, key=lambda p: p.name.lower()):
        before = entry(plan.before, names_before) if plan.before is not None else None
        after = entry(plan.after, names_after) if plan.after is not None else None
        if before is None:
            changes.append(_change(CREATE, plan.name, None, None, after, False))
        elif after is None:
            changes.append(_change(DELETE, plan.name, None, before, None, _stores(plan.before)))
        else:
            changes += _collection_changes(plan, before, after)
    return changes


def _collection_changes(plan: CollectionPlan, before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    name = plan.name
    changes: list[dict[str, Any]] = []
    old = {k: v for k, v in before.items() if k != "schema" and after.get(k) != v}
    new = {k: after.get(k) for k in old}
    new.update({k: v for k, v in after.items() if k != "schema" and k not in before})
    old_fields = {f["name"]: f for f in field_entries(before)}
    new_fields = field_entries(after)
    old_order = [plan.renames.get(f["name"], f["name"]) for f in new_fields
                 if plan.renames.get(f["name"], f["name"]) in old_fields]
    kept_before = [n for n in old_fields if n in old_order]
    if old_order != kept_before:
        old[FIELD_ORDER] = [n for n in old_fields]
        new[FIELD_ORDER] = [f["name"] for f in new_fields]
    if old or new:
        changes.append(_change(UPDATE, name, None, old, new, False))
    stored = _stores(plan.before)
    converting = {c.name for c in plan.field_changes() if loses_data(c)} if stored else set()
    matched: set[str] = set()
    for spec in new_fields:
        source = plan.renames.get(spec["name"], spec["name"])
        previous = old_fields.get(source)
        if previous is None:
            changes.append(_change(CREATE, name, spec["name"], None, spec, False))
            continue
        matched.add(source)
        if previous != spec:
            changes.append(_change(UPDATE, name, spec["name"], previous, spec, spec["name"] in converting))
    changes += [_change(DELETE, name, old_name, spec, None, stored)
                for old_name, spec in old_fields.items() if old_name not in matched]
    return changes


def _stores(collection: Collection | None) -> bool:
    """Whether `collection` stores records (a view's are computed: changing or deleting it loses none)."""
    return collection is not None and collection.type != VIEW_TYPE


def loses_data(change: FieldChange) -> bool:
    """Whether a field change may lose stored values: its type or whether it holds a list changes (values
    are converted, those that do not are cleared), or it stops being localized (only the default
    locale's value is kept). A field that becomes localized keeps each value (as the default locale's)."""
    return (change.old.type != change.new.type or is_multi(change.old) != is_multi(change.new)
            or (change.old.localized and not change.new.localized))


def data_loss(changes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changes of `changes` that lose stored data (`data_loss`), in order."""
    return [change for change in changes if change["data_loss"]]


def differences(change: dict[str, Any]) -> list[tuple[str, str, str]]:
    """What a change makes differ, in words for a terminal or a table: (attribute, before, after) triples. A
    created or deleted collection or field is one triple with attribute "" and a summary (type, number of
    fields, relation target) on its side; an update lists each attribute that differs (dotted inside nested
    ones: `validation.max`), values as JSON, `(none)` for an attribute one side lacks."""
    before, after = change["from"], change["to"]
    if change["op"] != UPDATE:
        return [("", _summary(before, change["field"]) if before is not None else "",
                 _summary(after, change["field"]) if after is not None else "")]
    old, new = _flat(before), _flat(after)
    keys = [k for k in dict.fromkeys([*old, *new]) if old.get(k, _ABSENT) != new.get(k, _ABSENT)]
    return [(k, _text(old.get(k, _ABSENT)), _text(new.get(k, _ABSENT))) for k in keys]


_ABSENT = object()


def _summary(value: dict[str, Any], field_name: str | None) -> str:
    if field_name is None:
        return f"{value.get('type')} collection, {len(field_entries(value))} fields"
    target = f" -> {value['collection']}" if value.get("collection") else ""
    return f"{value.get('type')}{target}"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as {dotted key: leaf}; anything else is one leaf under `prefix`."""
    if not isinstance(value, dict) or not value:
        return {prefix: value} if prefix else {}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _text(value: Any) -> str:
    return "(none)" if value is _ABSENT else json.dumps(value, ensure_ascii=False)
