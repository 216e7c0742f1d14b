"""Handlers of an auth collection's endpoints, `/api/v1/collections/{collection_name}/auth/*`
(spec: Auth collection endpoints; decisions.md: Identity and tokens, Response shapes).

Every handler answers 404 for an unknown collection or one that is not of type `auth`. The
Bearer endpoints accept only access tokens of that collection (401 otherwise). Auth attempts are
rate limited per client IP and `<collection>:<email>` (429); so is mail, per endpoint and address.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cms.api.context import client_ip, parse_body, services, user_agent
from cms.api.guards import require_collection_user
from cms.api.ratelimit import enforce_auth_limit, enforce_mail_limit
from cms.api.schemas import (
    AUTH_REGISTER_KEYS,
    ChangePasswordSchema,
    CollectionRegisterSchema,
    EmailChangeRequestSchema,
    LoginSchema,
    OtpRequestSchema,
    OtpVerifySchema,
    RefreshSchema,
    SessionSchema,
    TokenBodySchema,
    TokenSchema,
)
from cms.models import CollectionUser, LoginResult
from cms.services.otp import OTP_REQUESTED_MESSAGE
from cms.services.records import record_json


def _name(request: web.Request) -> str:
    return request.match_info["collection_name"]


def _limit_key(request: web.Request, email: str) -> str:
    """The auth rate limit's identifier: an address counts per collection."""
    return f"{_name(request)}:{email}"


def user_json(user: CollectionUser) -> dict[str, Any]:
    """A user as the API shows it: its record `{id, created, updated, email, verified, ...fields}`."""
    return record_json(user.record)


def login_json(result: LoginResult) -> dict[str, Any]:
    """The login response `{user, token, message, requires_2fa}` of a collection user."""
    return {"user": user_json(result.user), "token": TokenSchema().dump(result.token),
            "message": result.message, "requires_2fa": result.requires_2fa}


async def register(request: web.Request) -> web.Response:
    """POST .../auth/register `{email, password, password_confirm?, ...schema fields}`: 201
    `{user, message}`; the user is unverified and a verification email is queued. 400
    (already_exists, case-insensitive, per collection), 404, 422 (policy, schema fields), 429."""
    body = await parse_body(request, CollectionRegisterSchema())
    await enforce_auth_limit(request, "register", _limit_key(request, body["email"]))
    data = {k: v for k, v in body.items() if k not in AUTH_REGISTER_KEYS}
    user = await services(request).collection_auth.register(
        _name(request), body["email"], body["password"], body["password_confirm"], data,
        ip=client_ip(request), user_agent=user_agent(request),
    )
    message = "Registered. A verification link has been sent to your email address."
    return web.json_response({"user": user_json(user), "message": message}, status=201)


async def login(request: web.Request) -> web.Response:
    """POST .../auth/login `{email, password}`: 200 `{user, token, message, requires_2fa}`, one new
    session. 401 invalid_credentials (the same for an unknown email and a wrong password), 404, 429."""
    body = await parse_body(request, LoginSchema())
    await enforce_auth_limit(request, "login", _limit_key(request, body["email"]))
    result = await services(request).collection_auth.login(
        _name(request), body["email"], body["password"], ip=client_ip(request), user_agent=user_agent(request)
    )
    return web.json_response(login_json(result))


async def refresh(request: web.Request) -> web.Response:
    """POST .../auth/refresh `{refresh_token}`: 200 token object; the presented token is spent.
    401 (invalid, expired, spent, revoked, of another collection), 404, 429."""
    body = await parse_body(request, RefreshSchema())
    await enforce_auth_limit(request, "refresh", body["refresh_token"])
    pair = await services(request).collection_auth.refresh(_name(request), body["refresh_token"])
    return web.json_response(TokenSchema().dump(pair))


async def me(request: web.Request) -> web.Response:
    """GET .../auth/me: 200 the user's record (no password). 401, 404."""
    principal = await require_collection_user(request)
    user = await services(request).collection_auth.me(principal, _name(request))
    return web.json_response(user_json(user))


async def change_password(request: web.Request) -> web.Response:
    """POST .../auth/me/change-password `{old_password, new_password, password_confirm?}`: 200
    `{message}`; the user's other sessions are revoked. 401, 404, 422 (wrong `old_password`,
    policy, confirmation), 429."""
    principal = await require_collection_user(request)
    body = await parse_body(request, ChangePasswordSchema())
    await enforce_auth_limit(request, "change_password", principal.user_id)
    await services(request).collection_auth.change_password(
        principal, _name(request), body["old_password"], body["new_password"], body["password_confirm"],
        ip=client_ip(request), user_agent=user_agent(request),
    )
    return web.json_response({"message": "Password changed. Your other sessions have been signed out."})


