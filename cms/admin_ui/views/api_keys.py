"""API keys (`/_/api-keys`): the keys (an admin sees every key), a form to create one whose secret
is shown once, in the answer to the creating request and never again, and revocation after a
confirmation page. The same `ApiKeyService` calls, with the same principal, as `/api/v1/api-keys`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, confirmed_action, error_message, flash_redirect, render
from cms.errors import CmsError, NotFound, ValidationFailed
from cms.models import ApiKey, Principal
from cms.web.context import services
from cms.web.uploads import read_form

BASE = PREFIX + "/api-keys"
SCOPES = ("read", "write")


def _expiry(raw: str) -> datetime | None:
    """The form's `expires_at` (`datetime-local`, read as UTC), or None when empty. Raises
    ValidationFailed."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise ValidationFailed("Invalid expires_at: Not a date and time.",
                               errors={"expires_at": ["Not a date and time."]}) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


async def _page(request: web.Request, principal: Principal, *, status: int = 200, **context: Any) -> web.Response:
    keys = await services(request).api_keys.list_keys(principal)
    context.setdefault("created", None)
    context.setdefault("secret", None)
    context.setdefault("error", None)
    context.setdefault("form", {"name": "", "scopes": ["read"], "expires_at": ""})
    return await render(request, "api_keys/index.html", status=status, keys=keys, scopes=SCOPES, **context)


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/api-keys: the keys and the create form (never a secret)."""
    return await _page(request, principal)


@admin_page
async def create(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/api-keys: create a key and show its secret in this answer only (htmx swaps the
    screen in place, so reloading the page shows the list without it)."""
    data = await read_form(request)
    name, expires_at = str(data.get("name", "")), str(data.get("expires_at", ""))
    scopes = [str(s) for s in data.getall("scopes", [])]
    form: dict[str, Any] = {"name": name, "scopes": scopes, "expires_at": expires_at}
    htmx = request.headers.get("HX-Request") == "true"
    try:
        key, secret = await services(request).api_keys.create(
            principal, name, scopes, _expiry(expires_at))
    except CmsError as exc:  # htmx swaps only 2xx answers: the inline error comes with 200 there
        return await _page(request, principal, status=200 if htmx else exc.status, error=error_message(exc),
                           form=form)
    return await _page(request, principal, status=200 if htmx else 201, created=key, secret=secret)


async def _key(request: web.Request, principal: Principal) -> ApiKey:
    key_id = request.match_info["key_id"]
    for key in await services(request).api_keys.list_keys(principal):
        if key.id == key_id:
            return key
    raise NotFound("API key not found")


@admin_page
async def confirm_revoke(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/api-keys/{key_id}/revoke: "revoke this key?"."""
    return await render(request, "api_keys/revoke.html", key=await _key(request, principal))


@admin_page
async def revoke(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/api-keys/{key_id}/revoke: the key stops working at once."""
    await services(request).api_keys.revoke(principal, request.match_info["key_id"])
    return flash_redirect(request, BASE, "API key revoked")


def routes() -> list[web.RouteDef]:
    """The API keys screen's routes."""
    return [
        web.get(BASE, index, name="admin_ui.api_keys"),
        web.post(BASE, create),
        *confirmed_action(BASE + "/{key_id}/revoke", confirm_revoke, revoke),
    ]
