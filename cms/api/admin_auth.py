"""Handlers of the admin-table users' auth endpoints, `/api/v1/auth/*` (spec: Admin authentication)."""

from __future__ import annotations

from aiohttp import web

from cms.api.context import client_ip, parse_body, services, user_agent
from cms.api.guards import require_admin_user
from cms.api.ratelimit import enforce_auth_limit, enforce_mail_limit
from cms.api.schemas import (
    AdminUserSchema,
    ForgotPasswordSchema,
    LoginResponseSchema,
    LoginSchema,
    PasswordResetRequestSchema,
    RefreshSchema,
    RegisterSchema,
    ResetPasswordSchema,
    TokenBodySchema,
    TokenSchema,
)
from cms.services.password_resets import RESET_REQUESTED_MESSAGE


async def register(request: web.Request) -> web.Response:
    """POST /auth/register: 201 `{user, message}`; the user has role `user`, unverified, and a
    verification email is queued. 400 (malformed JSON, already_exists), 422 (fields, password policy),
    429 (10 attempts per minute per client IP and email)."""
    body = await parse_body(request, RegisterSchema())
    await enforce_auth_limit(request, "register", body["email"])
    user = await services(request).accounts.register(
        body["email"], body["password"], body["password_confirm"], body["name"]
    )
    message = "Registered. A verification link has been sent to your email address."
    return web.json_response({"user": AdminUserSchema().dump(user), "message": message}, status=201)


async def login(request: web.Request) -> web.Response:
    """POST /auth/login: 200 `{user, token, message, requires_2fa}`, one new session.
    401 invalid_credentials (the same for an unknown email and a wrong password), 400, 422,
    429 (10 attempts per minute per client IP and email)."""
    body = await parse_body(request, LoginSchema())
    await enforce_auth_limit(request, "login", body["email"])
    result = await services(request).accounts.login(
        body["email"], body["password"], user_agent=user_agent(request), ip=client_ip(request)
    )
    return web.json_response(LoginResponseSchema().dump(result))


async def refresh(request: web.Request) -> web.Response:
    """POST /auth/refresh: 200 token object `{access_token, refresh_token, token_type, expires_in}`;
    the presented refresh token is spent. 401 for an invalid, expired, spent or revoked one; 429."""
    body = await parse_body(request, RefreshSchema())
    await enforce_auth_limit(request, "refresh", body["refresh_token"])
    pair = await services(request).accounts.refresh(body["refresh_token"])
    return web.json_response(TokenSchema().dump(pair))


async def me(request: web.Request) -> web.Response:
    """GET /auth/me: 200 `{id, email, role, verified, name, created, updated}`. 401 without a valid token."""
    principal = await require_admin_user(request)
    user = await services(request).accounts.me(principal)
    return web.json_response(AdminUserSchema().dump(user))


async def logout(request: web.Request) -> web.Response:
    """POST /auth/logout: 200 `{message}`; the session is revoked, its access and refresh tokens
    stop working on every replica. 401 without a valid token."""
    principal = await require_admin_user(request)
    await services(request).accounts.logout(principal)
    return web.json_response({"message": "Logged out"})


async def verify_email(request: web.Request) -> web.Response:
    """POST /auth/verify-email `{token}`: 200 `{message}`, the user is verified.
    400 token_invalid (unknown, used, replaced) or token_expired (24 h), 422 (no token)."""
    body = await parse_body(request, TokenBodySchema())
    await services(request).email_verification.verify(body["token"])
    return web.json_response({"message": "Email verified"})


async def resend_verification(request: web.Request) -> web.Response:
    """POST /auth/resend-verification: 200 `{message}`; a new link is queued and older links stop
    working, or the message says the email is already verified. 401 without a valid token, 429
    (mail limit per user and address)."""
    principal = await require_admin_user(request)
    user = await services(request).accounts.me(principal)
    if not user.verified:
        await enforce_mail_limit(request, "resend_verification", user.email, user_id=user.id)
    sent = await services(request).accounts.resend_verification(principal)
    message = "A new verification link has been sent" if sent else "Email is already verified"
    return web.json_response({"message": message})


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
    await services(request).password_resets.request(
        body["email"], body["collection"], ip=client_ip(request), user_agent=user_agent(request)
    )
    return web.json_response({"message": RESET_REQUESTED_MESSAGE})


async def forgot_password(request: web.Request) -> web.Response:
    """POST /auth/forgot-password `{email}`: the admin-table form of request-password-reset, with
    the same answer. 422, 429 (auth limit, or the mail limit per address)."""
    body = await parse_body(request, ForgotPasswordSchema())
    await enforce_auth_limit(request, "reset", body["email"])
    await enforce_mail_limit(request, "forgot_password", body["email"])
    await services(request).password_resets.request(
        body["email"], None, ip=client_ip(request), user_agent=user_agent(request)
    )
    return web.json_response({"message": RESET_REQUESTED_MESSAGE})


async def reset_password(request: web.Request) -> web.Response:
    """POST /auth/reset-password `{token, new_password, password_confirm?}`: 200 `{message}`; the
    token (from the emailed link, admin or auth-collection user) is spent, the password set and
    every session of that user revoked. 400 token_invalid (unknown, used, replaced) / token_expired
    (1 hour), 422 (policy, confirmation; the token stays usable), 429."""
    body = await parse_body(request, ResetPasswordSchema())
    await enforce_auth_limit(request, "reset", body["token"])
    await services(request).password_resets.reset(
        body["token"], body["new_password"], body["password_confirm"],
        ip=client_ip(request), user_agent=user_agent(request),
    )
    return web.json_response({"message": "Password changed. Please log in with the new password."})