async def request_email_change(request: web.Request) -> web.Response:
    """POST .../auth/me/request-email-change `{new_email, password}`: 200 `{message}`; a confirmation
    link goes to the new address, which replaces the old one only when confirmed. 400
    (already_exists), 401, 404, 422 (wrong password, same address), 429."""
    principal = await require_collection_user(request)
    body = await parse_body(request, EmailChangeRequestSchema())
    await enforce_auth_limit(request, "email_change", principal.user_id)
    await enforce_mail_limit(request, f"{_name(request)}:email_change", body["new_email"])
    await services(request).collection_auth.request_email_change(
        principal, _name(request), body["new_email"], body["password"],
        ip=client_ip(request), user_agent=user_agent(request),
    )
    return web.json_response({"message": "A confirmation link has been sent to the new address."})


async def confirm_email_change(request: web.Request) -> web.Response:
    """POST .../auth/me/confirm-email-change `{token}`: 200 `{message}`; the address is changed (and
    verified) and every session of the user is revoked. 400 token_invalid / token_expired /
    already_exists, 404, 422."""
    body = await parse_body(request, TokenBodySchema())
    await services(request).collection_auth.confirm_email_change(_name(request), body["token"])
    return web.json_response({"message": "Email address changed. Please log in again."})


async def verify_email(request: web.Request) -> web.Response:
    """POST .../auth/verify-email `{token}`: 200 `{message}`, the user is verified. 400
    token_invalid / token_expired (24 h), 404, 422."""
    body = await parse_body(request, TokenBodySchema())
    await services(request).collection_auth.verify_email(_name(request), body["token"])
    return web.json_response({"message": "Email verified"})


async def resend_verification(request: web.Request) -> web.Response:
    """POST .../auth/resend-verification: 200 `{message}`; a new link is queued (older ones stop
    working) or the message says the address is already verified. 401, 404, 429 (mail limit per
    user and address)."""
    principal = await require_collection_user(request)
    user = await services(request).collection_auth.me(principal, _name(request))
    if not user.verified:
        await enforce_mail_limit(request, f"{_name(request)}:resend_verification", user.email, user_id=user.id)
    sent = await services(request).collection_auth.resend_verification(principal, _name(request))
    message = "A new verification link has been sent" if sent else "Email is already verified"
    return web.json_response({"message": message})


async def otp_request(request: web.Request) -> web.Response:
    """POST .../auth/otp/request `{email}`: 200 `{message}`, the same whether or not the address
    exists; a 6-digit code (10 minutes) is emailed if it does. 403 otp_disabled, 404, 422, 429
    (auth limit, or the mail limit per address, the same for an unknown address)."""
    body = await parse_body(request, OtpRequestSchema())
    await enforce_auth_limit(request, "otp_request", _limit_key(request, body["email"]))
    await enforce_mail_limit(request, f"{_name(request)}:otp_request", body["email"])
    await services(request).otp.request(_name(request), body["email"], ip=client_ip(request),
                                        user_agent=user_agent(request))
    return web.json_response({"message": OTP_REQUESTED_MESSAGE})


async def otp_verify(request: web.Request) -> web.Response:
    """POST .../auth/otp/verify `{email, code}`: 200 the login response, one new session. 400
    otp_invalid (wrong, expired, used, or used up after 5 tries), 403 otp_disabled, 404, 422, 429."""
    body = await parse_body(request, OtpVerifySchema())
    await enforce_auth_limit(request, "otp_verify", _limit_key(request, body["email"]))
    result = await services(request).otp.verify(_name(request), body["email"], body["code"],
                                                ip=client_ip(request), user_agent=user_agent(request))
    return web.json_response(login_json(result))


async def list_sessions(request: web.Request) -> web.Response:
    """GET .../auth/sessions: 200 `[{id, created, last_used, user_agent, ip, current}]`, the caller's
    active sessions, newest first. 401, 404."""
    principal = await require_collection_user(request)
    sessions = await services(request).collection_auth.list_sessions(principal, _name(request))
    return web.json_response(
        [SessionSchema().dump({**vars(s), "current": s.id == principal.session_id}) for s in sessions]
    )


async def revoke_session(request: web.Request) -> web.Response:
    """DELETE .../auth/sessions/{session_id}: 204; that session's tokens stop working at once.
    401, 404 (not an active session of the caller)."""
    principal = await require_collection_user(request)
    await services(request).collection_auth.revoke_session(
        principal, _name(request), request.match_info["session_id"],
        ip=client_ip(request), user_agent=user_agent(request),
    )
    return web.Response(status=204)


async def revoke_all_sessions(request: web.Request) -> web.Response:
    """DELETE .../auth/sessions/all: 204; every session of the caller, this one included, is revoked.
    401, 404."""
    principal = await require_collection_user(request)
    await services(request).collection_auth.revoke_all_sessions(
        principal, _name(request), ip=client_ip(request), user_agent=user_agent(request)
    )
    return web.Response(status=204)
