"""JSON where a string belongs, and keys a database would read as operators, change nothing and
are answered 4xx in the error model, never 500 (issue 28, item 3: operator injection; Parse
Server's `{"$ne": ...}` token and `$where` advisories, prototype pollution through `__proto__`).

Each input of a token, a code or a key gets every hostile value in turn: objects with operators,
arrays, numbers, booleans, null. Afterwards the real token still works, which shows nothing was
spent, verified or reset by the hostile ones."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import (
    USER_PASSWORD,
    bearer,
    create_collection,
    create_record,
    link_token,
    records_path,
)

HOSTILE: list[Any] = [
    {"$ne": ""}, {"$gt": ""}, {"$regex": ".*"}, {"$where": "sleep(100) || true"}, {"$exists": True},
    {"__proto__": {"admin": True}}, {"constructor": {"prototype": {"admin": True}}}, {"a.b": 1}, {"$in": [""]},
    [""], ["$ne"], [], 0, 1, -1, 10**18, 1.5, True, False, None, {},
]
"""What a client may send where a string belongs."""
ALICE = "alice@example.com"
PEOPLE = "/api/v1/collections/people/auth"
AUTH = "/api/v1/auth"


async def refused(response: Any) -> dict[str, Any]:
    """Assert a 4xx answer in the error model; return its body."""
    text = await response.text()
    assert 400 <= response.status < 500, f"{response.status}: {text}"
    body: dict[str, Any] = await response.json()
    assert isinstance(body["detail"], str) and body["detail"] and isinstance(body["code"], str), body
    return body


@pytest.fixture
async def unlimited(services) -> None:
    """No rate limit: each hostile value reaches the code that reads it, not the limiter."""
    await services.settings.set("rate_limit_enabled", False)


@pytest.fixture
async def alice(client, admin_token, unlimited) -> dict[str, Any]:
    """alice, an unverified user of the auth collection `people` (OTP and 2FA on)."""
    await create_collection(client, admin_token, "people", [], type="auth", otp_enabled=True, mfa_enabled=True)
    response = await client.post(f"{PEOPLE}/register", json={"email": ALICE, "password": USER_PASSWORD})
    assert response.status == 201, await response.text()
    return dict((await response.json())["user"])


def bodies(template: dict[str, Any], field_name: str) -> list[dict[str, Any]]:
    """`template` with `field_name` set to each HOSTILE value, then with each as the whole body's
    operator keys (`{"$where": ..., field_name: ...}`)."""
    out = [{**template, field_name: value} for value in HOSTILE]
    out += [{**template, "$where": "true"}, {**template, "__proto__": {field_name: "x"}},
            {**template, f"{field_name}.$ne": ""}, {"$set": {field_name: ""}}]
    return out


TOKEN_INPUTS = {
    "admin-verify-email": (f"{AUTH}/verify-email", {}, "token"),
    "collection-verify-email": (f"{PEOPLE}/verify-email", {}, "token"),
    "reset-password": (f"{AUTH}/reset-password", {"new_password": "new-password-123"}, "token"),
    "collection-reset-password": (f"{AUTH}/reset-password", {"new_password": "new-password-123",
                                                             "collection": "people"}, "token"),
    "confirm-email-change": (f"{PEOPLE}/me/confirm-email-change", {}, "token"),
    "otp-code": (f"{PEOPLE}/otp/verify", {"email": ALICE}, "code"),
    "otp-email": (f"{PEOPLE}/otp/verify", {"code": "123456"}, "email"),
    "2fa-token": (f"{PEOPLE}/2fa/verify", {"code": "123456"}, "mfa_token"),
    "2fa-code": (f"{PEOPLE}/2fa/verify", {"mfa_token": "x" * 20}, "code"),
    "refresh": (f"{PEOPLE}/refresh", {}, "refresh_token"),
    "admin-refresh": (f"{AUTH}/refresh", {}, "refresh_token"),
    "login-email": (f"{PEOPLE}/login", {"password": USER_PASSWORD}, "email"),
    "login-password": (f"{PEOPLE}/login", {"email": ALICE}, "password"),
    "admin-login-password": (f"{AUTH}/login", {"email": ALICE}, "password"),
    "oauth-state": (f"{PEOPLE}/oauth2/callback", {"provider": "google", "code": "c", "code_verifier": "v" * 43,
                                                   "redirect_uri": "http://cms.test/cb"}, "state"),
    "oauth-code": (f"{PEOPLE}/oauth2/callback", {"provider": "google", "state": "s" * 20, "code_verifier": "v" * 43,
                                                  "redirect_uri": "http://cms.test/cb"}, "code"),
    "oauth-provider": (f"{PEOPLE}/oauth2/callback", {"code": "c", "state": "s" * 20, "code_verifier": "v" * 43,
                                                      "redirect_uri": "http://cms.test/cb"}, "provider"),
}


@pytest.mark.parametrize("target", list(TOKEN_INPUTS))
async def test_hostile_values_of_tokens_codes_and_credentials_are_4xx(client, alice, target):
    path, template, field_name = TOKEN_INPUTS[target]
    for body in bodies(template, field_name):
        await refused(await client.post(path, json=body))
    for raw in (b"[]", b'"token"', b"null", b"1", b'{"token": "a", "token": {"$ne": ""}}'):
        await refused(await client.post(path, data=raw, headers={"Content-Type": "application/json"}))


async def test_after_every_hostile_value_the_real_tokens_still_work(client, alice, mailbox, run_jobs):
    """Nothing was verified, reset or spent by the hostile values: the emailed tokens (registration's
    verification, then a reset) then do it, each at its own endpoint."""
    for path, field_name in ((f"{PEOPLE}/verify-email", "token"), (f"{AUTH}/reset-password", "token")):
        for body in bodies({"new_password": "new-password-123", "collection": "people"}, field_name):
            await refused(await client.post(path, json=body))
    me = await client.post(f"{PEOPLE}/login", json={"email": ALICE, "password": USER_PASSWORD})
    assert me.status == 200, await me.text()
    assert (await me.json())["user"]["verified"] is False
    assert (await client.post(f"{AUTH}/request-password-reset", json={"email": ALICE, "collection": "people"})
            ).status == 200
    await run_jobs()
    tokens = [link_token(message) for message in mailbox.to(ALICE)]
    assert len(tokens) == 2, tokens
    verified = [(await client.post(f"{PEOPLE}/verify-email", json={"token": t})).status for t in tokens]
    reset = [(await client.post(f"{AUTH}/reset-password", json={"token": t, "new_password": "new-password-123"})
              ).status for t in tokens]
    assert sorted(verified + reset) == [200, 200, 400, 400], (verified, reset)


@pytest.mark.parametrize("header", ["X-API-Key", "Authorization"])
async def test_hostile_api_keys_and_bearer_tokens_are_401(client, alice, header):
    await create_collection(client, (await login_admin(client)), "posts", [{"name": "title", "type": "text"}],
                            list_rule=None, create_rule=None)
    for value in ('{"$ne": ""}', '{"$gt": ""}', "[]", "null", "0", "true", "$where", "a.b", "__proto__",
                  "cms_" + "x" * 40, "{}", "Bearer", "Bearer ", "Bearer {\"$ne\":\"\"}", "Basic YTpi"):
        header_value = value if header == "X-API-Key" or value.startswith(("Bearer", "Basic")) else f"Bearer {value}"
        for method in ("GET", "POST"):
            response = await client.request(method, records_path("posts"), headers={header: header_value},
                                            json={"data": {"title": "x"}})
            body = await refused(response)
            assert response.status in (400, 401), body
    total = await client.get(records_path("posts"), headers=bearer(await login_admin(client)))
    assert (await total.json())["total"] == 0


async def login_admin(client) -> str:
    from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, login

    return str((await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"])


DATA_KEYS: list[Any] = [
    {"$set": {"title": "pwned"}}, {"$where": "true"}, {"$inc": {"n": 1}}, {"a.b": 1}, {"title.x": "y"},
    {"__proto__": {"title": "pwned"}}, {"constructor": {"prototype": {}}}, {"_id": "chosen"}, {"id": "chosen"},
    {"created": "2020-01-01T00:00:00Z"}, {"title": {"$ne": ""}}, {"title": ["a"]}, {"n": {"$gt": 0}},
    {"n": "1e400"}, {"": 1}, {"$": 1}, {"title": "ok", "$unset": {"title": 1}},
]
"""What a client may send as a record's `data`: operator keys, dotted keys, system keys, operator values."""


