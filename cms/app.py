"""create_app(config): the aiohttp application (middlewares, routes, CORS, service lifecycle), with the
admin UI mounted at `/_/` as a sub-app (cms.admin_ui). The only module that imports both cms.api
and cms.admin_ui."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import swagger_ui_bundle  # type: ignore[import-untyped]
from aiohttp import web

from cms.admin_ui import PREFIX as ADMIN_UI_PREFIX
from cms.admin_ui import create_admin_ui
from cms.api.access_log import CmsAccessLogger
from cms.api.cors import CorsGate
from cms.api.guards import principal_middleware
from cms.api.guide import GUIDE_DIR, add_guide
from cms.api.http_server import CmsAppRunner
from cms.api.middlewares import request_middleware
from cms.api.openapi import openapi_json
from cms.api.ratelimit import rate_limit_middleware
from cms.api.routes import add_routes
from cms.config import Config
from cms.observability import tracing
from cms.observability.recorder import Recorder
from cms.services.content.schema_service import START_WAIT_S
from cms.services.origin import RequestOrigin, origin_scope
from cms.web.context import HTTP_STATS, SERVICES
from cms.web.schema_snapshot import read_snapshot_file
from cms.wiring import Services, open_services, recording

log = logging.getLogger("cms")

RECORDER = web.AppKey("recorder", Recorder)
"""The web app's recorder of dashboard figures and request log entries (tests flush it)."""


def create_app(config: Config, *, services: Services | None = None,
               guide_dir: Path | None = GUIDE_DIR) -> web.Application:
    """The web application. It opens its own services (MongoDB, Redis) on start-up and closes
    them on clean-up, unless `services` are handed in (then the caller owns them).

    JSON bodies are limited to `config.max_json_bytes` (413 above). The admin UI is a sub-app at
    `/_/`: this app's middlewares (request id, rate limit, principal) run first on its requests,
    then its own, which answer its failures with HTML pages. The built docs site in `guide_dir` (by
    default the package's `static/guide`) is served at `/docs/guide/` when it is there (cms.api.guide).
    On start-up the record indexes of every collection are synced in the background (`_index_sync_ctx`).
    With tracing on, a first middleware opens each request's server span (cms.observability.tracing).
    Browser origins that `CORS_ORIGINS` does not list are refused before any handler (cms.api.cors)."""
    cors = CorsGate(config)
    gate = () if cors.allow_all else (cors.middleware,)
    app = web.Application(
        middlewares=[*tracing.server_middlewares(), request_middleware, *gate, rate_limit_middleware,
                     principal_middleware],
        client_max_size=config.max_json_bytes,
    )
    app[HTTP_STATS] = {"active_connections": 0, "requests_total": 0}
    if services is not None:
        app[SERVICES] = services
    else:
        app.cleanup_ctx.append(_services_ctx(config))
    app.cleanup_ctx.append(_index_sync_ctx)
    app.cleanup_ctx.append(_realtime_ctx)
    app.cleanup_ctx.append(_recording_ctx)
    add_routes(app)
    app.on_shutdown.append(_close_realtime_streams)
    app.router.add_get("/openapi.json", openapi_json)
    app.router.add_static("/docs/static", Path(swagger_ui_bundle.swagger_ui_path))
    cors.install(app)
    add_guide(app, guide_dir)  # after CORS: static pages of the same origin
    app.add_subapp(ADMIN_UI_PREFIX, create_admin_ui())  # after CORS: the admin UI is same-origin only
    return app


def create_runner(app: web.Application, **kwargs: Any) -> web.AppRunner:
    """The runner that serves `app` (keyword arguments as `web.AppRunner`): requests that aiohttp's
    HTTP parser rejects are answered in the `{detail, code}` model too (414 `uri_too_long`,
    431 `request_header_too_large`, 400 `bad_request`; see cms.api.http_server). The access log
    defaults to CmsAccessLogger (aiohttp's line plus the fields `LOG_FORMAT=json` prints)."""
    kwargs.setdefault("access_log_class", CmsAccessLogger)
    return CmsAppRunner(app, **kwargs)


def _services_ctx(config: Config):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with open_services(config) as services:
            app[SERVICES] = services
            if config.admin_email and config.admin_password:
                await services.identity.registration.ensure_admin(config.admin_email, config.admin_password)
            await settle_schema(services, config)
            yield

    return ctx


async def _index_sync_ctx(app: web.Application) -> AsyncIterator[None]:
    """At start-up, every collection's record indexes are synced in the background, by one replica at
    a time (cms.services.content.index_sync); at clean-up the sync ends after its current collection."""
    sync = app[SERVICES].index_sync
    sync.start()
    try:
        yield
    finally:
        await sync.stop()


async def settle_schema(services: Services, config: Config) -> None:
    """Start-up (decisions.md, Schema as code): a schema apply cut short is undone or completed, then
    `SCHEMA_FILE`, if set, is applied (refusing data loss unless SCHEMA_ALLOW_DATA_LOSS); replicas started
    together take turns under the schema lock, and the later ones find nothing left to change. Raises
    CmsError (a snapshot that is invalid or loses data not allowed: the start-up stops)."""
    await services.schema.resume()
    if config.schema_file is None:
        return
    wanted = read_snapshot_file(config.schema_file)
    with origin_scope(RequestOrigin(user_agent="cms-serve SCHEMA_FILE")):
        snapshot = await services.schema.apply(None, wanted, expected_hash=None,
                                               allow_data_loss=config.schema_allow_data_loss, wait_s=START_WAIT_S)
    log.info("SCHEMA_FILE %s applied: the schema's hash is %s", config.schema_file, snapshot["hash"])


async def _realtime_ctx(app: web.Application) -> AsyncIterator[None]:
    """This process's realtime hub reads the event stream while the app serves."""
    hub = app[SERVICES].realtime
    await hub.start()
    try:
        yield
    finally:
        await hub.stop()


async def _recording_ctx(app: web.Application) -> AsyncIterator[None]:
    """This process records its figures for the dashboard and the request log while the app serves
    (`cms.wiring.recording`, kept as `app[RECORDER]`; a last flush on clean-up)."""
    async with recording(app[SERVICES]) as recorder:
        app[RECORDER] = recorder
        yield


async def _close_realtime_streams(app: web.Application) -> None:
    """Graceful shutdown: end every realtime stream first, so clients reconnect (to another replica)
    and resume, instead of waiting out the shutdown time-out."""
    services = app.get(SERVICES)
    if services is not None:
        for conn in list(services.realtime.connections.values()):
            conn.close("shutdown")
