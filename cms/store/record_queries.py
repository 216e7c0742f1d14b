"""The reads of the records' repository (`RecordRepository` in records.py extends `RecordQueries`):
point reads by id, the list queries that take a slot of the process's scan line (`find`, `find_ids`,
`find_related`, `count`), cursors that stream a collection, and the look-ups of relation holders and
unique values that writes check before they change anything.

One Mongo collection per CMS collection, `records_<collection id>` (documents.py names them and
converts their documents); ids are looked up a chunk at a time (bulk.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager, nullcontext
from datetime import datetime
from typing import Any, Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import ExecutionTimeout, OperationFailure

from cms.errors import BadRequest, ServiceUnavailable
from cms.models import QueryPlan, QueryShape, Record, SortSpec
from cms.store.bulk import ID_CHUNK, chunks
from cms.store.client import Capabilities, Database
from cms.store.documents import record_from_document, records_mongo_name
from cms.store.errors import translate_query_errors
from cms.store.point_reads import PointReads
from cms.store.query_plans import EXPLAIN_MISSING_CODES, pipeline_of, plain_sort, query_plan, sort_stages
from cms.store.query_shapes import shape_of
from cms.store.scan_line import ScanLine
from cms.store.transactions import current_session

_NO_SLOT = nullcontext()
"""What a query served by an index holds instead of a slot of the scan line (reusable: it does nothing)."""
MAX_KEPT_COLLECTIONS = 1024
"""Most driver collection objects a repository keeps (`_mongo_coll`); past it they are made afresh."""


class QueryWatch(Protocol):
    """Who is told of list queries that took longer than `threshold_ms` milliseconds (issue 38, item 3:
    cms.services.content.slow_queries). `slow` runs on the query's path (the event loop): it must be
    cheap, must not block and must not raise."""

    @property
    def threshold_ms(self) -> float:
        """Queries that take longer than this many milliseconds are slow."""
        ...

    def slow(self, collection_id: str, shape: QueryShape, duration_ms: float) -> None:
        """A list query of `collection_id`'s records of `shape` took `duration_ms` milliseconds."""


