"""Which query shapes the embedded SecantusDB serves from an index and which it still scans (issue 38,
item 4): each shape the service sends (a list page, a result set's ids, a back-relation, a count, a
search) on 20,000 record-shaped documents, timed and explained, with the service's indexes and without
them (a twin collection with only `_id_` and `created_id`).

    PYTHONPATH=. python scripts/bench/bench_query_shapes.py [--records 20000] [--repeat 3]

Prints a Markdown table: per shape the plan (`explain`, verbosity `executionStats`: the stages, index,
keys and documents examined, returned) and the median ms of `--repeat` runs of the find itself, with the
indexes and without. Figures: docs/performance.md, Indexes.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from cms.runtime.embedded import start_mongodb

INDEXES: list[tuple[str, list[tuple[str, int]]]] = [
    ("created_id", [("created", 1), ("_id", 1)]),  # every records collection: the default sort
    ("auto_relation_author", [("author", 1)]),  # a relation field (200 users)
    ("auto_relation_tags", [("tags", 1)]),  # a list relation: multikey
    ("idx_views_1", [("views", 1)]),  # a declared index on a number
    ("idx_author_1_created_-1", [("author", 1), ("created", -1)]),  # a declared compound
]
NEWEST = [("created", -1), ("_id", -1)]
ID_PROJECTION = {"_id": 1}
Shape = tuple[str, dict[str, Any], list[tuple[str, int]], int, dict[str, int] | None]
"""(label, filter, sort, limit (0: none), projection)."""


def shapes(records: int) -> list[Shape]:
    """The shapes measured (a page is 30 records; a result set is every matching id, sorted)."""
    ids = [f"r{i:05d}" for i in range(0, records, records // 30)][:30]
    return [
        ("page 1, no filter, sort -created (created_id walked)", {}, NEWEST, 30, None),
        ("page 1, no filter, sort views", {}, [("views", 1), ("_id", 1)], 30, None),
        ("get by id", {"_id": "r00007"}, [], 1, None),
        ("30 ids `_id $in` (a page of a result set, expand)", {"_id": {"$in": ids}}, [], 0, None),
        ("equality on a relation (author = u7: 100 records)", {"author": "u7"}, [], 0, None),
        ("back-relation `author $in` 30 users (3,000 records)", {"author": {"$in": [f"u{i}" for i in range(30)]}},
         [], 0, None),
        ("equality, sort -created, limit 30", {"author": "u7"}, NEWEST, 30, None),
        ("multikey equality (tags = t3)", {"tags": "t3"}, [], 0, None),
        ("range views >= 90,000 (10 %)", {"views": {"$gte": 90_000}}, [], 0, None),
        ("range views >= 90,000, sort -created, limit 30", {"views": {"$gte": 90_000}}, NEWEST, 30, None),
        ("range views >= 90,000, result set (ids, sorted)", {"views": {"$gte": 90_000}}, NEWEST, 100_000,
         ID_PROJECTION),
        ("range views >= 10,000 (90 %), result set", {"views": {"$gte": 10_000}}, NEWEST, 100_000, ID_PROJECTION),
        ("range views >= 99,000, sort views, limit 30", {"views": {"$gte": 99_000}}, [("views", 1)], 30, None),
        ("range 40,000 <= views < 41,000", {"views": {"$gte": 40_000, "$lt": 41_000}}, [], 0, None),
        ("`$or` of two indexed equalities", {"$or": [{"author": "u7"}, {"views": 7_919}]}, [], 0, None),
        ("negation views != 5", {"views": {"$ne": 5}}, [], 30, None),
        ("equality on an unindexed field (name)", {"name": "package-7"}, [], 0, None),
        ("search: a word anywhere (`$regex`, no text index)", {"name": {"$regex": re.escape("ckage-77"),
                                                                       "$options": "i"}}, [], 0, None),
    ]


def rows(records: int) -> list[dict[str, Any]]:
    """Record-shaped documents: a relation (200 users), a list relation, a number, a name."""
    return [{"_id": f"r{i:05d}", "views": (i * 7919) % 100_000, "author": f"u{i % 200}",
             "tags": [f"t{i % 5}", f"t{i % 7}"], "name": f"package-{i}", "created": i, "updated": i}
            for i in range(records)]


def plan_text(answer: dict[str, Any]) -> tuple[str, int, int, int]:
    """(stages with their index, keys examined, documents examined, returned) of an explain answer."""
    stages: list[str] = []
    node: Any = (answer.get("queryPlanner") or {}).get("winningPlan") or {}
    nodes = [node]
    while nodes:
        node = nodes.pop(0)
        if isinstance(node, dict):
            if "stage" in node:
                stages.append(node["stage"] + (f" {node['indexName']}" if node.get("indexName") else ""))
            nodes.extend(v for k, v in node.items() if k in ("inputStage", "inputStages") or isinstance(v, dict))
        elif isinstance(node, list):
            nodes.extend(node)
    stats = answer.get("executionStats") or {}
    return (" < ".join(stages) or "?", int(stats.get("totalKeysExamined", 0)),
            int(stats.get("totalDocsExamined", 0)), int(stats.get("nReturned", 0)))


def measure(db: Any, name: str, shape: Shape, repeat: int) -> tuple[str, int, int, int, float]:
    """The plan of `shape` on collection `name` and the median ms of `repeat` finds."""
    _label, query, sort, limit, projection = shape
    command: dict[str, Any] = {"find": name, "filter": query}
    if sort:
        command["sort"] = dict(sort)
    if limit:
        command["limit"] = limit
    if projection:
        command["projection"] = projection
    answer = db.command("explain", command, verbosity="executionStats")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        list(db[name].find(query, projection=projection, sort=sort or None, limit=limit, batch_size=max(limit, 101)))
        times.append((time.perf_counter() - started) * 1000)
    return (*plan_text(answer), statistics.median(times))


def main() -> None:
    """Fill both collections, then print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    documents = rows(args.records)
    with start_mongodb(Path(tempfile.mkdtemp()) / "db") as server:
        db = MongoClient(server.url).bench
        for name, indexes in (("indexed", INDEXES), ("plain", INDEXES[:1])):
            for start in range(0, len(documents), 1000):
                db[name].insert_many(documents[start:start + 1000])
            for index_name, keys in indexes:
                db[name].create_index(keys, name=index_name)
        print(f"{args.records:,} documents; median of {args.repeat} finds each; plan from `explain` "
              "(executionStats)\n")
        print("| shape | plan with the indexes | keys / docs examined, returned | ms | ms without the indexes "
              "(plan) |")
        print("|---|---|---:|---:|---:|")
        for shape in shapes(args.records):
            stages, keys, docs, returned, ms = measure(db, "indexed", shape, args.repeat)
            plain_stages, _, plain_docs, _, plain_ms = measure(db, "plain", shape, args.repeat)
            print(f"| {shape[0]} | {stages} | {keys:,} / {docs:,}, {returned:,} | {ms:,.1f} | {plain_ms:,.1f} "
                  f"({plain_stages}, {plain_docs:,} docs) |")


if __name__ == "__main__":
    main()
