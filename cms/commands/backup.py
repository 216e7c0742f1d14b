"""`cms backup create|list|restore FILE|delete FILE` (decisions.md, Running it; spec: Backups):
the backup service run from the command line, with its progress on stderr (`ProgressLine`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from cms.commands.environment import command_config, running_embedded, servers
from cms.config import Config
from cms.logs import setup_logging
from cms.services.origin import RequestOrigin, origin_scope
from cms.wiring import open_services

CLI_ORIGIN = RequestOrigin(user_agent="cms-cli")  # the audit log's entries of backup commands: no user, no address
PROGRESS_UNITS = {"verify": "bytes", "dump": "documents", "load": "documents"}


def backup(args: argparse.Namespace) -> int:
    """`cms backup create|list|restore FILE|delete FILE`: through the running embedded server's
    databases (`<data-dir>/embedded.json`), else MONGODB_URL / REDIS_URL or embedded servers started
    for the command. Restore asks for confirmation on a terminal and needs `--yes` otherwise."""
    config = command_config(args)
    setup_logging(config.log_level, config.log_format)
    if args.backup_command == "restore" and not args.yes:
        question = (f"Replace every collection of database {config.mongodb_db!r} with {args.filename}? "
                    "This cannot be undone. [y/N] ")
        if not sys.stdin.isatty():
            print("cms: error: restore replaces every collection; pass --yes to confirm", file=sys.stderr)
            return 2
        if input(question).strip().lower() not in ("y", "yes"):
            print("restore cancelled")
            return 1
    running = running_embedded(config)
    if running is not None:
        return asyncio.run(_backup(running, args))
    with servers(config, announce=False) as config:
        return asyncio.run(_backup(config, args))


async def _backup(config: Config, args: argparse.Namespace) -> int:
    progress = ProgressLine(sys.stderr)
    async with open_services(config) as services:
        backups = services.backups
        if args.backup_command == "create":
            with origin_scope(CLI_ORIGIN):
                made = await backups.create(None, progress=progress)
            progress.finish()
            print(f"{made.filename} written to {backups.backup_dir} ({made.size:,} bytes)")
        elif args.backup_command == "list":
            for item in await backups.list(None):
                print(f"{item.filename}  {item.size:>15,} bytes  {item.created:%Y-%m-%d %H:%M:%S} UTC")
        elif args.backup_command == "restore":
            with origin_scope(CLI_ORIGIN):
                result = await backups.restore(None, args.filename, progress=progress)
            progress.finish()
            print(result.message)
        else:
            with origin_scope(CLI_ORIGIN):
                await backups.delete(None, args.filename)
            print(f"{args.filename} deleted")
    return 0


class ProgressLine:
    """Progress of a backup or restore on `stream` (stderr): on a terminal one line redrawn in
    place (at most 10 times a second), otherwise a plain line per 10% of each stage.
    Called as `progress(stage, done, total)` (see `cms.services.operations.backups.Progress`)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
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
        text = f"{stage}: {done:,} of {total:,} {PROGRESS_UNITS.get(stage, '')} ({percent}%)"
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
