"""Process logging: `LOG_LEVEL` and `LOG_FORMAT` (text or json) for `cms serve` and `cms worker`.

`text` (the default) prints `time LEVEL logger: message`. `json` prints one JSON object per line
with `time` (ISO 8601 UTC, milliseconds), `level`, `logger` and `message`, an `exception` string
when a traceback is logged, and the fields a record carries in `extra={"fields": {...}}`: the
access log (`cms.access`, see cms.api.access_log) puts `request_id`, `method`, `path`, `status`,
`duration_ms` and `client_ip` there.

Lines are written in batches by a writer thread (`BatchedStreamHandler`): DEBUG and INFO lines at
most `FLUSH_INTERVAL_S` after they are logged, a WARNING or worse at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

FLUSH_INTERVAL_S = 0.1
"""The longest a DEBUG or INFO line waits before it is written (seconds)."""
FLUSH_BYTES = 64 * 1024
"""Waiting text (characters) that wakes the writer at once, without waiting for the interval."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS_ATTRIBUTE = "fields"
"""The LogRecord attribute (`extra={"fields": {...}}`) whose items the JSON formatter adds."""


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, with the time's seconds formatted once a second (`formatTime` ran
    `time.strftime` for every record, and the access log writes one per request)."""

    _second: tuple[int, str] = (-1, "")

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        """`2026-11-24 03:38:22,887`, as logging.Formatter's default, in local time."""
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return f"{self._second[1]},{int(record.msecs):03d}"


class JsonFormatter(logging.Formatter):
    """Formats a LogRecord as one line of JSON: `{time, level, logger, message, [exception],
    **fields}`. Values that are not JSON types are written as their `str()`; never raises for
    odd values."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a single-line JSON object (no newline inside, whatever the message holds)."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        fields = getattr(record, FIELDS_ATTRIBUTE, None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                entry.setdefault(str(key), value)
        return json.dumps(entry, default=str, ensure_ascii=False)


class BatchedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler whose lines are written by a writer thread, in batches: DEBUG and INFO lines
    at most FLUSH_INTERVAL_S seconds after they are logged; a WARNING or worse, or FLUSH_BYTES of
    waiting text, wakes the writer at once. One writer keeps the order of the lines.

    Why: the access log writes a line per request, and a `write(2)` per line cost about a tenth
    of the throughput of `GET` one record (several processes appending to one file). The logging
    thread only appends to a list: it never waits on the stream, so a slow write (a full pipe, a
    slow disk) does not stall the event loop. `flush()` (also run by `logging.shutdown` at exit)
    writes what waits; a process killed outright loses what was logged in its last moments."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._pending_size = 0
        # lock order: the handler's lock (held around emit), then _io_lock, then _pending_lock;
        # emit takes only _pending_lock, briefly, so logging never waits on a write
        self._io_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._wake = threading.Event()
        self._urgent = threading.Event()
        self._writer: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Queue the formatted record for the writer (Handler.handle holds the handler's lock)."""
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        with self._pending_lock:
            self._pending.append(line)
            self._pending_size += len(line)
            first, full = len(self._pending) == 1, self._pending_size >= FLUSH_BYTES
        if self._writer is None or not self._writer.is_alive():  # first use, or a forked child
            self._start_writer()
        if record.levelno >= logging.WARNING or full:
            self._urgent.set()
            self._wake.set()
        elif first:
            self._wake.set()

    def flush(self) -> None:
        """Write every waiting line and flush the stream (from any thread)."""
        with self._io_lock:
            with self._pending_lock:
                text = "".join(self._pending)
                self._pending.clear()
                self._pending_size = 0
            if text:
                try:
                    self.stream.write(text)
                    self.stream.flush()
                except Exception:  # noqa: BLE001 - a closed or broken stream: these lines are lost
                    pass

    def close(self) -> None:
        """Write what waits, then close as StreamHandler does (`basicConfig(force=True)` closes the
        handlers it replaces)."""
        self.flush()
        super().close()

    def _start_writer(self) -> None:
        self._wake, self._urgent = threading.Event(), threading.Event()
        self._writer = threading.Thread(target=self._write_loop, args=(self._wake, self._urgent),
                                        name="cms-log-writer", daemon=True)
        self._writer.start()

    def _write_loop(self, wake: threading.Event, urgent: threading.Event) -> None:
        while True:
            wake.wait()
            wake.clear()
            urgent.wait(FLUSH_INTERVAL_S)  # returns at once for a WARNING or a full buffer
            urgent.clear()
            self.flush()


def setup_logging(level: str, log_format: str) -> None:
    """Send every logger's records of `level` (a LOG_LEVELS name) and above to stderr, as text or
    JSON (`log_format` "text" or "json"). Replaces handlers set up before (`force`)."""
    handler = BatchedStreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    # No format of ours prints a record's source line, thread or process: skip gathering them
    # (logging's documented switches; finding the caller walks the stack on every record).
    logging._srcfile = None  # noqa: SLF001 - the switch logging's docs name for this (Optimization)
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.basicConfig(level=level, handlers=[handler], force=True)
