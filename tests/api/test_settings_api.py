"""Settings API (spec: System, Setting; decisions.md: Response shapes, Errors, Limits): admin only,
values as strings, typed and ranged changes, audited, seen by every replica within about a second."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from cms import redis_keys as keys
from cms.app import create_app
from cms.services.content.csv_io import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS
from cms.services.content.records import MAX_BULK_IDS
from cms.services.operations.settings import SETTINGS_DEFAULTS
from cms.store.client import open_client
from cms.wiring import open_services
from tests.conftest import bearer, error_of

SETTINGS = "/api/v1/settings"


async def settings_by_key(client: Any, token: str) -> dict[str, dict[str, str]]:
    response = await client.get(SETTINGS, headers=bearer(token))
    assert response.status == 200, await response.text()
    body = await response.json()
    assert isinstance(body, list)
    return {s["key"]: s for s in body}


async def post_setting(client: Any, token: str, body: dict[str, Any], **headers: str) -> Any:
    return await client.post(SETTINGS, headers={**bearer(token), **headers}, json=body)


async def test_list_has_every_setting_with_string_values(client, admin_token):
    settings = await settings_by_key(client, admin_token)
    assert set(settings) == set(SETTINGS_DEFAULTS)
    for key, setting in settings.items():
        assert set(setting) == {"key", "value", "category"}, setting
        assert isinstance(setting["value"], str) and setting["category"] == SETTINGS_DEFAULTS[key][1]
    assert settings["password_min_length"]["value"] == "8"
    assert settings["rate_limit_enabled"]["value"] == "true"
    assert settings["otp_enabled"]["value"] == "false"
    assert settings["refresh_reuse_interval_s"]["value"] == "0"
    assert settings["audit_retention_days"] == {"key": "audit_retention_days", "value": "90", "category": "security"}
    assert settings["csv_import_max_rows"]["value"] == str(MAX_IMPORT_ROWS) == "50000"
    assert settings["csv_import_max_mb"]["value"] == str(MAX_IMPORT_BYTES // (1024 * 1024)) == "10"
    assert settings["bulk_max_ids"]["value"] == str(MAX_BULK_IDS) == "1000"


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_only_admins_may_use_settings(client, services, user_token, collection_user_token, method):
    body = {"key": "password_min_length", "value": "12"}
    response = await client.request(method, SETTINGS, json=body)
    await error_of(response, 401, "unauthorized")
    for token in (user_token, collection_user_token):
        response = await client.request(method, SETTINGS, headers=bearer(token), json=body)
        await error_of(response, 403, "forbidden")
    assert (await services.settings.values())["password_min_length"] == 8
    assert await services.audit.count(event_type="setting_changed") == 0


@pytest.mark.parametrize("key, sent, shown, stored", [
    ("password_min_length", "12", "12", 12),
    ("password_min_length", 12, "12", 12),
    ("password_min_length", " 9 ", "9", 9),
    ("rate_limit_enabled", False, "false", False),
    ("rate_limit_enabled", "false", "false", False),
    ("otp_enabled", "TRUE", "true", True),
    ("refresh_reuse_interval_s", 600, "600", 600),
    ("audit_retention_days", "3650", "3650", 3650),
    ("csv_import_max_rows", 1, "1", 1),
    ("bulk_max_ids", "100000", "100000", 100_000),
], ids=["int-string", "int-native", "int-padded", "bool-native", "bool-string", "bool-upper", "reuse-max",
        "retention-max", "rows-min", "bulk-max"])
async def test_post_upserts_string_or_native_values(client, services, admin_token, key, sent, shown, stored):
    response = await post_setting(client, admin_token, {"key": key, "value": sent})
    assert response.status == 200, await response.text()
    category = SETTINGS_DEFAULTS[key][1]
    assert await response.json() == {"key": key, "value": shown, "category": category}
    assert (await settings_by_key(client, admin_token))[key]["value"] == shown
    value = (await services.settings.values())[key]
    assert value == stored and type(value) is type(stored)


@pytest.mark.parametrize("body, field", [
    ({"key": "no_such_setting", "value": "1"}, "key"),
    ({"key": "", "value": "1"}, "key"),
    ({"value": "1"}, "key"),
    ({"key": "password_min_length"}, "value"),
    ({"key": "password_min_length", "value": None}, "value"),
    ({"key": "password_min_length", "value": "abc"}, "value"),
    ({"key": "password_min_length", "value": "8.0"}, "value"),
    ({"key": "password_min_length", "value": 8.5}, "value"),
    ({"key": "password_min_length", "value": True}, "value"),
    ({"key": "password_min_length", "value": [8]}, "value"),
    ({"key": "password_min_length", "value": 0}, "value"),
    ({"key": "password_min_length", "value": "257"}, "value"),
    ({"key": "password_min_length", "value": "9" * 40}, "value"),
    ({"key": "rate_limit_enabled", "value": 1}, "value"),
    ({"key": "rate_limit_enabled", "value": "yes"}, "value"),
    ({"key": "audit_retention_days", "value": 0}, "value"),
    ({"key": "audit_retention_days", "value": 3651}, "value"),
    ({"key": "csv_import_max_rows", "value": 0}, "value"),
    ({"key": "csv_import_max_mb", "value": 1025}, "value"),
    ({"key": "bulk_max_ids", "value": 100_001}, "value"),
    ({"key": "refresh_reuse_interval_s", "value": -1}, "value"),
    ({"key": "password_min_length", "value": 12, "category": "files"}, "category"),
], ids=["unknown-key", "empty-key", "no-key", "no-value", "null", "not-a-number", "decimal-string", "float",
        "bool-for-int", "list", "below-range", "above-range", "huge", "int-for-bool", "word-for-bool",
        "retention-0", "retention-over", "rows-0", "mb-over", "bulk-over", "reuse-negative", "wrong-category"])
async def test_bad_changes_are_422_with_flat_errors_and_change_nothing(client, services, admin_token, body, field):
    before = await settings_by_key(client, admin_token)
    response = await post_setting(client, admin_token, body)
    payload = await error_of(response, 422, "validation_error")
    messages = payload["errors"][field]
    assert isinstance(messages, list) and messages and all(isinstance(m, str) for m in messages), payload
    assert await settings_by_key(client, admin_token) == before
    assert await services.audit.count(event_type="setting_changed") == 0


async def test_category_may_be_given_when_it_matches(client, admin_token):
    response = await post_setting(client, admin_token, {"key": "max_upload_mb", "value": "50", "category": "files"})
    assert response.status == 200, await response.text()
    assert (await response.json())["value"] == "50"


async def test_change_is_audited_with_old_and_new_value(client, services, clock, admin_token):
    me = await (await client.get("/api/v1/auth/me", headers=bearer(admin_token))).json()
    response = await post_setting(client, admin_token, {"key": "password_min_length", "value": 12},
                                  **{"User-Agent": "settings-test/1.0"})
    assert response.status == 200, await response.text()
    clock.advance(seconds=1)  # newest first needs distinct times
    response = await post_setting(client, admin_token, {"key": "password_min_length", "value": "10"})
    assert response.status == 200, await response.text()
    response = await client.get("/api/v1/audit", headers=bearer(admin_token), params={"event_type": "setting_changed"})
    assert response.status == 200, await response.text()
    items = (await response.json())["items"]
    assert [e["details"] for e in items] == [
        {"key": "password_min_length", "old_value": "12", "new_value": "10"},
        {"key": "password_min_length", "old_value": "8", "new_value": "12"},
    ]
    first = items[1]
    assert first["severity"] == "warning"
    assert first["user_id"] == me["id"]
    assert first["ip_address"] == "127.0.0.1"
    assert first["user_agent"] == "settings-test/1.0"


async def test_change_takes_effect_at_once_here(client, admin_token):
    response = await post_setting(client, admin_token, {"key": "password_min_length", "value": "20"})
    assert response.status == 200
    response = await client.post("/api/v1/auth/register", json={"email": "short@example.com", "password": "x" * 19})
    body = await error_of(response, 422, "validation_error")
    assert "password" in body["errors"]


async def rate_limit_shown(client: Any) -> str:
    response = await client.get("/api/v1/collections")
    assert response.status == 200, await response.text()
    return str(response.headers["X-RateLimit-Limit"])


async def test_change_reaches_another_replica_within_a_second(aiohttp_client, client, config, clock, admin_token):
    async with open_services(config, clock=clock) as second_services:
        replica = await aiohttp_client(create_app(config, services=second_services))
        try:
            assert await rate_limit_shown(replica) == "600"  # the replica has read (and cached) the settings
            assert await rate_limit_shown(replica) == "600"
            response = await post_setting(client, admin_token, {"key": "rate_limit_per_minute", "value": "500"})
            assert response.status == 200, await response.text()
            changed_at = time.monotonic()
            while await rate_limit_shown(replica) != "500":
                assert time.monotonic() - changed_at < 1.0, "the replica did not see the change within 1 s"
                await asyncio.sleep(0.05)
        finally:
            await replica.close()


async def test_settings_are_reread_only_when_the_version_moves(services, config):
    """The hot path reads the cache; MongoDB is read again only after the Redis version moved."""
    assert (await services.settings.values())["rate_limit_per_minute"] == 600
    mongo = open_client(config.mongodb_url)
    try:  # a write behind the service's back, with no version bump: not seen, however long we wait
        await mongo[config.mongodb_db]["settings"].update_one(
            {"key": "rate_limit_per_minute"}, {"$set": {"value": 321, "category": "security"}}, upsert=True)
    finally:
        await mongo.close()
    await asyncio.sleep(0.7)
    assert (await services.settings.values())["rate_limit_per_minute"] == 600
    await services.redis.incr(f"cms:settings:version:{config.mongodb_db}")
    await asyncio.sleep(0.6)
    assert (await services.settings.values())["rate_limit_per_minute"] == 321


async def test_a_version_lost_by_redis_never_hides_the_next_change(services, config, clock):
    """Redis may lose the version (a restart without persistence): the next change starts it at a
    random value before its INCR, so a replica that saw the version at 1 does not take the new
    settings for the ones it holds (counted from zero, the change would bring the version back to 1)."""

    async def replica_sees(settings: Any, value: int) -> None:
        deadline = time.monotonic() + 2.0
        while (await settings.values())["rate_limit_per_minute"] != value:
            assert time.monotonic() < deadline, f"the replica did not see {value} within 2 s"
            await asyncio.sleep(0.05)

    async with open_services(config, clock=clock) as replica:
        await services.settings.set("rate_limit_per_minute", 500)
        await replica_sees(replica.settings, 500)
        await services.redis.delete(keys.settings_version(config.mongodb_db))  # lost in a restart
        await services.settings.set("rate_limit_per_minute", 400)
        await replica_sees(replica.settings, 400)
