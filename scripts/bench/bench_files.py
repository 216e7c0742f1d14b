"""Benchmark file upload and download (GridFS) through a `cms serve` on embedded servers.

Usage:

    python scripts/bench/bench_files.py [--size-mib 50] [--repeat 5] [--concurrency 4] [--port PORT]
        [--data-dir DIR] [--keep]

It starts `python -m cms serve` as a child process in a fresh data dir (a temporary one unless
`--data-dir`), so the server runs embedded SecantusDB and redis-server as its own children, with an
admin from ADMIN_EMAIL / ADMIN_PASSWORD. Then, over HTTP on 127.0.0.1:

1. sets `max_upload_mb` above `--size-mib`, creates a base collection `bench_files` and one record;
2. uploads one file of `--size-mib` MiB of random (incompressible) bytes (`POST /api/v1/files`);
3. downloads it `--repeat` times one after the other (`GET /api/v1/files/{id}`), checking the
   SHA-256 of every download; then `--concurrency` downloads at once (aggregate rate);
4. times a 1 MiB range from the middle of the file and a revalidation answered 304.

It prints a Markdown table: per operation the seconds (best and median of the runs), the MiB/s
(size over the best and the median time) and the peak resident memory of the server process and of
it plus its children (SecantusDB, redis-server), sampled every 50 ms.

Exit status: 0 on success, 1 when a step fails, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from bench_records import MemorySampler, mib  # a sibling script

from cms import __version__
from cms.runtime.embedded import free_port

ADMIN_EMAIL = "bench@example.com"
ADMIN_PASSWORD = "bench-password-1"
START_TIMEOUT_S = 60.0
READ_BYTES = 1024 * 1024
MIB = 2**20


class BenchError(Exception):
    """A step failed; the message says which."""


def start_server(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    """`python -m cms serve` on embedded servers (MONGODB_URL and REDIS_URL removed from its env)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URL", "REDIS_URL", "SECRET_KEY")}
    env.update(ADMIN_EMAIL=ADMIN_EMAIL, ADMIN_PASSWORD=ADMIN_PASSWORD, LOG_LEVEL="WARNING")
    log = open(data_dir / "serve.log", "ab")  # noqa: SIM115 - kept open for the child's lifetime
    return subprocess.Popen([sys.executable, "-m", "cms", "serve", "--port", str(port), "--data-dir",
                             str(data_dir)], env=env, stdout=log, stderr=subprocess.STDOUT)


async def wait_healthy(session: aiohttp.ClientSession, base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise BenchError(f"cms serve exited with status {server.returncode}; see serve.log")
        try:
            async with session.get(f"{base}/health") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.25)
    raise BenchError(f"cms serve did not answer /health within {START_TIMEOUT_S:.0f} s")


async def call(session: aiohttp.ClientSession, method: str, url: str, expected: int, **kwargs: Any) -> Any:
    async with session.request(method, url, **kwargs) as response:
        if response.status != expected:
            raise BenchError(f"{method} {url}: {response.status} {await response.text()}")
        return await response.json() if response.content_type == "application/json" else None


