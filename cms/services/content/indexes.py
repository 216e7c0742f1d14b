"""Which indexes a collection's records get beside `created_id`, `unique_<field>` and the text index
(decisions.md, Indexes and query plans; issue 38):

- **automatic** ones, kept by the service and not listed in `indexes`: `auto_relation_<field>` for
  every relation field (multikey by itself when `max_select` > 1: the values are lists) and
  `auto_rule_<field>` for every field a rule compares with `@request.auth.*`
  (`access.fields_rules_filter_by`: every signed-in caller's list filters by it). None is made for a
  field whose `unique_<field>` index, or a declared index led by it, already serves an equality on it;
- **declared** ones, the collection's `indexes` attribute (`parse_indexes` checks it), named
  `idx_<field>_<1|-1>...` as MongoDB names its own (`idx_status_1_created_-1`).

A declared index naming a localized field (decisions.md, Localized fields) is made once per configured
locale, over `<field>.<code>` (`idx_title_1` -> `idx_title_1.de`, ...): a filter on a localized field is an
`$or` of equalities and ranges on those paths (`filters.conditions.localized_term`), each branch of which
such an index serves.

`managed_indexes(collection)` is the list the store makes true (`RecordRepository.sync_indexes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cms.errors import ValidationFailed
from cms.models import Collection, FieldSpec, IndexDeclaration
from cms.services.access import fields_rules_filter_by
from cms.services.content.fields import SYSTEM_FIELDS
from cms.store.record_indexes import IndexSpec

MAX_INDEXES = 16
"""Most declared indexes per collection."""
MAX_INDEX_FIELDS = 8
"""Most field names per declared index."""
AUTO_RELATION_PREFIX = "auto_relation_"
AUTO_RULE_PREFIX = "auto_rule_"
DECLARED_PREFIX = "idx_"
_PATHS = {"id": "_id", "created": "created", "updated": "updated"}
SERVICE_KEYS = {(("_id", 1),): "_id_", (("created", 1), ("_id", 1)): "created_id"}
"""Key patterns of indexes every records collection has (a declared copy would clash with them)."""


def parse_indexes(raw: Any) -> tuple[IndexDeclaration, ...]:
    """The `indexes` attribute of a request: a list of at most MAX_INDEXES `{fields, unique?}`,
    `fields` 1 to MAX_INDEX_FIELDS distinct names (`-` prefix: descending), `unique` a boolean
    (default false). Names are checked against a schema by `check_indexes`. Raises ValidationFailed
    with `errors` under `indexes` (`indexes`, `indexes.<i>`, `indexes.<i>.fields`, `indexes.<i>.unique`)."""
    if not isinstance(raw, list):
        raise _invalid({"indexes": ["Must be a list of {fields, unique} objects."]})
    if len(raw) > MAX_INDEXES:
        raise _invalid({"indexes": [f"At most {MAX_INDEXES} indexes per collection."]})
    errors: dict[str, list[str]] = {}
    parsed: list[IndexDeclaration] = []
    for i, entry in enumerate(raw):
        where = f"indexes.{i}"
        if not isinstance(entry, Mapping) or set(entry) - {"fields", "unique"} or "fields" not in entry:
            errors[where] = ["Must be an object {fields, unique} (fields required)."]
            continue
        names, unique = entry["fields"], entry.get("unique", False)
        if not isinstance(unique, bool):
            errors[f"{where}.unique"] = ["Must be a boolean."]
        if (not isinstance(names, list) or not 1 <= len(names) <= MAX_INDEX_FIELDS
                or not all(isinstance(n, str) and n.removeprefix("-") for n in names)):
            errors[f"{where}.fields"] = [f"Must be a list of 1 to {MAX_INDEX_FIELDS} field names."]
            continue
        bare = [n.removeprefix("-") for n in names]
        repeated = sorted({n for n in bare if bare.count(n) > 1})
        if repeated:
            errors[f"{where}.fields"] = [f"Field '{repeated[0]}' is named twice."]
            continue
        parsed.append(IndexDeclaration(fields=tuple(names), unique=unique))
    if errors:
        raise _invalid(errors)
    return tuple(parsed)


def check_indexes(collection: Collection) -> None:
    """The declared indexes of `collection` (as it will be stored) against its schema: every name a
    field of it or `id`, `created`, `updated`; no two entries over the same names in the same order
    (directions aside); none the same as an index the service keeps (`created_id`, `_id_`, a
    `unique_<field>`). Raises ValidationFailed under `indexes.<i>.fields` or `indexes.<i>`."""
    names = {spec.name for spec in collection.fields} | SYSTEM_FIELDS
    service_kept: dict[tuple[tuple[str, int], ...], str] = {
        **SERVICE_KEYS, **{((spec.name, 1),): f"unique_{spec.name}" for spec in collection.fields
                            if spec.validation.unique}}
    errors: dict[str, list[str]] = {}
    seen: dict[tuple[str, ...], int] = {}
    for i, declared in enumerate(collection.indexes):
        unknown = [n for n in _bare(declared) if n not in names]
        if unknown:
            errors[f"indexes.{i}.fields"] = [f"Unknown field '{unknown[0]}'."]
            continue
        if _bare(declared) in seen:
            errors[f"indexes.{i}"] = [f"Same fields as indexes.{seen[_bare(declared)]}."]
            continue
        seen[_bare(declared)] = i
        kept = service_kept.get(_keys(declared))
        if kept is not None:
            errors[f"indexes.{i}"] = [f"The service already keeps this index ({kept})."]
    if errors:
        raise _invalid(errors)


def declared_name(declared: IndexDeclaration) -> str:
    """The index name of a declared index: `idx_` and MongoDB's own naming (`status_1_created_-1`)."""
    return DECLARED_PREFIX + "_".join(f"{name}_{direction}" for name, direction in _named_keys(declared))


