"""cms.runtime.embedded against real child processes: persistence across restarts, clean stops, no orphans."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from pymongo import MongoClient

from cms.runtime.embedded import (
    ChildServer,
    EmbeddedServerError,
    embedded_servers,
    free_port,
    start_mongodb,
    start_redis,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def process_is_gone(pid: int) -> bool:
    """True once `pid` no longer runs: no such process, or a zombie left to a non-reaping init."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `condition` every 20 ms for up to `timeout_s` seconds; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def redis_pid(url: str) -> int:
    """The pid the Redis server at `url` reports in INFO."""
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        return int(cast("dict[str, Any]", client.info("server"))["process_id"])
    finally:
        client.close()


def mongo_client(url: str) -> MongoClient[dict[str, Any]]:
    return MongoClient(url, serverSelectionTimeoutMS=5000)


def assert_reaped(server: ChildServer) -> None:
    assert server.process.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(server.process.pid, 0)


def test_mongodb_data_survives_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "db"
    with start_mongodb(data_dir) as server:
        assert server.name == "mongodb"
        assert server.url.endswith("/?retryWrites=false")
        with mongo_client(server.url) as client:
            client.cms.things.insert_one({"_id": "a", "title": "kept"})
    assert_reaped(server)
    assert server.log_path == tmp_path / "mongodb.log"
    assert "listening" in server.log_path.read_text()

    with start_mongodb(data_dir) as again, mongo_client(again.url) as client:
        assert client.cms.things.find_one({"_id": "a"}) == {"_id": "a", "title": "kept"}
    assert_reaped(again)


def test_redis_is_reached_over_tcp_when_the_socket_path_is_too_long(tmp_path: Path) -> None:
    from cms.runtime.embedded import MAX_UNIX_SOCKET_PATH

    data_dir = tmp_path / ("d" * MAX_UNIX_SOCKET_PATH)
    server = start_redis(data_dir)
    try:
        assert server.url.startswith("redis://127.0.0.1:") and server.url.endswith("/0")
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        assert client.ping()
        client.close()
    finally:
        server.stop()


def test_redis_data_survives_restart_through_aof(tmp_path: Path) -> None:
    data_dir = tmp_path / "redis"
    server = start_redis(data_dir)
    try:
        assert server.url == f"unix://{data_dir.resolve()}/redis.sock?db=0"  # the cheaper way on one machine
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        client.set("greeting", "hello")
        assert client.config_get("save") == {"save": ""}
        client.close()
    finally:
        server.stop()
        server.stop()  # idempotent
    assert_reaped(server)
    assert (data_dir / "appendonly.aof").exists()
    assert not (data_dir / "dump.rdb").exists()

    with start_redis(data_dir) as again:
        client = redis.Redis.from_url(again.url, socket_timeout=5)
        assert client.get("greeting") == b"hello"
        client.close()
    assert_reaped(again)


def test_embedded_servers_yields_urls_and_stops_both(tmp_path: Path) -> None:
    with embedded_servers(tmp_path, need_mongodb=True, need_redis=True) as urls:
        assert urls.mongodb_url is not None and urls.redis_url is not None
        pids = [redis_pid(urls.redis_url)]
        with mongo_client(urls.mongodb_url) as client:
            pids.append(int(client.admin.command("serverStatus")["pid"]))
    assert (tmp_path / "redis" / "appendonly.aof").exists()
    assert (tmp_path / "db" / "WiredTiger").exists()
    assert {p.name for p in tmp_path.iterdir()} >= {"mongodb.log", "redis.log"}
    assert wait_until(lambda: all(process_is_gone(pid) for pid in pids), timeout_s=1.0)


def test_embedded_servers_stops_on_exception(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(KeyError), embedded_servers(tmp_path, need_mongodb=False, need_redis=True) as urls:
        assert urls.redis_url is not None
        pids.append(redis_pid(urls.redis_url))
        raise KeyError("boom")
    assert wait_until(lambda: process_is_gone(pids[0]), timeout_s=1.0)


def test_child_dies_with_a_sigkilled_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from cms.runtime.embedded import start_redis
        server = start_redis(Path({str(tmp_path / "redis")!r}))
        print(server.process.pid, flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                                     os.environ.get("PYTHONPATH")]))}
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), parent.stderr.read() if parent.stderr else line
        child_pid = int(line)
        assert not process_is_gone(child_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=5)
        assert wait_until(lambda: process_is_gone(child_pid), timeout_s=5.0)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_mongodb_on_a_regular_file_fails_fast_with_log_text(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "db"
    not_a_dir.write_text("I am a file")
    started = time.monotonic()
    with pytest.raises(EmbeddedServerError, match="mongodb failed to start") as caught:
        start_mongodb(not_a_dir, timeout_s=20)
    assert time.monotonic() - started < 10
    assert "File exists" in str(caught.value)  # from secantus' traceback in the log


def test_redis_on_a_taken_port_fails_fast_with_log_text(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(EmbeddedServerError, match="redis failed to start") as caught:
            start_redis(tmp_path / "redis", port=port, timeout_s=10)
    assert time.monotonic() - started < 5
    assert "Address already in use" in str(caught.value)


def test_a_foreign_server_on_the_port_is_not_mistaken_for_ours(tmp_path: Path) -> None:
    with start_redis(tmp_path / "first") as first:
        client = redis.Redis.from_url(first.url, socket_timeout=5)
        info: dict[str, Any] = client.info("server")  # type: ignore[assignment]
        port = int(info["tcp_port"])  # it listens on TCP too, beside its socket
        client.close()
        with pytest.raises(EmbeddedServerError, match="Address already in use"):
            start_redis(tmp_path / "second", port=port, timeout_s=5)
        assert first.process.poll() is None


def test_redis_in_a_data_dir_that_is_a_file_fails(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "redis"
    not_a_dir.write_text("I am a file")
    with pytest.raises(EmbeddedServerError, match="redis failed to start"):
        start_redis(not_a_dir)


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
