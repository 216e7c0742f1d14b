"""Handlers of the admin-table users' auth endpoints, `/api/v1/auth/*` (spec: Admin authentication)."""

from __future__ import annotations

from aiohttp import web

from cms.api.context import client_ip, parse_body, services, user_agent
from cms.api.guards import require_admin_user
from cms.api.schemas import (
    AdminUserSchema,
    LoginResponseSchema,
    LoginSchema,
    RefreshSchema,
    RegisterSchema,
    TokenBodySchema,
    TokenSchema,
)


async def register(request: web.Request) -> web.Response:
    body = await parse_body(request, RegisterSchema())
    user = await services(request).accounts.register(
        body["email"], body["password"], body["password_confirm"], body["name"]
    )
    message = "Registered. A verification link has been sent to your email address."
    return web.json_response({"user": AdminUserSchema().dump(user), "message": message}, status=201)


async def login(request: web.Request) -> web.Response:
    body = await parse_body(request, LoginSchema())
    result = await services(request).accounts.login(
        body["email"], body["password"], user_agent=user_agent(request), ip=client_ip(request)
    )
    return web.json_response(LoginResponseSchema().dump(result))


async def refresh(request: web.Request) -> web.Response:
    body = await parse_body(request, RefreshSchema())
    pair = await services(request).accounts.refresh(body["refresh_token"])
    return web.json_response(TokenSchema().dump(pair))


async def me(request: web.Request) -> web.Response:
    principal = await require_admin_user(request)
    user = await services(request).accounts.me(principal)
    return web.json_response(AdminUserSchema().dump(user))


async def logout(request: web.Request) -> web.Response:
    principal = await require_admin_user(request)
    await services(request).accounts.logout(principal)
    return web.json_response({"message": "Logged out"})


async def verify_email(request: web.Request) -> web.Response:
    body = await parse_body(request, TokenBodySchema())
    await services(request).accounts.verify_email(body["token"])
    return web.json_response({"message": "Email verified"})


async def resend_verification(request: web.Request) -> web.Response:
    principal = await require_admin_user(request)
    sent = await services(request).accounts.resend_verification(principal)
    message = "A new verification link has been sent" if sent else "Email is already verified"
    return web.json_response({"message": message})
