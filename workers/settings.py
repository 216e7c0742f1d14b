"""arq worker set-up: `cms worker`, `arq workers.WorkerSettings`, the in-process worker of
embedded `cms serve`, and burst workers in tests all build their Worker here."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from arq.cron import cron
from arq.worker import Function, func

from cms.config import Config, WorkerOptions
from cms.infra import lend, open_redis, redis_settings
from cms.jobs import DELIVER_WEBHOOK, DELIVER_WEBHOOKS, SEND_EMAIL, SEND_OTP, SEND_PASSWORD_RESET, TRACE_CONTEXT
from cms.observability import tracing
from cms.observability.metrics_http import MetricsServer
from cms.security import passwords
from cms.services.access import metrics_token_matches
from cms.wiring import Services, open_services, recording
from workers.auth import AUTH_JOB_MAX_TRIES, send_otp, send_password_reset
from workers.email import EMAIL_MAX_TRIES, send_email
from workers.liveness import ReconnectingWorker, hold_job_locks, on_job_end, on_job_start, release_job_locks
from workers.maintenance import ORPHAN_SWEEP_MINUTES, sweep_orphaned_records
from workers.schedules import SCHEDULE_SECONDS, run_due_schedules
from workers.webhooks import BATCH_MAX_TRIES, RELAY_EVERY_S, deliver_webhook, deliver_webhooks, relay_webhook_outbox

JobFunction = Callable[..., Awaitable[Any]]
"""An arq job coroutine function: `(ctx, *args, **kwargs) -> result`."""


def job(function: JobFunction, name: str, max_tries: int) -> Function:
    """The arq Function `name` running `function` in the job wrapper: it takes the TRACE_CONTEXT keyword
    argument off (jobs queued with tracing on carry it, whether or not this worker traces; older jobs
    lack it) and runs the job in its span (`tracing.job_span`: the trace of the enqueuing request)."""

    async def run(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        trace_context = kwargs.pop(TRACE_CONTEXT, None)
        config = ctx.get("config")
        with tracing.job_span(name, trace_context, job_id=ctx.get("job_id"), job_try=ctx.get("job_try"),
                              queue_name=config.queue_name if isinstance(config, Config) else None):
            return await function(ctx, *args, **kwargs)

    return func(run, name=name, max_tries=max_tries)


FUNCTIONS = [
    job(send_email, SEND_EMAIL, EMAIL_MAX_TRIES),
    job(send_password_reset, SEND_PASSWORD_RESET, AUTH_JOB_MAX_TRIES),
    job(send_otp, SEND_OTP, AUTH_JOB_MAX_TRIES),
    job(deliver_webhooks, DELIVER_WEBHOOKS, BATCH_MAX_TRIES),
    job(deliver_webhook, DELIVER_WEBHOOK, BATCH_MAX_TRIES),
]
JOB_TIMEOUT_S = 120
"""Seconds one job may run before arq cancels it (and retries it, up to its max_tries)."""
HEALTH_CHECK_INTERVAL_S = 30
"""How often a worker refreshes its health-check key (`arq --check`; it expires 1 s after)."""
CRON_JOBS = [cron(relay_webhook_outbox, second=set(range(0, 60, RELAY_EVERY_S)), run_at_startup=True,
                  unique=True, timeout=60),
             cron(sweep_orphaned_records, minute=set(ORPHAN_SWEEP_MINUTES), second=0, run_at_startup=True,
                  unique=True, timeout=JOB_TIMEOUT_S),
             cron(run_due_schedules, second=set(SCHEDULE_SECONDS), run_at_startup=True, unique=True,
                  timeout=JOB_TIMEOUT_S)]


async def on_startup(ctx: dict[str, Any]) -> None:
    """Open services unless the caller handed them in (`ctx["services"]`); they share the
    worker's own Redis pool (`ctx["redis"]`), so a worker process holds one pool, and record the
    dashboard's figures (`cms.wiring.recording`; services handed in are recorded by their owner).
    Start holding the locks of running jobs (`workers.liveness`). A worker that opened its own services
    serves its metrics on METRICS_PORT when that is set (`serve_metrics`). Runs again after a reconnect
    (ReconnectingWorker)."""
    hold_job_locks(ctx)
    if "config" not in ctx:  # `arq workers.WorkerSettings`: neither cms command set this process up
        ctx["config"] = Config.from_env(os.environ)
        passwords.use_parameters(ctx["config"].password_parameters)  # as `cms` commands do
        tracing.start(os.environ)
    if "services" not in ctx:
        stack = AsyncExitStack()
        ctx["services"] = await stack.enter_async_context(open_services(ctx["config"], redis=ctx["redis"]))
        await stack.enter_async_context(recording(ctx["services"]))  # webhook deliveries for the dashboard
        ctx["exit_stack"] = stack
        serve_metrics(ctx["config"], ctx["services"], stack)
    # Deliveries whose enqueue was lost (a web process died after writing them) go out now; a burst
    # worker, which runs no cron jobs, relies on this.
    try:
        await ctx["services"].webhook_outbox.relay()
    except Exception:
        logging.getLogger("cms.workers").warning("webhook relay at start-up failed", exc_info=True)


def serve_metrics(config: Config, services: Services, stack: AsyncExitStack) -> MetricsServer | None:
    """Serve the worker's metrics on `config.metrics_port` (all interfaces; the METRICS_TOKEN bearer
    required when that is set) until `stack` closes; None when no port is set or metrics are off.
    Raises OSError when the port is taken."""
    if config.metrics_port is None or services.metrics is None:
        return None
    token = config.metrics_token
    server = MetricsServer(services.metrics, asyncio.get_running_loop(), port=config.metrics_port,
                           allowed=None if token is None else lambda presented: metrics_token_matches(presented, token))
    server.start()
    stack.push_async_callback(asyncio.to_thread, server.close)  # waits for the server thread: off the loop
    return server


async def on_shutdown(ctx: dict[str, Any]) -> None:
    """Close what on_startup opened."""
    await release_job_locks(ctx)
    stack = ctx.pop("exit_stack", None)
    if stack is not None:
        await stack.aclose()


def build_worker(config: Config, *, services: Services | None = None, burst: bool = False,
                 handle_signals: bool = True, poll_delay_s: float | None = None) -> ReconnectingWorker:
    """An arq Worker for `config`'s queue with every job function, running up to
    `config.worker_max_jobs` jobs at once and looking at the queue every `poll_delay_s` seconds
    (default `config.worker_poll_delay_s`). Without `services` it opens the process's Redis pool
    (`open_redis`, closed with the worker) and builds its services on it at start; `services`
    (shared with the web app in the same process) lend it theirs, which its close leaves open.

    On SIGTERM or SIGINT (`handle_signals`), or `handle_sig_wait_for_completion()`, it stops taking
    jobs and gives running ones up to `config.shutdown_timeout_s` seconds; then arq cancels them,
    and a cancelled job stays queued (arq's retry) for the next worker to run. A Redis outage does
    not end it (ReconnectingWorker), and a job of a worker killed outright runs again on another
    within `workers.liveness.LOCK_TTL_S` seconds."""
    assert config.redis_url, "redis_url must be set"
    ctx: dict[str, Any] = {"config": config}
    if services is not None:
        ctx["services"] = services
    return ReconnectingWorker(
        FUNCTIONS,
        queue_name=config.queue_name,
        redis_pool=open_redis(config) if services is None else lend(services.redis),
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        on_job_start=on_job_start,
        on_job_end=on_job_end,
        cron_jobs=None if burst else CRON_JOBS,
        ctx=ctx,
        burst=burst,
        handle_signals=handle_signals,
        poll_delay=config.worker_poll_delay_s if poll_delay_s is None else poll_delay_s,
        max_jobs=config.worker_max_jobs,
        max_tries=EMAIL_MAX_TRIES,
        job_timeout=JOB_TIMEOUT_S,
        job_completion_wait=config.shutdown_timeout_s,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
    )


_ENV = WorkerOptions.from_env(os.environ)


class WorkerSettings:
    """For `arq workers.WorkerSettings`: the same worker as `cms worker`, configured from the
    environment (REDIS_URL, QUEUE_NAME, SHUTDOWN_TIMEOUT_S, WORKER_MAX_JOBS, WORKER_POLL_DELAY_MS),
    with the same short job locks, except that arq's own loop exits when Redis goes away, where
    `cms worker` reconnects."""

    functions = FUNCTIONS
    cron_jobs = CRON_JOBS
    on_startup = on_startup
    on_shutdown = on_shutdown
    on_job_start = on_job_start
    on_job_end = on_job_end
    queue_name = _ENV.queue_name
    job_completion_wait = _ENV.shutdown_timeout_s
    health_check_interval = HEALTH_CHECK_INTERVAL_S
    redis_settings = redis_settings(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    max_tries = EMAIL_MAX_TRIES
    job_timeout = JOB_TIMEOUT_S
    max_jobs = _ENV.max_jobs
    poll_delay = _ENV.poll_delay_s
