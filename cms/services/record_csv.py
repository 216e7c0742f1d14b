"""CSV export and import of a collection's records (spec: Records, export/csv and import/csv;
decisions.md: Limits). Cells are rendered and parsed by `csv_io`; RecordService resolves the
collection and the query and hands in its event path, so every imported record emits `create`
exactly as a single create does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.errors import PayloadTooLarge
from cms.models import Collection, Record
from cms.services.csv_io import (
    MAX_IMPORT_BYTES,
    ROW_ERROR_KEY,
    CsvChunkWriter,
    CsvImport,
    ImportResult,
    ParsedRow,
    RowFailure,
    csv_header,
    render_row,
)
from cms.services.fields import value_list
from cms.store.records import DUPLICATE_KEY, RecordRepository

log = logging.getLogger("cms.records")

EXPORT_BATCH_SIZE = 1_000
"""Documents fetched per round trip while exporting."""
IMPORT_BATCH_SIZE = 1_000
"""CSV rows validated, then stored with one unordered insert_many, at a time."""
UNKNOWN_RELATION = "Unknown record id."

EmitCreated = Callable[[Collection, Sequence[Record]], Awaitable[None]]


@dataclass(frozen=True)
class CsvExport:
    """A CSV download: `filename` (`<collection>-<YYYYmmdd-HHMMSS>.csv`, UTC) and `chunks`, the CSV
    text (header row first, CRLF line ends) in pieces of about 64 KiB. Close `chunks` (`aclose()`)
    when stopping early."""

    filename: str
    chunks: AsyncGenerator[str, None]


class RecordCsv:
    """Streams records out as CSV and stores CSV rows as records, in batches.

    `emit_created(collection, records)` is called after each batch is stored, with the records
    that went in."""

    def __init__(self, records: RecordRepository, emit_created: EmitCreated, *, clock: Clock = utcnow) -> None:
        self._records = records
        self._emit_created = emit_created
        self._clock = clock

    def export(self, collection: Collection, query: dict[str, Any], order: list[tuple[str, int]]) -> CsvExport:
        """The records of `collection` matching `query` in `order` (a prepared MongoDB query and sort)."""
        filename = f"{collection.name}-{self._clock():%Y%m%d-%H%M%S}.csv"
        return CsvExport(filename=filename, chunks=self._chunks(collection, query, order))

    async def _chunks(
        self, collection: Collection, query: dict[str, Any], order: list[tuple[str, int]]
    ) -> AsyncGenerator[str, None]:
        writer = CsvChunkWriter()
        writer.write(csv_header(collection))
        records = self._records.stream(collection.id, query, order, batch_size=EXPORT_BATCH_SIZE)
        try:
            async for record in records:
                chunk = writer.write(render_row(collection, record))
                if chunk:
                    yield chunk
        finally:
            await records.aclose()
        yield writer.take()

    async def import_csv(self, collection: Collection, content: bytes) -> ImportResult:
        """Store the rows of CSV `content` as new records of `collection`.

        The file is checked as a whole first: nothing is stored when it is over 10 MiB
        (PayloadTooLarge) or when `CsvImport` refuses it (ValidationFailed: empty, not UTF-8, bad
        header, broken quoting, over 50,000 rows). Then each row is parsed and validated; valid rows
        are stored IMPORT_BATCH_SIZE at a time with one unordered insert_many. Rows that fail
        validation, name a missing relation target or clash on a unique field are reported in
        `failed` by 1-based data-row number, with `errors: {field or "_row": [message]}`. Records
        of one batch share their `created` time."""
        if len(content) > MAX_IMPORT_BYTES:
            raise PayloadTooLarge(f"The CSV file is larger than {MAX_IMPORT_BYTES // 2**20} MiB")
        upload = await asyncio.to_thread(CsvImport, collection, content)
        result = ImportResult()
        # Parsing is CPU-bound: it runs in a worker thread, one batch ahead of the inserts.
        next_batch = partial(next, upload.batches(IMPORT_BATCH_SIZE), None)
        pending = asyncio.ensure_future(asyncio.to_thread(next_batch))
        try:
            while (batch := await pending) is not None:
                pending = asyncio.ensure_future(asyncio.to_thread(next_batch))
                rows, failed = batch
                result.failed.extend(failed)
                await self._store_rows(collection, rows, result)
        finally:  # leaving early (an error): drop the batch parsed ahead, and any error it had
            pending.cancel()
            if pending.done() and not pending.cancelled():
                pending.exception()
        result.failed.sort(key=lambda failure: failure.row)
        return result

    async def _store_rows(self, collection: Collection, rows: list[ParsedRow], result: ImportResult) -> None:
        """Insert one batch of valid rows; add what was stored and what was refused to `result`."""
        rows = await self._drop_missing_relations(collection, rows, result.failed)
        if not rows:
            return
        now = self._clock()
        records = [Record(id=new_id(), created=now, updated=now, data=row.values) for row in rows]
        refused = {failure.index: failure for failure in await self._records.insert_many(collection.id, records)}
        for index, failure in sorted(refused.items()):
            if failure.code == DUPLICATE_KEY:
                message = "Value must be unique"
            else:
                log.error("CSV import into %s: row %d refused: %s", collection.name, rows[index].row, failure.message)
                message = f"Could not be stored (server error {failure.code})"
            result.failed.append(RowFailure(rows[index].row, {failure.field or ROW_ERROR_KEY: [message]}))
        stored = [record for index, record in enumerate(records) if index not in refused]
        result.imported += len(stored)
        await self._emit_created(collection, stored)

    async def _drop_missing_relations(
        self, collection: Collection, rows: list[ParsedRow], failed: list[RowFailure]
    ) -> list[ParsedRow]:
        """The rows whose relation ids all exist (one lookup per relation field); the others go to
        `failed`."""
        errors: dict[int, dict[str, list[str]]] = {}
        for spec in collection.fields:
            if spec.type != "relation" or spec.collection_id is None:
                continue
            wanted = {i for row in rows for i in value_list(row.values.get(spec.name))}
            if not wanted:
                continue
            missing = wanted - await self._records.existing_ids(spec.collection_id, sorted(wanted))
            for index, row in enumerate(rows):
                if missing.intersection(value_list(row.values.get(spec.name))):
                    errors.setdefault(index, {})[spec.name] = [UNKNOWN_RELATION]
        failed.extend(RowFailure(rows[index].row, row_errors) for index, row_errors in errors.items())
        return [row for index, row in enumerate(rows) if index not in errors]