@pytest.fixture
async def posts(client, admin_token, unlimited) -> dict[str, Any]:
    await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text"}, {"name": "n", "type": "number"}, {"name": "meta", "type": "json"}])
    return await create_record(client, admin_token, "posts", {"title": "kept", "n": 1})


async def stored(client, admin_token) -> list[dict[str, Any]]:
    response = await client.get(records_path("posts") + "?per_page=100", headers=bearer(admin_token))
    return [{k: item.get(k) for k in ("id", "title", "n", "meta")} for item in (await response.json())["items"]]


async def test_operator_and_dotted_keys_in_record_data_change_nothing(client, admin_token, posts):
    before = await stored(client, admin_token)
    for data in DATA_KEYS + [value for value in HOSTILE if value != {}]:  # `{}` is a record of no fields
        body = {"data": data}
        await refused(await client.post(records_path("posts"), headers=bearer(admin_token), json=body))
        await refused(await client.patch(records_path("posts", posts["id"]), headers=bearer(admin_token), json=body))
        await refused(await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                                        json={"record_ids": [posts["id"]], "data": data}))
    for top in ({"$set": {"title": "pwned"}}, {"data": {"title": "x"}, "$where": "1"}, {"data.title": "x"}):
        await refused(await client.post(records_path("posts"), headers=bearer(admin_token), json=top))
    assert await stored(client, admin_token) == before
    # the body the hostile ones were wrapped in is the one the route takes: the same with a plain change applies
    applied = await client.post(records_path("posts") + "/bulk-update", headers=bearer(admin_token),
                                json={"record_ids": [posts["id"]], "data": {"title": "changed"}})
    assert (applied.status, await applied.json()) == (200, {"updated": 1})


