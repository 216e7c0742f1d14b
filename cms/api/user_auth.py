"""Handlers shared by both user systems (issue 13): the same handler serves `/api/v1/auth/...` (the
admin table) and `/api/v1/collections/{collection_name}/auth/...` (that auth collection); the path
says which (`door`). Spec: Admin authentication, Auth collection endpoints; decisions.md: Identity
and tokens, Response shapes.

Only the user's JSON shape and the rate-limit keys differ: an admin-table user is
`{id, email, role, verified, name, created, updated}`, a collection user its record; an address or
a mail endpoint counts per collection (`<collection>:<email>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cms.api.guards import signed_in_principal
from cms.api.responses import json_response
from cms.api.schemas import (
    ChangePasswordSchema,
    OAuthCallbackSchema,
    OAuthProvidersQuerySchema,
    RefreshSchema,
    TwoFactorCodeSchema,
    TwoFactorDisableSchema,
)
from cms.models import LoginResult, Principal
from cms.services import representation as represent
from cms.services.identity.systems import UserSystem
from cms.web.context import client_ip, parse_body, parse_query, services, user_agent
from cms.web.ratelimit import enforce_auth_limit, enforce_mail_limit
from cms.web.schemas import LoginSchema, TwoFactorVerifySchema

COLLECTION_PARAM = "collection_name"


def limit_prefix(request: web.Request) -> str:
    """The prefix of the path's rate-limit keys (addresses and mail endpoints count per user
    system): "" for the admin table, "<collection>:" for an auth collection. Needs no look-up, so
    limits apply before an unknown collection's 404."""
    name = request.match_info.get(COLLECTION_PARAM)
    return "" if name is None else f"{name}:"


@dataclass(frozen=True)
class Door:
    """The user system a request's path names, with how it shows its users (`represent.UserShape`)."""

    system: UserSystem[Any]
    shape: represent.UserShape

    def user_json(self, user: Any) -> dict[str, Any]:
        """A user of this system as the API shows it."""
        return self.shape.user(user)

    def login_json(self, result: LoginResult) -> dict[str, Any]:
        """The login answer with this system's user shape."""
        return self.shape.login(result)


async def door(request: web.Request) -> Door:
    """The user system of the request's path. Raises NotFound (unknown or non-auth collection)."""
    systems = services(request).identity.systems
    name = request.match_info.get(COLLECTION_PARAM)
    if name is None:
        return Door(systems.admin, represent.ADMIN_USERS)
    return Door(await systems.collection(name), represent.COLLECTION_USERS)


async def caller(request: web.Request) -> Principal:
    """The signed-in caller of an endpoint of the path's kind of user system: the route's policy
    (ADMIN_USER or COLLECTION_USER) checked it before the handler ran and before the collection is
    looked up. Raises Unauthorized (none: a route without such a policy)."""
    return signed_in_principal(request)


async def signed_in(request: web.Request, principal: Principal | None = None) -> tuple[Door, Principal, Any]:
    """The door, the caller (`caller`, unless given) and the caller's user. Raises Unauthorized (see
    `caller`), NotFound (collection), then Unauthorized (a user of another collection, or gone)."""
    principal = principal or await caller(request)
    entry = await door(request)
    return entry, principal, await services(request).identity.systems.current(entry.system, principal)


async def login(request: web.Request) -> web.Response:
    """POST .../auth/login `{email, password}`: 200 `{user, token, message, requires_2fa}`, one new
    session. 401 invalid_credentials (the same for an unknown email and a wrong password), 400, 404
    (collection), 422, 429 (10 attempts per minute per client IP and address)."""
    body = await parse_body(request, LoginSchema())
    await enforce_auth_limit(request, "login", limit_prefix(request) + body["email"])
    entry = await door(request)
    result = await services(request).identity.login.password(
        entry.system, body["email"], body["password"], ip=client_ip(request), user_agent=user_agent(request))
    return json_response(entry.login_json(result))


async def refresh(request: web.Request) -> web.Response:
    """POST .../auth/refresh `{refresh_token}`: 200 token object `{access_token, refresh_token,
    token_type, expires_in}`; the presented token is spent. 401 (invalid, expired, spent, revoked,
    of another user system), 404 (collection), 429."""
    body = await parse_body(request, RefreshSchema())
    await enforce_auth_limit(request, "refresh", body["refresh_token"])
    entry = await door(request)
    pair = await services(request).identity.login.refresh(entry.system, body["refresh_token"])
    return json_response(represent.token(pair))


async def me(request: web.Request) -> web.Response:
    """GET .../auth/me: 200 the caller (no password). 401, 404 (collection)."""
    entry, _, user = await signed_in(request)
    return json_response(entry.user_json(user))


async def change_password(request: web.Request) -> web.Response:
    """POST .../auth/me/change-password `{old_password, new_password, password_confirm?}`: 200
    `{message}`; the user's other sessions are revoked, the caller's stays. 401, 404 (collection),
    422 (wrong `old_password`, policy, confirmation), 429."""
    principal = await caller(request)
    body = await parse_body(request, ChangePasswordSchema())
    await enforce_auth_limit(request, "change_password", principal.user_id)
    entry, _, user = await signed_in(request, principal)
    await services(request).identity.credentials.change_password(
        entry.system, principal, user, body["old_password"], body["new_password"], body["password_confirm"])
    return json_response(represent.message("Password changed. Your other sessions have been signed out."))


async def resend_verification(request: web.Request) -> web.Response:
    """POST .../auth/resend-verification: 200 `{message}`; a new link is queued (older ones stop
    working) or the message says the address is already verified. 401, 404 (collection), 429 (mail
    limit per user and address)."""
    entry, _, user = await signed_in(request)
    if not user.verified:
        await enforce_mail_limit(request, f"{limit_prefix(request)}resend_verification", user.email, user_id=user.id)
    sent = await services(request).identity.verification.resend(entry.system, user)
    message = "A new verification link has been sent" if sent else "Email is already verified"
    return json_response(represent.message(message))


