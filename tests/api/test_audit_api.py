"""Audit API (spec: Audit logs; decisions.md: Response shapes, Audit events): admin only, filters,
newest first, pagination, the security view, statistics, and the TTL index that follows the
`audit_retention_days` setting."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from cms.services.operations.audit import SEVERITIES
from cms.store.client import open_client
from cms.wiring import open_services
from tests.conftest import bearer, error_of

AUDIT = "/api/v1/audit"
ENTRY_KEYS = {"id", "event_type", "severity", "user_id", "ip_address", "user_agent", "details", "created"}
# decisions.md, Audit events: every type and its severity
DECISIONS_SEVERITIES = {
    "login_success": "info", "login_failed": "warning", "logout": "info", "register": "info",
    "email_verified": "info", "password_reset_requested": "info", "password_reset_completed": "warning",
    "password_changed": "warning", "session_revoked": "info", "refresh_token_reuse": "critical",
    "otp_failed": "warning", "rate_limited": "warning", "collection_created": "info",
    "collection_updated": "info", "collection_deleted": "info", "api_key_created": "info",
    "api_key_revoked": "info", "setting_changed": "warning", "backup_created": "info",
    "backup_restored": "critical", "backup_deleted": "warning", "schema_applied": "warning",
}
# issue 14: the two-factor steps
TWO_FACTOR_SEVERITIES = {"mfa_enabled": "info", "mfa_disabled": "warning", "mfa_failed": "warning",
                         "mfa_recovery_used": "warning"}
# added by docs/operations/backups.md (GET /api/v1/backups/{filename})
README_SEVERITIES = {"backup_downloaded": "warning"}
# decisions.md, Drafts, versions and scheduled publishing: a scheduled publish (of a record, of a release)
# that fails validation
DRAFTS_SEVERITIES = {"record_publish_failed": "warning", "release_publish_failed": "warning"}
# (event_type, user_id, ip_address), written one clock second apart in this order
SEEDED = [
    ("login_failed", "u1", "10.0.0.1"),
    ("login_success", "u1", "10.0.0.2"),
    ("refresh_token_reuse", "u2", "10.0.0.1"),
    ("setting_changed", "u2", "10.0.0.3"),
    ("register", "u3", "10.0.0.3"),
    ("otp_failed", "u3", "10.0.0.4"),
    ("backup_restored", None, "10.0.0.4"),
]


async def get_json(client: Any, path: str, token: str, **params: Any) -> Any:
    response = await client.get(path, headers=bearer(token), params={k: str(v) for k, v in params.items()})
    assert response.status == 200, await response.text()
    return await response.json()


async def all_entries(client: Any, token: str) -> list[dict[str, Any]]:
    """The whole log through the API (it is small in these tests), newest first."""
    page = await get_json(client, AUDIT, token, limit=200)
    assert page["total"] == len(page["items"]) < 200
    return list(page["items"])


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture
async def seeded(services, clock, admin_token) -> list[datetime]:
    """The SEEDED entries, starting one hour after the admin's login; returns their times."""
    clock.advance(hours=1)
    times = []
    for n, (event_type, user_id, ip) in enumerate(SEEDED):
        times.append(clock())
        await services.audit.record(event_type, user_id=user_id, ip_address=ip, user_agent=f"agent-{n}",
                                    details={"n": n})
        clock.advance(seconds=1)
    return times


def seeded_numbers(items: list[dict[str, Any]]) -> list[int]:
    return [e["details"]["n"] for e in items if "n" in e["details"]]


@pytest.mark.parametrize("path", [AUDIT, AUDIT + "/security", AUDIT + "/statistics"])
async def test_only_admins_may_read_the_audit_log(client, user_token, collection_user_token, path):
    await error_of(await client.get(path), 401, "unauthorized")
    for token in (user_token, collection_user_token):
        await error_of(await client.get(path, headers=bearer(token)), 403, "forbidden")


def test_every_event_type_of_the_decisions_has_its_severity():
    assert SEVERITIES == {**DECISIONS_SEVERITIES, **TWO_FACTOR_SEVERITIES, **README_SEVERITIES, **DRAFTS_SEVERITIES}


async def test_every_event_type_is_stored_with_its_severity(client, services, admin_token):
    for event_type in DECISIONS_SEVERITIES:
        await services.audit.record(event_type, user_id="u", ip_address="10.1.1.1", user_agent="ua",
                                    details={"what": event_type})
    for event_type, severity in DECISIONS_SEVERITIES.items():
        page = await get_json(client, AUDIT, admin_token, event_type=event_type, ip_address="10.1.1.1")
        assert page["total"] == 1, (event_type, page)
        entry = page["items"][0]
        assert set(entry) == ENTRY_KEYS
        assert entry["severity"] == severity
        assert (entry["user_id"], entry["ip_address"], entry["user_agent"]) == ("u", "10.1.1.1", "ua")
        assert entry["details"] == {"what": event_type}
        assert entry["created"].endswith("Z")


