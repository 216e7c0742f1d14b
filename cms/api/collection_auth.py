"""Handlers of an auth collection's own endpoints, `/api/v1/collections/{collection_name}/auth/*`
(spec: Auth collection endpoints; decisions.md: Identity and tokens, Response shapes): register,
email change, verify-email and OTP login. Login, refresh, me, change-password,
resend-verification and sessions are shared with the admin table (`cms/api/user_auth.py`).

Every handler answers 404 for an unknown collection or one that is not of type `auth`. The
Bearer endpoints accept only access tokens of that collection (401 otherwise). Auth attempts are
rate limited per client IP and `<collection>:<email>` (429); so is mail, per endpoint and address.
"""

from __future__ import annotations

from aiohttp import web

from cms.api.responses import json_response
from cms.api.schemas import (
    AUTH_REGISTER_KEYS,
    CollectionRegisterSchema,
    EmailChangeRequestSchema,
    OtpRequestSchema,
    OtpVerifySchema,
    TokenBodySchema,
)
from cms.api.user_auth import caller, limit_prefix, signed_in
from cms.services import representation as represent
from cms.services.identity.collection_users import CollectionUsers
from cms.services.identity.otp import OTP_REQUESTED_MESSAGE
from cms.web.context import client_ip, parse_body, services, user_agent
from cms.web.ratelimit import enforce_auth_limit, enforce_mail_limit


def _name(request: web.Request) -> str:
    return request.match_info["collection_name"]


async def _system(request: web.Request) -> CollectionUsers:
    """The auth collection of the path. Raises NotFound."""
    return await services(request).identity.systems.collection(_name(request))


async def register(request: web.Request) -> web.Response:
    """POST .../auth/register `{email, password, password_confirm?, ...schema fields}`: 201
    `{user, message}`; the user is unverified and a verification email is queued. 400
    (already_exists, case-insensitive, per collection), 404, 422 (policy, schema fields), 429."""
    body = await parse_body(request, CollectionRegisterSchema())
    await enforce_auth_limit(request, "register", limit_prefix(request) + body["email"])
    data = {k: v for k, v in body.items() if k not in AUTH_REGISTER_KEYS}
    user = await services(request).identity.registration.register(
        await _system(request), body["email"], body["password"], body["password_confirm"], data,
    )
    message = "Registered. A verification link has been sent to your email address."
    return json_response(represent.COLLECTION_USERS.registered(user, message), status=201)


async def request_email_change(request: web.Request) -> web.Response:
    """POST .../auth/me/request-email-change `{new_email, password}`: 200 `{message}`; a confirmation
    link goes to the new address, which replaces the old one only when confirmed. 400
    (already_exists), 401, 404, 422 (wrong password, same address), 429."""
    principal = await caller(request)
    body = await parse_body(request, EmailChangeRequestSchema())
    await enforce_auth_limit(request, "email_change", principal.user_id)
    await enforce_mail_limit(request, f"{limit_prefix(request)}email_change", body["new_email"])
    entry, _, user = await signed_in(request, principal)
    await services(request).identity.email_change.request(
        entry.system, user, body["new_email"], body["password"],
    )
    return json_response(represent.message("A confirmation link has been sent to the new address."))


async def confirm_email_change(request: web.Request) -> web.Response:
    """POST .../auth/me/confirm-email-change `{token}`: 200 `{message}`; the address is changed (and
    verified), every session of the user is revoked and the old address gets a notice. 400
    token_invalid / token_expired / already_exists, 404, 422."""
    body = await parse_body(request, TokenBodySchema())
    await services(request).identity.email_change.confirm(await _system(request), body["token"])
    return json_response(represent.message("Email address changed. Please log in again."))


async def verify_email(request: web.Request) -> web.Response:
    """POST .../auth/verify-email `{token}`: 200 `{message}`, the user is verified. 400
    token_invalid / token_expired (24 h), 404, 422."""
    body = await parse_body(request, TokenBodySchema())
    await services(request).identity.verification.verify(await _system(request), body["token"])
    return json_response(represent.message("Email verified"))


async def otp_request(request: web.Request) -> web.Response:
    """POST .../auth/otp/request `{email}`: 200 `{message}`, the same whether or not the address
    exists; a 6-digit code (10 minutes) is emailed if it does. 403 otp_disabled, 404, 422, 429
    (auth limit, or the mail limit per address, the same for an unknown address)."""
    body = await parse_body(request, OtpRequestSchema())
    await enforce_auth_limit(request, "otp_request", limit_prefix(request) + body["email"])
    await enforce_mail_limit(request, f"{limit_prefix(request)}otp_request", body["email"])
    await services(request).identity.otp.request(await _system(request), body["email"])
    return json_response(represent.message(OTP_REQUESTED_MESSAGE))


async def otp_verify(request: web.Request) -> web.Response:
    """POST .../auth/otp/verify `{email, code}`: 200 the login response, one new session. 400
    otp_invalid (wrong, expired, used, or used up after 5 tries), 403 otp_disabled, 404, 422, 429."""
    body = await parse_body(request, OtpVerifySchema())
    await enforce_auth_limit(request, "otp_verify", limit_prefix(request) + body["email"])
    system = await _system(request)
    result = await services(request).identity.otp.verify(system, body["email"], body["code"],
                                                         ip=client_ip(request), user_agent=user_agent(request))
    return json_response(represent.COLLECTION_USERS.login(result))
