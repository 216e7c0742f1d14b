"""Process logging: `LOG_LEVEL` and `LOG_FORMAT` (text or json) for `cms serve` and `cms worker`.

`text` (the default) prints `time LEVEL logger: message`. `json` prints one JSON object per line
with `time` (ISO 8601 UTC, milliseconds), `level`, `logger` and `message`, an `exception` string
when a traceback is logged, and the fields a record carries in `extra={"fields": {...}}`: the
access log (`cms.access`, see cms.api.access_log) puts `request_id`, `method`, `path`, `status`,
`duration_ms` and `client_ip` there.

Lines are written in batches (`BatchedStreamHandler`): DEBUG and INFO lines at most
`FLUSH_INTERVAL_S` after they are logged, a WARNING or worse at once (with every line before it).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

FLUSH_INTERVAL_S = 0.1
"""The longest a DEBUG or INFO line waits in the buffer before it is written (seconds)."""
FLUSH_BYTES = 64 * 1024
"""Buffered text (characters) that is written at once, without waiting for the interval."""

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
    """A StreamHandler that writes in batches: DEBUG and INFO lines wait in a buffer for at most
    FLUSH_INTERVAL_S seconds (a daemon thread writes them) or until FLUSH_BYTES are waiting; a
    WARNING or worse is written at once, after the lines logged before it, so the order holds.

    The access log writes a line per request: one `write(2)` per line cost a quarter of the
    throughput of `GET` one record (two processes appending to one file). `flush()` (also run by
    `logging.shutdown` at exit) writes what waits; a process killed outright loses at most the
    last FLUSH_INTERVAL_S of DEBUG and INFO lines."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._pending_size = 0
        self._waiting = threading.Event()
        self._flusher_pid = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Buffer the formatted record (Handler.handle holds the handler's lock here)."""
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._pending.append(line)
        self._pending_size += len(line)
        if record.levelno >= logging.WARNING or self._pending_size >= FLUSH_BYTES:
            self._write_pending()
        elif len(self._pending) == 1:
            if self._flusher_pid != os.getpid():  # first use, or a forked child: no flusher yet
                self._start_flusher()
            self._waiting.set()

    def flush(self) -> None:
        """Write every buffered line and flush the stream."""
        with self.lock:  # type: ignore[union-attr]
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        self._pending_size = 0
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream: these lines are lost
            pass

    def _start_flusher(self) -> None:
        self._flusher_pid = os.getpid()
        self._waiting = threading.Event()
        threading.Thread(target=self._flush_loop, args=(self._waiting,), name="cms-log-flush", daemon=True).start()

    def _flush_loop(self, waiting: threading.Event) -> None:
        while True:
            waiting.wait()
            waiting.clear()
            threading.Event().wait(FLUSH_INTERVAL_S)
            self.flush()


def setup_logging(level: str, log_format: str) -> None:
    """Send every logger's records of `level` (a LOG_LEVELS name) and above to stderr, as text or
    JSON (`log_format` "text" or "json"). Replaces handlers set up before (`force`)."""
    handler = BatchedStreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    # No format of ours prints a record's source line, thread or process: skip gathering them
    # (logging's documented switches; finding the caller walks the stack on every record).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.basicConfig(level=level, handlers=[handler], force=True)
