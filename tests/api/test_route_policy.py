"""Route policy (issue "seams", item 1; decisions.md, 401 or 403): who may call each route, as the route
table declares it, the one middleware enforces it and the OpenAPI document shows it.

`test_each_policy_class_answers_each_caller` holds representative routes of each class to the statuses
an anonymous caller, a bad token, a user of an auth collection, an admin-table user with role `user`
and an admin get. `test_every_route_does_what_its_document_says` calls every route of the table with
no credentials and with a token that is not valid, and checks the answer against the route's
`security` in /openapi.json, so the document cannot drift from what is enforced.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from cms.api.routes import ROUTES
from cms.errors import Forbidden
from cms.models import Principal
from cms.wiring import Services
from tests.conftest import Client, bearer, create_collection

ANON, BAD, COLLECTION_USER, USER, ADMIN = "anonymous", "bad token", "collection user", "role user", "admin"
CALLERS = (ANON, BAD, COLLECTION_USER, USER, ADMIN)
BAD_TOKEN = "not-a-valid-token"

# (policy class, method, path, {caller: status}); `posts` is a base collection with default rules and
# `people` the auth collection of the `collection_user_token` fixture
CASES: list[tuple[str, str, str, dict[str, int]]] = [
    ("public", "GET", "/api/v1/collections",
     {ANON: 200, BAD: 200, COLLECTION_USER: 200, USER: 200, ADMIN: 200}),
    ("public", "GET", "/health",
     {ANON: 200, BAD: 200, COLLECTION_USER: 200, USER: 200, ADMIN: 200}),
    ("public", "GET", "/api/v1/health",
     {ANON: 200, BAD: 200, COLLECTION_USER: 200, USER: 200, ADMIN: 200}),
    ("optional", "GET", "/api/v1/collections/posts/records",
     {ANON: 200, BAD: 401, COLLECTION_USER: 200, USER: 200, ADMIN: 200}),
    ("optional", "GET", "/api/v1/stats",
     {ANON: 200, BAD: 401, COLLECTION_USER: 200, USER: 200, ADMIN: 200}),
    ("optional", "POST", "/api/v1/collections/posts/records",  # create rule: signed in
     {ANON: 401, BAD: 401, COLLECTION_USER: 201, USER: 201, ADMIN: 201}),
    ("principal", "GET", "/api/v1/webhooks",
     {ANON: 401, BAD: 401, COLLECTION_USER: 403, USER: 200, ADMIN: 200}),
    ("principal", "GET", "/api/v1/api-keys",
     {ANON: 401, BAD: 401, COLLECTION_USER: 403, USER: 200, ADMIN: 200}),
    ("principal", "GET", "/api/v1/collections/posts/records/export/csv",
     {ANON: 401, BAD: 401, COLLECTION_USER: 200, USER: 200, ADMIN: 200}),
    ("admin user", "GET", "/api/v1/auth/me",
     {ANON: 401, BAD: 401, COLLECTION_USER: 401, USER: 200, ADMIN: 200}),
    ("admin user", "GET", "/api/v1/auth/sessions",
     {ANON: 401, BAD: 401, COLLECTION_USER: 401, USER: 200, ADMIN: 200}),
    ("collection user", "GET", "/api/v1/collections/people/auth/me",
     {ANON: 401, BAD: 401, COLLECTION_USER: 200, USER: 401, ADMIN: 401}),
    ("collection user", "GET", "/api/v1/collections/people/auth/sessions",
     {ANON: 401, BAD: 401, COLLECTION_USER: 200, USER: 401, ADMIN: 401}),
    ("admin", "GET", "/api/v1/settings",
     {ANON: 401, BAD: 401, COLLECTION_USER: 403, USER: 403, ADMIN: 200}),
    ("admin", "GET", "/api/v1/audit",
     {ANON: 401, BAD: 401, COLLECTION_USER: 403, USER: 403, ADMIN: 200}),
    ("admin", "DELETE", "/api/v1/collections/nosuch",
     {ANON: 401, BAD: 401, COLLECTION_USER: 403, USER: 403, ADMIN: 404}),
]


@pytest.mark.parametrize("policy, method, path, expected", CASES,
                         ids=[f"{c[0]}:{c[1]} {c[2]}" for c in CASES])
async def test_each_policy_class_answers_each_caller(client: Client, admin_token: str, user_token: str,
                                                     collection_user_token: str, policy: str, method: str,
                                                     path: str, expected: dict[str, int]) -> None:
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    headers = {ANON: {}, BAD: bearer(BAD_TOKEN), COLLECTION_USER: bearer(collection_user_token),
               USER: bearer(user_token), ADMIN: bearer(admin_token)}
    body = {"data": {"title": "hello"}} if method == "POST" else None
    seen = {}
    for caller in CALLERS:
        response = await client.request(method, path, headers=headers[caller], json=body)
        seen[caller] = response.status
        if response.status >= 400:
            error = await response.json()
            assert set(error) >= {"detail", "code"}, error
    assert seen == expected


PARAMS = {"filename": "backup-20260101-000000.tar.gz"}
BEARER_ONLY: list[dict[str, list[str]]] = [{"bearerAuth": []}]
API_KEY: dict[str, list[str]] = {"apiKeyAuth": []}
ANONYMOUS_OR_BEARER: list[dict[str, list[str]]] = [{}, {"bearerAuth": []}]


def _concrete(path: str) -> str:
    return re.sub(r"{(\w+)}", lambda m: PARAMS.get(m.group(1), "nosuch"), path)


async def test_every_route_does_what_its_document_says(client: Client) -> None:
    document = await (await client.get("/openapi.json")).json()
    checked = api_keyed = 0
    for route in ROUTES:
        path = _concrete(route.path)
        operation: dict[str, Any] = document["paths"].get(route.path, {}).get(route.method.lower(), {})
        assert bool(operation) == route.in_docs, (route.method, route.path)
        security = operation.get("security")
        if security is not None and API_KEY in security:  # an API key is accepted here: a bad one is 401
            security = [requirement for requirement in security if requirement != API_KEY]
            bad_key = (await client.request(route.method, path, headers={"X-API-Key": "cms_" + "x" * 40})).status
            assert bad_key == 401, (route.method, route.path, bad_key)
            api_keyed += 1
        anonymous = (await client.request(route.method, path)).status
        bad_token = (await client.request(route.method, path, headers=bearer(BAD_TOKEN))).status
        where = f"{route.method} {route.path}: security {security}, anonymous {anonymous}, bad token {bad_token}"
        if security == BEARER_ONLY:  # credentials required
            assert anonymous == 401 and bad_token == 401, where
            assert "401" in operation["responses"], where
        elif security == ANONYMOUS_OR_BEARER:  # anyone; a credential that is sent must be valid
            assert bad_token == 401, where
        else:  # public: a credential is not looked at
            assert security is None, where
            assert anonymous != 401 and bad_token != 401, where
        checked += 1
    assert checked == len(ROUTES) > 80
    assert api_keyed >= 10  # records, files, batch and realtime


ROLE_USER = Principal(kind="admin_user", user_id="u1", role="user")
PERSON = Principal(kind="collection_user", user_id="p1", collection_id="c1", collection_name="people")
ROLE_ADMIN = Principal(kind="admin_user", user_id="a1", role="admin")


async def test_services_check_access_themselves(services: Services) -> None:
    """The admin UI and the workers call services directly: each admin-only or admin-table-only
    service refuses a caller the route policy would have refused (access.py decides), and backups
    let the operator (None: the CLI) through."""
    admin_only = (services.settings.list, services.audit.list, services.audit.statistics, services.backups.list)
    for admin_call in admin_only:
        for principal in (ROLE_USER, PERSON):
            with pytest.raises(Forbidden, match="Admin role required"):
                await admin_call(principal)
        await admin_call(ROLE_ADMIN)
    for admin_table_call in (services.webhooks.list_webhooks, services.api_keys.list_keys):
        with pytest.raises(Forbidden, match="managed by admin-table users"):
            await admin_table_call(PERSON)
        assert await admin_table_call(ROLE_USER) == []
    assert await services.backups.list(None) == []  # the operator


async def test_rate_limit_class_comes_from_the_route(client: Client, services: Services) -> None:
    """EXEMPT routes of the table (health, docs) and the docs' files outside it are not counted;
    GENERAL routes are."""
    await services.settings.set("rate_limit_per_minute", 1)
    for path in ("/health", "/api/v1/health", "/docs", "/openapi.json", "/docs/static/swagger-ui.css"):
        assert [(await client.get(path)).status for _ in range(3)] == [200, 200, 200], path
    assert [(await client.get("/api/v1/collections")).status for _ in range(2)] == [200, 429]
