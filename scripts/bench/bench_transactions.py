"""What a transaction costs on the embedded SecantusDB, without the CMS: the ceiling of `POST /api/v1/batch`.

Usage:

    python scripts/bench/bench_transactions.py [--duration 4] [--concurrency 64] [--rounds 2]

Starts a SecantusDB (as `cms serve` does: `cms.runtime.embedded.start_mongodb`, fresh data dir) and,
for each shape, runs `--concurrency` asyncio tasks on one pymongo client that repeat it for
`--duration` seconds, then prints operations and documents per second and the median latency:

- `insert_one`: one document, no transaction (a single create without group commit);
- `insert_many(10)`: ten documents in one insert, no transaction (a group of the group commit);
- `txn: insert_many(10)`: one transaction holding one insert of ten documents, then its commit;
- `txn: find + insert_many(10)`: what a batch of 10 creates into one collection with a relation field
  sends (one relation look-up, one ordered insert, the commit);
- `find, txn: insert_many(10)`: the same with the look-up outside the transaction;
- `txn: 10 x (find + insert_one)`: what such a batch sent before runs of creates were one insert.

SecantusDB 0.7.0b3 resolves every statement of a transaction, and its commit, under one process-wide
lock (`TransactionRegistry.for_statement` / `.commit`), which also takes the lock of every open
transaction of every session in turn (`_prune_locked`) and so waits for their statements in
flight: transactions of concurrent sessions run one statement at a time. The figures show what that
costs per statement.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's `cms`
from pymongo import AsyncMongoClient  # noqa: E402

from cms.runtime.embedded import start_mongodb  # noqa: E402

Shape = Callable[[Any, Any], Awaitable[int]]


def docs(count: int) -> list[dict[str, Any]]:
    """`count` new small documents."""
    return [{"_id": uuid.uuid4().hex, "title": "bench"} for _ in range(count)]


async def insert_one(client: Any, coll: Any) -> int:
    """One document, no transaction."""
    await coll.insert_one(docs(1)[0])
    return 1


async def insert_many(client: Any, coll: Any) -> int:
    """Ten documents in one insert, no transaction."""
    await coll.insert_many(docs(10))
    return 10


async def txn_insert_many(client: Any, coll: Any) -> int:
    """A transaction: one insert of ten documents, the commit."""
    async with client.start_session() as session:
        await session.start_transaction()
        await coll.insert_many(docs(10), session=session)
        await session.commit_transaction()
    return 10


async def txn_find_insert_many(client: Any, coll: Any) -> int:
    """A transaction: one find, one insert of ten documents, the commit (a batch of 10 creates now)."""
    async with client.start_session() as session:
        await session.start_transaction()
        await coll.find_one({"_id": {"$in": ["none"]}}, session=session)
        await coll.insert_many(docs(10), session=session)
        await session.commit_transaction()
    return 10


async def find_then_txn_insert_many(client: Any, coll: Any) -> int:
    """One find outside, then `txn_insert_many`."""
    await coll.find_one({"_id": {"$in": ["none"]}})
    return await txn_insert_many(client, coll)


async def txn_ten_inserts(client: Any, coll: Any) -> int:
    """A transaction: ten finds and ten single inserts, the commit (a batch of 10 creates before)."""
    async with client.start_session() as session:
        await session.start_transaction()
        for document in docs(10):
            await coll.find_one({"_id": {"$in": ["none"]}}, session=session)
            await coll.insert_one(document, session=session)
        await session.commit_transaction()
    return 10


SHAPES: list[tuple[str, Shape]] = [
    ("insert_one", insert_one),
    ("insert_many(10)", insert_many),
    ("txn: insert_many(10)", txn_insert_many),
    ("txn: find + insert_many(10)", txn_find_insert_many),
    ("find, txn: insert_many(10)", find_then_txn_insert_many),
    ("txn: 10 x (find + insert_one)", txn_ten_inserts),
]


async def measure(url: str, name: str, shape: Shape, concurrency: int, duration: float) -> tuple[float, float, float]:
    """(operations/s, documents/s, p50 ms) of `shape` repeated by `concurrency` tasks."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url, maxPoolSize=concurrency + 8)
    coll = client["bench_transactions"][name.replace(" ", "_").replace(":", "").replace("(", "").replace(")", "")]
    await coll.update_one({"_id": "warm"}, {"$set": {"n": 1}}, upsert=True)  # the collection exists
    latencies: list[float] = []
    documents = 0
    stop = time.monotonic() + duration

    async def worker() -> None:
        nonlocal documents
        while time.monotonic() < stop:
            started = time.monotonic()
            stored = await shape(client, coll)
            documents += stored
            latencies.append(time.monotonic() - started)

    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - began
    await client.close()
    return len(latencies) / elapsed, documents / elapsed, statistics.median(latencies) * 1000


async def main_async(args: argparse.Namespace) -> None:
    """Start the server, measure every shape, print the table, stop the server."""
    server = start_mongodb(Path(tempfile.mkdtemp(prefix="bench_transactions_")) / "db")
    try:
        print(f"SecantusDB, {args.concurrency} concurrent tasks, {args.duration:g} s per shape and round")
        print("| shape | ops/s | docs/s | p50 ms |\n|---|---:|---:|---:|")
        for name, shape in SHAPES:
            rounds = [await measure(server.url, name, shape, args.concurrency, args.duration)
                      for _ in range(args.rounds)]
            ops, documents, p50 = (statistics.median(values) for values in zip(*rounds, strict=True))
            print(f"| {name} | {ops:,.0f} | {documents:,.0f} | {p50:,.1f} |")
    finally:
        server.stop()


def main() -> None:
    """Parse the command line and print the table (median of `--rounds`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per shape and round")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent tasks")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per shape (the median is printed)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
