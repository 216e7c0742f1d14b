"""The `cms` command: `serve`, `worker`, `admin create`, `backup ...`, `schema ...` (decisions.md, Running it).

`cms serve` with no MONGODB_URL / REDIS_URL starts SecantusDB and redis-server as child processes
under `--data-dir` and runs the arq worker in-process; the children stop when serve stops.
While serving embedded, the child URLs are kept in `<data-dir>/embedded.json` so that
`cms admin create` and `cms backup` in another shell reach the same servers (cms.commands.environment).
The `backup` command is in cms.commands.backup, `schema` in cms.commands.schema.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import getpass
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web

from cms import __version__
from cms.app import create_app, create_runner
from cms.commands import schema as schema_command
from cms.commands.backup import backup
from cms.commands.environment import (
    command_config,
    environment,
    running_embedded,
    servers,
    use_password_parameters,
)
from cms.config import Config, ConfigError
from cms.errors import CmsError
from cms.logs import setup_logging
from cms.observability import tracing
from cms.runtime.embedded import EmbeddedServerError, stop_when_parent_dies
from cms.web.context import SERVICES
from cms.wiring import Services, open_services

log = logging.getLogger("cms")

SHUTDOWN_MARGIN_S = 5.0
"""Seconds a `--workers` parent allows past SHUTDOWN_TIMEOUT_S for closing pools before it kills."""
MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""Where prometheus-client's multiprocess mode keeps each process's values (set for the children)."""


def _add_worker(app: web.Application, config: Config) -> None:
    """Run the arq worker inside the web process (embedded mode), sharing the app's services.

    When the app shuts down (on_shutdown, before in-flight requests are waited for), the worker
    stops taking jobs and gives running ones up to `config.shutdown_timeout_s` seconds; arq
    cancels the rest, which puts them back on the queue for the next start."""
    from workers.settings import build_worker

    running: dict[str, Any] = {}

    async def drain(app: web.Application) -> None:
        worker = running.get("worker")
        if worker is not None:
            worker.handle_sig_wait_for_completion(signal.SIGTERM)

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        worker = build_worker(config, services=app[SERVICES], handle_signals=False)
        running["worker"] = worker
        task = asyncio.create_task(worker.async_run())
        yield
        if worker.allow_pick_jobs:  # cleaned up without on_shutdown: nothing drains, so stop now
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await worker.close()

    app.on_shutdown.append(drain)
    app.cleanup_ctx.append(ctx)


def add_envelope_check(app: web.Application) -> None:
    """Warn, once after start-up, of each collection past the embedded server's envelope (issue 31,
    item 4): one WARNING line per collection, saying from how many records a cold list page passes
    250 ms there and pointing to MONGODB_URL (`Services.envelope`; nothing in external mode).

    The check runs as a task beside the serving app (it never delays start-up) and costs one catalog
    query and one count estimate per collection; a failure is logged, never raised. The task is
    cancelled when the app stops."""

    async def check(services: Services) -> None:
        try:
            for large in await services.envelope.large_collections():
                log.warning("%s", large.message)
        except Exception:  # a start-up advice must never take the server down
            log.exception("checking collection sizes against the embedded server's envelope failed")

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(check(app[SERVICES]))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(ctx)


def serve(args: argparse.Namespace) -> int:
    """Run the web server until SIGINT/SIGTERM: in this process, or with `--workers N` > 1 in N
    child processes sharing the port (SO_REUSEPORT). Embedded servers are started here, once.
    Returns the exit status (0, or 1 when a web process died on its own)."""
    config = command_config(args)
    setup_logging(config.log_level, config.log_format)
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    tracing.check(environment())
    with servers(config, announce=True) as config:
        mode = "embedded" if config.embedded else "external MongoDB and Redis"
        processes = f", {args.workers} processes" if args.workers > 1 else ""
        print(f"cms {__version__} serving on http://{config.host}:{config.port} ({mode}{processes}); "
              f"API explorer at /docs", flush=True)
        if args.workers > 1:
            return serve_processes(config, args.workers)
        with traced():
            run(_serve_until_signal(config, run_worker=config.embedded, reuse_port=False))
    return 0


@contextlib.contextmanager
def traced() -> Iterator[None]:
    """Tracing on for the block if the environment asks for it (decisions.md, Traces); on leaving, the
    spans left are exported. Each process that serves or runs jobs opens one: `cms serve` (each
    `--workers` child), `cms worker`."""
    tracing.start(environment())
    try:
        yield
    finally:
        tracing.shutdown()


