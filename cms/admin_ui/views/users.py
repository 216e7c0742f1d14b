"""Users of an auth collection (`/_/collections/{name}/users`): the users (email, verified flag;
find by address, paging; from the same records service and list rule check as
`GET /api/v1/collections/{name}/records`), marking a user verified, a user's active sessions and
revoking them all, through the identity services the auth endpoints use (`identity.systems`,
`identity.sessions`). Only an admin reaches these pages (`admin_page`)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, confirmed_action, flash_redirect, page_number, render
from cms.errors import NotFound
from cms.models import CollectionUser, Page, Principal
from cms.services.identity.collection_users import CollectionUsers
from cms.web.context import services

BASE = PREFIX + "/collections/{collection_name}/users"
PER_PAGE = 50


def _base(system: CollectionUsers) -> str:
    return f"{PREFIX}/collections/{system.collection_name}/users"


async def _system(request: web.Request) -> CollectionUsers:
    """The auth collection of the path. Raises NotFound (unknown, or not of type auth)."""
    return await services(request).identity.systems.collection(request.match_info["collection_name"])


async def _user(request: web.Request) -> tuple[CollectionUsers, CollectionUser]:
    system = await _system(request)
    user = await system.get(request.match_info["user_id"])
    if user is None:
        raise NotFound("User not found")
    return system, user


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET .../users[?page=]: the collection's users, newest first, PER_PAGE a page; `?email=`
    finds one user by address (the identity service's look-up: the filter grammar has no `email`
    field in auth collections, and `search` looks only in the schema's text fields)."""
    system = await _system(request)
    email = request.query.get("email", "").strip()
    page = page_number(request.query.get("page", "1"))
    if email:
        found = await system.find_by_email(email)
        users = [] if found is None else [found.record]
        listed = Page(items=users, total=len(users), page=1, per_page=PER_PAGE)
    else:
        listed = await services(request).records.list(system.collection_name, page=page, per_page=PER_PAGE,
                                                      sort="-created", principal=principal)
    pages = max(1, -(-listed.total // PER_PAGE))
    return await render(request, "users/index.html", collection=system.collection, users=listed.items,
                        total=listed.total, page=listed.page, pages=pages, email=email, base=_base(system))


@admin_page
async def detail(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET .../users/{user_id}: the user, its fields and its active sessions."""
    system, user = await _user(request)
    sessions = await services(request).identity.sessions.active(system, user)
    fields: list[tuple[str, Any]] = [(f.name, user.record.data.get(f.name)) for f in system.collection.fields]
    return await render(request, "users/detail.html", collection=system.collection, user=user, sessions=sessions,
                        fields=fields, base=_base(system))


@admin_page
async def verify(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST .../users/{user_id}/verify: mark the address verified (as a followed verification link
    does: an `update` record event), audited as `email_verified` by the admin."""
    system, user = await _user(request)
    await services(request).identity.verification.mark_verified(system, user, principal)
    return flash_redirect(request, f"{_base(system)}/{user.id}", f"{user.email} is verified")


@admin_page
async def confirm_revoke_all(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET .../users/{user_id}/sessions/revoke-all: "sign this user out everywhere?"."""
    system, user = await _user(request)
    sessions = await services(request).identity.sessions.active(system, user)
    return await render(request, "users/revoke_all.html", collection=system.collection, user=user,
                        count=len(sessions), base=_base(system))


@admin_page
async def revoke_all(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST .../users/{user_id}/sessions/revoke-all: every session of the user is revoked; its
    access and refresh tokens stop working at once (audited as `session_revoked`)."""
    system, user = await _user(request)
    count = await services(request).identity.sessions.revoke_all(system, user, by=principal)
    return flash_redirect(request, f"{_base(system)}/{user.id}",
                          f"Revoked {count} session{'' if count == 1 else 's'} of {user.email}")


def routes() -> list[web.RouteDef]:
    """The users screen's routes."""
    return [
        web.get(BASE, index, name="admin_ui.users"),
        web.get(BASE + "/{user_id}", detail),
        web.post(BASE + "/{user_id}/verify", verify),
        *confirmed_action(BASE + "/{user_id}/sessions/revoke-all", confirm_revoke_all, revoke_all),
    ]
