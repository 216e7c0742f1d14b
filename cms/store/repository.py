"""`Repository`: what every repository of one model repeats on its Mongo collection (STYLE.md rule 3;
decisions.md: Storage): insert one (driver errors translated), find one or many by a query, delete
one. Each repository subclasses it with its model's document conversion and adds what is its own
(updates, indexes, the queries of its service).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from pymongo.asynchronous.collection import AsyncCollection

from cms.store.documents import to_document
from cms.store.errors import translate_errors

T = TypeVar("T")

Sort = Sequence[tuple[str, int]]
"""A sort: (field, 1 ascending | -1 descending) pairs, most significant first."""


class Repository(Generic[T]):
    """The documents of one Mongo collection (`mongo_coll`), each one `T`: `load` makes a `T` of a
    document, `dump` a document of a `T` (default `to_document`: dataclass fields, `id` as `_id`).
    `unique`: the name a unique clash on insert is reported under (AlreadyExists)."""

    def __init__(self, mongo_coll: AsyncCollection[dict[str, Any]], load: Callable[[dict[str, Any]], T],
                 dump: Callable[[T], dict[str, Any]] = to_document, *, unique: str = "value") -> None:
        self._mongo_coll = mongo_coll
        self._load = load
        self._dump = dump
        self._unique = unique

    async def insert(self, item: T) -> None:
        """Store a new `item`. Raises AlreadyExists (a unique index: `unique`) or ServiceUnavailable."""
        async with translate_errors(self._unique):
            await self._mongo_coll.insert_one(self._dump(item))

    async def _find_one(self, query: Mapping[str, Any]) -> T | None:
        """The one document matching `query`, as a `T`, or None."""
        doc = await self._mongo_coll.find_one(dict(query))
        return self._load(doc) if doc else None

    async def _find(self, query: Mapping[str, Any], sort: Sort | None = None) -> list[T]:
        """Every document matching `query`, in `sort` order (default: natural), as `T`s."""
        cursor = self._mongo_coll.find(dict(query))
        if sort:
            cursor = cursor.sort(list(sort))
        return [self._load(doc) async for doc in cursor]

    async def _delete_one(self, query: Mapping[str, Any]) -> bool:
        """Remove the document matching `query`. Returns False if there was none."""
        return (await self._mongo_coll.delete_one(dict(query))).deleted_count == 1
