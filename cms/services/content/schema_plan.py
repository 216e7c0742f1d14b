"""From a snapshot to a plan (decisions.md, Schema as code): what each collection of the instance becomes,
checked as a whole before anything is written.

A snapshot's collections are matched with the instance's by name (case-insensitively: collection names
are unique so); one the instance lacks is created (its id chosen here), one the snapshot lacks is deleted.
Each wanted collection is built and checked by the collection service's own builder
(`CollectionService.new_definition`: names, types, schema, switches, rules, declared indexes, versions), as
the body of a create: a snapshot accepts exactly what the collections API accepts, and a collection of a
snapshot is its whole definition (what it leaves out takes a create's default). A stored collection keeps
its id and creation time. Besides, the plan refuses:

- two collections of one name, a type change (base <-> auth: delete and create instead);
- a relation (`collection` of a field), or a view (`view.source`), naming a collection the snapshot does
  not define (the instance may have it, but an apply deletes what the snapshot lacks); a field naming
  `collection_id`. A view's fields follow from its `view` over its source as the snapshot defines it (the
  snapshot's own list of a view's fields is not read);
- a `renamed_from` that names no field of the stored collection while the field itself is not stored
  either, that names a field the new schema keeps, or that two fields name. A field already stored
  under its new name (the snapshot applied before) and a field of a collection the snapshot creates
  have nothing to rename: their `renamed_from` is ignored.

Every problem is reported at once: ValidationFailed (422) with `errors` keyed `collections.<name>...`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cms.clock import new_id
from cms.errors import CmsError, ValidationFailed
from cms.models import DEFAULT_LOCALES, VIEW_TYPE, Collection
from cms.services.content.collections import CollectionService
from cms.services.content.fields import NAME_PATTERN
from cms.services.content.schema_diff import CollectionPlan, diff
from cms.services.content.schema_snapshot import REFERENCES, entries, snapshot_hash, swap_field_references

RENAMED_FROM = "renamed_from"
"""The key of a snapshot field naming the stored field whose values it keeps."""


@dataclass(frozen=True)
class WantedCollection:
    """One collection of a snapshot as the web layer loaded it (`cms.web.schema_snapshot`): `schema` the
    field entries (relations naming their target by `collection`; `renamed_from` allowed), `rules` the
    `<action>_rule`s given, `options` every other attribute, as keyword arguments of
    `CollectionService.new_definition` (indexes, otp_enabled, versions, ...; an attribute left out takes
    a create's default)."""

    name: str
    type: str
    schema: tuple[dict[str, Any], ...]
    rules: Mapping[str, str | None]
    options: Mapping[str, Any]


@dataclass(frozen=True)
class Plan:
    """What an apply of a snapshot does: `collections` the plans of the collections it changes (created,
    changed or deleted), `changes` the diff (`schema_diff`), `current_hash` the hash of the instance's
    snapshot it was made against."""

    collections: tuple[CollectionPlan, ...]
    changes: list[dict[str, Any]]
    current_hash: str


async def make_plan(service: CollectionService, current: Sequence[Collection],
                    wanted: Sequence[WantedCollection]) -> Plan:
    """The plan that makes the instance holding `current` hold `wanted` (see the module docstring).
    Reads nothing but the settings (the defaults of auth switches). Raises ValidationFailed listing every
    problem."""
    errors: dict[str, list[str]] = {}
    stored = {c.name.lower(): c for c in current}
    seen: set[str] = set()
    ids: dict[str, str] = {}
    for item in wanted:
        if item.name.lower() in seen:
            errors.setdefault("collections", []).append(f"Two collections are named '{item.name}'")
        seen.add(item.name.lower())
        match = stored.get(item.name.lower())
        ids[item.name] = match.id if match is not None else new_id()
    plans: list[CollectionPlan] = []
    built: dict[str, Collection] = {}  # name -> the collection as the apply stores it: views' sources
    views = {item.name for item in wanted if item.type == VIEW_TYPE}
    for item in _views_last(wanted, errors):
        where = f"collections.{item.name}"
        match = stored.get(item.name.lower())
        try:
            if match is not None and match.type != item.type:
                raise ValidationFailed(f"{where}: the type cannot change", errors={"type": [
                    f"Stored as {match.type}; a collection's type cannot change (delete it and create it)."]})
            schema: list[dict[str, Any]] | None = None
            renames: dict[str, str] = {}
            if item.type != VIEW_TYPE:  # a view's fields follow from `view` over its source, as the apply builds it
                fields, renames = _resolve_fields(item, ids, match, views)
                schema = list(fields)
            after = await service.new_definition(item.name, item.type, schema, rules=dict(item.rules),
                                                 collection_id=ids[item.name], sources=built, **item.options)
            if match is None:
                plans.append(CollectionPlan(None, after))
            else:
                after = replace(after, created=match.created, version=match.version + 1, locales=match.locales)
                plans.append(CollectionPlan(match, after, renames))
            built[item.name] = after
        except CmsError as exc:
            _merge(errors, where, exc)
    kept = {name.lower() for name in ids}
    plans += [CollectionPlan(c, None) for c in current if c.name.lower() not in kept]
    if errors:
        raise ValidationFailed("The snapshot cannot be applied", errors=errors)
    names_before = {c.id: c.name for c in current}
    names_after = {ids[item.name]: item.name for item in wanted}
    changed = [p for p in plans if _differs(p)]
    return Plan(tuple(changed), diff(changed, names_before, names_after), snapshot_hash(entries(current)))


def _views_last(wanted: Sequence[WantedCollection], errors: dict[str, list[str]]) -> list[WantedCollection]:
    """`wanted` with every view after the collection it reads (a view over a view after that one); a view
    whose source the snapshot does not define, or that reads itself through others, is reported in
    `errors` and left out."""
    ordered = [item for item in wanted if item.type != VIEW_TYPE]
    placed = {item.name for item in ordered}
    waiting = [item for item in wanted if item.type == VIEW_TYPE]
    names = {item.name for item in wanted}
    while waiting:
        ready = [item for item in waiting if _source(item) in placed]
        if not ready:
            for item in waiting:
                source = _source(item)
                message = (f"A view over collection '{source}', which the snapshot does not define."
                           if source not in names else "A view that reads itself, through other views.")
                errors.setdefault(f"collections.{item.name}.view.source", []).append(message)
            break
        ordered += ready
        placed.update(item.name for item in ready)
        waiting = [item for item in waiting if item not in ready]
    return ordered


def _source(item: WantedCollection) -> str | None:
    """The source a view of the snapshot names (None: it names none; its check says so)."""
    view = item.options.get("view")
    source = view.get("source") if isinstance(view, dict) else None
    return source if isinstance(source, str) else None


def _differs(plan: CollectionPlan) -> bool:
    """Whether the plan changes anything the snapshot shows (or renames a field). Equal definitions, their
    version, `updated` and the locales they were read with aside, show alike: relations of both point to
    the same ids, hence names."""
    if plan.before is None or plan.after is None or plan.renames:
        return True
    return replace(plan.before, version=0, updated=plan.before.created, locales=DEFAULT_LOCALES) != replace(
        plan.after, version=0, updated=plan.before.created, locales=DEFAULT_LOCALES)


def _merge(errors: dict[str, list[str]], where: str, exc: CmsError) -> None:
    """Add the problems of `exc` (a builder's ValidationFailed or InvalidFilter) under `where`."""
    if isinstance(exc, ValidationFailed) and exc.errors:
        for key, messages in exc.errors.items():
            errors.setdefault(f"{where}.{key}", []).extend(messages)
    else:
        errors.setdefault(where, []).append(exc.detail)


def _resolve_fields(item: WantedCollection, ids: Mapping[str, str], stored: Collection | None,
                    views: set[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The schema of `item` as the collection service takes it (relation targets by id, `renamed_from`
    taken out) and its renames (new field name -> stored field name). Raises ValidationFailed."""
    problems: dict[str, list[str]] = {}
    schema: list[dict[str, Any]] = []
    renamed_from: dict[str, str] = {}
    for position, spec in enumerate(item.schema):
        spec = dict(spec)
        where = f"schema.{position}"
        if any(ref.id_key in spec for ref in REFERENCES if ref.field_level):
            problems.setdefault(where, []).append(
                "A snapshot names a relation's target collection by name ('collection'), not by id.")
        old = spec.pop(RENAMED_FROM, None)
        if old is not None:
            if not isinstance(old, str) or not NAME_PATTERN.match(old):
                problems.setdefault(f"{where}.{RENAMED_FROM}", []).append("Must be a field name.")
            else:
                renamed_from[str(spec.get("name"))] = old
        for ref in REFERENCES:
            target = spec.get(ref.name_key) if ref.field_level else None
            if isinstance(target, str) and target not in ids:
                problems.setdefault(f"{where}.{ref.name_key}", []).append(
                    f"Relation to collection '{target}', which the snapshot does not define.")
            elif isinstance(target, str) and target in views:
                problems.setdefault(f"{where}.{ref.name_key}", []).append(
                    f"Relation to '{target}', a view: a relation cannot point to a view.")
        schema.append(swap_field_references(spec, ids.get, to_names=False))
    renames = _renames(renamed_from, [str(s.get("name")) for s in schema], stored, problems)
    if problems:
        raise ValidationFailed("Invalid schema", errors=problems)
    return schema, renames


def _renames(renamed_from: Mapping[str, str], names: Sequence[str], stored: Collection | None,
             problems: dict[str, list[str]]) -> dict[str, str]:
    """The renames to make of `renamed_from` (new -> old) against the `stored` collection (None: created)."""
    if stored is None:
        return {}
    renames: dict[str, str] = {}
    stored_names = {f.name for f in stored.fields}
    for new, old in renamed_from.items():
        where = f"schema.{new}.{RENAMED_FROM}"
        if old in names:
            problems.setdefault(where, []).append(f"'{old}' is a field of the new schema too; it cannot be renamed.")
        elif old in renames.values():
            problems.setdefault(where, []).append(f"Two fields are renamed from '{old}'.")
        elif old in stored_names and new in stored_names:
            problems.setdefault(where, []).append(f"Both '{old}' and '{new}' are stored fields; rename one only.")
        elif old in stored_names:
            renames[new] = old
        elif new not in stored_names:
            problems.setdefault(where, []).append(f"Field '{old}' does not exist in collection '{stored.name}'.")
    return renames
