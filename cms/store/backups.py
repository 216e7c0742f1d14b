"""Dump and restore of the whole database in mongodump's layout (decisions.md, Backups).

The only code of the backup feature that knows BSON and the driver:

- `DumpRepository.collections()` / `.documents(name)` read what a dump holds: per collection its
  options and index specs (`<collection>.metadata.json`, mongodump's Extended JSON:
  `{"options", "indexes", "uuid", "collectionName", "type"}`) and its documents as raw BSON bytes,
  concatenated (`<collection>.bson`), never decoded.
- `iter_documents`, `check_document` and `parse_metadata` read an archive's members back and
  raise BadRequest for anything malformed, so an archive can be verified before anything changes.
- `DumpRepository.restore()` loads every collection into a staging collection, builds its indexes,
  and only then renames the staging collections over the live ones and drops the collections the
  dump does not hold: a failure before that switch leaves the data untouched.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, cast

import bson
from bson import json_util
from bson.codec_options import CodecOptions, DatetimeConversion
from bson.raw_bson import RawBSONDocument
from pymongo.asynchronous.collection import AsyncCollection

from cms.errors import BadRequest, InternalError
from cms.store.client import Database
from cms.store.documents import RECORDS_PREFIX

log = logging.getLogger("cms.store")

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024 + 16 * 1024
"""Largest BSON document accepted from an archive: MongoDB's 16 MiB plus the server's headroom."""
MAX_METADATA_BYTES = 16 * 1024 * 1024
"""Largest `<collection>.metadata.json` accepted from an archive."""
CHUNK_BYTES = 1024 * 1024
"""`documents()` yields raw BSON in chunks of about this many bytes."""
FIND_BATCH = 1000
STAGING_PREFIX = "_restore."
"""Collections named so are a restore in progress (or a crashed one): never dumped, dropped by
the next restore."""
COLLECTION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")
"""Collection names a dump may hold: safe as a file name, never `system.*` or staging."""
RAW: CodecOptions[RawBSONDocument] = CodecOptions(document_class=RawBSONDocument)
DECODE: CodecOptions[dict[str, Any]] = CodecOptions(datetime_conversion=DatetimeConversion.DATETIME_AUTO)
"""Validation decodes every value; dates outside Python's range stay valid (DatetimeMS)."""


@dataclass(frozen=True)
class CollectionDump:
    """One collection as mongodump describes it: `name`, the `options` it was created with ({} for
    a plain collection) and its `indexes` (listIndexes specs, `_id_` included)."""

    name: str
    options: dict[str, Any]
    indexes: list[dict[str, Any]]


def valid_collection_name(name: str) -> bool:
    """Whether `name` may appear in a dump: COLLECTION_NAME, not `system.*`, not staging."""
    return (COLLECTION_NAME.fullmatch(name) is not None and not name.startswith("system.")
            and not name.startswith(STAGING_PREFIX))


def metadata_json(dump: CollectionDump) -> bytes:
    """The `<collection>.metadata.json` of `dump`: canonical Extended JSON, UTF-8, as mongodump
    writes it (`uuid` left empty, so mongorestore gives the collection a new one)."""
    document = {"options": dump.options, "indexes": dump.indexes, "uuid": "",
                "collectionName": dump.name, "type": "collection"}
    return json_util.dumps(document, json_options=json_util.CANONICAL_JSON_OPTIONS).encode()


