"""What every `cms` command starts from: its Config (environment, `.env`, command-line options)
and the MongoDB and Redis it reaches: the URLs from the environment, the embedded servers of a
`cms serve` already running on the data dir, or embedded servers started for the command
(decisions.md, Running it)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from cms.config import Config
from cms.runtime.embedded import embedded_servers
from cms.security import passwords

EMBEDDED_STATE_FILE = "embedded.json"
"""Under the data dir while an embedded `cms serve` runs: the URLs of its servers (JSON)."""


def environment() -> dict[str, str]:
    """The process environment over the values of an optional `.env` file in the working directory."""
    file_values = {k: v for k, v in dotenv_values(".env").items() if v is not None} if Path(".env").exists() else {}
    return {**file_values, **os.environ}


def command_config(args: argparse.Namespace) -> Config:
    """The Config of a command: `Config.from_env` over `environment()`, with the command's
    `--host`, `--port` and `--data-dir` when it has them; this process hashes passwords as it says
    (`use_password_parameters`). Raises ConfigError."""
    env = environment()
    data_dir = Path(args.data_dir) if getattr(args, "data_dir", None) else None
    config = Config.from_env(env, host=getattr(args, "host", None), port=getattr(args, "port", None),
                             data_dir=data_dir)
    use_password_parameters(config)
    return config


def use_password_parameters(config: Config) -> None:
    """Make this process hash new passwords with `config`'s argon2id parameters (`password_*`). Every
    process that reads a Config from the environment calls it once: each `cms` command, each spawned
    `cms serve --workers` process, an `arq` worker. Tests build their Config directly and keep their own
    (tests/conftest.py)."""
    passwords.use_parameters(config.password_parameters)


@contextlib.contextmanager
def servers(config: Config, *, announce: bool) -> Iterator[Config]:
    """Start what the environment does not provide; yield the config with every URL set. With
    `announce` (`cms serve`) the embedded servers' URLs are written to the data dir's
    EMBEDDED_STATE_FILE while they run, for `running_embedded`."""
    if not config.embedded:
        yield config
        return
    state_file = config.data_dir / EMBEDDED_STATE_FILE
    with embedded_servers(
        config.data_dir, need_mongodb=config.mongodb_url is None, need_redis=config.redis_url is None
    ) as urls:
        full = config.with_urls(mongodb_url=urls.mongodb_url, redis_url=urls.redis_url)
        if announce:
            state_file.write_text(json.dumps({"mongodb_url": full.mongodb_url, "redis_url": full.redis_url}))
        try:
            yield full
        finally:
            if announce:
                state_file.unlink(missing_ok=True)


def running_embedded(config: Config) -> Config | None:
    """The config of an embedded `cms serve` already running on this data dir, if any."""
    state_file = config.data_dir / EMBEDDED_STATE_FILE
    if not config.embedded or not state_file.exists():
        return None
    urls: dict[str, Any] = json.loads(state_file.read_text())
    return config.with_urls(mongodb_url=urls.get("mongodb_url"), redis_url=urls.get("redis_url"))