async def logout(request: web.Request) -> web.Response:
    """POST .../auth/logout: 200 `{message}`; the session is revoked, its access and refresh tokens
    stop working on every replica. 401."""
    await services(request).identity.sessions.logout(await caller(request))
    return json_response(represent.message("Logged out"))


async def list_sessions(request: web.Request) -> web.Response:
    """GET .../auth/sessions: 200 `[{id, created, last_used, user_agent, ip, current}]`, the caller's
    active sessions, newest first. 401, 404 (collection)."""
    entry, principal, user = await signed_in(request)
    sessions = await services(request).identity.sessions.active(entry.system, user)
    return json_response(represent.sessions(sessions, principal.session_id))


async def revoke_session(request: web.Request) -> web.Response:
    """DELETE .../auth/sessions/{session_id}: 204; that session's tokens stop working at once.
    401, 404 (collection, or not an active session of the caller)."""
    entry, _, user = await signed_in(request)
    await services(request).identity.sessions.revoke(
        entry.system, user, request.match_info["session_id"])
    return web.Response(status=204)


async def revoke_all_sessions(request: web.Request) -> web.Response:
    """DELETE .../auth/sessions/all: 204; every session of the caller, this one included, is revoked.
    401, 404 (collection)."""
    entry, _, user = await signed_in(request)
    await services(request).identity.sessions.revoke_all(entry.system, user)
    return web.Response(status=204)


# --- two-factor login (decisions.md, Two-factor login (TOTP)) ---------------------------------------


async def two_factor_setup(request: web.Request) -> web.Response:
    """POST .../auth/2fa/setup: 200 `{secret, otpauth_url, qr_svg}`, a new secret awaiting its
    first code; nothing is enabled yet. 400 (2FA already on), 401, 404 (collection)."""
    entry, _, user = await signed_in(request)
    setup = await services(request).identity.two_factor.setup(entry.system, user)
    return json_response(represent.two_factor_setup(setup))


async def two_factor_enable(request: web.Request) -> web.Response:
    """POST .../auth/2fa/enable `{code}`: 200 `{recovery_codes}` (shown once); 2FA is on. 400
    otp_invalid (wrong code, or no setup), 400 (already on), 401, 404, 422, 429."""
    principal = await caller(request)
    body = await parse_body(request, TwoFactorCodeSchema())
    await enforce_auth_limit(request, "2fa", principal.user_id)
    entry, _, user = await signed_in(request, principal)
    codes = await services(request).identity.two_factor.enable(entry.system, user, body["code"])
    return json_response(represent.recovery_codes(codes))


async def two_factor_disable(request: web.Request) -> web.Response:
    """POST .../auth/2fa/disable `{password, code}` (`code`: TOTP or recovery): 200 `{message}`;
    2FA is off. 400 otp_invalid, 400 (not on), 401, 404, 422 (wrong password: `errors.password`), 429."""
    principal = await caller(request)
    body = await parse_body(request, TwoFactorDisableSchema())
    await enforce_auth_limit(request, "2fa", principal.user_id)
    entry, _, user = await signed_in(request, principal)
    await services(request).identity.two_factor.disable(entry.system, user, body["password"], body["code"])
    return json_response(represent.message("Two-factor authentication is off."))


async def two_factor_verify(request: web.Request) -> web.Response:
    """POST .../auth/2fa/verify `{mfa_token, code}`: 200 the login response, one new session. 400
    otp_invalid (wrong, replayed or used code; the fifth voids the token), token_invalid (bad,
    spent or voided `mfa_token`, or of another user system), token_expired (5 minutes), 404, 422, 429."""
    body = await parse_body(request, TwoFactorVerifySchema())
    await enforce_auth_limit(request, "2fa_verify", body["mfa_token"])
    entry = await door(request)
    result = await services(request).identity.login.second_step(
        entry.system, body["mfa_token"], body["code"], ip=client_ip(request), user_agent=user_agent(request))
    return json_response(entry.login_json(result))


# --- OAuth2 / OpenID Connect login ------------------------------------------------------------------


async def oauth_providers(request: web.Request) -> web.Response:
    """GET .../auth/oauth2/providers?redirect_uri=: 200 `[{name, auth_url, state, code_verifier,
    code_challenge, code_challenge_method}]`, each with a fresh state and PKCE pair. 403 (OAuth2
    login off for this user system), 404 (collection), 422."""
    query = parse_query(request, OAuthProvidersQuerySchema())
    entry = await door(request)
    links = await services(request).identity.oauth.providers(entry.system, query["redirect_uri"])
    return json_response(represent.oauth_providers(links))


async def oauth_callback(request: web.Request) -> web.Response:
    """POST .../auth/oauth2/callback `{provider, code, code_verifier, state, redirect_uri}`: 200 the
    login response (a session, or `requires_2fa`). 400 token_invalid (state or ID token), 400
    (the provider refused or could not be reached), 400 already_exists (an account has the address
    and the provider did not verify it), 403 (OAuth2 off), 404, 422, 429."""
    body = await parse_body(request, OAuthCallbackSchema())
    await enforce_auth_limit(request, "oauth2", body["provider"])
    entry = await door(request)
    result = await services(request).identity.oauth.callback(
        entry.system, body["provider"], body["code"], body["code_verifier"], body["state"], body["redirect_uri"],
        ip=client_ip(request), user_agent=user_agent(request))
    return json_response(entry.login_json(result))
