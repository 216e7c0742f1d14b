"""How long the embedded SecantusDB takes to build one index at 10,000 records (the automatic and declared
kinds: a relation field, a multikey relation, a number, a compound), how long an insert waits when it
arrives during a build, and an equality filter with and without an index. Three rounds.

    PYTHONPATH=. python scripts/bench/bench_index_build.py

Figures: docs/performance.md, Indexes.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from cms.runtime.embedded import start_mongodb

RECORDS = 10_000
INDEXES: list[tuple[str, list[tuple[str, int]]]] = [
    ("auto_relation_author", [("author", 1)]),
    ("auto_relation_tags", [("tags", 1)]),
    ("idx_views_1", [("views", 1)]),
    ("idx_author_1_created_-1", [("author", 1), ("created", -1)]),
]


def rows() -> list[dict[str, Any]]:
    """RECORDS documents shaped like records: a relation (200 users), a list relation, a number."""
    return [{"_id": f"r{i:05d}", "views": (i * 7919) % 100_000, "author": f"u{i % 200}",
             "tags": [f"t{i % 5}", f"t{i % 7}"], "name": f"package-{i}", "created": i, "updated": i}
            for i in range(RECORDS)]


def fill(mongo_coll: Any, documents: list[dict[str, Any]]) -> None:
    """Insert `documents` 500 at a time."""
    for start in range(0, len(documents), 500):
        mongo_coll.insert_many(documents[start:start + 500])


def build_while_writing(url: str, mongo_coll: Any) -> tuple[float, list[float]]:
    """Build `idx_views_1` while another connection inserts one document after another; the build's
    ms and each insert's ms."""
    waits: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        other = MongoClient(url)[mongo_coll.database.name][mongo_coll.name]
        i = 0
        while not stop.is_set():
            started = time.perf_counter()
            other.insert_one({"_id": f"x{i}", "views": i})
            waits.append((time.perf_counter() - started) * 1000)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.3)
    started = time.perf_counter()
    mongo_coll.create_index([("views", 1)], name="idx_views_1", background=True)
    build_ms = (time.perf_counter() - started) * 1000
    stop.set()
    thread.join()
    return build_ms, waits


def main() -> None:
    """Run the three rounds and print one line per round, then the two equality filters."""
    documents = rows()
    with start_mongodb(Path(tempfile.mkdtemp()) / "db") as server:
        db = MongoClient(server.url).bench
        for round_ in range(3):
            mongo_coll = db[f"records{round_}"]
            fill(mongo_coll, documents)
            built = []
            for name, keys in INDEXES:
                started = time.perf_counter()
                mongo_coll.create_index(keys, name=name, background=True)
                built.append(f"{name} {(time.perf_counter() - started) * 1000:,.0f} ms")
            written = db[f"writes{round_}"]
            fill(written, documents)
            build_ms, waits = build_while_writing(server.url, written)
            print(f"round {round_ + 1}: {', '.join(built)}; idx_views_1 during inserts {build_ms:,.0f} ms, "
                  f"{len(waits)} inserts, longest {max(waits):,.0f} ms, median {statistics.median(waits):.1f} ms")
        indexed = db.records0
        for label, query in (("indexed (author)", {"author": "u7"}), ("no index (name)", {"name": "package-7"})):
            started = time.perf_counter()
            found = list(indexed.find(query))
            print(f"equality {label}: {len(found)} found in {(time.perf_counter() - started) * 1000:,.1f} ms")


if __name__ == "__main__":
    main()