async def test_list_is_newest_first_with_defaults(client, admin_token, seeded):
    page = await get_json(client, AUDIT, admin_token)
    assert (page["limit"], page["offset"]) == (50, 0)
    assert set(page) == {"items", "total", "limit", "offset"}
    assert seeded_numbers(page["items"]) == [6, 5, 4, 3, 2, 1, 0]
    created = [parse_time(e["created"]) for e in page["items"]]
    assert created == sorted(created, reverse=True)
    assert page["total"] == len(page["items"])
    # the admin's own login (through the API, before the seeded entries) is last
    assert page["items"][-1]["event_type"] == "login_success" and page["items"][-1]["ip_address"] == "127.0.0.1"


async def test_pagination(client, admin_token, seeded):
    everything = await all_entries(client, admin_token)
    pages = []
    for offset in range(0, len(everything), 3):
        page = await get_json(client, AUDIT, admin_token, limit=3, offset=offset)
        assert (page["limit"], page["offset"], page["total"]) == (3, offset, len(everything))
        assert len(page["items"]) <= 3
        pages.extend(page["items"])
    assert pages == everything
    beyond = await get_json(client, AUDIT, admin_token, offset=len(everything))
    assert beyond["items"] == [] and beyond["total"] == len(everything)
    clamped = await get_json(client, AUDIT, admin_token, limit=1000)
    assert clamped["limit"] == 200 and clamped["items"] == everything


@pytest.mark.parametrize("name, value, keep", [
    ("event_type", "login_failed", lambda e: e["event_type"] == "login_failed"),
    ("event_type", "login_success", lambda e: e["event_type"] == "login_success"),
    ("severity", "warning", lambda e: e["severity"] == "warning"),
    ("severity", "critical", lambda e: e["severity"] == "critical"),
    ("user_id", "u2", lambda e: e["user_id"] == "u2"),
    ("ip_address", "10.0.0.1", lambda e: e["ip_address"] == "10.0.0.1"),
    ("ip_address", "127.0.0.1", lambda e: e["ip_address"] == "127.0.0.1"),
], ids=["event_type", "event_type-with-api-login", "severity-warning", "severity-critical", "user_id",
        "ip_address", "ip_address-of-the-test-client"])
async def test_each_filter(client, admin_token, seeded, name, value, keep):
    expected = [e for e in await all_entries(client, admin_token) if keep(e)]
    page = await get_json(client, AUDIT, admin_token, **{name: value})
    assert page["items"] == expected and page["total"] == len(expected)
    assert expected  # each filter picks something, and not everything
    assert len(expected) < len(await all_entries(client, admin_token))


async def test_date_filters(client, admin_token, seeded):
    page = await get_json(client, AUDIT, admin_token, from_date=iso(seeded[2]))
    assert seeded_numbers(page["items"]) == [6, 5, 4, 3, 2] and page["total"] == 5  # from is inclusive
    page = await get_json(client, AUDIT, admin_token, to_date=iso(seeded[2]))
    assert seeded_numbers(page["items"]) == [1, 0]  # to is exclusive; the admin's login is earlier still
    assert page["total"] == 3
    page = await get_json(client, AUDIT, admin_token, from_date=iso(seeded[1]), to_date=iso(seeded[4]))
    assert seeded_numbers(page["items"]) == [3, 2, 1]
    naive = seeded[5].replace(tzinfo=None).isoformat()  # naive means UTC
    assert seeded_numbers((await get_json(client, AUDIT, admin_token, from_date=naive))["items"]) == [6, 5]
    day = (seeded[0] + timedelta(days=2)).date().isoformat()  # a date alone is its midnight
    assert (await get_json(client, AUDIT, admin_token, from_date=day))["total"] == 0


async def test_filters_combine(client, admin_token, seeded):
    page = await get_json(client, AUDIT, admin_token, severity="warning", ip_address="10.0.0.3", user_id="u2",
                          event_type="setting_changed", from_date=iso(seeded[0]), to_date=iso(seeded[6]))
    assert seeded_numbers(page["items"]) == [3] and page["total"] == 1
    page = await get_json(client, AUDIT, admin_token, severity="critical", user_id="u1")
    assert page["items"] == [] and page["total"] == 0


@pytest.mark.parametrize("params, field", [
    ({"from_date": "yesterday"}, "from_date"),
    ({"to_date": "2024-13-01"}, "to_date"),
    ({"from_date": "x" * 100}, "from_date"),
    ({"event_type": "nope"}, "event_type"),
    ({"severity": "fatal"}, "severity"),
    ({"limit": "0"}, "limit"),
    ({"limit": "ten"}, "limit"),
    ({"offset": "-1"}, "offset"),
    ({"offset": "1.5"}, "offset"),
    ({"user_id": ""}, "user_id"),
], ids=["word-date", "bad-month", "long-date", "event_type", "severity", "limit-0", "limit-word", "offset-negative",
        "offset-decimal", "empty-user_id"])
