"""`cms backup create|list|restore FILE|delete FILE` (decisions.md, Running it; spec: Backups):
the backup service run from the command line, with its progress on stderr (`commands.progress.ProgressLine`)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from cms.commands.environment import command_config, running_embedded, servers
from cms.commands.progress import ProgressLine
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
    progress = ProgressLine(sys.stderr, PROGRESS_UNITS)
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
