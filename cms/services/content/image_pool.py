"""The image workers of one process: a bounded `concurrent.futures.ProcessPoolExecutor`, created at
first use and shut down with the services (decisions.md, Files in records, thumbnails and file
tokens: image work off the event loop, in processes, not threads that would hold the GIL).

Workers are forked from a fork server (`forkserver`: the web process's threads and sockets are not
copied into them) and run `imaging.init_worker` first. At most IMAGE_JOBS_QUEUED jobs wait or run at
once per process; more are refused at once with 503, so a burst of uploads cannot queue up minutes of
work. A job that runs past its time-out, or a worker that dies (the memory bound), ends the pool's
workers; the next job starts new ones.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from cms.errors import ServiceUnavailable
from cms.services.content import imaging

log = logging.getLogger("cms.files")

T = TypeVar("T")

IMAGE_WORKERS = max(1, min(4, os.cpu_count() or 1))
"""Worker processes per web process (the machine's cores, at most 4)."""
IMAGE_JOBS_QUEUED = 32
"""Jobs one process lets wait for or run in its workers at once; the next is 503."""
IMAGE_JOB_TIMEOUT_S = 30.0
"""Seconds one job (an upload's check, a thumbnail) may take."""


class ImagePool:
    """The process's image workers (module docstring). `workers`: the pool's size."""

    def __init__(self, workers: int = IMAGE_WORKERS, *, queued: int = IMAGE_JOBS_QUEUED,
                 timeout_s: float = IMAGE_JOB_TIMEOUT_S) -> None:
        self._workers = workers
        self._slots = asyncio.Semaphore(queued)
        self._queued = queued
        self._timeout_s = timeout_s
        self._executor: ProcessPoolExecutor | None = None
        self._closed = False

    def _pool(self) -> ProcessPoolExecutor:
        if self._closed:
            raise ServiceUnavailable("The service is shutting down")
        if self._executor is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([imaging.__name__])  # each worker forks with Pillow imported
            self._executor = ProcessPoolExecutor(self._workers, mp_context=context,
                                                 initializer=imaging.init_worker)
        return self._executor

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker (`fn` a module-level function of `imaging`, `args` picklable).
        Raises what `fn` raises (ImageRefused), or ServiceUnavailable (too many jobs waiting, the
        time-out passed, a worker died, or the pool is closed)."""
        if self._slots.locked():
            raise ServiceUnavailable(f"Too many images are being processed ({self._queued}); retry shortly")
        async with self._slots:
            executor = self._pool()
            future = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
            try:
                return await asyncio.wait_for(future, self._timeout_s)
            except TimeoutError:
                log.error("an image job (%s) ran past %.0f s: its workers are stopped", fn.__name__, self._timeout_s)
                self._reset(executor)
                raise ServiceUnavailable("The image took too long to process") from None
            except BrokenProcessPool:
                log.error("an image worker died during %s (memory bound?): the pool restarts", fn.__name__)
                self._reset(executor)
                raise ServiceUnavailable("The image could not be processed") from None

    def _reset(self, executor: ProcessPoolExecutor) -> None:
        """Stop `executor`'s workers (a job stuck in one cannot be cancelled otherwise); the next job
        starts a new pool."""
        if self._executor is executor:
            self._executor = None
        for process in list(getattr(executor, "_processes", {}).values()):
            process.kill()
        executor.shutdown(wait=False, cancel_futures=True)

    def started(self) -> bool:
        """Whether the workers' pool exists (created by a first job, gone after `close`)."""
        return self._executor is not None

    async def close(self) -> None:
        """Shut the workers down (jobs still waiting are cancelled); later jobs are refused."""
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
