"""Repository of files: GridFS (`fs.files`, `fs.chunks`), read through pymongo's AsyncGridFSBucket.

The only module that imports `gridfs`. Every replica reads every file from MongoDB. Uploads write
the GridFS layout themselves (`FileUpload`, to bound memory); a file document (`fs.files`) is
written only when its upload is complete, so a reader never sees part of a file, and the chunks of
an upload that fails are deleted (`FileUpload.abort`). Our fields live under
`metadata`: `content_type`, `collection_id`, `collection`, `record_id`, `field` (the file field it
was uploaded for, when one), `sha256`, `created`.

Thumbnails are GridFS files too, under ids of their own (`<file id>.<size>.<format>`), with
`metadata.thumb_of` naming their file (and the file's `record_id` and `collection_id`, so they go
with the record and the collection as the file does); `delete` removes a file's thumbnails with it.
They are never served as files (`open` and `get` do not see them).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import Any

from bson.int64 import Int64
from gridfs import AsyncGridFSBucket, NoFile
from gridfs.asynchronous.grid_file import AsyncGridOut
from gridfs.errors import CorruptGridFile
from pymongo.asynchronous.collection import AsyncCollection

from cms.errors import AlreadyExists
from cms.models import StoredFile
from cms.store.bulk import chunks
from cms.store.client import Database
from cms.store.errors import translate_errors

log = logging.getLogger("cms.store")

BUCKET = "fs"
CHUNK_BYTES = 255 * 1024
"""GridFS chunk size (the driver's default). On the embedded server 1 MiB chunks read about 10%
faster and 4 MiB ones slower; the default keeps a chunk well under any server's message limits."""
WRITE_BATCH_CHUNKS = 2
"""Chunks per insert while uploading (510 KiB). On the embedded server a 50 MiB upload writes at
about 120 MiB/s with 1 chunk per insert, 155 with 2, 180 with 4, 130 with 8; 2 keeps the memory of
an upload small and puts chunks in the database early (a 413 at 1 MiB then has chunks to delete)."""
RANGE_BATCH_CHUNKS = 8
"""Chunks per reply when reading part of a file (about 2 MiB)."""


def _file_from_document(doc: dict[str, Any]) -> StoredFile | None:
    """A `fs.files` document as a StoredFile; None for a GridFS file the service did not write
    (no `metadata` of ours, e.g. restored from elsewhere)."""
    meta = doc.get("metadata") or {}
    if "thumb_of" in meta:
        return None
    try:
        return StoredFile(
            id=str(doc["_id"]), filename=str(doc.get("filename") or "file"),
            content_type=str(meta["content_type"]), size=int(doc["length"]),
            collection_id=str(meta["collection_id"]), collection=str(meta.get("collection", "")),
            record_id=str(meta["record_id"]), sha256=str(meta["sha256"]), created=meta["created"],
            field=None if meta.get("field") is None else str(meta["field"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


class FileUpload:
    """One upload in progress, written in the GridFS layout that AsyncGridFSBucket reads: chunks of
    CHUNK_BYTES (`files_id`, `n`, `data`) are inserted WRITE_BATCH_CHUNKS at a time as the bytes
    arrive, so an upload holds under 1 MiB in memory whatever its size (the driver's own writer
    buffers up to 48 MB, a whole file under the default limit); `finish` writes the `fs.files`
    document, and only then is the file visible; `abort` deletes whatever was written.
    Not safe to share between tasks."""

    def __init__(self, db: Database, file_id: str, filename: str) -> None:
        self._files = db[f"{BUCKET}.files"]
        self._chunks = db[f"{BUCKET}.chunks"]
        self._file_id = file_id
        self._filename = filename
        self._buffer = bytearray()
        self._pending: list[dict[str, Any]] = []
        self._next_n = 0
        self._length = 0
        self._done = False

    async def write(self, data: bytes) -> None:
        """Append `data` to the file (full chunks are sent in batches)."""
        self._buffer += data
        while len(self._buffer) >= CHUNK_BYTES:
            self._add_chunk(bytes(self._buffer[:CHUNK_BYTES]))
            del self._buffer[:CHUNK_BYTES]
        if len(self._pending) >= WRITE_BATCH_CHUNKS:
            await self._flush()

    async def finish(self, file: StoredFile) -> None:
        """Write the last chunk and the file document, with `file`'s metadata (its `id`, `filename`
        and `size` are the upload's own). After this the file is visible to readers."""
        metadata: dict[str, Any] = {
            "content_type": file.content_type, "collection_id": file.collection_id, "collection": file.collection,
            "record_id": file.record_id, "sha256": file.sha256, "created": file.created}
        if file.field is not None:
            metadata["field"] = file.field
        await self.finish_with(metadata, file.created)

    async def finish_with(self, metadata: dict[str, Any], created: datetime) -> None:
        """Write the last chunk and the file document with `metadata` as is (a thumbnail's). Raises
        AlreadyExists when a file of this id exists (its chunks are left to the caller's `abort`)."""
        if self._buffer:
            self._add_chunk(bytes(self._buffer))
            self._buffer.clear()
        await self._flush()
        async with translate_errors("file"):
            await self._files.insert_one({
                "_id": self._file_id, "length": Int64(self._length), "chunkSize": CHUNK_BYTES,
                "uploadDate": created, "filename": self._filename, "metadata": metadata,
            })
        self._done = True

    async def abort(self) -> None:
        """Delete the chunks written so far. Never raises: a failure is logged (chunks without a
        file document are never served)."""
        if self._done:
            return
        self._done = True
        self._pending.clear()
        try:
            await self._chunks.delete_many({"files_id": self._file_id})
            await self._files.delete_one({"_id": self._file_id})
        except Exception:
            log.exception("could not delete the chunks of the aborted upload %s", self._file_id)

    def _add_chunk(self, data: bytes) -> None:
        self._pending.append({"files_id": self._file_id, "n": self._next_n, "data": data})
        self._next_n += 1
        self._length += len(data)

    async def _flush(self) -> None:
        if not self._pending:
            return
        async with translate_errors("file"):
            await self._chunks.insert_many(self._pending, ordered=True)
        self._pending = []


class FileReader:
    """An opened file: `file` describes it and `chunks` streams a byte range of it."""

    def __init__(self, file: StoredFile, grid_out: AsyncGridOut, chunks: AsyncCollection[dict[str, Any]]) -> None:
        self.file = file
        self._grid_out = grid_out
        self._chunks = chunks

    async def chunks(self, start: int, end: int) -> AsyncGenerator[bytes, None]:
        """The bytes `start` (inclusive) to `end` (exclusive), in pieces of at most one GridFS chunk
        (255 KiB). The whole file is read through the driver's GridOut; a part of it with one query
        for just the chunks it covers (the GridOut cursor would fetch a first batch of up to 16 MiB
        past the start, whatever the range). Raises gridfs' CorruptGridFile when chunks are missing
        or the wrong size (e.g. the file was deleted while it was being read)."""
        if start == 0 and end == self.file.size:
            pieces = self._whole()
        else:
            pieces = self._part(start, end)
        try:
            async for piece in pieces:
                yield piece
        finally:
            await pieces.aclose()
            await self._grid_out.close()

    async def close(self) -> None:
        """Release the file without reading it."""
        await self._grid_out.close()

    async def _whole(self) -> AsyncGenerator[bytes, None]:
        while data := await self._grid_out.readchunk():
            yield data

    async def _part(self, start: int, end: int) -> AsyncGenerator[bytes, None]:
        if start >= end:
            return
        chunk_size = int(self._grid_out.chunk_size)
        first, last = start // chunk_size, (end - 1) // chunk_size
        expected = first
        query = {"files_id": self.file.id, "n": {"$gte": first, "$lte": last}}
        async with translate_errors("file"):
            cursor = self._chunks.find(query, sort=[("n", 1)], batch_size=RANGE_BATCH_CHUNKS)
            try:
                async for doc in cursor:
                    data = bytes(doc["data"])
                    offset = expected * chunk_size
                    if doc["n"] != expected or len(data) != min(chunk_size, self.file.size - offset):
                        raise CorruptGridFile(f"file {self.file.id}: chunk {doc['n']} is not chunk {expected} "
                                              "of the expected size")
                    yield data[max(start - offset, 0):end - offset]
                    expected += 1
            finally:
                await cursor.close()
        if expected != last + 1:
            raise CorruptGridFile(f"file {self.file.id}: chunk {expected} is missing")


class FileRepository:
    """Files in the GridFS bucket `fs`; ids are the service's UUID strings."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._bucket = AsyncGridFSBucket(db, bucket_name=BUCKET, chunk_size_bytes=CHUNK_BYTES)
        self._files = db[f"{BUCKET}.files"]
        self._chunks = db[f"{BUCKET}.chunks"]

    async def ensure_indexes(self) -> None:
        """GridFS's own indexes (so uploads need not create them) plus the look-ups of clean-up:
        by record id and by collection id."""
        await self._files.create_index([("filename", 1), ("uploadDate", 1)])
        await self._chunks.create_index([("files_id", 1), ("n", 1)], unique=True)
        await self._files.create_index("metadata.record_id")
        await self._files.create_index("metadata.collection_id")
        await self._files.create_index("metadata.thumb_of", sparse=True)

    def open_upload(self, file_id: str, filename: str) -> FileUpload:
        """Start writing the file `file_id` (nothing is sent until a batch of chunks fills)."""
        return FileUpload(self._db, file_id, filename)

    async def open(self, file_id: str) -> FileReader | None:
        """The file `file_id` opened for reading (one look-up of its document), or None when there
        is no such file written by the service."""
        async with translate_errors("file"):
            try:
                grid_out = await self._bucket.open_download_stream(file_id)
            except NoFile:
                return None
        file = _file_from_document({"_id": file_id, "filename": grid_out.filename, "length": grid_out.length,
                                    "metadata": grid_out.metadata})
        if file is None:
            await grid_out.close()
            return None
        return FileReader(file, grid_out, self._chunks)

    async def get(self, file_id: str) -> StoredFile | None:
        """The description of file `file_id`, or None."""
        async with translate_errors("file"):
            doc = await self._files.find_one({"_id": file_id})
        return None if doc is None else _file_from_document(doc)

    async def delete(self, file_id: str) -> bool:
        """Delete one file (its document first, so readers stop finding it, then its chunks) and
        its thumbnails. Returns whether the document was there."""
        async with translate_errors("file"):
            deleted = (await self._files.delete_one({"_id": file_id})).deleted_count
            await self._chunks.delete_many({"files_id": file_id})
        await self._delete_matching({"metadata.thumb_of": file_id})
        return deleted == 1

    async def get_many(self, file_ids: Sequence[str]) -> dict[str, StoredFile]:
        """The descriptions of the files of `file_ids` that exist, by id (one query per 1,000 ids)."""
        found: dict[str, StoredFile] = {}
        async with translate_errors("file"):
            for batch in chunks(file_ids):
                async for doc in self._files.find({"_id": {"$in": batch}}):
                    file = _file_from_document(doc)
                    if file is not None:
                        found[file.id] = file
        return found

    async def owners(self, file_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """`{file id: (record id, field or None)}` for the files of `file_ids` that exist
        (thumbnails are not files: left out)."""
        owners: dict[str, tuple[str, str | None]] = {}
        async with translate_errors("file"):
            for batch in chunks(file_ids):
                async for doc in self._files.find({"_id": {"$in": batch}}, {"metadata": 1}):
                    meta = doc.get("metadata") or {}
                    if "thumb_of" not in meta and "record_id" in meta:
                        field = meta.get("field")
                        owners[str(doc["_id"])] = (str(meta["record_id"]), None if field is None else str(field))
        return owners

    async def read_all(self, file_id: str, size: int) -> bytes | None:
        """The whole content of file `file_id` of `size` bytes (one query for its chunks), or None
        when its chunks are not all there (a file being written or deleted)."""
        async with translate_errors("file"):
            pieces = [bytes(doc["data"]) async for doc in
                      self._chunks.find({"files_id": file_id}, {"data": 1, "n": 1}, sort=[("n", 1)])]
        data = b"".join(pieces)
        return data if len(data) == size else None

    async def read_thumb(self, thumb_id: str) -> bytes | None:
        """The bytes of the thumbnail `thumb_id`, or None when it has not been stored (whole)."""
        async with translate_errors("file"):
            doc = await self._files.find_one({"_id": thumb_id}, {"length": 1})
        if doc is None:
            return None
        return await self.read_all(thumb_id, int(doc["length"]))

    async def store_thumb(self, thumb_id: str, source: StoredFile, content_type: str, data: bytes,
                          created: datetime) -> bool:
        """Store the thumbnail `thumb_id` of file `source`; False when it exists already (another
        replica stored it first). The caller holds the thumbnail's lock (`Thumbnails`): chunks of
        this id without a document are a dead writer's, and are deleted first."""
        async with translate_errors("file"):
            if await self._files.find_one({"_id": thumb_id}, {"_id": 1}) is not None:
                return False
            await self._chunks.delete_many({"files_id": thumb_id})
        upload = FileUpload(self._db, thumb_id, source.filename)
        try:
            await upload.write(data)
            await upload.finish_with({"thumb_of": source.id, "record_id": source.record_id,
                                      "collection_id": source.collection_id, "content_type": content_type,
                                      "created": created}, created)
        except AlreadyExists:
            return False  # a writer without the lock (Redis away) got there first: its chunks stay
        except BaseException:
            await upload.abort()
            raise
        return True

    async def delete_for_records(self, record_ids: Sequence[str]) -> int:
        """Delete every file attached to one of `record_ids`; returns how many files."""
        deleted = 0
        for batch in chunks(record_ids):
            deleted += await self._delete_matching({"metadata.record_id": {"$in": batch}})
        return deleted

    async def delete_for_collection(self, collection_id: str) -> int:
        """Delete every file attached to a record of the collection; returns how many files."""
        return await self._delete_matching({"metadata.collection_id": collection_id})

    async def _delete_matching(self, query: dict[str, Any]) -> int:
        async with translate_errors("file"):
            ids = [doc["_id"] async for doc in self._files.find(query, {"_id": 1})]
            deleted = 0
            for batch in chunks(ids):
                deleted += (await self._files.delete_many({"_id": {"$in": batch}})).deleted_count
                await self._chunks.delete_many({"files_id": {"$in": batch}})
        return deleted
