"""API keys and the one authenticator (issue 9, items 0 and 1): create, list, revoke, both header
forms, scopes, expiry, records and files only, every replica refuses a revoked key at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cms.app import create_app
from cms.wiring import open_services
from tests.conftest import bearer, create_collection, create_record, error_of, records_path

KEYS = "/api/v1/api-keys"


async def make_key(client: Any, token: str, scopes: list[str], **extra: Any) -> dict[str, Any]:
    response = await client.post(KEYS, headers=bearer(token), json={"name": "ci", "scopes": scopes, **extra})
    assert response.status == 201, await response.text()
    return dict(await response.json())


def api_key(key: dict[str, Any]) -> dict[str, str]:
    return {"X-API-Key": key["key"]}


@pytest.fixture
async def posts(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    return await create_record(client, admin_token, "posts", {"title": "one"})


async def test_a_key_is_shown_once_and_stored_hashed(client, admin_token, services, config):
    key = await make_key(client, admin_token, ["read"])
    assert set(key) == {"id", "name", "scopes", "expires_at", "created", "last_used", "key"}
    assert key["key"].startswith("cms_") and len(key["key"]) >= 4 + 43
    listed = await (await client.get(KEYS, headers=bearer(admin_token))).json()
    assert [k["id"] for k in listed] == [key["id"]] and "key" not in listed[0]
    from cms.store.client import open_client
    mongo = open_client(config.mongodb_url)
    try:
        docs = [d async for d in mongo[config.mongodb_db]["api_keys"].find({})]
    finally:
        await mongo.close()
    assert key["key"] not in repr(docs)


@pytest.mark.parametrize("form", ["x-api-key", "bearer"])
async def test_both_header_forms_and_scopes(client, admin_token, posts, form):
    reader = await make_key(client, admin_token, ["read"])
    writer = await make_key(client, admin_token, ["write"])

    def headers(key: dict[str, Any]) -> dict[str, str]:
        return api_key(key) if form == "x-api-key" else bearer(key["key"])

    assert (await client.get(records_path("posts", posts["id"]), headers=headers(reader))).status == 200
    await error_of(await client.post(records_path("posts"), headers=headers(reader), json={"data": {"title": "x"}}),
                   403, "forbidden")
    created = await client.post(records_path("posts"), headers=headers(writer), json={"data": {"title": "x"}})
    assert created.status == 201
    await error_of(await client.get(records_path("posts"), headers=headers(writer)), 403, "forbidden")
    deleted = await client.delete(records_path("posts", (await created.json())["id"]), headers=headers(writer))
    assert deleted.status == 204


async def test_keys_reach_records_and_files_only(client, admin_token, posts):
    key = await make_key(client, admin_token, ["read", "write"])
    for method, path in (("GET", "/api/v1/collections"), ("GET", "/api/v1/auth/me"), ("GET", KEYS),
                         ("POST", "/api/v1/collections"), ("GET", "/api/v1/webhooks")):
        await error_of(await client.request(method, path, headers=api_key(key), json={}), 403, "forbidden")
    assert (await client.get("/health", headers=api_key(key))).status == 200


async def test_expired_revoked_and_unknown_keys_are_401(client, admin_token, posts, clock):
    soon = (clock() + timedelta(hours=1)).replace(tzinfo=None).isoformat()
    key = await make_key(client, admin_token, ["read"], expires_at=soon)
    path = records_path("posts", posts["id"])
    assert (await client.get(path, headers=api_key(key))).status == 200
    clock.advance(hours=2)
    await error_of(await client.get(path, headers=api_key(key)), 401, "unauthorized")
    other = await make_key(client, admin_token, ["read"])
    assert (await client.delete(f"{KEYS}/{other['id']}", headers=bearer(admin_token))).status == 204
    await error_of(await client.get(path, headers=api_key(other)), 401, "unauthorized")
    await error_of(await client.get(path, headers={"X-API-Key": "cms_" + "x" * 43}), 401, "unauthorized")
    await error_of(await client.get(path, headers={"X-API-Key": "cms_" + "x" * 500}), 401, "unauthorized")


async def test_a_revoked_key_is_refused_by_another_replica_at_once(client, admin_token, posts, config,
                                                                   aiohttp_client):
    key = await make_key(client, admin_token, ["read"])
    path = records_path("posts", posts["id"])
    async with open_services(config) as other_services:
        other = await aiohttp_client(create_app(config, services=other_services))
        assert (await other.get(path, headers=api_key(key))).status == 200
        assert (await client.delete(f"{KEYS}/{key['id']}", headers=bearer(admin_token))).status == 204
        await error_of(await other.get(path, headers=api_key(key)), 401, "unauthorized")


@pytest.mark.parametrize("body, field_name", [
    ({"name": "", "scopes": ["read"]}, "name"),
    ({"name": "k", "scopes": []}, "scopes"),
    ({"name": "k", "scopes": ["admin"]}, "scopes"),
    ({"name": "k", "scopes": ["read"], "expires_at": "2001-01-01T00:00:00"}, "expires_at"),
    ({"name": "k", "scopes": ["read"], "expires_at": "tomorrow"}, "expires_at"),
], ids=["empty-name", "no-scopes", "bad-scope", "past", "not-a-date"])
async def test_bad_keys_are_422(client, admin_token, body, field_name):
    error = await error_of(await client.post(KEYS, headers=bearer(admin_token), json=body), 422, "validation_error")
    assert any(k.split(".")[0] == field_name for k in error["errors"]), error


async def test_who_manages_keys(client, admin_token, user_token, services):
    mine = await make_key(client, user_token, ["read"])
    theirs = await make_key(client, admin_token, ["read"])
    assert [k["id"] for k in await (await client.get(KEYS, headers=bearer(user_token))).json()] == [mine["id"]]
    assert {k["id"] for k in await (await client.get(KEYS, headers=bearer(admin_token))).json()} == {
        mine["id"], theirs["id"]}
    await error_of(await client.delete(f"{KEYS}/{theirs['id']}", headers=bearer(user_token)), 404, "not_found")
    await error_of(await client.get(KEYS), 401, "unauthorized")
    assert await services.audit.count(event_type="api_key_created") == 2
    assert (await client.delete(f"{KEYS}/{mine['id']}", headers=bearer(admin_token))).status == 204
    assert await services.audit.count(event_type="api_key_revoked") == 1


async def test_collection_users_cannot_manage_keys(client, admin_token):
    await create_collection(client, admin_token, "members", [], type="auth")
    await client.post("/api/v1/collections/members/auth/register",
                      json={"email": "m@example.com", "password": "member-password-1"})
    login = await client.post("/api/v1/collections/members/auth/login",
                              json={"email": "m@example.com", "password": "member-password-1"})
    member = bearer((await login.json())["token"]["access_token"])
    await error_of(await client.get(KEYS, headers=member), 403, "forbidden")
    await error_of(await client.post(KEYS, headers=member, json={"name": "k", "scopes": ["read"]}), 403, "forbidden")


async def test_a_key_acts_with_its_users_rights(client, admin_token, user_token):
    """An admin's key sees auth-collection users; a role-`user` key does not."""
    await create_collection(client, admin_token, "members", [], type="auth")
    await client.post("/api/v1/collections/members/auth/register",
                      json={"email": "m@example.com", "password": "member-password-1"})
    admin_key = await make_key(client, admin_token, ["read"])
    user_key = await make_key(client, user_token, ["read"])
    every = await (await client.get(records_path("members"), headers=api_key(admin_key))).json()
    assert every["total"] == 1
    none = await (await client.get(records_path("members"), headers=api_key(user_key))).json()
    assert none["total"] == 0


async def test_last_used_is_written_at_most_once_a_minute(client, admin_token, posts, clock):
    key = await make_key(client, admin_token, ["read"])
    path = records_path("posts", posts["id"])
    await client.get(path, headers=api_key(key))
    first = (await (await client.get(KEYS, headers=bearer(admin_token))).json())[0]["last_used"]
    assert first is not None
    clock.advance(seconds=30)
    await client.get(path, headers=api_key(key))
    assert (await (await client.get(KEYS, headers=bearer(admin_token))).json())[0]["last_used"] == first
    clock.advance(seconds=31)
    await client.get(path, headers=api_key(key))
    assert (await (await client.get(KEYS, headers=bearer(admin_token))).json())[0]["last_used"] > first
