"""User-supplied regular expressions (field `validation.pattern`) on a linear-time engine.

Python's `re` backtracks: `^(a+)+$` against 28 `a`s and a `!` takes seconds, on the event loop.
RE2 (`google-re2`) matches in time linear in the text and refuses the constructs that need
backtracking (back-references, look-arounds), so a pattern accepted here can never stall the
service. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import re2  # type: ignore[import-untyped]

MAX_PATTERN_LENGTH = 500
"""Longest accepted pattern, in characters."""
MAX_PATTERN_MEMORY = 8 * 1024 * 1024
"""Memory RE2 may use for one compiled pattern, in bytes (bounds `x{1000}`-style blow-ups)."""


class PatternError(ValueError):
    """A pattern that is too long or that RE2 cannot compile; `str(error)` says why."""


def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 program of `pattern`, with `.search(text)` returning a match or None.

    Raises PatternError when the pattern is longer than MAX_PATTERN_LENGTH characters, uses a
    construct RE2 does not support (back-references, look-around), or needs more than
    MAX_PATTERN_MEMORY bytes."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(f"longer than {MAX_PATTERN_LENGTH} characters")
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_PATTERN_MEMORY
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(str(reason)) from None