def run(main: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run(main)` on uvloop's event loop when uvloop is installed (a dependency
    except on Windows; issue "Fast reads"), else on asyncio's own."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def _serve_child(config: Config, run_worker: bool, parent_pid: int) -> None:
    """Body of one `--workers` child process (spawned): serve until SIGTERM; die with the parent."""
    stop_when_parent_dies(parent_pid)
    use_password_parameters(config)  # spawned: nothing of the parent's process state is inherited
    setup_logging(config.log_level, config.log_format)
    with traced():
        run(_serve_until_signal(config, run_worker=run_worker, reuse_port=True))


def serve_processes(config: Config, count: int) -> int:
    """Run `count` web processes on `config.host:config.port` (SO_REUSEPORT: the kernel spreads
    connections over them) until SIGINT or SIGTERM, then pass SIGTERM on and wait for them, up to
    `config.shutdown_timeout_s` + SHUTDOWN_MARGIN_S seconds before killing. The first process also
    runs the embedded worker. If a process exits on its own, the others are stopped too and the
    status is 1 (a supervisor restarts the whole); otherwise 0. With metrics on, the processes share
    a fresh prometheus-client multiprocess directory (`metrics_directory`), removed at exit."""
    with metrics_directory(config) as config:
        return _serve_processes(config, count)


@contextlib.contextmanager
def metrics_directory(config: Config) -> Iterator[Config]:
    """With metrics on: a fresh temporary directory for prometheus-client's multiprocess mode, set as
    PROMETHEUS_MULTIPROC_DIR for the processes spawned meanwhile (prometheus-client reads it when
    imported) and in the yielded config (`metrics_multiprocess_dir`); removed, and the variable
    restored, on exit. With metrics off: `config` as it is."""
    if not config.metrics_enabled:
        yield config
        return
    directory = tempfile.mkdtemp(prefix="cms-metrics-")
    previous = os.environ.get(MULTIPROCESS_VARIABLE)
    os.environ[MULTIPROCESS_VARIABLE] = directory
    try:
        yield replace(config, metrics_multiprocess_dir=Path(directory))
    finally:
        if previous is None:
            os.environ.pop(MULTIPROCESS_VARIABLE, None)
        else:
            os.environ[MULTIPROCESS_VARIABLE] = previous
        shutil.rmtree(directory, ignore_errors=True)


def _serve_processes(config: Config, count: int) -> int:
    context = multiprocessing.get_context("spawn")  # no fork: the parent holds threads and sockets
    children = [context.Process(target=_serve_child, name=f"cms-web-{index}",
                                args=(config, config.embedded and index == 0, os.getpid()))
                for index in range(count)]
    wake_r, wake_w = socket.socketpair()  # a signal writes to wake_w and so ends the wait below
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signalled: list[int] = []
    handlers = {signum: signal.signal(signum, lambda signum, _frame: signalled.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    previous_wakeup_fd = signal.set_wakeup_fd(wake_w.fileno())
    died: list[Any] = []
    try:
        for child in children:
            child.start()
        while not signalled and not died:
            multiprocessing.connection.wait([*(child.sentinel for child in children), wake_r])
            died = [child for child in children if not child.is_alive()]
        if died and not signalled:
            log.error("web process %s exited with %s; stopping the others", died[0].name, died[0].exitcode)
    finally:
        for child in children:
            if child.pid is not None and child.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + config.shutdown_timeout_s + SHUTDOWN_MARGIN_S
        for child in children:
            if child.pid is None:
                continue
            child.join(max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                log.warning("web process %s did not stop in time; killing it", child.name)
                child.kill()
                child.join()
        signal.set_wakeup_fd(previous_wakeup_fd)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        wake_r.close()
        wake_w.close()
    return 1 if died and not signalled else 0


def freeze_start_up_heap() -> None:
    """Collect once, then move every object alive after start-up (modules, classes, functions, the
    services and their caches: about 90,000 in a web process) out of the cycle collector's reach
    (`gc.freeze`), so that its full collections walk only what requests and streams made since.
    Issue 37: under a steady stream of realtime events each web process ran full collections of
    140 to 250 ms (the event loop stopped meanwhile; 2 shared cores), 8 ms with the heap frozen.
    Called before the port is bound: no request waits for the collection made here."""
    gc.collect()
    gc.freeze()


async def _serve_until_signal(config: Config, *, run_worker: bool, reuse_port: bool) -> None:
    """Serve the app on the configured host and port until SIGINT or SIGTERM, then shut down
    gracefully: stop accepting, give in-flight requests up to `config.shutdown_timeout_s` seconds
    (then cancel them), stop the in-process worker if any, close the pools. Like `web.run_app`,
    through `create_runner`, whose answers to requests the HTTP parser rejects are in the error
    model. `reuse_port` binds with SO_REUSEPORT (`--workers`)."""
    app = create_app(config)
    if run_worker:
        _add_worker(app, config)
    if run_worker and config.embedded:  # one process of `--workers N` warns, not each
        add_envelope_check(app)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):  # a signal during start-up stops right after it
        loop.add_signal_handler(signum, stop.set)
    runner = create_runner(app, access_log=logging.getLogger("cms.access"), keepalive_timeout=75,
                           shutdown_timeout=config.shutdown_timeout_s)
    await runner.setup()
    freeze_start_up_heap()
    try:
        await web.TCPSite(runner, config.host, config.port, reuse_port=reuse_port or None).start()
        await stop.wait()
        log.info("stopping: no new connections; in-flight requests get up to %d s", config.shutdown_timeout_s)
    finally:
        await runner.cleanup()
    log.info("stopped")


def worker(args: argparse.Namespace) -> int:
    """Run the arq worker (production: MONGODB_URL and REDIS_URL set)."""
    config = command_config(args)
    setup_logging(config.log_level, config.log_format)
    if config.embedded:
        raise ConfigError("cms worker needs MONGODB_URL and REDIS_URL (in embedded mode cms serve runs the worker)")
    from workers.settings import build_worker

    # On SIGTERM/SIGINT arq stops taking jobs and waits up to config.shutdown_timeout_s for running ones,
    # then cancels them; a cancelled job goes back on the queue (retry) for the next worker.
    with traced():
        build_worker(config).run()
    return 0


def admin_create(args: argparse.Namespace) -> int:
    """Create an admin-table user with role admin; prompts for the password unless --password."""
    config = command_config(args)
    setup_logging(config.log_level, config.log_format)
    password = args.password
    if password is None:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Repeat password: ") != password:
            print("cms: error: passwords do not match", file=sys.stderr)
            return 2
    running = running_embedded(config)
    if running is not None:
        asyncio.run(_create_admin(running, args.email, password, args.name))
        return 0
    with servers(config, announce=False) as config:
        asyncio.run(_create_admin(config, args.email, password, args.name))
    return 0


async def _create_admin(config: Config, email: str, password: str, name: str) -> None:
    async with open_services(config) as services:
        user = await services.identity.registration.create_admin(email, password, name)
    print(f"admin {user.email} created (id {user.id})")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `cms` command."""
    parser = argparse.ArgumentParser(prog="cms", description="Headless CMS backend")
    parser.add_argument("--version", action="version", version=f"cms {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve_parser = commands.add_parser("serve", help="run the web server (embedded MongoDB/Redis by default)")
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=8090)
    serve_parser.add_argument("--data-dir", default=None, help="default: $CMS_DATA_DIR or ./cms_data")
    serve_parser.add_argument("--workers", type=int, default=1, metavar="N",
                              help="web processes sharing the port (SO_REUSEPORT); default 1")
    serve_parser.set_defaults(run=serve)

    worker_parser = commands.add_parser("worker", help="run the job worker (needs MONGODB_URL and REDIS_URL)")
    worker_parser.set_defaults(run=worker)

    admin_parser = commands.add_parser("admin", help="manage admin users")
    admin_commands = admin_parser.add_subparsers(dest="admin_command", required=True)
    create_parser = admin_commands.add_parser("create", help="create an admin user")
    create_parser.add_argument("email")
    create_parser.add_argument("--password", default=None, help="default: prompt")
    create_parser.add_argument("--name", default="")
    create_parser.add_argument("--data-dir", default=None, help="default: $CMS_DATA_DIR or ./cms_data")
    create_parser.set_defaults(run=admin_create)

    backup_parser = commands.add_parser("backup", help="create, list, restore and delete backups")
    backup_commands = backup_parser.add_subparsers(dest="backup_command", required=True)
    for name, text in (("create", "back up the whole database"), ("list", "list backups, newest first"),
                       ("restore", "replace every collection with a backup's contents"),
                       ("delete", "delete a backup")):
        sub = backup_commands.add_parser(name, help=text)
        if name in ("restore", "delete"):
            sub.add_argument("filename", help="backup-YYYYmmdd-HHMMSS.tar.gz")
        if name == "restore":
            sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        sub.add_argument("--data-dir", default=None, help="default: $CMS_DATA_DIR or ./cms_data")
        sub.set_defaults(run=backup)
    schema_command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of `cms` and `python -m cms`; exits with the command's status."""
    args = build_parser().parse_args(argv)
    try:
        status = args.run(args)
    except ConfigError as exc:
        print(f"cms: configuration error: {exc}", file=sys.stderr)
        status = 2
    except EmbeddedServerError as exc:
        print(f"cms: {exc}", file=sys.stderr)
        status = 1
    except CmsError as exc:
        print(f"cms: error: {exc.detail}" + (f" {exc.errors}" if exc.errors else ""), file=sys.stderr)
        status = 1
    sys.exit(status)
