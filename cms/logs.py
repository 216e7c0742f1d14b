"""Process logging: `LOG_LEVEL` and `LOG_FORMAT` (text or json) for `cms serve` and `cms worker`.

`text` (the default) prints `time LEVEL logger: message`. `json` prints one JSON object per line
with `time` (ISO 8601 UTC, milliseconds), `level`, `logger` and `message`, an `exception` string
when a traceback is logged, and the fields a record carries in `extra={"fields": {...}}`: the
access log (`cms.access`, see cms.api.access_log) puts `request_id`, `method`, `path`, `status`,
`duration_ms` and `client_ip` there.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS_ATTRIBUTE = "fields"
"""The LogRecord attribute (`extra={"fields": {...}}`) whose items the JSON formatter adds."""


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


def setup_logging(level: str, log_format: str) -> None:
    """Send every logger's records of `level` (a LOG_LEVELS name) and above to stderr, as text or
    JSON (`log_format` "text" or "json"). Replaces handlers set up before (`force`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
