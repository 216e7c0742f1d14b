"""Schema as code on the embedded SecantusDB (issue 43, Benchmarks): export, diff and apply of a schema of 50
collections of 20 fields each, with 10,000 records in the one collection that changes.

Two instances (two databases on one embedded SecantusDB and one redis-server, each with its own services, as
two running `cms serve` have): the source's snapshot is applied to the empty target (the first deployment),
then 10,000 records are stored in the target's `c00`, then each scenario changes `c00` in the source's
snapshot and applies it to the target, and back, `--rounds` times (medians):

- `fields and rules`: two fields added, a rule changed (no stored value touched);
- `declared index`: a declared index added (built over the 10,000 records);
- `rename`: a field renamed with `renamed_from` (one `$rename` over the records);
- `convert`: a number field becomes text (each stored value rewritten; needs allow_data_loss).

    PYTHONPATH=. python scripts/bench/bench_schema.py [--rounds 3] [--records 10000]

Figures: docs/performance.md, "Schema as code".
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cms.config import Config
from cms.models import ROLE_ADMIN, Principal, Record
from cms.runtime.embedded import start_mongodb, start_redis
from cms.web.schema_snapshot import load_snapshot
from cms.wiring import Services, open_services

COLLECTIONS = 50
FIELDS = 20
CHANGED = "c00"
ADMIN = Principal(kind="admin_user", user_id="bench", role=ROLE_ADMIN)


def field_specs(index: int) -> list[dict[str, Any]]:
    """FIELDS fields of every kind; the relation points to the previous collection."""
    specs: list[dict[str, Any]] = [
        {"name": "title", "type": "text", "validation": {"required": True, "max": 200}},
        {"name": "views", "type": "number", "validation": {"min": 0}},
        {"name": "status", "type": "select", "values": ["draft", "live", "gone"]},
        {"name": "published", "type": "date"},
        {"name": "flag", "type": "bool"},
        {"name": "meta", "type": "json"},
        {"name": "email", "type": "email"},
        {"name": "link", "type": "url"},
        {"name": "body", "type": "editor", "view_rule": "@request.auth.id != ''"},
    ]
    if index > 0:
        specs.append({"name": "parent", "type": "relation", "collection_id": f"c{index - 1:02d}"})
    specs += [{"name": f"extra{n}", "type": "text"} for n in range(FIELDS - len(specs))]
    return specs


async def seed_source(services: Services) -> None:
    """The source instance's 50 collections (relations by id, through the collections service)."""
    ids: dict[str, str] = {}
    for index in range(COLLECTIONS):
        name = f"c{index:02d}"
        specs = field_specs(index)
        for spec in specs:
            if spec["type"] == "relation":
                spec["collection_id"] = ids[spec["collection_id"]]
        collection = await services.collections.create(
            ADMIN, name, "base", specs, rules={"list_rule": "status = 'live'"},
            indexes=[{"fields": ["status", "-created"]}])
        ids[name] = collection.id


async def store_records(services: Services, count: int) -> None:
    """`count` records in the target's CHANGED collection, 1,000 per insert."""
    collection = await services.catalog.by_name(CHANGED)
    now = datetime.now(UTC)
    for start in range(0, count, 1000):
        batch = [Record(id=uuid.uuid4().hex, created=now + timedelta(microseconds=i), updated=now,
                        data={"title": f"record {i}", "views": i, "status": "live", "extra0": "x"})
                 for i in range(start, min(count, start + 1000))]
        await services.records.repository.insert_many(collection.id, batch)


