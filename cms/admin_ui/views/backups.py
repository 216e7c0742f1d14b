"""Backups (`/_/backups`): the list of `GET /api/v1/backups`, and create, download, restore and
delete. Restore and delete ask first on a page of their own. Create and restore run the same
BackupService calls as `POST /api/v1/backups` and `.../restore` (same principal, address and user
agent, so they are audited alike) as a job of this process: the browser goes to the job's page,
which shows the service's progress (documents dumped, archive verified, documents loaded) until
the result. A download is `BackupService.download` (audited), as `GET /api/v1/backups/{filename}`.
Backup jobs live in this process: their page is on the replica that started them."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, confirmed_action, error_message, flash_redirect, redirect, render
from cms.errors import CmsError, NotFound
from cms.models import Principal
from cms.services.operations.backups import Backup, backup_time
from cms.web.context import services
from cms.web.files import backup_file_response

log = logging.getLogger("cms.admin_ui")

MAX_JOBS = 20
"""Finished jobs kept per app (the oldest are forgotten)."""


@dataclass
class Job:
    """A backup or restore under way or done: `stage` and `done`/`total` as the service's progress
    callback reports them, then `message` (success) or `error`."""

    id: str
    kind: str  # "create" or "restore"
    filename: str = ""
    stage: str = "starting"
    done: int = 0
    total: int = 0
    finished: bool = False
    message: str = ""
    error: str = ""
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def progress(self, stage: str, done: int, total: int) -> None:
        """The service's progress callback (event loop or worker thread: plain assignments)."""
        self.stage, self.done, self.total = stage, done, total

    @property
    def percent(self) -> int | None:
        """How far the current stage is, when its total is known."""
        return min(100, self.done * 100 // self.total) if self.total else None


_JOBS: weakref.WeakKeyDictionary[web.Application, dict[str, Job]] = weakref.WeakKeyDictionary()
_SEQUENCE = itertools.count(1)


def _jobs(request: web.Request) -> dict[str, Job]:
    return _JOBS.setdefault(request.app, {})


def _running(request: web.Request) -> Job | None:
    """The job of this process still under way, if any (one at a time: each is a whole dump)."""
    return next((j for j in _jobs(request).values() if not j.finished), None)


def _start_job(request: web.Request, kind: str, work: Callable[[Job], Awaitable[str]], *,
               filename: str = "") -> web.Response:
    """Run `work(job)` (its result: the job's message) as a new job of this process and send the
    browser to the job's page, or to the job already running (one at a time). The work runs in a
    task started here, so it keeps the request's origin (cms.services.origin) for the audit log."""
    running = _running(request)
    if running is not None:
        return redirect(f"{PREFIX}/backups/jobs/{running.id}", request)
    job = Job(id=f"{next(_SEQUENCE):04d}-{secrets.token_hex(4)}", kind=kind, filename=filename)
    _track(request, job, asyncio.ensure_future(work(job)))
    return redirect(f"{PREFIX}/backups/jobs/{job.id}", request)


def _track(request: web.Request, job: Job, work: asyncio.Future[str]) -> None:
    jobs = _jobs(request)

    async def run() -> None:
        try:
            job.message = await work
        except CmsError as exc:
            job.error = exc.detail
        except Exception:  # internals stay in the log, not on the page
            log.exception("admin UI backup job %s failed", job.id)
            job.error = f"Failed (see the server log, job {job.id})."
        finally:
            job.finished = True

    job.task = asyncio.create_task(run(), name=f"admin-ui-backup-{job.id}")
    jobs[job.id] = job
    for old in [j for j in jobs.values() if j.finished][:-MAX_JOBS]:
        jobs.pop(old.id, None)


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


async def _backup(request: web.Request, principal: Principal) -> Backup:
    """The listed backup named in the path (NotFound otherwise; BadRequest for a malformed name)."""
    filename = request.match_info["filename"]
    if backup_time(filename) is None:
        raise NotFound("There is no such backup.")
    for backup in await services(request).backups.list(principal):
        if backup.filename == filename:
            return backup
    raise NotFound(f"Backup {filename} not found")


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/backups: every backup, newest first, and the jobs of this process."""
    backups = await services(request).backups.list(principal)
    jobs = sorted(_jobs(request).values(), key=lambda j: j.id, reverse=True)
    return await render(request, "backups/index.html", backups=backups, jobs=jobs, size=_size)


@admin_page
async def create(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/backups: start a backup; the browser goes to its job page (or to the one already
    running: one job at a time)."""
    async def work(job: Job) -> str:
        backup = await services(request).backups.create(principal, progress=job.progress)
        job.filename = backup.filename
        return f"Backup {backup.filename} written ({_size(backup.size)})."

    return _start_job(request, "create", work)


@admin_page
async def confirm(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/backups/{filename}/restore|delete: the confirmation page."""
    backup = await _backup(request, principal)
    action = request.path.rsplit("/", 1)[-1]  # restore or delete (routes())
    return await render(request, "backups/confirm.html", backup=backup, action=action, size=_size, error=None)


@admin_page
async def restore(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/backups/{filename}/restore: start the restore; the browser goes to its job page (or
    to the one already running)."""
    backup = await _backup(request, principal)

    async def work(job: Job) -> str:
        result = await services(request).backups.restore(principal, backup.filename, progress=job.progress)
        return result.message + "."

    return _start_job(request, "restore", work, filename=backup.filename)


@admin_page
async def delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/backups/{filename}/delete: delete the backup (as `DELETE /api/v1/backups/{filename}`)."""
    backup = await _backup(request, principal)
    try:
        await services(request).backups.delete(principal, backup.filename)
    except CmsError as exc:
        return await render(request, "backups/confirm.html", status=exc.status, backup=backup, action="delete",
                            size=_size, error=error_message(exc))
    return flash_redirect(request, PREFIX + "/backups", f"Backup {backup.filename} deleted.")


@admin_page
async def download(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/backups/{filename}/download: the archive, as `GET /api/v1/backups/{filename}` sends it."""
    backup, path = await services(request).backups.download(principal, request.match_info["filename"])
    return backup_file_response(backup.filename, path)


@admin_page
async def job_page(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/backups/jobs/{job_id}: a job's progress and result; with htmx (its polling), only the
    status part."""
    job = _jobs(request).get(request.match_info["job_id"])
    if job is None:
        raise NotFound("There is no such backup job in this process (it may have run on another replica).")
    if request.headers.get("HX-Request") == "true":
        return await render(request, "backups/_job.html", job=job)
    return await render(request, "backups/job.html", job=job)


def routes() -> list[web.RouteDef]:
    """The backups screen's routes."""
    name = PREFIX + "/backups/{filename}"
    return [
        web.get(PREFIX + "/backups", index, name="admin_ui.backups"),
        web.post(PREFIX + "/backups", create),
        web.get(PREFIX + "/backups/jobs/{job_id}", job_page),
        web.get(name + "/download", download),
        *confirmed_action(name + "/restore", confirm, restore),
        *confirmed_action(name + "/delete", confirm, delete),
    ]