def managed_indexes(collection: Collection) -> list[IndexSpec]:
    """The automatic and declared indexes of `collection`'s records (see the module docstring)."""
    declared = [spec for i, d in enumerate(collection.indexes) for spec in _per_locale(collection, d, IndexSpec(
        name=declared_name(d), keys=_keys(d), unique=d.unique, present=tuple(n for n in _bare(d) if n not in _PATHS),
        label=f"indexes.{i}"))]
    served = {d.keys[0][0] for d in declared} | {s.name for s in collection.fields if s.validation.unique}
    automatic: list[IndexSpec] = []
    for spec in collection.fields:
        if spec.type == "relation" and spec.name not in served:
            automatic.append(_auto(AUTO_RELATION_PREFIX, spec))
            served.add(spec.name)
    for name in sorted(fields_rules_filter_by(collection) - served):
        ruled = collection.field(name)
        if ruled is not None:
            automatic.append(_auto(AUTO_RULE_PREFIX, ruled))
    return automatic + declared


def _per_locale(collection: Collection, declared: IndexDeclaration, spec: IndexSpec) -> list[IndexSpec]:
    """`spec` as it is made: as is, or, naming localized fields, one index per configured locale over
    `<field>.<code>` (named `<name>.<code>`)."""
    localized = set(collection.localized_fields) & set(_bare(declared))
    if not localized:
        return [spec]

    def at(path: str, code: str) -> str:
        return f"{path}.{code}" if path in localized else path

    return [replace(spec, name=f"{spec.name}.{code}", keys=tuple((at(path, code), d) for path, d in spec.keys),
                    present=tuple(at(path, code) for path in spec.present)) for code in collection.locales.codes]


def _auto(prefix: str, spec: FieldSpec) -> IndexSpec:
    return IndexSpec(name=f"{prefix}{spec.name}", keys=((spec.name, 1),))


def _bare(declared: IndexDeclaration) -> tuple[str, ...]:
    return tuple(name for name, _ in _named_keys(declared))


def _named_keys(declared: IndexDeclaration) -> list[tuple[str, int]]:
    return [(n[1:], -1) if n.startswith("-") else (n, 1) for n in declared.fields]


def _keys(declared: IndexDeclaration) -> tuple[tuple[str, int], ...]:
    return tuple((_PATHS.get(name, name), direction) for name, direction in _named_keys(declared))


def _invalid(errors: dict[str, list[str]]) -> ValidationFailed:
    return ValidationFailed("Invalid indexes", errors=errors)