def parse_metadata(raw: bytes, name: str) -> CollectionDump:
    """Parse a `<name>.metadata.json` (Extended JSON, canonical or relaxed). Raises BadRequest when
    it is not a JSON object, `indexes` is not a list of specs with `key` and `name`, `options` is
    not an object, `type` is other than "collection", or `collectionName` differs from `name`."""
    what = f"{name}.metadata.json"
    if len(raw) > MAX_METADATA_BYTES:
        raise BadRequest(f"{what} is larger than {MAX_METADATA_BYTES} bytes")
    try:
        document = json_util.loads(raw.decode("utf-8"))
    except (ValueError, TypeError, bson.errors.BSONError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadRequest(f"{what} is not a JSON object")
    indexes = document.get("indexes", [])
    options = document.get("options", {})
    if not isinstance(indexes, list) or not all(
        isinstance(spec, dict) and isinstance(spec.get("key"), dict) and isinstance(spec.get("name"), str)
        for spec in indexes
    ):
        raise BadRequest(f"{what}: 'indexes' must be a list of index specs with 'key' and 'name'")
    if not isinstance(options, dict):
        raise BadRequest(f"{what}: 'options' must be an object")
    if document.get("type", "collection") != "collection":
        raise BadRequest(f"{what}: only collections can be restored, not {document.get('type')!r}")
    if document.get("collectionName", name) != name:
        raise BadRequest(f"{what} describes collection {document.get('collectionName')!r}")
    return CollectionDump(name=name, options=dict(options), indexes=[dict(spec) for spec in indexes])


def iter_documents(stream: IO[bytes], what: str) -> Iterator[bytes]:
    """The raw BSON documents of a `.bson` stream (concatenated documents), one `bytes` each,
    read with bounded memory. Raises BadRequest for a length prefix out of range (5 bytes to
    MAX_DOCUMENT_BYTES) or a stream that ends inside a document. Does not decode the contents
    (see `check_document`)."""
    offset = 0
    while True:
        head = stream.read(4)
        if not head:
            return
        if len(head) < 4:
            raise BadRequest(f"{what} is truncated at byte {offset}")
        size = int.from_bytes(head, "little", signed=True)
        if not 5 <= size <= MAX_DOCUMENT_BYTES:
            raise BadRequest(f"{what} holds a corrupt BSON document at byte {offset} (length {size})")
        body = stream.read(size - 4)
        if len(body) < size - 4:
            raise BadRequest(f"{what} is truncated at byte {offset}")
        offset += size
        yield head + body


def check_document(raw: bytes, what: str) -> None:
    """Decode one raw BSON document completely (every value, UTF-8 strings included). Raises
    BadRequest naming `what` when it does not decode."""
    try:
        bson.decode(raw, DECODE)
    except Exception as exc:  # noqa: BLE001 - InvalidBSON, and decoders' own errors for malformed values
        raise BadRequest(f"{what} holds a corrupt BSON document: {exc}") from None


def staging_started(name: str) -> float | None:
    """When the restore that made the staging collection `name` started (Unix seconds), or None
    for a name that is not a staging collection's or carries no start (an older version's)."""
    if not name.startswith(STAGING_PREFIX):
        return None
    started, dash, _ = name.removeprefix(STAGING_PREFIX).partition("-")
    return float(started) if dash and started.isdigit() else None


def _index_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A listIndexes spec as a createIndexes spec: without `ns` (legacy, refused by new servers)."""
    return {k: v for k, v in spec.items() if k != "ns"}


class DumpRepository:
    """Reads and replaces every collection of one database (the service's), for backups."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @property
    def database_name(self) -> str:
        """The name of the database, the root folder of a dump."""
        return self._db.name

    async def collections(self) -> list[CollectionDump]:
        """Every collection of the database except `system.*` and staging ones, by name, with its
        options and index specs. Raises InternalError for a collection whose name cannot be a
        file name in a dump (this service never creates one)."""
        dumps = []
        async for info in await self._db.list_collections():
            name = info["name"]
            if info.get("type", "collection") != "collection" or name.startswith(("system.", STAGING_PREFIX)):
                continue
            if not valid_collection_name(name):
                raise InternalError(f"Collection {name!r} cannot be backed up: unsupported name")
            indexes = [dict(spec) async for spec in await self._db[name].list_indexes()]
            dumps.append(CollectionDump(name=name, options=dict(info.get("options") or {}), indexes=indexes))
        return sorted(dumps, key=lambda dump: dump.name)

    async def estimated_count(self, name: str) -> int:
        """About how many documents collection `name` holds (from metadata, no scan)."""
        return await self._db[name].estimated_document_count()

    async def documents(self, name: str) -> AsyncIterator[tuple[bytes, int]]:
        """The documents of collection `name` in natural order, as raw BSON bytes, never decoded:
        yields (chunk of concatenated documents of about CHUNK_BYTES, documents in it)."""
        mongo_coll = cast("AsyncCollection[RawBSONDocument]", self._db.get_collection(name, codec_options=RAW))
        parts: list[bytes] = []
        size = 0
        async for document in mongo_coll.find({}, batch_size=FIND_BATCH):
            raw = bytes(document.raw)  # the same object when it is bytes already
            parts.append(raw)
            size += len(raw)
            if size >= CHUNK_BYTES:
                yield b"".join(parts), len(parts)
                parts, size = [], 0
        if parts:
            yield b"".join(parts), len(parts)

    async def restore(self, dumps: Mapping[str, CollectionDump],
                      batches: AsyncIterator[tuple[str, list[bytes]]], *,
                      switched: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Make the database hold exactly `dumps`, with the documents of `batches`.

        `batches` yields (collection name, raw BSON documents), every name one of `dumps`; the
        documents must already be verified (`check_document`). Staging collections left by an
        earlier restore are dropped first. Each collection is then built under a staging name
        (STAGING_PREFIX + the start in Unix seconds + "-" + a restore id + "." + name; see
        `staging_started`) with its options, documents and indexes; only when all are complete
        are they renamed over the live collections and every other collection (but `system.*` and
        staging collections) dropped. `switched` is awaited between the renames and the drops (the
        backup's data is live, the rest not yet dropped); when it returns False (the caches'
        epochs could not be moved), records collections are not dropped but left to the orphan
        sweep (`CollectionService.sweep_orphans`), as a create that raced the restore must find
        them gone only after the epoch moved. Until that switch a failure (including an error
        raised by `batches`) drops the staging collections and leaves the data as it was; the
        switch itself is shielded from cancellation. Driver errors propagate."""
        await self._drop_staging(STAGING_PREFIX)
        prefix = f"{STAGING_PREFIX}{int(time.time())}-{uuid.uuid4().hex[:8]}."
        try:
            for dump in dumps.values():
                await self._db.create_collection(prefix + dump.name, **dump.options)
            raw_db = self._db.with_options(codec_options=RAW)
            async for name, documents in batches:
                if documents:
                    await raw_db[prefix + name].insert_many([RawBSONDocument(raw) for raw in documents])
            for dump in dumps.values():
                specs = [_index_options(spec) for spec in dump.indexes if spec.get("name") != "_id_"]
                if specs:
                    await self._db.command("createIndexes", prefix + dump.name, indexes=specs)
        except BaseException:
            await asyncio.shield(self._drop_staging(prefix))
            raise
        await asyncio.shield(self._switch(prefix, set(dumps), switched))

    async def _switch(self, prefix: str, names: set[str], switched: Callable[[], Awaitable[bool]] | None) -> None:
        admin = self._db.client.admin
        db = self._db.name
        for name in sorted(names):
            await admin.command("renameCollection", f"{db}.{prefix}{name}", to=f"{db}.{name}", dropTarget=True)
        drop_records = switched is None or await switched()
        for name in await self._db.list_collection_names():
            if name in names or name.startswith(("system.", STAGING_PREFIX)):
                continue
            if name.startswith(RECORDS_PREFIX) and not drop_records:
                log.warning("restore: %s is left to the orphan sweep (the catalog epoch could not be moved)", name)
                continue
            await self._db.drop_collection(name)
        log.info("restored %d collections into database %s", len(names), db)

    async def _drop_staging(self, prefix: str) -> None:
        for name in await self._db.list_collection_names():
            if name.startswith(prefix):
                await self._db.drop_collection(name)
