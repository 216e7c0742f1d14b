"""CSV export and import of a collection's records (spec: Records, export/csv and import/csv;
decisions.md: Limits). Cells are rendered and parsed by `csv_io`; RecordService resolves the
collection and the query. Imported rows are written through the one writer (`RecordWriter`): its
relation check, insert, deleted-collection guard and events, so every imported record emits
`create` exactly as a single create does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cms.clock import Clock, new_id, utcnow
from cms.errors import NotFound, PayloadTooLarge
from cms.models import DRAFT, Collection, DraftState, Record, SortSpec
from cms.services.content.csv_io import (
    MAX_IMPORT_BYTES,
    MAX_IMPORT_ROWS,
    ROW_ERROR_KEY,
    CsvChunkWriter,
    CsvImport,
    ImportResult,
    ParsedRow,
    RowFailure,
    csv_header,
    render_row,
)
from cms.services.content.record_writer import UNKNOWN_RELATION, RecordWriter
from cms.store.bulk import DUPLICATE_KEY, InsertFailure
from cms.store.records import RecordRepository
from cms.store.working_copies import WorkingCopyRepository

log = logging.getLogger("cms.records")

EXPORT_BATCH_SIZE = 1_000
"""Documents fetched per round trip while exporting."""
IMPORT_BATCH_SIZE = 1_000
"""CSV rows validated, then stored with one unordered insert_many, at a time."""
__all__ = ["EXPORT_BATCH_SIZE", "IMPORT_BATCH_SIZE", "UNKNOWN_RELATION", "CsvExport", "RecordCsv"]



def _as_is(record: Record) -> Record:
    return record


@dataclass(frozen=True)
class CsvExport:
    """A CSV download: `filename` (`<collection>-<YYYYmmdd-HHMMSS>.csv`, UTC) and `chunks`, the CSV
    text (header row first, CRLF line ends) in pieces of about 64 KiB. Close `chunks` (`aclose()`)
    when stopping early."""

    filename: str
    chunks: AsyncGenerator[str, None]
    language: str | None = None
    """The locale localized fields answer (the `Content-Language`; decisions.md, Localized fields)."""


class RecordCsv:
    """Streams records out of `records` as CSV and stores CSV rows as records, in batches, through
    `writer` (after each batch: its deleted-collection guard, then the events of the records that
    went in)."""

    def __init__(self, records: RecordRepository, writer: RecordWriter, *, clock: Clock = utcnow) -> None:
        self._records = records
        self._writer = writer
        self._clock = clock

    async def export(self, collection: Collection, query: dict[str, Any], order: SortSpec,
                     redact: Callable[[Record], Record] = _as_is, codes: Sequence[str] = (),
                     language: str | None = None) -> CsvExport:
        """The records of `collection` matching `query` in `order` (a prepared MongoDB query and sort),
        each as `redact` leaves it (the caller's field rules: a hidden value is an empty cell; localized
        fields as the export's `?locale=` answers them); the columns are `collection`'s fields (the
        caller's: without the fields unknown to it), a localized one per locale of `codes` when given
        (`?locale=*`: `title:en`, `title:de`).

        The first record is fetched here, so a query the server refuses raises (InvalidFilter)
        before the caller has sent a byte of the download."""
        filename = f"{collection.name}-{self._clock():%Y%m%d-%H%M%S}.csv"
        records = self._records.stream(collection.id, query, order, batch_size=EXPORT_BATCH_SIZE)
        try:
            first = await anext(records, None)
        except BaseException:
            await records.aclose()
            raise
        return CsvExport(filename=filename, chunks=self._chunks(collection, first, records, redact, codes),
                         language=language)

    async def _chunks(
        self, collection: Collection, first: Record | None, records: AsyncGenerator[Record, None],
        redact: Callable[[Record], Record], codes: Sequence[str],
    ) -> AsyncGenerator[str, None]:
        writer = CsvChunkWriter()
        writer.write(csv_header(collection, codes))
        try:
            if first is not None:
                chunk = writer.write(render_row(collection, redact(first), codes))
                if chunk:
                    yield chunk
                async for record in records:
                    chunk = writer.write(render_row(collection, redact(record), codes))
                    if chunk:
                        yield chunk
        finally:
            await records.aclose()
        yield writer.take()

    async def import_csv(self, collection: Collection, content: bytes, *, epoch: str | None = None,
                         max_bytes: int = MAX_IMPORT_BYTES, max_rows: int = MAX_IMPORT_ROWS,
                         permitted: Callable[[Record], bool] | None = None,
                         drafts: WorkingCopyRepository | None = None) -> ImportResult:
        """Store the rows of CSV `content` as new records of `collection`. `drafts`: the collection has
        drafts (decisions.md, Drafts, versions and scheduled publishing): the rows become working copies
        (`draft`: types and lengths checked, `required`, `unique` and relation targets at publish) in
        this store, and emit no event.

        The file is checked as a whole first: nothing is stored when it is over 10 MiB
        (PayloadTooLarge) or when `CsvImport` refuses it (ValidationFailed: empty, not UTF-8, bad
        header, broken quoting, over 50,000 rows). Then every row is parsed and validated, and the
        relation ids of all valid rows are looked up, before the first insert; valid rows are then
        stored IMPORT_BATCH_SIZE at a time with one unordered insert_many. Rows that fail
        validation, that `permitted` (the create rule, given the record a row would store) refuses,
        that name a missing relation target or that clash on a unique field are reported in
        `failed` by 1-based data-row number, with `errors: {field, "_rule" or "_row": [message]}`;
        what `permitted` raises (a field's write_rule) refuses the file before anything is stored.

        If the database fails part-way, the import stops there and still answers: the rows that
        were stored are counted in `imported` (a batch in doubt is looked up by its record ids),
        every other valid row is in `failed` with a `_row` message saying it was not stored, so a
        client can retry exactly those. Only when even that look-up fails are the rows of the batch
        in doubt reported as possibly stored. Records of one batch share their `created` time.

        `epoch`: the catalog epoch `collection` was looked up under. Raises NotFound when the
        collection was deleted during the import (what it stored is dropped)."""
        if len(content) > max_bytes:
            raise PayloadTooLarge(f"The CSV file is larger than {max_bytes // 2**20} MiB")
        rows, failed = await asyncio.to_thread(_parse_all, collection, content, max_rows, drafts is not None)
        result = ImportResult(failed=failed)
        now = self._clock()
        if permitted is not None:
            rows = await asyncio.to_thread(_drop_refused, rows, now, permitted, result.failed)
        if drafts is None:  # a working copy's relation targets are checked at publish
            rows = await self._drop_missing_relations(collection, rows, result.failed)
        for start in range(0, len(rows), IMPORT_BATCH_SIZE):
            batch = rows[start:start + IMPORT_BATCH_SIZE]
            now = self._clock()
            records = [Record(id=new_id(), created=now, updated=now, data=row.values) for row in batch]
            try:
                refused = await self._insert(collection, records, drafts)
            except Exception as exc:  # the database failed: say exactly what is stored
                log.exception("CSV import into %s failed after %d records", collection.name, result.imported)
                await self._report_failure(collection, batch, records, rows[start + len(batch):], result, exc, drafts)
                break
            try:
                await self._writer.guard(collection, epoch)
            except NotFound:  # deleted meanwhile: so are the working copies stored
                if drafts is not None:
                    await drafts.drop(collection.id)
                raise
            await self._count_stored(collection, batch, records, refused, result, emit=drafts is None)
        result.failed.sort(key=lambda failure: failure.row)
        return result

    async def _insert(self, collection: Collection, records: list[Record],
                      drafts: WorkingCopyRepository | None) -> list[InsertFailure]:
        """Store a batch: records through the writer (the failures: unique clashes), or new `draft`
        working copies in `drafts` (no unique index there: none fail)."""
        if drafts is None:
            return await self._writer.insert_many(collection, records)
        await drafts.insert_missing(collection.id, [replace(r, state=DraftState(DRAFT)) for r in records])
        return []

    async def _count_stored(self, collection: Collection, batch: list[ParsedRow], records: list[Record],
                            refused: list[InsertFailure], result: ImportResult, *, emit: bool = True) -> None:
        """Add one inserted batch to `result`: the records that went in (and, with `emit`, their
        events), and the rows the database refused (unique clashes) as failures."""
        by_index = {failure.index: failure for failure in refused}
        for index, failure in sorted(by_index.items()):
            if failure.code == DUPLICATE_KEY:
                message = "Value must be unique"
            else:
                log.error("CSV import into %s: row %d refused: %s", collection.name, batch[index].row, failure.message)
                message = f"Could not be stored (server error {failure.code})"
            result.failed.append(RowFailure(batch[index].row, {failure.field or ROW_ERROR_KEY: [message]}))
        stored = [record for index, record in enumerate(records) if index not in by_index]
        result.imported += len(stored)
        if not emit:
            return
        try:
            await self._writer.emit_created(collection, stored)
        except Exception:  # the rows are stored: the answer must say so (no 5xx after storing)
            log.exception("CSV import into %s: events of %d stored records could not be written to the outbox",
                          collection.name, len(stored))

    async def _report_failure(self, collection: Collection, batch: list[ParsedRow], records: list[Record],
                              later: list[ParsedRow], result: ImportResult, exc: Exception,
                              drafts: WorkingCopyRepository | None = None) -> None:
        """After a database failure while storing `batch`: count the batch's records that did get
        stored (looked up by id, in `drafts` for working copies), and report the rest of `batch` and
        every row of `later` as not stored."""
        reason = f"Not stored: the database failed during the import ({type(exc).__name__}); import this row again."
        stored_ids: set[str] | None
        try:
            stored_ids = await (drafts or self._records).existing_ids(collection.id, [r.id for r in records])
        except Exception:  # noqa: BLE001 - still down: the batch is in doubt
            log.warning("CSV import into %s: could not check which rows were stored", collection.name)
            stored_ids = None
        if stored_ids is None:
            doubt = "Unknown whether stored: the database failed during the import; check before importing it again."
            result.failed.extend(RowFailure(row.row, {ROW_ERROR_KEY: [doubt]}) for row in batch)
        else:
            stored = [record for record in records if record.id in stored_ids]
            result.imported += len(stored)
            result.failed.extend(RowFailure(row.row, {ROW_ERROR_KEY: [reason]})
                                 for row, record in zip(batch, records, strict=False) if record.id not in stored_ids)
            if stored and drafts is None:
                await self._writer.emit_created(collection, stored)
        result.failed.extend(RowFailure(row.row, {ROW_ERROR_KEY: [reason]}) for row in later)

    async def _drop_missing_relations(
        self, collection: Collection, rows: list[ParsedRow], failed: list[RowFailure]
    ) -> list[ParsedRow]:
        """The rows whose relation ids all exist (one lookup per relation field); the others go to
        `failed`."""
        errors = await self._writer.relation_failures(collection, [row.values for row in rows])
        failed.extend(RowFailure(rows[index].row, row_errors) for index, row_errors in errors.items())
        return [row for index, row in enumerate(rows) if index not in errors]


RULE_ERROR_KEY = "_rule"
"""The `errors` key of a CSV row the create rule refuses."""


def _drop_refused(rows: list[ParsedRow], now: Any, permitted: Callable[[Record], bool],
                  failed: list[RowFailure]) -> list[ParsedRow]:
    """The rows whose record `permitted` accepts; the others go to `failed` under RULE_ERROR_KEY."""
    kept: list[ParsedRow] = []
    for row in rows:
        if permitted(Record(id="", created=now, updated=now, data=row.values)):
            kept.append(row)
        else:
            failed.append(RowFailure(row.row, {RULE_ERROR_KEY: ["The create rule does not allow this record."]}))
    return kept


def _parse_all(collection: Collection, content: bytes, max_rows: int,
               working: bool = False) -> tuple[list[ParsedRow], list[RowFailure]]:
    """Check the file as a whole, then parse and validate every row (`working`: as working copies, no
    field required): (valid rows, failed rows). CPU-bound: callers run it in a worker thread. Raises
    ValidationFailed (the file is refused)."""
    upload = CsvImport(collection, content, max_rows=max_rows, working=working)
    rows: list[ParsedRow] = []
    failed: list[RowFailure] = []
    for valid, invalid in upload.batches(IMPORT_BATCH_SIZE):
        rows.extend(valid)
        failed.extend(invalid)
    return rows, failed
