"""Child server processes: start one, wait until it answers, stop and reap it (embedded mode's
plumbing, used by `embedded.py`).

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
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

logger = logging.getLogger("cms.runtime.embedded")

LOG_TAIL_LINES = 20
POLL_INTERVAL_S = 0.05
PROBE_TIMEOUT_S = 0.5
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_ADDRESS_IN_USE = "Address already in use"  # redis-server's and Python's bind error text


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be started; the message ends with the last lines of its log."""


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


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on `host` that was free a moment ago (bind to port 0, read it, close).

    Another process may take it before the caller binds it; the start functions retry once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def stop_when_parent_dies(parent_pid: int) -> None:
    """Have this process get SIGTERM when its parent (`parent_pid`) dies, so a `--workers` web
    process never outlives a killed `cms serve`. Linux only (elsewhere nothing happens); call it
    from the main thread. Exits at once (status 1) if the parent is already gone."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent_pid:
        os._exit(1)


Probe = Callable[[str, str, int, int], bool]  # (url, host, port, pid) -> is our server answering?


def start_child(name: str, argv: Callable[[int], list[str]], url: Callable[[int], str],
                      probe: Probe, log_path: Path, data_dir: Path, host: str, port: int | None,
                      timeout_s: float) -> ChildServer:
    """Start `argv(port)` as the child server `name` on `port`, or on a free port, trying a second free
    port if the first got taken; its output is appended to `log_path`. Returns once `probe` says it
    answers at `url(port)`, within `timeout_s` seconds. Raises EmbeddedServerError (with the log's
    last lines) if it exits or does not answer in time; the process is gone by then."""
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


def port_accepts(host: str, port: int) -> bool:
    """Whether something listens on host:port; saves a 0.5 s driver timeout while it is not up."""
    try:
        with socket.create_connection((_connect_host(host), port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def _connect_host(host: str) -> str:
    """A wildcard bind address is not connectable; clients use the loopback address instead."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def url_host(host: str) -> str:
    """`host` as it goes into a URL: a wildcard becomes loopback, an IPv6 address gets brackets."""
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