async def download(session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None,
                   expected: int = 200) -> tuple[int, str]:
    """(bytes received, SHA-256 hex) of one GET, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    size = 0
    async with session.get(url, headers=headers or {}) as response:
        if response.status != expected:
            raise BenchError(f"GET {url}: {response.status}")
        async for piece in response.content.iter_chunked(READ_BYTES):
            digest.update(piece)
            size += len(piece)
    return size, digest.hexdigest()


async def run(args: argparse.Namespace, data_dir: Path) -> int:
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(data_dir, port)
    sampler = MemorySampler(server.pid)
    timeout = aiohttp.ClientTimeout(total=600)
    rows: list[tuple[str, list[float], int]] = []  # (operation, seconds per run, bytes per run)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await wait_healthy(session, base, server)
            login = await call(session, "POST", f"{base}/api/v1/auth/login", 200,
                               json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
            auth = {"Authorization": f"Bearer {login['token']['access_token']}"}
            await call(session, "POST", f"{base}/api/v1/settings", 200, headers=auth,
                       json={"key": "max_upload_mb", "value": args.size_mib + 1})
            await call(session, "POST", f"{base}/api/v1/settings", 200, headers=auth,
                       json={"key": "rate_limit_enabled", "value": False})
            await call(session, "POST", f"{base}/api/v1/collections", 201, headers=auth,
                       json={"name": "bench_files", "schema": [{"name": "title", "type": "text"}]})
            record = await call(session, "POST", f"{base}/api/v1/collections/bench_files/records", 201,
                                headers=auth, json={"data": {"title": "bench"}})
            content = os.urandom(args.size_mib * MIB)
            expected_sha = hashlib.sha256(content).hexdigest()
            await asyncio.sleep(1.0)  # the settings change reaches the server's cache (0.5 s checks)
            sampler.start()

            form = aiohttp.FormData()
            form.add_field("collection", "bench_files")
            form.add_field("record_id", record["id"])
            form.add_field("file", content, filename="bench.bin", content_type="application/octet-stream")
            with sampler.phase("upload"):
                started = time.perf_counter()
                uploaded = await call(session, "POST", f"{base}/api/v1/files", 201, headers=auth, data=form)
                rows.append(("upload", [time.perf_counter() - started], len(content)))
            url = f"{base}/api/v1/files/{uploaded['id']}"

            times: list[float] = []
            with sampler.phase("download"):
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    size, sha = await download(session, url)
                    times.append(time.perf_counter() - started)
                    if size != len(content) or sha != expected_sha:
                        raise BenchError(f"download differs: {size} bytes, sha256 {sha}")
            rows.append(("download", times, len(content)))

            label = f"download x{args.concurrency} at once"
            with sampler.phase(label):
                started = time.perf_counter()
                results = await asyncio.gather(*(download(session, url) for _ in range(args.concurrency)))
                rows.append((label, [time.perf_counter() - started], len(content) * args.concurrency))
            if any(r != (len(content), expected_sha) for r in results):
                raise BenchError("a concurrent download differs")

            middle = len(content) // 2
            range_times: list[float] = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                size, _ = await download(session, url, {"Range": f"bytes={middle}-{middle + MIB - 1}"}, 206)
                range_times.append(time.perf_counter() - started)
            rows.append(("1 MiB range (middle)", range_times, MIB))
            etag_times: list[float] = []
            etag = f'"{uploaded["id"]}-{expected_sha[:32]}"'
            for _ in range(args.repeat):
                started = time.perf_counter()
                await download(session, url, {"If-None-Match": etag}, 304)
                etag_times.append(time.perf_counter() - started)
            rows.append(("revalidate (304)", etag_times, 0))
    finally:
        sampler.stop()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    print(f"# File benchmark: cms {__version__}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    print(f"Python {platform.python_version()}, {platform.system()} {platform.release()}, {os.cpu_count()} CPUs; "
          f"`cms serve` on embedded SecantusDB; one file of {args.size_mib} MiB random bytes; client and "
          "server on 127.0.0.1\n")
    print("| operation | runs | seconds best / median | MiB/s best / median | peak RSS cms serve MiB "
          "| peak RSS with children MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, seconds, size in rows:
        best, median = min(seconds), statistics.median(seconds)
        rate = f"{size / MIB / best:,.0f} / {size / MIB / median:,.0f}" if size else "-"
        own, tree = sampler.peaks.get(label, (0, 0))
        print(f"| {label} | {len(seconds)} | {best:.3f} / {median:.3f} | {rate} | "
              f"{mib(own) if own else '-'} | {mib(tree) if tree else '-'} |")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Time file upload and download on embedded servers.")
    parser.add_argument("--size-mib", type=int, default=50, help="file size in MiB (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=5, help="sequential downloads (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent downloads (default: %(default)s)")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a fresh temporary directory")
    parser.add_argument("--keep", action="store_true", help="keep the data dir (database, serve.log)")
    args = parser.parse_args(argv)
    if not 1 <= args.size_mib <= 1024 or args.repeat < 1 or args.concurrency < 1:
        parser.error("--size-mib must be 1..1024, --repeat and --concurrency at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir: Any = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-files-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(run(args, data_dir))
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep and args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