class RecordQueries:
    """The reads of the records of every collection; callers pass the collection id and a prepared
    query. List queries (`find`, `find_ids`, `find_related`, `count`) take a slot of `scans`, the
    process's line of scans (503 when it is full); point reads do not. `watch` is told of each list
    query that took longer than its threshold (from its slot to its last document; the wait in line
    is not counted), by its shape (`query_shapes.shape_of`: never a value)."""

    def __init__(self, db: Database, capabilities: Capabilities, *, scans: ScanLine | None = None,
                 watch: QueryWatch | None = None) -> None:
        self._db = db
        self.capabilities = capabilities
        self.scans = scans or ScanLine()
        self.watch = watch
        self.points = PointReads(self._find_one, self._find_many)
        self._colls: dict[str, AsyncCollection[dict[str, Any]]] = {}

    @asynccontextmanager
    async def _timed(self, collection_id: str, query: Mapping[str, Any],
                     sort: SortSpec | Sequence[tuple[str, int]] = ()) -> AsyncIterator[None]:
        """Time the block (a list query): past `watch.threshold_ms`, tell `watch` (not when it raised)."""
        watch = self.watch
        if watch is None:
            yield
            return
        started = time.perf_counter()
        yield
        duration_ms = (time.perf_counter() - started) * 1000
        if duration_ms > watch.threshold_ms:
            watch.slow(collection_id, shape_of(query, sort), duration_ms)

    def _scan_slot(self, client: str | None) -> AbstractAsyncContextManager[None]:
        """One slot of the process's scan line in `client`'s share (`ScanLine.slot`). Raises
        ServiceUnavailable (503, `Retry-After`) when the line or the share is full or the wait would be
        too long."""
        return self.scans.slot(client)

    def _mongo_coll(self, collection_id: str) -> AsyncCollection[dict[str, Any]]:
        """The driver's collection object of `collection_id`, made once per process (building one
        costs a few µs on every read otherwise); at most MAX_KEPT_COLLECTIONS are kept."""
        found = self._colls.get(collection_id)
        if found is None:
            if len(self._colls) >= MAX_KEPT_COLLECTIONS:
                self._colls.clear()
            found = self._colls[collection_id] = self._db[records_mongo_name(collection_id)]
        return found

    async def get(self, collection_id: str, record_id: str) -> Record | None:
        """The record, or None. Outside a transaction, concurrent gets of one collection are read
        together (`PointReads`: one `$in` query for the gets that arrive while one is in flight)."""
        doc = await self.read_document(collection_id, record_id)
        return record_from_document(doc) if doc else None

    async def read_document(self, collection_id: str, record_id: str) -> dict[str, Any] | None:
        """The stored document of one record, or None: `get`'s read (a point read outside a
        transaction, else a `find_one` in its session), for the store's own guarded writes."""
        session = current_session()
        if session is not None:
            return await self._mongo_coll(collection_id).find_one({"_id": record_id}, session=session)
        return await self.points.get(collection_id, record_id)

    async def _find_one(self, collection_id: str, record_id: str) -> dict[str, Any] | None:
        """One document by id, outside any transaction (`PointReads`' read on its own)."""
        return await self._mongo_coll(collection_id).find_one({"_id": record_id})

    async def _find_many(self, collection_id: str, record_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The documents among `record_ids` (at most ID_CHUNK), outside any transaction (`PointReads`' batch)."""
        return [doc async for doc in self._mongo_coll(collection_id).find({"_id": {"$in": list(record_ids)}})]

    async def find_by_ids(self, collection_id: str, record_ids: Sequence[str]) -> list[Record]:
        """The records among `record_ids` that exist (one find per ID_CHUNK ids, any order). Outside a
        transaction they are point reads (`PointReads.get_many`: read with the gets of the collection
        that arrive meanwhile)."""
        if current_session() is None:
            found_now = await self.points.get_many(collection_id, record_ids)
            return [record_from_document(doc) for doc in found_now.values()]
        mongo_coll = self._mongo_coll(collection_id)
        found: list[Record] = []
        for chunk in chunks(record_ids):
            cursor = mongo_coll.find({"_id": {"$in": chunk}}, session=current_session())
            found.extend([record_from_document(d) async for d in cursor])
        return found

    async def existing_ids(self, collection_id: str, record_ids: Sequence[str]) -> set[str]:
        """Which of `record_ids` exist (one find per ID_CHUNK ids). Fewer than ID_CHUNK outside a
        transaction (a write's relation check) are point reads (`PointReads.get_many`), read with the
        collection's other point reads of the moment."""
        if current_session() is None and len(record_ids) < ID_CHUNK:
            return set(await self.points.get_many(collection_id, record_ids))
        mongo_coll = self._mongo_coll(collection_id)
        found: set[str] = set()
        for chunk in chunks(record_ids):
            found.update([d["_id"] async for d in mongo_coll.find({"_id": {"$in": chunk}}, projection={"_id": 1},
                                                                   session=current_session())])
        return found

    async def find_holders(self, collection_id: str, field_name: str, record_ids: Sequence[str]) -> list[Record]:
        """The records whose relation field `field_name` names any of `record_ids` (a one-value
        field equal to one, or a list holding one), with `_id` and that field only in `data`."""
        mongo_coll = self._mongo_coll(collection_id)
        found: list[Record] = []
        for chunk in chunks(record_ids):
            cursor = mongo_coll.find({field_name: {"$in": chunk}}, session=current_session(),
                                     projection={field_name: 1, "created": 1, "updated": 1})
            found.extend([record_from_document(d) async for d in cursor])
        return list({r.id: r for r in found}.values())

    async def count_holders(self, collection_id: str, field_name: str, value: Any, exclude_ids: Sequence[str]) -> int:
        """How many records other than `exclude_ids` hold `value` in `field_name` (for a list value:
        any of its items, as a unique index on a list field compares items)."""
        return await self._mongo_coll(collection_id).count_documents(
            {field_name: _holding(value), "_id": {"$nin": list(exclude_ids)}}
        )

    async def value_holders(self, collection_id: str, field_name: str, value: Any, *, limit: int) -> list[Record]:
        """At most `limit` records holding `value` in `field_name` (a list value: any of its items),
        outside any transaction (a duplicate key aborts the one it happened in): the committed records
        a unique clash on that value clashed with."""
        cursor = self._mongo_coll(collection_id).find({field_name: _holding(value)}, limit=limit)
        return [record_from_document(d) async for d in cursor]

    async def stream(
        self, collection_id: str, query: dict[str, Any], sort: SortSpec, *, batch_size: int
    ) -> AsyncGenerator[Record, None]:
        """Every record matching `query` in `sort` order, fetched from the server `batch_size` documents
        at a time, so memory stays flat however many match."""
        stages = sort_stages(sort)
        mongo_coll = self._mongo_coll(collection_id)
        cursor: Any
        if stages is None:
            cursor = mongo_coll.find(query, sort=plain_sort(sort)).batch_size(batch_size)
        else:
            async with translate_query_errors():
                cursor = await mongo_coll.aggregate(pipeline_of(query, stages, 0, 0, None), batchSize=batch_size)
        try:
            async with translate_query_errors():
                async for doc in cursor:
                    yield record_from_document(doc)
        finally:
            await cursor.close()

    async def find(
        self, collection_id: str, query: dict[str, Any], sort: SortSpec, skip: int, limit: int, *,
        client: str | None = None,
    ) -> list[Record]:
        """Records matching `query` in `sort` order, `skip` then at most `limit` of them, in `client`'s
        share of the scan line (an aggregation when the sort holds a tuple path, `sort_stages`). Raises
        InvalidFilter when the server refuses the query (see `translate_query_errors`) and
        ServiceUnavailable (the line is full)."""
        stages = sort_stages(sort)
        async with self._scan_slot(client), translate_query_errors(), self._timed(collection_id, query, sort):
            mongo_coll = self._mongo_coll(collection_id)
            if stages is not None:
                cursor = await mongo_coll.aggregate(pipeline_of(query, stages, skip, limit, None))
                return [record_from_document(d) async for d in cursor]
            found = mongo_coll.find(query, sort=plain_sort(sort), skip=skip, limit=limit)
            return [record_from_document(d) async for d in found]

    async def find_ids(self, collection_id: str, query: dict[str, Any], sort: SortSpec,
                       limit: int, *, client: str | None = None) -> list[Any]:
        """The `_id`s of the records matching `query` in `sort` order, at most `limit` (> 0): one scan
        that sends back only the ids, in one batch (a cursor's later batches cost the embedded server a
        second pass). The server sorts before it projects, so no sort key travels. In `client`'s share
        of the scan line. Raises InvalidFilter when the server refuses the query and ServiceUnavailable
        (the line is full)."""
        stages = sort_stages(sort)
        async with self._scan_slot(client), translate_query_errors(), self._timed(collection_id, query, sort):
            mongo_coll = self._mongo_coll(collection_id)
            if stages is not None:
                cursor = await mongo_coll.aggregate(pipeline_of(query, stages, 0, limit, {"_id": 1}), batchSize=limit)
                return [d["_id"] async for d in cursor]
            found = mongo_coll.find(query, projection={"_id": 1}, sort=plain_sort(sort), limit=limit, batch_size=limit)
            return [d["_id"] async for d in found]

    async def find_related(self, collection_id: str, query: dict[str, Any], sort: SortSpec,
                           limit: int, *, client: str | None = None, indexed: bool = False) -> list[Record]:
        """Records matching `query` (the related records of a page, by `_id` or relation field `$in`)
        in `sort` order, at most `limit` (0: all), in the current transaction if any (a batch sees
        what it wrote), in `client`'s share of the scan line. `indexed`: the query is led by `_id` or
        by a field an index leads (a relation field's `auto_relation_<field>`), so the server examines
        the records it matches, not the collection: it takes no slot, like a point read (issue 38).
        Raises InvalidFilter when the server refuses the query and ServiceUnavailable (the line is full)."""
        stages = sort_stages(sort)
        async with (self._scan_slot(client) if not indexed else _NO_SLOT), translate_query_errors(), \
                self._timed(collection_id, query, sort):
            mongo_coll = self._mongo_coll(collection_id)
            if stages is not None:
                cursor = await mongo_coll.aggregate(pipeline_of(query, stages, 0, limit, None),
                                                    session=current_session())
                return [record_from_document(d) async for d in cursor]
            found = mongo_coll.find(query, sort=plain_sort(sort), limit=limit, session=current_session())
            return [record_from_document(d) async for d in found]

    async def find_fields(self, collection_id: str, query: dict[str, Any], names: Sequence[str], limit: int, *,
                          client: str | None = None) -> list[Record]:
        """At most `limit` (> 0) records matching `query`, each with `created`, `updated` and only the
        fields `names` in `data` (those it holds), in no particular order, in one batch, in `client`'s
        share of the scan line. Raises InvalidFilter (the server refused the query) and
        ServiceUnavailable (the line is full)."""
        projection = {"created": 1, "updated": 1, **{name: 1 for name in names}}
        async with self._scan_slot(client), translate_query_errors(), self._timed(collection_id, query):
            cursor = self._mongo_coll(collection_id).find(query, projection=projection, limit=limit,
                                                          batch_size=limit)
            return [record_from_document(d) async for d in cursor]

    async def aggregate(self, collection_id: str, pipeline: list[dict[str, Any]], *, max_time_ms: int,
                        client: str | None = None) -> tuple[list[dict[str, Any]], int]:
        """Run a grouping `pipeline` whose last stage is a `$facet` of `items` and `total: [{n}]`
        (`filters.mongo.group_pipeline`) over the collection's records: the groups as the pipeline
        answers them, and how many there are in all. In `client`'s share of the scan line, for at most
        `max_time_ms` on the server; timed for `watch` by its `$match`. Raises InvalidFilter (the server
        refused the pipeline), ServiceUnavailable (the line is full, or the time limit passed: 503 with
        `Retry-After`)."""
        match = pipeline[0].get("$match", {}) if pipeline else {}
        async with self._scan_slot(client), translate_query_errors(), self._timed(collection_id, match):
            try:
                cursor = await self._mongo_coll(collection_id).aggregate(pipeline, maxTimeMS=max_time_ms)
                answers = [d async for d in cursor]
            except ExecutionTimeout:
                error = ServiceUnavailable(f"The aggregation took longer than {max_time_ms:,} ms; narrow its filter "
                                           "or retry later")
                error.headers["Retry-After"] = str(max(1, math.ceil(max_time_ms / 1000)))
                raise error from None
        facet = answers[0] if answers else {}
        counted = facet.get("total") or [{}]
        return list(facet.get("items") or []), int(counted[0].get("n", 0))

    async def explain_find(
        self, collection_id: str, query: dict[str, Any], sort: SortSpec, skip: int, limit: int, *,
        client: str | None = None,
    ) -> QueryPlan:
        """How the server runs `find` (the arguments of `find`) by its `explain` command (verbosity
        `executionStats`: the query is run), summarised; in `client`'s share of the scan line. A sort
        holding a tuple path (an aggregation, `sort_stages`) is explained without that key: the index
        the `$match` uses is the same.
        Raises BadRequest when the server has no `explain` for `find` (refuses the command or answers
        without a plan), InvalidFilter when it refuses the query, ServiceUnavailable (the line is full)."""
        command: dict[str, Any] = {"find": records_mongo_name(collection_id), "filter": query, "skip": skip,
                                   "limit": limit}
        plain = plain_sort([(path, direction) for path, direction in sort if isinstance(path, str)])
        if plain:
            command["sort"] = dict(plain)
        async with self._scan_slot(client), translate_query_errors():
            try:
                answer = await self._db.command("explain", command, verbosity="executionStats")
            except OperationFailure as exc:
                if exc.code not in EXPLAIN_MISSING_CODES:
                    raise
                answer = {}
        plan = query_plan(answer)
        if plan is None:
            raise BadRequest("This database server does not explain queries (no `explain` for `find`)")
        return plan

    async def count(self, collection_id: str, query: dict[str, Any], *, client: str | None = None) -> int:
        """How many records match `query`; for the whole collection (`{}`) the server's count from
        its collection metadata (`estimated_document_count`: no scan on MongoDB; issue "Fast
        reads", item 4). In `client`'s share of the scan line. Raises InvalidFilter when the server
        refuses the query and ServiceUnavailable (the line is full)."""
        async with self._scan_slot(client), translate_query_errors(), self._timed(collection_id, query):
            if not query:
                return await self._mongo_coll(collection_id).estimated_document_count()
            return await self._mongo_coll(collection_id).count_documents(query)

    async def estimated_count(self, collection_id: str, *, timeout_ms: int) -> int | None:
        """The server's cheap count of the collection's records (`estimated_document_count`: from
        the collection's metadata on MongoDB, no query is run), bounded by `timeout_ms` and taking no
        scan slot; None when the server does not answer it (no such command, or past the time-out)."""
        try:
            return await self._mongo_coll(collection_id).estimated_document_count(maxTimeMS=timeout_ms)
        except OperationFailure:
            return None

    async def database_names(self) -> set[str]:
        """The name of every MongoDB collection of the database (records collections are those
        starting with RECORDS_PREFIX)."""
        return set(await self._db.list_collection_names())

    async def stream_field_values(
        self, collection_id: str, names: Sequence[str], *, batch_size: int
    ) -> AsyncGenerator[list[tuple[str, dict[str, Any]]], None]:
        """The records holding any of the fields `names`, in `created` order, as lists of at most
        `batch_size` (record id, {name: value} of the fields present); one cursor, so memory stays
        flat. Updating these fields between batches is safe: the cursor walks the `created_id`
        index, whose keys do not change."""
        batches = self._field_batches(collection_id, names, sort=[("created", 1), ("_id", 1)], batch_size=batch_size)
        async with aclosing(batches):
            async for docs in batches:
                yield [(doc.pop("_id"), doc) for doc in docs]

    async def stream_values_after(
        self, collection_id: str, names: Sequence[str], *, after_id: str, batch_size: int
    ) -> AsyncGenerator[list[tuple[str, datetime, dict[str, Any]]], None]:
        """The records holding any of the fields `names` whose id sorts after `after_id` ("" for all), in
        id order, as lists of at most `batch_size` (record id, updated, {name: value} of the fields present):
        a rewrite that records the last id it finished resumes from there (a schema apply)."""
        batches = self._field_batches(collection_id, names, sort=[("_id", 1)], batch_size=batch_size,
                                      after_id=after_id, also=("updated",))
        async with aclosing(batches):
            async for docs in batches:
                yield [(doc.pop("_id"), doc.pop("updated", None), doc) for doc in docs]

    async def _field_batches(
        self, collection_id: str, names: Sequence[str], *, sort: list[tuple[str, int]], batch_size: int,
        after_id: str = "", also: Sequence[str] = (),
    ) -> AsyncGenerator[list[dict[str, Any]], None]:
        """The documents holding any of the fields `names` (projected to `_id`, those fields and `also`),
        ids after `after_id` ("" for all), in `sort` order, as lists of at most `batch_size`, read through
        one cursor (closed however the caller stops) so that memory stays flat."""
        query: dict[str, Any] = {"$or": [{name: {"$exists": True}} for name in names]}
        if after_id:
            query["_id"] = {"$gt": after_id}
        projection = {name: 1 for name in (*also, *names)}
        cursor = self._mongo_coll(collection_id).find(query, projection=projection, sort=sort).batch_size(batch_size)
        batch: list[dict[str, Any]] = []
        try:
            async for doc in cursor:
                batch.append(doc)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
            if batch:
                yield batch
        finally:
            await cursor.close()

    def hold_scans(self) -> AbstractAsyncContextManager[None]:
        """Take every free list-query slot for the block (`ScanLine.hold`), so the `find` and `count`
        calls that start meanwhile wait in line (bounded, then ServiceUnavailable) until it ends: for
        maintenance that needs the database to itself for a moment, and for tests that hold queries
        (issue "Fast reads", items 3 and 6)."""
        return self.scans.hold()


def _holding(value: Any) -> Any:
    """The match of a field holding `value`: for a list, any of its items (as a unique index on a
    list field compares items)."""
    return {"$in": value} if isinstance(value, list) else value
