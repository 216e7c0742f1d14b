"""scripts/load_packages.py end to end: a small CSV through a real test server."""

from __future__ import annotations

import asyncio
import csv
import sys
from pathlib import Path

from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "load_packages.py"


async def test_load_script_loads_rows_and_times_queries(client, services, tmp_path):
    await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
    path = tmp_path / "packages.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "version", "released", "popular", "summary"])
        for i in range(12):
            writer.writerow([f"pkg-{i}", f"1.{i}.0", f"2025-0{1 + i % 9}-01", "true" if i % 3 == 0 else "false",
                             "" if i == 5 else f"HTTP client number {i}"])
        writer.writerow(["pkg-1", "9.9", "2025-01-01", "false", "duplicate name, skipped"])
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), str(path), "--url", str(client.make_url("")).rstrip("/"),
        "--email", ADMIN_EMAIL, "--password", ADMIN_PASSWORD, "--concurrency", "4", "--repeat", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, stderr.decode()[-2000:]
    listing = await (await client.get("/api/v1/collections/packages/records", params={"per_page": 100})).json()
    assert listing["total"] == 12
    assert {r["name"] for r in listing["items"]} == {f"pkg-{i}" for i in range(12)}
    assert "summary" not in next(r for r in listing["items"] if r["name"] == "pkg-5")
    report = stdout.decode()
    assert "rows/s" in report and "search" in report


async def test_load_script_reports_unreachable_server(tmp_path):
    path = tmp_path / "packages.csv"
    path.write_text("name,version,released,popular,summary\npkg,1.0,2025-01-01,true,x\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), str(path), "--url", "http://127.0.0.1:9", "--email", "a@b.co", "--password", "x",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 1
    assert "reach" in stderr.decode().lower() or "connect" in stderr.decode().lower()