@pytest.mark.parametrize("value", [{"$set": {"a": 1}}, {"a.b": 1, "$where": "1"}, {"__proto__": {"x": 1}},
                                   [{"$gt": ""}], {"nested": {"$ne": "", "c.d": [{"$in": []}]}}],
                         ids=["set", "dotted-where", "proto", "array-of-operator", "nested"])
async def test_a_json_field_stores_operator_keys_as_data_or_refuses_them(client, admin_token, posts, value):
    """A json field's value is data: stored and read back as sent (or refused 422), never run as an
    operator and never a 500."""
    response = await client.post(records_path("posts"), headers=bearer(admin_token),
                                 json={"data": {"title": "with json", "meta": value}})
    if response.status != 201:
        await refused(response)
        return
    created = await response.json()
    assert created["meta"] == value
    again = await client.get(records_path("posts", created["id"]), headers=bearer(admin_token))
    assert again.status == 200 and (await again.json())["meta"] == value
    others = [item for item in await stored(client, admin_token) if item["id"] != created["id"]]
    assert others == [{"id": posts["id"], "title": "kept", "n": 1, "meta": None}]


async def test_hostile_ids_in_paths_and_bulk_bodies_are_4xx(client, admin_token, posts):
    for record_id in ('{"$ne":""}', "%7B%22%24ne%22%3A%22%22%7D", "$where", "a.b", "__proto__", "[]"):
        for method in ("GET", "PATCH", "DELETE"):
            await refused(await client.request(method, records_path("posts", record_id), headers=bearer(admin_token),
                                               json={"data": {"title": "x"}}))
    for ids in HOSTILE + [[{"$ne": ""}], [["x"]], [None], [1]]:
        await refused(await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                                        json={"record_ids": ids}))
        await refused(await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                                        json={"record_ids": [posts["id"], ids]}))
    assert [item["id"] for item in await stored(client, admin_token)] == [posts["id"]]
    # the body the hostile ids were sent in is the one the route takes: the real id alone deletes the record
    deleted = await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                                json={"record_ids": [posts["id"]]})
    assert (deleted.status, await deleted.json()) == (200, {"deleted": 1})


async def test_hostile_batch_bodies_are_4xx_and_change_nothing(client, admin_token, posts):
    before = await stored(client, admin_token)
    url = records_path("posts")
    hostile_requests: list[Any] = [
        *HOSTILE, {"$where": "1"}, [{"$ne": ""}], [None], [[]], [1],
        [{"method": {"$ne": ""}, "url": url, "body": {"data": {"title": "x"}}}],
        [{"method": "POST", "url": {"$ne": ""}, "body": {"data": {"title": "x"}}}],
        [{"method": "POST", "url": url, "body": {"data": {"$set": {"title": "x"}}}}],
        [{"method": "POST", "url": url, "body": {"$set": {"title": "x"}}}],
        [{"method": "POST", "url": url, "body": [1]}],
        [{"method": "PATCH", "url": records_path("posts", posts["id"]), "body": {"data": {"title.$": "x"}}}],
        [{"method": "PATCH", "url": url + "/%7B%22%24ne%22%3A%22%22%7D", "body": {"data": {"title": "x"}}}],
        [{"method": "DELETE", "url": url + "/" + posts["id"] + "?filter=id!=''"}],
        [{"method": "POST", "url": url, "body": {"data": {"title": "x"}}, "__proto__": {"method": "DELETE"}}],
    ]
    for requests in hostile_requests:
        response = await client.post("/api/v1/batch", headers=bearer(admin_token), json={"requests": requests})
        await refused(response)
    assert await stored(client, admin_token) == before
