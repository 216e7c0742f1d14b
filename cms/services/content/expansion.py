"""Relations in one request: which collections an `expand` names, and loading their records
(decisions.md, Relations in one request).

`resolve(catalog, collection, view, principal)` reads the expand paths of a `RecordView` against
the collections: a segment is a relation field of the collection it is read in (the record of
`max_select` 1 or unset, else an array), or a back-relation `<collection>_via_<field>` (the records
of `<collection>` whose relation field `<field>` points at this collection and holds the record's
id; an array, newest first, at most MAX_BACK_RELATIONS per record). Paths sharing a prefix share
its segment. Each segment carries the view rule of its collection bound to the caller
(`access.check`), so only the records the caller may view are loaded, their localized fields answered
in the view's locale.

`Expansion.load(records, parents)` loads them for a whole page at once: one database query per
segment (forward: the point reads of every id the page's records hold, `find_by_ids`, batched with
concurrent gets of that collection, the view rule decided on each record; back: one query on the
relation field with `$in` of the page's ids, the view rule in the query), whatever the page size.
Both are served by an index (`_id_`, the relation field's `auto_relation_<field>`), so they take no
slot of the scan line (issue 38), except a back-relation whose collection's view rule joins the query
(`$and`: the embedded server's planner scans it): a view with `expand` of records everyone may see is
refused only as a point read would be.
The read cache keys an expanded read with `key_parts()` and stamps it with the versions of
`collections()` as well (content/record_reads.py), so a write to any of them makes it stale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cms.errors import InvalidFilter, NotFound
from cms.models import Collection, Principal, Record, SortSpec
from cms.services import access as actions
from cms.services.access import Access, check
from cms.services.caching.catalog import Catalog
from cms.services.content.fields import is_multi, value_list
from cms.services.representation.record_view import Expanded, RecordView
from cms.store.records import RecordRepository
from cms.store.transactions import current_session

MAX_BACK_RELATIONS = 1000
"""Records one back-relation embeds per record (the newest)."""
MAX_EXPANDED_RECORDS = 10_000
"""Related records one request may load over all its segments and levels; past it the request is
400 `invalid_filter` (six levels of multi-relations would otherwise multiply without bound)."""
BACK_RELATION = "_via_"
"""What joins `<collection>` and `<field>` in a back-relation segment."""
NEWEST_FIRST: SortSpec = [("created", -1), ("_id", -1)]


@dataclass(frozen=True)
class Segment:
    """One resolved segment: its `name` (the key under `expand`), the `target` collection of the
    related records, the relation `field` (of the parent's collection, or of `target` when `back`),
    `many` (shown as an array), `access` (target's view rule bound to the caller) and `children`
    (the deeper segments, read in `target`)."""

    name: str
    target: Collection
    field: str
    back: bool
    many: bool
    access: Access
    children: tuple[Segment, ...] = ()


@dataclass(frozen=True)
class Expansion:
    """The resolved expand paths of a view over one collection: a tree of `segments`."""

    segments: tuple[Segment, ...] = ()

    def collections(self) -> list[str]:
        """The name of every collection whose records the expansion embeds, sorted, once each."""
        names: set[str] = set()
        stack = list(self.segments)
        while stack:
            segment = stack.pop()
            names.add(segment.target.name)
            stack.extend(segment.children)
        return sorted(names)

    def key_parts(self) -> list[Any]:
        """Plain values naming what the expansion shows to this caller (for the read cache's key):
        each segment's name, target collection id and bound view decision (field rules included), nested."""
        return [_parts(s) for s in self.segments]

    @property
    def shared(self) -> bool:
        """True when every caller sees the same related records (every target's view rule is "" and
        none of its fields is hidden from anyone)."""
        stack = list(self.segments)
        while stack:
            segment = stack.pop()
            if not segment.access.shared:
                return False
            stack.extend(segment.children)
        return True

    async def load(self, records: RecordRepository, parents: Sequence[Record], *,
                   client: str | None = None) -> tuple[Expanded, ...]:
        """The related records of `parents` (one page or one record), one query per segment (none for
        a segment whose view rule refuses the caller, or with nothing to look up), each in `client`'s
        share of the scan line (`record_pages.scan_client`; None: no client)."""
        return await _load_all(records, self.segments, parents, _Budget(client))


class _Budget:
    """What is left of MAX_EXPANDED_RECORDS for one `load` (siblings share it), and whose share of
    the scan line its queries take (`client`)."""

    def __init__(self, client: str | None) -> None:
        self.left = MAX_EXPANDED_RECORDS
        self.client = client

    def take(self, count: int) -> None:
        """Count `count` more related records. Raises InvalidFilter once past the bound."""
        self.left -= count
        if self.left < 0:
            raise InvalidFilter(f"expand: more than {MAX_EXPANDED_RECORDS:,} related records in one request; "
                                "ask for fewer paths, shallower paths or a smaller page")


NOTHING = Expansion()


def _parts(segment: Segment) -> list[Any]:
    return [segment.name, segment.target.id, segment.access.key_parts(), [_parts(c) for c in segment.children]]


async def resolve(catalog: Catalog, collection: Collection, view: RecordView,
                  principal: Principal | None) -> Expansion:
    """The expansion `view.expand` asks for on records of `collection`, for `principal` (None: no
    credentials). Raises InvalidFilter (400) naming `expand` and the segment that is not a relation
    field of its collection nor a back-relation pointing at it."""
    if not view.expand:
        return NOTHING
    tree: dict[str, Any] = {}
    for path in view.expand:
        level = tree
        for segment in path:
            level = level.setdefault(segment, {})
    return Expansion(await _resolve_level(catalog, collection, tree, principal, (), view.locale))


async def _resolve_level(catalog: Catalog, parent: Collection, tree: dict[str, Any], principal: Principal | None,
                         prefix: tuple[str, ...], locale: str | None) -> tuple[Segment, ...]:
    segments = []
    for name, deeper in tree.items():
        target, field_name, back, many = await _relation(catalog, parent, name, prefix)
        children = await _resolve_level(catalog, target, deeper, principal, (*prefix, name), locale)
        segments.append(Segment(name, target, field_name, back, many,
                                check(principal, target, actions.VIEW, locale=locale), children))
    return tuple(segments)


async def _relation(catalog: Catalog, parent: Collection, name: str,
                    prefix: tuple[str, ...]) -> tuple[Collection, str, bool, bool]:
    """(target collection, relation field, back, many) of segment `name` read in `parent`."""
    where = ".".join((*prefix, name))
    spec = parent.field(name)
    if spec is not None:
        if spec.type != "relation" or spec.collection_id is None:
            raise InvalidFilter(f"expand: '{name}' (in '{where}') is a {spec.type} field of '{parent.name}', "
                                "not a relation")
        target = await catalog.find_by_id(spec.collection_id)
        if target is None:
            raise InvalidFilter(f"expand: '{name}' (in '{where}') points at a collection that no longer exists")
        return target, name, False, is_multi(spec)
    start = name.find(BACK_RELATION)
    while start > 0:
        collection_name, field_name = name[:start], name[start + len(BACK_RELATION):]
        try:
            target = await catalog.by_name(collection_name)
        except NotFound:
            target = None
        back_spec = target.field(field_name) if target is not None else None
        if target is not None and back_spec is not None and back_spec.type == "relation" \
                and back_spec.collection_id == parent.id:
            return target, field_name, True, True
        start = name.find(BACK_RELATION, start + 1)
    raise InvalidFilter(f"expand: '{name}' (in '{where}') is neither a field of '{parent.name}' nor a "
                        f"back-relation <collection>{BACK_RELATION}<field> pointing at it")


async def _load(records: RecordRepository, segment: Segment, parents: Sequence[Record], budget: _Budget) -> Expanded:
    if segment.access.refused or not parents:
        return Expanded(segment.name, segment.many)
    if segment.back:
        related = await _back(records, segment, parents, budget)
    else:
        related = await _forward(records, segment, parents, budget)
    if segment.access.fields.guards or segment.access.localization.fields:
        # what the caller may not see of the related records is left out; localized fields resolved
        shown = {r.id: segment.access.redact(r) for found in related.values() for r in found}
        related = {pid: [shown[r.id] for r in found] for pid, found in related.items()}
    children: tuple[Expanded, ...] = ()
    if segment.children:
        unique = list({r.id: r for found in related.values() for r in found}.values())
        children = await _load_all(records, segment.children, unique, budget)
    return Expanded(segment.name, segment.many, related, children)


async def _load_all(records: RecordRepository, segments: Sequence[Segment],
                    parents: Sequence[Record], budget: _Budget) -> tuple[Expanded, ...]:
    """Sibling segments at once; one after the other inside a transaction (a batch), whose session
    takes one operation at a time."""
    if current_session() is not None:
        return tuple([await _load(records, s, parents, budget) for s in segments])
    return tuple(await asyncio.gather(*[_load(records, s, parents, budget) for s in segments]))


def _visible(query: dict[str, Any], access: Access, via: str | None = None) -> dict[str, Any]:
    """`query` within what the view rule `access` shows; with `via` (the relation field a back-relation
    is read through), only where the caller may see that field's value too."""
    visible = access.query if via is None else access.visible_query(via)
    return query if visible is None else {"$and": [query, visible]}


async def _forward(records: RecordRepository, segment: Segment, parents: Sequence[Record],
                   budget: _Budget) -> dict[str, list[Record]]:
    """Parent id -> the visible records its relation field names, in the field's order (one query)."""
    held = {p.id: [v for v in value_list(p.data.get(segment.field)) if isinstance(v, str)] for p in parents}
    wanted = list(dict.fromkeys(i for ids in held.values() for i in ids))
    if not wanted:
        return {}
    budget.take(len(wanted))  # before the query: the ids are known
    # point reads (read with the gets of that collection that arrive meanwhile), the view rule decided
    # on each record in memory: the same condition `_visible` would add to the query
    found = {r.id: r for r in await records.find_by_ids(segment.target.id, wanted) if segment.access.allows(r)}
    related = {pid: [found[i] for i in ids if i in found] for pid, ids in held.items()}
    return {pid: shown for pid, shown in related.items() if shown}


async def _back(records: RecordRepository, segment: Segment, parents: Sequence[Record],
                budget: _Budget) -> dict[str, list[Record]]:
    """Parent id -> the visible records of the target whose relation field holds it, newest first, at
    most MAX_BACK_RELATIONS each. One query of at most MAX_BACK_RELATIONS per parent in all; should a
    few parents take that whole budget, the others are asked again (each round completes at least one
    parent, so it ends)."""
    pending = list(dict.fromkeys(p.id for p in parents))
    related: dict[str, list[Record]] = {}
    while pending:
        limit = min(MAX_BACK_RELATIONS * len(pending), budget.left + 1)  # one more shows the bound passed
        query = _visible({segment.field: {"$in": pending}}, segment.access, segment.field)
        # by `auto_relation_<field>` (content/indexes.py) when the query is that field alone; joined to
        # a view rule (`$and`) the embedded server's planner scans, so it takes a slot like a list
        found = await records.find_related(segment.target.id, query, NEWEST_FIRST, limit, client=budget.client,
                                           indexed="$and" not in query)
        budget.take(len(found))
        got: dict[str, list[Record]] = {pid: [] for pid in pending}
        for record in found:
            for pid in value_list(record.data.get(segment.field)):
                if pid in got and len(got[pid]) < MAX_BACK_RELATIONS:
                    got[pid].append(record)
        related.update({pid: shown for pid, shown in got.items() if shown})
        if len(found) < limit:
            break
        pending = [pid for pid in pending if len(got[pid]) < MAX_BACK_RELATIONS]
    return related
