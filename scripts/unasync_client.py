"""Write, or check, the Python client's blocking twin: `clients/python/cms_client/_sync.py` from `_async.py`.

    python scripts/unasync_client.py           # write _sync.py
    python scripts/unasync_client.py --check   # exit 1 when the committed _sync.py is not what this writes

The rewrite is unasync's (https://github.com/python-trio/unasync), done here in a few lines so that the build
needs nothing more: `async def` / `async with` / `async for` lose `async`, `await` goes, `AsyncX` names become
`SyncX` (`AsyncCmsClient` is `CmsClient`, httpx's `AsyncClient` is `Client`), `aclose` is `close`,
`__aenter__` / `__aexit__` are `__enter__` / `__exit__`, `drive_async` is `drive_sync` and `asyncio` (its Lock)
is `threading`. Continuation lines aligned under an opening bracket move left with it, so the output reads as
if written by hand. The same rewrite applies to docstrings and comments.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "clients" / "python" / "cms_client"
SOURCE = PACKAGE / "_async.py"
TARGET = PACKAGE / "_sync.py"
HEADER = "# Generated from _async.py by scripts/unasync_client.py: edit _async.py, then run that script.\n"

RENAMES = {
    "AsyncCmsClient": "CmsClient",
    "AsyncClient": "Client",
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "drive_async": "drive_sync",
    "asyncio": "threading",
}
"""Whole identifiers renamed; any other `Async<Name>` becomes `Sync<Name>`."""

PATTERN = re.compile(r"\basync (?=def\b|with\b|for\b)|\bawait |\b(?:Async[A-Z]\w*|" +
                     "|".join(re.escape(name) for name in RENAMES) + r")\b")


def _replacement(text: str) -> str:
    if text.startswith(("async ", "await ")):
        return ""
    if text in RENAMES:
        return RENAMES[text]
    return "Sync" + text.removeprefix("Async")


def _rewrite(line: str) -> tuple[str, list[tuple[int, int]]]:
    """`line` rewritten, and each change as (column in `line`, characters removed: negative when it grew)."""
    changes: list[tuple[int, int]] = []

    def substitute(match: re.Match[str]) -> str:
        new = _replacement(match.group())
        changes.append((match.start(), len(match.group()) - len(new)))
        return new

    return PATTERN.sub(substitute, line), changes


def _logical_lines(source: str) -> list[tuple[int, int]]:
    """(first, last) 0-based physical line numbers of each logical line (a statement over several lines)."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NL, tokenize.COMMENT) and start is None:
            continue
        if token.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if start is None:
            start = token.start[0] - 1
        if token.type == tokenize.NEWLINE:
            spans.append((start, token.end[0] - 1))
            start = None
    return spans


def unasync(source: str) -> str:
    """The blocking twin of `source` (see the module)."""
    lines = source.splitlines(keepends=True)
    out = list(lines)
    continuation: dict[int, int] = {}  # physical line -> its logical line's first line
    for first, last in _logical_lines(source):
        for number in range(first + 1, last + 1):
            continuation[number] = first
    first_changes: dict[int, list[tuple[int, int]]] = {}
    for number, line in enumerate(lines):
        out[number], changes = _rewrite(line)
        first_changes[number] = changes
    for number, first in continuation.items():
        line, original = out[number], lines[number]
        indent = len(original) - len(original.lstrip(" "))
        if not original.strip():
            continue
        shift = sum(removed for column, removed in first_changes[first] if column < indent)
        if 0 < shift <= indent - (len(lines[first]) - len(lines[first].lstrip(" "))):
            out[number] = line[shift:] if line[:shift].strip() == "" else line
        elif shift < 0:
            out[number] = " " * -shift + line
    return HEADER + "".join(out)


def main() -> int:
    """Write `_sync.py`, or with `--check` compare it; 0 when written or equal, 1 when it differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when _sync.py differs from the rewrite")
    fresh = unasync(SOURCE.read_text())
    if parser.parse_args().check:
        if TARGET.read_text() != fresh:
            print(f"{TARGET} is not the rewrite of {SOURCE.name}: run python scripts/unasync_client.py",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(fresh)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
