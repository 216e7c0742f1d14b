"""`cms schema export [FILE] | diff FILE | apply FILE [--allow-data-loss]` (decisions.md, Schema as code): the
schema service run from the command line against the configured database (the running embedded server's,
MONGODB_URL, or embedded servers started for the command).

`export` writes the snapshot as indented JSON, keys sorted (a file that diffs well under version control;
its hash is that of the canonical bytes, as `GET /api/v1/schema` answers); `diff` prints one line per change,
coloured on a terminal (unless NO_COLOR is set); `apply` prints the diff, applies it (progress on stderr)
and prints the new hash. Exit status 0, or 1 when the snapshot is refused (each problem printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from cms.commands.backup import CLI_ORIGIN
from cms.commands.environment import command_config, running_embedded, servers
from cms.commands.progress import ProgressLine
from cms.config import Config
from cms.errors import CmsError
from cms.logs import setup_logging
from cms.services.content.schema_diff import differences
from cms.services.origin import origin_scope
from cms.web.schema_snapshot import read_snapshot_file
from cms.wiring import open_services

LOCK_WAIT_S = 60.0
"""Seconds a command waits for an apply running elsewhere (or one cut short whose lock has yet to expire)."""
PROGRESS_UNITS = {"indexes": "collections", "rewrite": "records"}
COLOURS = {"create": "\033[32m", "update": "\033[33m", "delete": "\033[31m", "loss": "\033[1;31m", "off": "\033[0m"}
SIGNS = {"create": "+", "update": "~", "delete": "-"}


def schema(args: argparse.Namespace) -> int:
    """Run `cms schema <command>` (module docstring); returns the exit status."""
    config = command_config(args)
    setup_logging(config.log_level, config.log_format)
    running = running_embedded(config)
    if running is not None:
        return asyncio.run(_schema(running, args))
    with servers(config, announce=False) as config:
        return asyncio.run(_schema(config, args))


async def _schema(config: Config, args: argparse.Namespace) -> int:
    async with open_services(config) as services:
        try:
            if args.schema_command == "export":
                snapshot = await services.schema.export(None, wait_s=LOCK_WAIT_S)
                text = json.dumps(snapshot, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
                if args.file:
                    Path(args.file).write_text(text, encoding="utf-8")
                    print(f"{len(snapshot['collections'])} collections written to {args.file} "
                          f"(hash {snapshot['hash']})", file=sys.stderr)
                else:
                    sys.stdout.write(text)
                return 0
            wanted = read_snapshot_file(Path(args.file))
            diff = await services.schema.diff(None, wanted, wait_s=LOCK_WAIT_S)
            print_changes(diff["changes"], sys.stdout)
            if args.schema_command == "diff" or not diff["changes"]:
                return 0
            progress = ProgressLine(sys.stderr, PROGRESS_UNITS)
            with origin_scope(CLI_ORIGIN):
                applied = await services.schema.apply(None, wanted, expected_hash=diff["hash"],
                                                      allow_data_loss=args.allow_data_loss, progress=progress,
                                                      wait_s=LOCK_WAIT_S)
            progress.finish()
            print(f"applied {_count(len(diff['changes']))}; hash {applied['hash']}")
            return 0
        except CmsError as exc:
            print_refusal(exc, sys.stderr)
            return 1


def print_changes(changes: Sequence[dict[str, Any]], stream: TextIO) -> None:
    """One line per change (`+ posts.summary  text`, `~ posts.title  type: "text" -> "number"  data loss`),
    coloured when `stream` is a terminal and NO_COLOR is not set; then a count."""
    colour = bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ

    def paint(key: str, text: str) -> str:
        return f"{COLOURS[key]}{text}{COLOURS['off']}" if colour else text

    if not changes:
        print("no changes", file=stream)
        return
    width = max(len(_target(change)) for change in changes)
    for change in changes:
        what = "; ".join(f"{key}: {before} -> {after}" if key else before or after
                         for key, before, after in differences(change))
        line = f"{SIGNS[change['op']]} {_target(change).ljust(width)}  {what}"
        print(paint(change["op"], line) + (paint("loss", "  data loss") if change["data_loss"] else ""),
              file=stream)
    lossy = sum(1 for change in changes if change["data_loss"])
    print(_count(len(changes)) + (f", {lossy} losing data (apply needs --allow-data-loss)" if lossy else ""),
          file=stream)


def _count(changes: int) -> str:
    return f"{changes} change" if changes == 1 else f"{changes} changes"


def _target(change: dict[str, Any]) -> str:
    return str(change["collection"]) + (f".{change['field']}" if change["field"] else "")


def print_refusal(error: CmsError, stream: TextIO) -> None:
    """A refused command: the error, then each problem on a line of its own."""
    print(f"cms: error: {error.detail}", file=stream)
    for key, messages in (error.errors or {}).items():
        for message in messages:
            print(f"  {key}: {message}", file=stream)


def add_parser(commands: Any) -> None:
    """The `schema` command and its three subcommands, on the `cms` parser's subparsers."""
    parser = commands.add_parser("schema", help="export, diff and apply schema snapshots (schema as code)")
    subcommands = parser.add_subparsers(dest="schema_command", required=True)
    export = subcommands.add_parser("export", help="write the schema snapshot (to FILE, else stdout)")
    export.add_argument("file", nargs="?", default=None, metavar="FILE")
    diff = subcommands.add_parser("diff", help="show what applying the snapshot in FILE would change")
    diff.add_argument("file", metavar="FILE")
    apply = subcommands.add_parser("apply", help="apply the snapshot in FILE, all or nothing")
    apply.add_argument("file", metavar="FILE")
    apply.add_argument("--allow-data-loss", action="store_true",
                       help="accept deleting collections and fields and converting types")
    for sub in (export, diff, apply):
        sub.add_argument("--data-dir", default=None, help="default: $CMS_DATA_DIR or ./cms_data")
        sub.set_defaults(run=schema)
