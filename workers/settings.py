"""arq worker set-up: `cms worker`, `arq workers.WorkerSettings`, the in-process worker of
embedded `cms serve`, and burst workers in tests all build their Worker here."""

from __future__ import annotations

import logging
import os
from contextlib import AsyncExitStack
from typing import Any

from arq import Worker
from arq.cron import cron
from arq.worker import func

from cms.config import QUEUE_NAME, Config
from cms.jobs import DELIVER_WEBHOOK, SEND_EMAIL, SEND_OTP, SEND_PASSWORD_RESET
from cms.wiring import Services, open_services, redis_settings
from workers.auth import AUTH_JOB_MAX_TRIES, send_otp, send_password_reset
from workers.email import EMAIL_MAX_TRIES, send_email
from workers.webhooks import RELAY_EVERY_S, WEBHOOK_MAX_TRIES, deliver_webhook, relay_webhook_outbox

FUNCTIONS = [
    func(send_email, name=SEND_EMAIL, max_tries=EMAIL_MAX_TRIES),
    func(send_password_reset, name=SEND_PASSWORD_RESET, max_tries=AUTH_JOB_MAX_TRIES),
    func(send_otp, name=SEND_OTP, max_tries=AUTH_JOB_MAX_TRIES),
    func(deliver_webhook, name=DELIVER_WEBHOOK, max_tries=WEBHOOK_MAX_TRIES),
]
HEALTH_CHECK_INTERVAL_S = 30
"""How often a worker refreshes its health-check key (`arq --check`; it expires 1 s after)."""
CRON_JOBS = [cron(relay_webhook_outbox, second=set(range(0, 60, RELAY_EVERY_S)), run_at_startup=True,
                  unique=True, timeout=60)]


async def on_startup(ctx: dict[str, Any]) -> None:
    """Open services unless the caller handed them in (`ctx["services"]`)."""
    if "config" not in ctx:
        ctx["config"] = Config.from_env(os.environ)
    if "services" not in ctx:
        stack = AsyncExitStack()
        ctx["services"] = await stack.enter_async_context(open_services(ctx["config"]))
        ctx["exit_stack"] = stack
    # Deliveries whose enqueue was lost (a web process died after writing them) go out now; a burst
    # worker, which runs no cron jobs, relies on this.
    try:
        await ctx["services"].webhooks.relay()
    except Exception:
        logging.getLogger("cms.workers").warning("webhook relay at start-up failed", exc_info=True)


async def on_shutdown(ctx: dict[str, Any]) -> None:
    """Close what on_startup opened."""
    stack = ctx.pop("exit_stack", None)
    if stack is not None:
        await stack.aclose()


def build_worker(config: Config, *, services: Services | None = None, burst: bool = False,
                 handle_signals: bool = True, poll_delay_s: float | None = None) -> Worker:
    """An arq Worker for `config`'s queue with every job function, running up to
    `config.worker_max_jobs` jobs at once and looking at the queue every `poll_delay_s` seconds
    (default `config.worker_poll_delay_s`). It opens its own Redis pool; `services` may be shared
    with the web app in the same process.

    On SIGTERM or SIGINT (`handle_signals`), or `handle_sig_wait_for_completion()`, it stops taking
    jobs and gives running ones up to `config.shutdown_timeout_s` seconds; then arq cancels them,
    and a cancelled job stays queued (arq's retry) for the next worker to run."""
    assert config.redis_url, "redis_url must be set"
    ctx: dict[str, Any] = {"config": config}
    if services is not None:
        ctx["services"] = services
    return Worker(
        FUNCTIONS,
        queue_name=config.queue_name,
        redis_settings=redis_settings(config.redis_url),
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        cron_jobs=None if burst else CRON_JOBS,
        ctx=ctx,
        burst=burst,
        handle_signals=handle_signals,
        poll_delay=config.worker_poll_delay_s if poll_delay_s is None else poll_delay_s,
        max_jobs=config.worker_max_jobs,
        max_tries=EMAIL_MAX_TRIES,
        job_timeout=120,
        job_completion_wait=config.shutdown_timeout_s,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
    )


class WorkerSettings:
    """For `arq workers.WorkerSettings`: reads the configuration from the environment."""

    functions = FUNCTIONS
    cron_jobs = CRON_JOBS
    on_startup = on_startup
    on_shutdown = on_shutdown
    queue_name = os.environ.get("QUEUE_NAME") or QUEUE_NAME
    job_completion_wait = Config.shutdown_timeout_s
    health_check_interval = HEALTH_CHECK_INTERVAL_S
    redis_settings = redis_settings(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    max_tries = EMAIL_MAX_TRIES
    max_jobs = Config.worker_max_jobs
    poll_delay = Config.worker_poll_delay_s
