"""Benchmark backup and restore on a fresh database of an embedded server.

Usage:

    python scripts/bench/bench_backups.py [--records 100000] [--large-docs 10] [--large-mib 8]
        [--data-dir DIR] [--keep]

It starts SecantusDB and redis-server as child processes in a fresh data dir (a temporary one
unless `--data-dir`), opens the services in this process (as `cms backup` does), creates a base
collection `bench` and loads `--records` records into it (straight through the driver, 1,000 per
insert, so loading is not what is timed), plus `--large-docs` GridFS-style chunk documents of
`--large-mib` MiB of random (incompressible) bytes each. Then it times:

1. backup: `BackupService.create` (dump, gzip, tar, fsync, rename);
2. restore: `BackupService.restore` of that archive after the records were changed (verify the
   whole archive, load into staging collections, build indexes, switch), and checks that the
   database holds the backup's documents again.

It prints a Markdown table: seconds, documents per second, archive size, and the peak resident
memory of this process (before → peak) and of it plus its children (SecantusDB, redis-server),
sampled every 50 ms in a thread.

Exit status: 0 on success, 1 when a step fails, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_records import MemorySampler, mib  # a sibling script

from cms import __version__
from cms.clock import new_id, utcnow
from cms.config import Config
from cms.models import Principal
from cms.runtime.embedded import start_mongodb, start_redis
from cms.store.client import open_client
from cms.store.documents import records_mongo_name
from cms.wiring import open_services

INSERT_BATCH = 1000
OPERATOR = Principal(kind="admin_user", user_id="bench", role="admin")


async def load(config: Config, collection_id: str, records: int, large_docs: int, large_mib: int) -> None:
    """Insert the records and the large documents through a driver client of our own."""
    assert config.mongodb_url
    client = open_client(config.mongodb_url)
    try:
        db = client[config.mongodb_db]
        mongo_coll = db[records_mongo_name(collection_id)]
        now = utcnow()
        for start in range(0, records, INSERT_BATCH):
            batch = [{"_id": new_id(), "created": now, "updated": now, "title": f"Record {n}",
                      "body": f"Body of record {n}, " + "lorem ipsum dolor sit amet " * 4, "n": n}
                     for n in range(start, min(start + INSERT_BATCH, records))]
            await mongo_coll.insert_many(batch)
            if (start // INSERT_BATCH) % 20 == 0:
                print(f"loading: {start + len(batch):,} of {records:,} records", file=sys.stderr)
        for n in range(large_docs):
            file_id = new_id()
            await db["fs.files"].insert_one({"_id": file_id, "length": large_mib * 2**20, "filename": f"f{n}.bin"})
            await db["fs.chunks"].insert_one({"files_id": file_id, "n": 0, "data": os.urandom(large_mib * 2**20)})
    finally:
        await client.close()


async def count(config: Config, collection_id: str) -> int:
    assert config.mongodb_url
    client = open_client(config.mongodb_url)
    try:
        return await client[config.mongodb_db][records_mongo_name(collection_id)].count_documents({})
    finally:
        await client.close()


async def run(args: argparse.Namespace, data_dir: Path) -> int:
    sampler = MemorySampler(os.getpid())
    with start_mongodb(data_dir / "db") as mongodb, start_redis(data_dir / "redis") as redis:
        config = Config(secret_key="bench-" + "x" * 40, mongodb_url=mongodb.url, redis_url=redis.url,
                        mongodb_db="bench", data_dir=data_dir, embedded=True)
        async with open_services(config) as services:
            collection = await services.collections.create(
                OPERATOR, "bench", "base",
                [{"name": "title", "type": "text"}, {"name": "body", "type": "editor"}, {"name": "n", "type": "number"}])
            started = time.perf_counter()
            await load(config, collection.id, args.records, args.large_docs, args.large_mib)
            load_s = time.perf_counter() - started
            print(f"# Backup benchmark: cms {__version__}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            print(f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
                  f"{os.cpu_count()} CPUs; embedded SecantusDB; {args.records:,} records + {args.large_docs} "
                  f"documents of {args.large_mib} MiB random bytes (loaded in {load_s:,.1f} s)\n")
            rows: list[tuple[str, float, int, str]] = []
            sampler.start()
            try:
                print("backing up ...", file=sys.stderr)
                with sampler.phase("backup"):
                    started = time.perf_counter()
                    backup = await services.backups.create(None)
                    rows.append(("backup", time.perf_counter() - started, 0, f"{backup.size / 2**20:,.1f}"))
                await load(config, new_id(), 1000, 0, 0)  # a change for the restore to undo
                print("restoring ...", file=sys.stderr)
                with sampler.phase("restore"):
                    started = time.perf_counter()
                    result = await services.backups.restore(None, backup.filename)
                    rows.append(("restore", time.perf_counter() - started, result.documents,
                                 f"{backup.size / 2**20:,.1f}"))
                rows[0] = ("backup", rows[0][1], result.documents, rows[0][3])  # the same archive's documents
            finally:
                sampler.stop()
            restored = await count(config, collection.id)
            if restored != args.records:
                print(f"error: {restored:,} records after the restore, expected {args.records:,}", file=sys.stderr)
                return 1
    print("| operation | seconds | documents | documents/s | archive MiB | RSS this process MiB: before → peak "
          "| peak RSS with children MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, seconds, docs, size in rows:
        own, tree = sampler.peaks.get(label, (0, 0))
        before = sampler.starts.get(label, 0)
        print(f"| {label} | {seconds:,.1f} | {docs:,} | {docs / seconds:,.0f} | {size} | "
              f"{mib(before)} → {mib(own)} | {mib(tree)} |")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Time backup and restore on an embedded server.")
    parser.add_argument("--records", type=int, default=100_000, help="records to load (default: %(default)s)")
    parser.add_argument("--large-docs", type=int, default=10,
                        help="large binary documents to add (default: %(default)s)")
    parser.add_argument("--large-mib", type=int, default=8, help="MiB per large document, at most 15 "
                        "(default: %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a fresh temporary directory")
    parser.add_argument("--keep", action="store_true", help="keep the data dir (servers' data, the backup)")
    args = parser.parse_args(argv)
    if args.records < 1 or args.large_docs < 0 or not 1 <= args.large_mib <= 15:
        parser.error("--records must be at least 1, --large-docs at least 0, --large-mib 1..15")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir: Any = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-backups-"))
    try:
        return asyncio.run(run(args, data_dir))
    finally:
        if not args.keep and args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