async def test_bad_query_values_are_422(client, admin_token, params, field):
    response = await client.get(AUDIT, headers=bearer(admin_token), params=params)
    body = await error_of(response, 422, "validation_error")
    messages = body["errors"][field]
    assert isinstance(messages, list) and all(isinstance(m, str) for m in messages), body


async def test_raw_query_keys_are_never_a_query(client, admin_token, seeded):
    everything = await all_entries(client, admin_token)
    for params in ({"details.n": "3"}, {"$where": "1"}, {"severity[$ne]": "info"}, {"event_type[$gt]": ""}):
        page = await get_json(client, AUDIT, admin_token, limit=200, **params)
        assert page["items"] == everything, params


async def test_security_view(client, admin_token, seeded):
    everything = await all_entries(client, admin_token)
    page = await get_json(client, AUDIT + "/security", admin_token)
    assert page["items"] == [e for e in everything if e["severity"] in ("warning", "critical")]
    assert seeded_numbers(page["items"]) == [6, 5, 3, 2, 0]
    assert (page["total"], page["limit"], page["offset"]) == (5, 50, 0)
    page = await get_json(client, AUDIT + "/security", admin_token, severity="critical")
    assert seeded_numbers(page["items"]) == [6, 2] and page["total"] == 2
    page = await get_json(client, AUDIT + "/security", admin_token, limit=2, offset=1)
    assert seeded_numbers(page["items"]) == [5, 3] and page["total"] == 5
    response = await client.get(AUDIT + "/security", headers=bearer(admin_token), params={"severity": "bad"})
    assert "severity" in (await error_of(response, 422, "validation_error"))["errors"]


async def test_statistics(client, services, clock, admin_token):
    before = await get_json(client, AUDIT + "/statistics", admin_token)
    assert set(before) == {"total", "by_event_type", "by_severity", "last_24h"}
    assert before["total"] >= 1 and before["by_event_type"]["login_success"] >= 1  # the admin's login
    now = clock.now
    clock.now = now - timedelta(hours=25)  # two entries older than a day
    await services.audit.record("login_failed", ip_address="10.0.0.9")
    await services.audit.record("refresh_token_reuse")
    clock.now = now - timedelta(hours=23)
    await services.audit.record("login_failed")
    clock.now = now
    for event_type in ("login_failed", "register", "backup_deleted"):
        await services.audit.record(event_type)
    after = await get_json(client, AUDIT + "/statistics", admin_token)
    assert after["total"] == before["total"] + 6
    assert after["last_24h"] == before["last_24h"] + 4
    added_types = {t: after["by_event_type"].get(t, 0) - before["by_event_type"].get(t, 0)
                   for t in after["by_event_type"]}
    assert {t: n for t, n in added_types.items() if n} == {
        "login_failed": 3, "refresh_token_reuse": 1, "register": 1, "backup_deleted": 1}
    added_severities = {s: after["by_severity"].get(s, 0) - before["by_severity"].get(s, 0)
                        for s in ("info", "warning", "critical")}
    assert added_severities == {"info": 1, "warning": 4, "critical": 1}
    assert sum(after["by_event_type"].values()) == sum(after["by_severity"].values()) == after["total"]
    assert after["total"] == (await get_json(client, AUDIT, admin_token))["total"]


async def retention_s(config: Any) -> Any:
    mongo = open_client(config.mongodb_url)
    try:
        indexes = await mongo[config.mongodb_db]["audit_log"].index_information()
    finally:
        await mongo.close()
    ttl = [i for i in indexes.values() if i.get("expireAfterSeconds") is not None]
    assert len(ttl) == 1, indexes
    assert ttl[0]["key"] == [("created", -1)]
    return ttl[0]["expireAfterSeconds"]


async def test_retention_index_follows_the_setting(client, config, admin_token):
    assert await retention_s(config) == 90 * 86400
    response = await client.post("/api/v1/settings", headers=bearer(admin_token),
                                 json={"key": "audit_retention_days", "value": "30"})
    assert response.status == 200, await response.text()
    assert await retention_s(config) == 30 * 86400
    response = await client.post("/api/v1/settings", headers=bearer(admin_token),
                                 json={"key": "audit_retention_days", "value": 3650})
    assert response.status == 200, await response.text()
    assert await retention_s(config) == 3650 * 86400
    response = await client.post("/api/v1/settings", headers=bearer(admin_token),
                                 json={"key": "audit_retention_days", "value": 0})
    await error_of(response, 422, "validation_error")
    assert await retention_s(config) == 3650 * 86400


async def test_retention_index_is_set_at_start_from_the_stored_setting(services, config, clock):
    await services.settings.set("audit_retention_days", 7)
    mongo = open_client(config.mongodb_url)
    try:  # as if the index had been left behind with another lifetime (or without one)
        await mongo[config.mongodb_db].command(
            "collMod", "audit_log", index={"name": "created_-1", "expireAfterSeconds": 12345})
    finally:
        await mongo.close()
    assert await retention_s(config) == 12345
    async with open_services(config, clock=clock):
        assert await retention_s(config) == 7 * 86400
