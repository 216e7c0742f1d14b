"""Records: CRUD and list (page, filter, sort, search) within a collection (spec: Records;
decisions.md: Records). Every change emits one RecordEvent per record through the dispatcher.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.errors import NotFound, ValidationFailed
from cms.filters.grammar import parse_filter
from cms.filters.mongo import (
    ResolvedField,
    search_query,
    text_search_query,
    to_mongo_query,
    to_mongo_sort,
)
from cms.filters.sort import parse_sort
from cms.models import Collection, Page, Principal, Record
from cms.services.collections import CollectionService
from cms.services.events import CREATE, DELETE, UPDATE, EventDispatcher, RecordEvent
from cms.services.fields import RecordSchemas, text_field_names, to_json_value
from cms.store.records import RecordRepository

MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 30
DEFAULT_SORT: list[tuple[str, int]] = [("created", 1)]
SYSTEM_RESOLUTIONS = {
    "id": ResolvedField(path="_id", type="id"),
    "created": ResolvedField(path="created", type="datetime"),
    "updated": ResolvedField(path="updated", type="datetime"),
}


class CollectionFields:
    """FieldResolver over a collection: system fields plus schema fields, nothing else."""

    def __init__(self, collection: Collection) -> None:
        self._fields = {f.name: ResolvedField(path=f.name, type=f.type) for f in collection.fields}

    def resolve(self, name: str) -> ResolvedField | None:
        """The stored path and type of field `name`, or None when the collection has no such field."""
        return SYSTEM_RESOLUTIONS.get(name) or self._fields.get(name)


def record_json(record: Record) -> dict[str, Any]:
    """The API shape of a record: `{id, created, updated, ...fields}` with JSON-safe values."""
    body: dict[str, Any] = {"id": record.id, "created": to_json_value(record.created),
                            "updated": to_json_value(record.updated)}
    for key, value in record.data.items():
        body[key] = [to_json_value(v) for v in value] if isinstance(value, list) else to_json_value(value)
    return body


class RecordService:
    """Records of user collections. Reads are public; writes need a principal (API guard)."""

    def __init__(
        self,
        collections: CollectionService,
        records: RecordRepository,
        schemas: RecordSchemas,
        events: EventDispatcher,
        *,
        clock: Clock = utcnow,
    ) -> None:
        self._collections = collections
        self._records = records
        self._schemas = schemas
        self._events = events
        self._clock = clock

    async def list(
        self,
        collection_name: str,
        *,
        page: int = 1,
        per_page: int = DEFAULT_PER_PAGE,
        sort: str | None = None,
        filter_expr: str | None = None,
        search: str | None = None,
    ) -> Page[Record]:
        """One page of the collection's records and the total for the same query.

        `page` >= 1, `per_page` 1..100 (larger values are clamped). `sort` is `a,-b`; `filter_expr`
        follows decisions.md's grammar; `search` requires every word in some text, editor, email or
        url field. Raises NotFound (collection) or InvalidFilter (syntax, unknown field, bad value)."""
        collection = await self._collections.get_by_name(collection_name)
        per_page = min(per_page, MAX_PER_PAGE)
        query = self.query(collection, filter_expr=filter_expr, search=search)
        resolver = CollectionFields(collection)
        order = to_mongo_sort(parse_sort(sort), resolver) if sort else list(DEFAULT_SORT)
        if not any(path == "_id" for path, _ in order):
            order.append(("_id", 1))
        items, total = await asyncio.gather(
            self._records.find(collection.id, query, order, (page - 1) * per_page, per_page),
            self._records.count(collection.id, query),
        )
        return Page(items=items, total=total, page=page, per_page=per_page)

    def query(self, collection: Collection, *, filter_expr: str | None, search: str | None) -> dict[str, Any]:
        """The MongoDB query for a filter and a search over `collection` (both optional).
        Raises InvalidFilter."""
        parts: list[dict[str, Any]] = []
        if filter_expr and filter_expr.strip():
            parts.append(to_mongo_query(parse_filter(filter_expr), CollectionFields(collection)))
        if search and search.strip():
            fields = text_field_names(collection)
            if self._records.capabilities.text_index and fields:
                parts.append(text_search_query(search))
            else:
                parts.append(search_query(search, fields))
        parts = [p for p in parts if p]
        if not parts:
            return {}
        return parts[0] if len(parts) == 1 else {"$and": parts}

    async def get(self, collection_name: str, record_id: str) -> Record:
        """One record. Raises NotFound (collection or record)."""
        collection = await self._collections.get_by_name(collection_name)
        return await self._get(collection, record_id)

    async def _get(self, collection: Collection, record_id: str) -> Record:
        record = await self._records.get(collection.id, record_id)
        if record is None:
            raise NotFound("Record not found")
        return record

    async def create(self, principal: Principal, collection_name: str, data: Any) -> Record:
        """Validate `data` against the schema and store a new record; emits `create`.
        Raises NotFound, ValidationFailed (422) or AlreadyExists (a unique field)."""
        collection = await self._collections.get_by_name(collection_name)
        values = self._schemas.load(collection, data, partial=False)
        values = {k: v for k, v in values.items() if v is not None}
        await self._check_relations(collection, values)
        now = self._clock()
        record = Record(id=new_id(), created=now, updated=now, data=values)
        await self._records.insert(collection.id, record)
        await self._emit(CREATE, collection, record)
        return record

    async def update(self, principal: Principal, collection_name: str, record_id: str, data: Any) -> Record:
        """Change the fields given in `data` (null clears an optional field); emits `update`.
        Raises NotFound, ValidationFailed or AlreadyExists."""
        collection = await self._collections.get_by_name(collection_name)
        values = self._schemas.load(collection, data, partial=True)
        set_values = {k: v for k, v in values.items() if v is not None}
        unset = [k for k, v in values.items() if v is None]
        await self._check_relations(collection, set_values)
        set_values["updated"] = self._clock()
        record = await self._records.update(collection.id, record_id, set_values, unset)
        if record is None:
            raise NotFound("Record not found")
        await self._emit(UPDATE, collection, record)
        return record

    async def delete(self, principal: Principal, collection_name: str, record_id: str) -> None:
        """Delete one record; emits `delete` with `{id}`. Raises NotFound."""
        collection = await self._collections.get_by_name(collection_name)
        if not await self._records.delete(collection.id, record_id):
            raise NotFound("Record not found")
        await self._events.emit([RecordEvent(DELETE, collection.name, record_id, {"id": record_id}, self._clock())])

    async def _emit(self, kind: str, collection: Collection, record: Record) -> None:
        await self._events.emit([RecordEvent(kind, collection.name, record.id, record_json(record), self._clock())])

    async def _check_relations(self, collection: Collection, values: dict[str, Any]) -> None:
        """Every relation id must name an existing record of the target collection."""
        for spec in collection.fields:
            if spec.type != "relation" or spec.name not in values or spec.collection_id is None:
                continue
            ids = values[spec.name] if isinstance(values[spec.name], list) else [values[spec.name]]
            wanted = set(ids)
            found = await self._records.count(spec.collection_id, {"_id": {"$in": sorted(wanted)}})
            if found != len(wanted):
                raise ValidationFailed(
                    "Relation points to a missing record", errors={spec.name: ["Unknown record id."]}
                )
