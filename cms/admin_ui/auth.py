"""Sign-in and sign-out of the admin UI, through the same identity services as
`POST /api/v1/auth/login`, `/2fa/verify` and `/logout` (the API's user_auth handlers): the admin table's
password login, its second step when the user has 2FA on, the same auth rate limit per client IP
and address, and session revocation on sign-out."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from aiohttp import web

from cms.admin_ui.common import (
    LOGIN_PATH,
    NEXT_PATH,
    PREFIX,
    Handler,
    error_page,
    flash_redirect,
    redirect,
    render,
    signed_in_page,
)
from cms.admin_ui.session import COOKIE_CHANGE_KEY, CSRF_FIELD, current_principal, login_csrf_matches, login_csrf_token
from cms.errors import CmsError, RateLimited
from cms.models import LoginResult, Principal
from cms.web.context import client_ip, load, services, user_agent
from cms.web.ratelimit import enforce_auth_limit
from cms.web.schemas import MAX_EMAIL, LoginSchema, TwoFactorVerifySchema
from cms.web.uploads import read_form

BAD_CREDENTIALS = "Wrong email or password."
MAX_TOKEN = 4096
"""Longest mfa_token echoed back into the 2FA form (TwoFactorVerifySchema's bound)."""

SignInStep = Callable[[web.Request, dict[str, str], str], Awaitable[web.StreamResponse]]
"""A sign-in POST handler after the CSRF check: `(request, form fields as text, next path)`."""


def _next(value: object) -> str:
    target = value if isinstance(value, str) else ""
    return target if NEXT_PATH.match(target) and target != LOGIN_PATH else PREFIX + "/"


async def _form_page(request: web.Request, template: str, *, status: int = 200, **context: object) -> web.Response:
    response = await render(request, template, status=status, principal=None,
                            csrf_token=login_csrf_token(request), **context)
    login_csrf_token(request, response)  # sets the nonce cookie when this browser has none yet
    return response


async def login_page(request: web.Request) -> web.StreamResponse:
    """GET /_/login: the sign-in form (already signed in: the dashboard)."""
    if await current_principal(request) is not None:
        return redirect(_next(request.query.get("next")))
    return await _form_page(request, "login/login.html", email="", error=None, next=_next(request.query.get("next")))


def _sign_in_step(fields: tuple[str, ...]) -> Callable[[SignInStep], Handler]:
    """The decorator of a sign-in form's POST handler: the login CSRF check (403 page when it fails),
    then `step(request, values, target)` with the form's `fields` as text (missing: "") and the
    checked `next` path to go to afterwards."""
    def decorate(step: SignInStep) -> Handler:
        @functools.wraps(step)
        async def handler(request: web.Request) -> web.StreamResponse:
            form = await read_form(request)
            if not login_csrf_matches(request, _text(form.get(CSRF_FIELD))):
                return await error_page(request, 403,
                                        "The sign-in form has expired (CSRF check failed). Reload and retry.")
            return await step(request, {name: _text(form.get(name)) for name in fields}, _next(form.get("next")))

        return handler

    return decorate


@_sign_in_step(("email", "password"))
async def login_submit(request: web.Request, form: dict[str, str], target: str) -> web.StreamResponse:
    """POST /_/login `email, password, csrf_token, next`: a session cookie and a redirect, the 2FA
    form when the user has 2FA on, or the form again with the error (401 wrong credentials, 429)."""
    email, password = form["email"], form["password"]
    identity = services(request).identity
    try:
        email = load(LoginSchema(), form)["email"]  # the API's bounds, the address normalised
        await enforce_auth_limit(request, "login", email)
        result = await identity.login.password(identity.systems.admin, email, password, ip=client_ip(request),
                                               user_agent=user_agent(request))
    except CmsError as exc:
        message = BAD_CREDENTIALS if exc.status in (401, 422) else _refusal(exc)
        return await _form_page(request, "login/login.html", status=exc.status, email=email[:MAX_EMAIL],
                                error=message, next=target)
    return await _signed_in(request, result, target)


@_sign_in_step(("mfa_token", "code"))
async def two_factor_submit(request: web.Request, form: dict[str, str], target: str) -> web.StreamResponse:
    """POST /_/login/2fa `mfa_token, code, csrf_token, next`: completes a 2FA login (the second step
    of `/api/v1/auth/2fa/verify`); a wrong code shows the form again while the mfa_token lasts."""
    mfa_token, code = form["mfa_token"], form["code"]
    identity = services(request).identity
    try:
        load(TwoFactorVerifySchema(), form)  # the API's bounds
        await enforce_auth_limit(request, "2fa_verify", mfa_token)
        result = await identity.login.second_step(identity.systems.admin, mfa_token, code.strip(),
                                                  ip=client_ip(request), user_agent=user_agent(request))
    except CmsError as exc:
        if exc.code == "otp_invalid":
            return await _form_page(request, "login/two_factor.html", status=400, mfa_token=mfa_token[:MAX_TOKEN],
                                    error="Wrong code; try again.", next=target)
        return await _form_page(request, "login/login.html", status=exc.status, email="", error=_refusal(exc),
                                next=target)
    return await _signed_in(request, result, target)


async def _signed_in(request: web.Request, result: LoginResult, target: str) -> web.StreamResponse:
    if result.requires_2fa:
        return await _form_page(request, "login/two_factor.html", mfa_token=result.mfa_token, error=None,
                                next=target)
    request[COOKIE_CHANGE_KEY] = result.token  # written by on_response_prepare
    return redirect(target)


@signed_in_page
async def logout(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/logout (CSRF): revoke the session (as `/api/v1/auth/logout`) and clear the cookie."""
    await services(request).identity.sessions.logout(principal)
    request[COOKIE_CHANGE_KEY] = None
    return flash_redirect(request, LOGIN_PATH, "You are signed out.")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _refusal(error: CmsError) -> str:
    if isinstance(error, RateLimited):
        return f"Too many attempts; retry in {error.retry_after_s} s."
    return error.detail


def routes() -> list[web.RouteDef]:
    """Sign-in, its 2FA step and sign-out."""
    return [
        web.get(LOGIN_PATH, login_page),
        web.post(LOGIN_PATH, login_submit),
        web.post(LOGIN_PATH + "/2fa", two_factor_submit),
        web.post(PREFIX + "/logout", logout),
    ]