def changed(snapshot: dict[str, Any], scenario: str) -> dict[str, Any]:
    """The snapshot with CHANGED changed as `scenario` says."""
    result = copy.deepcopy(snapshot)
    target = next(c for c in result["collections"] if c["name"] == CHANGED)
    fields = target["schema"]["fields"]
    if scenario == "fields and rules":
        fields += [{"name": "added1", "type": "text"}, {"name": "added2", "type": "number"}]
        target["view_rule"] = "status != 'gone'"
    elif scenario == "declared index":
        target["indexes"] = [*target["indexes"], {"fields": ["views"], "unique": False}]
    elif scenario == "rename":
        next(f for f in fields if f["name"] == "title").update(name="headline", renamed_from="title")
    elif scenario == "convert":
        next(f for f in fields if f["name"] == "views")["type"] = "text"
    return result


async def timed(work: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """(seconds `work()` took, its result)."""
    started = time.perf_counter()
    result = await work()
    return time.perf_counter() - started, result


async def round_trip(target: Services, snapshot: dict[str, Any], scenario: str) -> tuple[float, float, float]:
    """Diff and apply the changed snapshot to the target, then apply the original back; (export s, diff s,
    apply s) of the forward change."""
    forward = load_snapshot(changed(snapshot, scenario))
    export_s, _ = await timed(lambda: target.schema.export(None))
    diff_s, diff = await timed(lambda: target.schema.diff(None, forward))
    apply_s, _ = await timed(lambda: target.schema.apply(None, forward, expected_hash=diff["hash"],
                                                         allow_data_loss=True))
    back = _renamed_back(snapshot) if scenario == "rename" else snapshot  # text values become numbers again
    await target.schema.apply(None, load_snapshot(back), expected_hash=None, allow_data_loss=True)
    return export_s, diff_s, apply_s


def _renamed_back(snapshot: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(snapshot)
    target = next(c for c in result["collections"] if c["name"] == CHANGED)
    next(f for f in target["schema"]["fields"] if f["name"] == "title")["renamed_from"] = "headline"
    return result


async def run(mongodb_url: str, redis_url: str, data_dir: Path, rounds: int, records: int) -> None:
    """The two instances, the first deployment, the records, then each scenario `rounds` times."""
    def config(name: str) -> Config:
        return Config(secret_key="bench-secret-key-" + "x" * 32, mongodb_url=mongodb_url, mongodb_db=name,
                      redis_url=redis_url, data_dir=data_dir, queue_name=f"cms:bench:{name}", metrics_enabled=False)

    async with open_services(config("source")) as source, open_services(config("target")) as target:
        await seed_source(source)
        export_s, snapshot = await timed(lambda: source.schema.export(None))
        wanted = load_snapshot(snapshot)
        diff_s, diff = await timed(lambda: target.schema.diff(None, wanted))
        apply_s, _ = await timed(lambda: target.schema.apply(None, wanted, expected_hash=diff["hash"]))
        size = len(str(snapshot).encode())
        print(f"schema: {COLLECTIONS} collections x {FIELDS} fields, snapshot ~{size / 1024:.0f} KiB")
        print(f"{'first deployment (50 created)':32} export {export_s * 1000:7.0f} ms  diff {diff_s * 1000:7.0f} ms  "
              f"apply {apply_s:6.2f} s")
        await store_records(target, records)
        print(f"{records:,} records stored in {CHANGED}")
        for scenario in ("fields and rules", "declared index", "rename", "convert"):
            figures = [await round_trip(target, snapshot, scenario) for _ in range(rounds)]
            export_ms = statistics.median(f[0] for f in figures) * 1000
            diff_ms = statistics.median(f[1] for f in figures) * 1000
            apply = statistics.median(f[2] for f in figures)
            print(f"{scenario:32} export {export_ms:7.0f} ms  diff {diff_ms:7.0f} ms  apply {apply:6.2f} s  "
                  f"(rounds: {', '.join(f'{f[2]:.2f}' for f in figures)})", flush=True)


def main() -> None:
    """Start the embedded servers, run the scenarios, print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        data_dir = Path(directory)
        with start_mongodb(data_dir / "db") as mongodb, start_redis(data_dir / "redis") as redis:
            asyncio.run(run(mongodb.url, redis.url, data_dir, args.rounds, args.records))


if __name__ == "__main__":
    main()
