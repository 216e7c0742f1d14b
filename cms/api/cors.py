"""CORS for every API route (aiohttp-cors), and the one answer to a browser origin it does not allow.

aiohttp-cors answers allowed preflights and adds the `Access-Control-*` headers to allowed requests. An
origin that `CORS_ORIGINS` does not list gets, for its preflight and for its actual request alike, a 403
`cors_origin_not_allowed` in the error model whose `detail` names that origin and the allowed ones (or
says that none are set and how to set them), before any handler runs; the service's own origin (the
request's scheme and host, or `PUBLIC_URL`'s) is never refused, so same-origin pages (the API explorer)
keep working. Each refused origin is logged once per process, and at most `MAX_LOGGED_REFUSED_ORIGINS`
of them are remembered: an attacker cycling origins grows neither memory nor the log."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import aiohttp_cors
from aiohttp import web
from aiohttp.typedefs import Handler

from cms.config import Config
from cms.errors import CorsRefused
from cms.web.context import is_https

log = logging.getLogger("cms.api")

MAX_LOGGED_REFUSED_ORIGINS = 256
"""Refused origins a process remembers (to log each once); past this, new ones are not logged."""
MAX_SHOWN_ORIGIN_CHARS = 200
"""An origin is shown (in a refusal's detail and in the log) cut to this many characters."""
MAX_SHOWN_ALLOWED_ORIGINS = 20
"""A refusal's detail lists at most this many allowed origins (then says how many more there are)."""
EXPOSED_HEADERS = ("X-Request-Id", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
"""Response headers a cross-origin page may read."""
PREFLIGHT_MAX_AGE_S = 3600
"""How long a browser may keep a preflight's answer (`Access-Control-Max-Age`)."""


def shown(origin: str) -> str:
    """`origin` as it may be shown in a detail or a log line: at most MAX_SHOWN_ORIGIN_CHARS
    characters, anything unprintable as `?`."""
    cut = origin[:MAX_SHOWN_ORIGIN_CHARS]
    text = "".join(c if c.isprintable() else "?" for c in cut)
    return text + ("..." if len(origin) > MAX_SHOWN_ORIGIN_CHARS else "")


class CorsGate:
    """Which browser origins may call the API (`config.cors_origins`, `CORS_ORIGINS`; `*` allows all),
    and the refusal of the others. `install(app)` sets up aiohttp-cors on every route the app has
    then; `middleware` (in the app's list, after the error-model middleware) refuses a request whose
    `Origin` is neither allowed nor the service's own, on those routes only (the docs site and the
    admin UI, mounted later, are same-origin pages that CORS does not cover)."""

    def __init__(self, config: Config) -> None:
        self.allow_all = "*" in config.cors_origins
        self.allowed = frozenset(config.cors_origins)
        self._listed = tuple(dict.fromkeys(config.cors_origins))
        public = urlsplit(config.public_url) if config.public_url else None
        self._public_origin = f"{public.scheme}://{public.netloc}".lower() if public else None
        self._covered: set[web.AbstractResource] = set()
        self._logged: set[str] = set()
        self._log_full = False

    def install(self, app: web.Application) -> None:
        """CORS for every route of `app` (aiohttp-cors). Its response hook runs only for requests with
        an `Origin` header (without one it changes nothing, CORS 6.1.1, but costs a route look-up on
        every answer)."""
        options = aiohttp_cors.ResourceOptions(  # type: ignore[no-untyped-call]
            allow_credentials=False, allow_headers="*", expose_headers=EXPOSED_HEADERS,
            allow_methods="*", max_age=PREFLIGHT_MAX_AGE_S,
        )
        cors = aiohttp_cors.setup(app, defaults={origin: options for origin in self._listed})
        for route in list(app.router.routes()):
            cors.add(route)
        self._covered = {route.resource for route in app.router.routes() if route.resource is not None}
        hooks = app.on_response_prepare
        for index, hook in enumerate(hooks):
            owner = getattr(hook, "__self__", None)
            if owner is not None and type(owner).__module__.startswith("aiohttp_cors"):
                hooks[index] = _only_with_origin(hook)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse (CorsRefused, 403) a covered route's request from an origin not allowed."""
        origin = request.headers.get("Origin")
        if origin is None or self.allow_all or origin in self.allowed \
                or request.match_info.route.resource not in self._covered or self._is_own(request, origin):
            return await handler(request)
        self._note(origin, request)
        raise self.refusal(origin)

    def refusal(self, origin: str) -> CorsRefused:
        """The 403 `cors_origin_not_allowed` for `origin`: its detail names the origin, the allowed
        origins (or that there are none) and the setting that lists them."""
        if self._listed:
            names = ", ".join(shown(o) for o in self._listed[:MAX_SHOWN_ALLOWED_ORIGINS])
            more = len(self._listed) - MAX_SHOWN_ALLOWED_ORIGINS
            allowed = f"the allowed origins are {names}" + (f" and {more} more" if more > 0 else "")
        else:
            allowed = "no origins are allowed"
        detail = (f"CORS: origin {shown(origin)} is not allowed; {allowed} (the CORS_ORIGINS setting, "
                  "comma-separated; an origin is scheme://host:port exactly, so http://localhost:5173 and "
                  "http://127.0.0.1:5173 are different origins)")
        error = CorsRefused(detail)
        error.headers["Vary"] = "Origin"
        return error

    def _is_own(self, request: web.Request, origin: str) -> bool:
        """Whether `origin` is the service's own: the one the request came to, or PUBLIC_URL's."""
        origin = origin.lower()
        scheme = "https" if is_https(request) else "http"
        return origin == f"{scheme}://{request.host}".lower() or origin == self._public_origin

    def _note(self, origin: str, request: web.Request) -> None:
        """Log the refusal of `origin` once (at most MAX_LOGGED_REFUSED_ORIGINS origins are remembered)."""
        key = shown(origin)
        if key in self._logged:
            return
        if len(self._logged) >= MAX_LOGGED_REFUSED_ORIGINS:
            if not self._log_full:
                self._log_full = True
                log.warning("CORS: %d refused origins logged; further new ones are not logged",
                            MAX_LOGGED_REFUSED_ORIGINS)
            return
        self._logged.add(key)
        allowed = ", ".join(shown(o) for o in self._listed[:MAX_SHOWN_ALLOWED_ORIGINS]) or "none"
        log.warning("CORS: refused origin %s (%s %s); allowed by CORS_ORIGINS: %s", key, request.method,
                    shown(request.path), allowed)


def _only_with_origin(hook: Any) -> Any:
    """`hook` (an `on_response_prepare` handler) called only for requests with an `Origin` header."""

    async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if "Origin" in request.headers:
            await hook(request, response)

    return on_response_prepare
