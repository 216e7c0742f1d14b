"""The progress line of long `cms` commands on stderr (backups, restores, schema applies)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


class ProgressLine:
    """Progress of a long command (a backup, a restore, a schema apply) on `stream` (stderr): on a terminal
    one line redrawn in place (at most 10 times a second), otherwise a plain line per 10% of each stage.
    Called as `progress(stage, done, total)` (see `cms.services.operations.backups.Progress`); `units`
    names what a stage counts (`{"dump": "documents"}`)."""

    def __init__(self, stream: Any, units: Mapping[str, str] | None = None) -> None:
        self._stream = stream
        self._units = dict(units or {})
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._stage = ""
        self._step = -1
        self._shown_at = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Show that `done` of `total` steps of `stage` are finished (a line per stage; on a
        terminal the line is redrawn at most every few tenths of a second)."""
        if stage != self._stage:
            self.finish()
            self._stage, self._step, self._shown_at = stage, -1, 0.0
        percent = min(100, done * 100 // total) if total else 0
        text = f"{stage}: {done:,} of {total:,} {self._units.get(stage.partition(' ')[0], '')} ({percent}%)"
        if self._tty:
            now = time.monotonic()
            if now - self._shown_at >= 0.1 or done >= total:
                self._shown_at = now
                self._stream.write("\r" + text.ljust(72))
                self._stream.flush()
        elif percent // 10 != self._step:
            self._step = percent // 10
            print(text, file=self._stream, flush=True)

    def finish(self) -> None:
        """End the current stage's line (terminal only)."""
        if self._tty and self._stage:
            self._stream.write("\n")
            self._stream.flush()
        self._stage = ""
