"""Handlers of the admin-table users' own auth endpoints, `/api/v1/auth/*` (spec: Admin
authentication): register, verify-email (any user system's token) and password reset. Login,
refresh, me, logout, change-password, resend-verification and sessions are shared with the auth
collections (`cms/api/user_auth.py`)."""

from __future__ import annotations

from aiohttp import web

from cms.api.responses import json_response
from cms.api.schemas import (
    ForgotPasswordSchema,
    PasswordResetRequestSchema,
    RegisterSchema,
    ResetPasswordSchema,
    TokenBodySchema,
)
from cms.services import representation as represent
from cms.services.identity.password_reset import RESET_REQUESTED_MESSAGE
from cms.web.context import parse_body, services
from cms.web.ratelimit import enforce_auth_limit, enforce_mail_limit


async def register(request: web.Request) -> web.Response:
    """POST /auth/register: 201 `{user, message}`; the user has role `user`, unverified, and a
    verification email is queued. 400 (malformed JSON, already_exists), 422 (fields, password policy),
    429 (10 attempts per minute per client IP and email)."""
    body = await parse_body(request, RegisterSchema())
    await enforce_auth_limit(request, "register", body["email"])
    identity = services(request).identity
    user = await identity.registration.register(
        identity.systems.admin, body["email"], body["password"], body["password_confirm"], {"name": body["name"]},
    )
    message = "Registered. A verification link has been sent to your email address."
    return json_response(represent.ADMIN_USERS.registered(user, message), status=201)


async def verify_email(request: web.Request) -> web.Response:
    """POST /auth/verify-email `{token}`: 200 `{message}`, the user is verified, whichever user
    system issued the token. 400 token_invalid (unknown, used, replaced) or token_expired (24 h),
    422 (no token)."""
    body = await parse_body(request, TokenBodySchema())
    await services(request).identity.verification.verify_any(body["token"])
    return json_response(represent.message("Email verified"))


async def request_password_reset(request: web.Request) -> web.Response:
    """POST /auth/request-password-reset `{email, collection?}`: 200 `{message}`, the same fixed
    message (and about the same time) whether or not the address exists; if it does, a reset link
    (1 hour, single use) is emailed. With `collection` (an auth collection's name) the address is
    looked up among that collection's users. 404 (unknown or non-auth collection), 422, 429 (auth
    limit, or the mail limit per address, the same for an unknown address)."""
    body = await parse_body(request, PasswordResetRequestSchema())
    limit_key = f"{body['collection']}:{body['email']}" if body["collection"] else body["email"]
    await enforce_auth_limit(request, "reset", limit_key)
    endpoint = f"{body['collection']}:request_password_reset" if body["collection"] else "request_password_reset"
    await enforce_mail_limit(request, endpoint, body["email"])
    await services(request).identity.password_reset.request(
        body["email"], body["collection"]
    )
    return json_response(represent.message(RESET_REQUESTED_MESSAGE))


async def forgot_password(request: web.Request) -> web.Response:
    """POST /auth/forgot-password `{email}`: the admin-table form of request-password-reset, with
    the same answer. 422, 429 (auth limit, or the mail limit per address)."""
    body = await parse_body(request, ForgotPasswordSchema())
    await enforce_auth_limit(request, "reset", body["email"])
    await enforce_mail_limit(request, "forgot_password", body["email"])
    await services(request).identity.password_reset.request(
        body["email"], None
    )
    return json_response(represent.message(RESET_REQUESTED_MESSAGE))


async def reset_password(request: web.Request) -> web.Response:
    """POST /auth/reset-password `{token, new_password, password_confirm?}`: 200 `{message}`; the
    token (from the emailed link, admin or auth-collection user) is spent, the password set and
    every session of that user revoked. 400 token_invalid (unknown, used, replaced) / token_expired
    (1 hour), 422 (policy, confirmation; the token stays usable), 429."""
    body = await parse_body(request, ResetPasswordSchema())
    await enforce_auth_limit(request, "reset", body["token"])
    await services(request).identity.password_reset.reset(
        body["token"], body["new_password"], body["password_confirm"],
    )
    return json_response(represent.message("Password changed. Please log in with the new password."))
