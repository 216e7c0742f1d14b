"""What every admin screen uses: rendering, the admin check, CSRF, flash messages and errors.

A screen handler is written as

    @admin_page
    async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
        collections = await services(request).collections.list()
        return await render(request, "collections/index.html", collections=collections)

`admin_page` signs the request in (cookie -> Principal, see session.py), refuses role `user` with a
403 page, checks the CSRF token of every POST/PUT/PATCH/DELETE and turns a service's CmsError into
an error page. Handlers call the same services, with the same principal, as the REST API.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2
from aiohttp import web

from cms.admin_ui.session import (
    CSRF_FIELD,
    CSRF_HEADER,
    PRINCIPAL_KEY,
    SAFE_METHODS,
    csrf_token_for,
    csrf_token_matches,
    current_principal,
)
from cms.errors import CmsError
from cms.models import Principal
from cms.services.origin import origin_scope
from cms.web.context import is_https, request_origin, services
from cms.web.uploads import read_form

PREFIX = "/_"
LOGIN_PATH = PREFIX + "/login"
FLASH_COOKIE = "cms_admin_flash"
NEXT_PATH = re.compile(r"^/_/[A-Za-z0-9_\-/]*\Z")
"""Where sign-in may send the browser back to (no other host, no `//`)."""

ScreenHandler = Callable[[web.Request, Principal], Awaitable[web.StreamResponse]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("cms.admin_ui", "templates"),
    autoescape=jinja2.select_autoescape(["html"], default_for_string=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


class LoginRequired(Exception):
    """No valid admin-UI session: the browser goes to the sign-in page."""


class PageRefused(Exception):
    """The request is refused with an error page (`status`, `message`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ErrorMessage:
    """A service error as a page shows it: the detail, the code and per-field messages."""

    detail: str
    code: str
    fields: dict[str, list[str]] = field(default_factory=dict)


def error_message(error: CmsError) -> ErrorMessage:
    """A CmsError (the `{detail, code, errors}` model) as an inline message; nested field errors
    keep their dotted keys (`schema.0.name`)."""
    fields: dict[str, list[str]] = {}
    for key, messages in (error.errors or {}).items():
        fields[str(key)] = [str(m) for m in messages] if isinstance(messages, list) else [str(messages)]
    return ErrorMessage(detail=error.detail, code=error.code, fields=fields)


MAX_PAGE = 1_000_000
"""Highest page number a list screen accepts (as `RecordListQuerySchema`)."""


def page_number(raw: str) -> int:
    """A `?page=` value as a page number: 1..MAX_PAGE (anything else is the nearest bound, or 1)."""
    try:
        return min(MAX_PAGE, max(1, int(raw)))
    except ValueError:
        return 1


async def require_signed_in(request: web.Request) -> Principal:
    """The signed-in admin-table user, any role. Raises LoginRequired."""
    principal = await current_principal(request)
    if principal is None:
        raise LoginRequired()
    return principal


async def require_admin(request: web.Request) -> Principal:
    """The signed-in admin-table user with role `admin`. Raises LoginRequired or PageRefused (403)."""
    principal = await require_signed_in(request)
    if not principal.is_admin:
        raise PageRefused(403, "The admin area needs an account with role admin.")
    return principal


async def csrf_check(request: web.Request, principal: Principal) -> None:
    """Check the CSRF token of a state-changing request: the `X-CSRF-Token` header (htmx, app.js) or
    the `csrf_token` form field. Raises PageRefused (403) when it is missing or wrong."""
    presented = request.headers.get(CSRF_HEADER)
    if presented is None and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await read_form(request)
        value = form.get(CSRF_FIELD)
        presented = value if isinstance(value, str) else None
    if not csrf_token_matches(request, principal, presented):
        raise PageRefused(403, "The form has expired or did not come from this site (CSRF check failed). "
                               "Reload the page and try again.")


def flash(response: web.StreamResponse, request: web.Request, message: str, level: str = "info") -> None:
    """Show `message` (`level`: info, success or error) on the next page rendered for this browser
    (a signed, short-lived cookie; use it before a redirect)."""
    payload = base64.urlsafe_b64encode(json.dumps({"m": message, "l": level}).encode()).decode().rstrip("=")
    response.set_cookie(FLASH_COOKIE, f"{payload}.{_flash_mac(request, payload)}", path="/_/", httponly=True,
                        samesite="Lax", secure=is_https(request), max_age=60)


def _flash_mac(request: web.Request, payload: str) -> str:
    secret = services(request).config.secret_key.encode()
    return hmac.new(secret, b"cms-admin-ui:flash:" + payload.encode(), hashlib.sha256).hexdigest()[:32]


def _take_flash(request: web.Request) -> dict[str, str] | None:
    payload, _, mac = request.cookies.get(FLASH_COOKIE, "").partition(".")
    if not payload or not hmac.compare_digest(mac, _flash_mac(request, payload)):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return {"message": str(data["m"]), "level": str(data["l"])}
    except (ValueError, KeyError, TypeError):
        return None


def redirect(location: str, request: web.Request | None = None) -> web.Response:
    """A 303 See Other to `location`; an htmx request gets `HX-Redirect` instead (a full page load)."""
    if request is not None and request.headers.get("HX-Request") == "true":
        return web.Response(status=204, headers={"HX-Redirect": location})
    return web.Response(status=303, headers={"Location": location})


def flash_redirect(request: web.Request, location: str, message: str, level: str = "success") -> web.Response:
    """The answer of a completed action: `redirect` to `location` (303, or `HX-Redirect` for htmx) with
    `message` flashed on the page it lands on (`level`: info, success or error)."""
    response = redirect(location, request)
    flash(response, request, message, level)
    return response


def confirmed_action(path: str, confirm: Handler, act: Handler, *, name: str | None = None) -> list[web.RouteDef]:
    """A destructive action at `path`: GET shows `confirm` (the "are you sure?" page, whose form posts
    back to the same path; route `name`, if given) and POST runs `act`."""
    return [web.get(path, confirm, name=name), web.post(path, act)]


async def render(request: web.Request, template: str, *, status: int = 200, **context: Any) -> web.Response:
    """Render `template` (a path under templates/, autoescaped) as an HTML page. The context also
    has `principal` (or None), `csrf_token` (session token, or the value the page passes),
    `nav_collections` (for admins), `flash` (a message left by `flash`), `path` and `prefix`."""
    principal: Principal | None = request.get(PRINCIPAL_KEY)
    context.setdefault("principal", principal)
    if principal is not None:
        context.setdefault("csrf_token", csrf_token_for(request, principal))
    context.setdefault("csrf_token", "")
    if principal is not None and principal.is_admin and "nav_collections" not in context:
        context["nav_collections"] = await services(request).collections.list()
    context.setdefault("nav_collections", [])
    flashed = _take_flash(request)
    context.setdefault("flash", flashed)
    context.setdefault("path", request.path)
    context.setdefault("prefix", PREFIX)
    html = ENV.get_template(template).render(**context)
    response = web.Response(text=html, status=status, content_type="text/html", charset="utf-8")
    if flashed is not None:
        response.del_cookie(FLASH_COOKIE, path="/_/")
    return response


async def error_page(request: web.Request, status: int, message: str) -> web.Response:
    """The error page (403, 404, ...) with `message`, in the layout when signed in."""
    return await render(request, "error.html", status=status, status_code=status, message=message)


def login_redirect(request: web.Request) -> web.Response:
    """Send the browser to the sign-in page, coming back to this page (GET) afterwards."""
    target = LOGIN_PATH
    if request.method == "GET" and NEXT_PATH.match(request.path) and request.path != LOGIN_PATH:
        target += "?next=" + request.path
    return redirect(target, request)


def _page(check: Callable[[web.Request], Awaitable[Principal]], *,
          form_csrf: bool = True) -> Callable[[ScreenHandler], Handler]:
    """The decorator of screen handlers: `check` signs the request in; with `form_csrf` (the
    default) the CSRF token of every state-changing request is checked first, else the handler
    checks it itself (a form read as a stream)."""
    def decorate(handler: ScreenHandler) -> Handler:
        @functools.wraps(handler)
        async def wrapper(request: web.Request) -> web.StreamResponse:
            try:
                principal = await check(request)
                if form_csrf and request.method not in SAFE_METHODS:
                    await csrf_check(request, principal)
                with origin_scope(request_origin(request, principal)):  # the signed-in admin's, for the audit log
                    return await handler(request, principal)
            except LoginRequired:
                return login_redirect(request)
            except PageRefused as exc:
                return await error_page(request, exc.status, exc.message)
            except CmsError as exc:
                return await error_page(request, exc.status, exc.detail)

        return wrapper

    return decorate


admin_page = _page(require_admin)
streamed_admin_page = _page(require_admin, form_csrf=False)
"""`admin_page` for a multipart form read as a stream (the app's `client_max_size` would bound a
form read whole): the handler checks the CSRF token from the form's first part before it reads or
stores anything else."""
"""Decorator of a screen handler `(request, principal)`: role admin, CSRF on unsafe methods, error pages."""

signed_in_page = _page(require_signed_in)
"""Like `admin_page` for any admin-table user (role user too): sign-out and the 403 page's actions."""


def stub_routes(path: str, title: str, screen: str) -> list[web.RouteDef]:
    """A GET route at `path` showing "not built yet" for a screen still to come (`screen`: the
    views module that will own it)."""

    @admin_page
    async def stub(request: web.Request, principal: Principal) -> web.StreamResponse:
        return await render(request, "stub.html", title=title, screen=screen)

    return [web.get(path, stub, name=f"admin_ui.{screen}")]
