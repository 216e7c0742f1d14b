"""Which index would serve a query shape, and which indexes a collection has and why (issue 38, items 1
to 3; decisions.md, Indexes and query plans; docs/concepts/indexes.md).

- `kept_indexes(collection)`: every index the service keeps on the collection's records, read from its
  definition (what `CollectionService` and the start-up sync make true): `_id_`, `created_id`, one
  `unique_<field>` per unique field, the automatic and the declared ones, each with why it exists.
- `suggest_index(collection, shape, index_sorts=...)`: the declared index (`{fields, unique: false}`)
  that would serve a query of `shape`, by MongoDB's ESR rule: the fields it pins (equality, in name
  order), then its sort keys, then the fields it bounds (ranges, in name order); None when a kept index
  already serves it that way, or when it names no field an index can serve. `index_sorts` is the
  server's capability (`Capabilities.index_sorts`): a server that sorts a filtered query's result in
  memory whatever the indexes (the embedded SecantusDB) gets no sort keys in the suggestion, as they
  would only keep it from using the index for a range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cms.models import Collection, IndexDeclaration, QueryShape
from cms.services.content.fields import SYSTEM_FIELDS, unique_field_names
from cms.services.content.indexes import (
    AUTO_RELATION_PREFIX,
    AUTO_RULE_PREFIX,
    MAX_INDEX_FIELDS,
    SERVICE_KEYS,
    managed_indexes,
)
from cms.store.documents import UNIQUE_PREFIX

Keys = tuple[tuple[str, int], ...]
"""An index's key pattern in the API's names (`id`, not `_id`): ((name, 1 | -1), ...)."""
SERVICE_REASONS = {"_id_": "every record's id", "created_id": "the default sort (created), walked both ways"}
"""Why each index of `SERVICE_KEYS` exists, in words."""


@dataclass(frozen=True)
class KeptIndex:
    """One index of a collection's records: its `name`, its `keys` (API names), whether it is `unique`,
    its `origin` (`service`: every collection has it or a unique field asks for it; `automatic`: a
    relation field or a rule asks for it; `declared`: the collection's `indexes`) and `reason`, why it
    exists, in words."""

    name: str
    keys: Keys
    unique: bool
    origin: str
    reason: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The keys as a declared index names them (`-` for descending)."""
        return tuple(f"{'-' if direction < 0 else ''}{name}" for name, direction in self.keys)


def kept_indexes(collection: Collection) -> list[KeptIndex]:
    """Every index of `collection`'s records by its definition, service ones first (`_id_`,
    `created_id`, `unique_<field>`), then the automatic and the declared ones as `managed_indexes`
    lists them. The text index (`search_text`, where the server has one) is left out: it serves
    `search` only."""
    kept = [KeptIndex(name, _named(keys), name == "_id_", "service", SERVICE_REASONS[name])
            for keys, name in SERVICE_KEYS.items()]
    kept += [KeptIndex(f"{UNIQUE_PREFIX}{path}", ((path, 1),), True, "service",
                       f"field {path.partition('.')[0]} is unique" + (f" (locale {code})" if code else ""))
             for path in unique_field_names(collection) for code in (path.partition(".")[2],)]
    for spec in managed_indexes(collection):
        keys = _named(spec.keys)
        field_name = keys[0][0]
        if spec.name.startswith(AUTO_RELATION_PREFIX):
            kept.append(KeptIndex(spec.name, keys, False, "automatic",
                                  f"{field_name} is a relation field (filters on it, expand's back-relations)"))
        elif spec.name.startswith(AUTO_RULE_PREFIX):
            kept.append(KeptIndex(spec.name, keys, False, "automatic",
                                  f"a rule compares {field_name} with @request.auth"))
        else:
            kept.append(KeptIndex(spec.name, keys, spec.unique, "declared", "declared in the collection's indexes"))
    return kept


def _named(keys: tuple[tuple[str, int], ...]) -> Keys:
    """A key pattern of document paths in the API's names (`_id` is `id`)."""
    return tuple(("id" if path == "_id" else path, direction) for path, direction in keys)


def suggest_index(collection: Collection, shape: QueryShape, *, index_sorts: bool) -> IndexDeclaration | None:
    """The declared index that would serve queries of `shape` on `collection` (module docstring), or
    None. Only names a declared index may hold (schema fields, `id`, `created`, `updated`) are used;
    a shape that pins `id` is served by `_id_`. At most MAX_INDEX_FIELDS names."""
    allowed = {spec.name for spec in collection.fields} | SYSTEM_FIELDS
    equality = [name for name in shape.equality if name in allowed]
    if "id" in equality:
        return None
    sort: list[tuple[str, int]] = []
    if index_sorts:
        for key in shape.sort:
            name = key.removeprefix("-")
            if name in allowed and name not in equality and all(name != n for n, _ in sort):
                sort.append((name, -1 if key.startswith("-") else 1))
    sorted_names = {name for name, _ in sort}
    ranges = [name for name in shape.ranges if name in allowed and name not in equality and name not in sorted_names]
    if not equality and not sort and not ranges:
        return None
    if any(_serves(index.keys, equality, sort, ranges) for index in kept_indexes(collection)):
        return None
    fields = [*equality, *(f"{'-' if d < 0 else ''}{n}" for n, d in sort), *ranges]
    return IndexDeclaration(fields=tuple(fields[:MAX_INDEX_FIELDS]), unique=False)


def _serves(keys: Keys, equality: Sequence[str], sort: Sequence[tuple[str, int]], ranges: Sequence[str]) -> bool:
    """Whether an index of `keys` serves a query by ESR: its first keys are the equality fields (any
    order), the next ones the sort keys in order (every direction as asked, or every one reversed: the
    index walked backward), and the next one, if the query has ranges, one of the range fields."""
    names = [name for name, _ in keys]
    if len(names) < len(equality) or set(names[:len(equality)]) != set(equality):
        return False
    rest = list(keys[len(equality):])
    if sort:
        head = rest[:len(sort)]
        if [name for name, _ in head] != [name for name, _ in sort]:
            return False
        same = all(d == w for (_, d), (_, w) in zip(head, sort, strict=True))
        reversed_ = all(d == -w for (_, d), (_, w) in zip(head, sort, strict=True))
        if not (same or reversed_):
            return False
        rest = rest[len(sort):]
    if ranges:
        return bool(rest) and rest[0][0] in ranges
    return True
