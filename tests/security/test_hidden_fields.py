"""No field a caller may not read can be named in a record query, reached through a relation, or
guessed from a count or an error (issue 28, item 3: hidden-field oracles; Strapi's
`where[updatedBy][resetPasswordToken][$startsWith]` count oracle, Directus's `search` over fields
the caller cannot read, PocketBase's filters through relations onto auth collections).

The secrets of a user live outside its record: the password hash in `auth_credentials` (or the
admin table), the TOTP secret in `mfa_factors`, OTP codes in `otp_codes`, reset tokens in
`one_time_tokens`. The tests name each of them as a record field of an auth collection and of a
collection relating to it, through every reading parameter, and compare what comes back with a
control name that never existed: same status, same code, same detail but for the name."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pyotp
import pytest

from tests.conftest import (
    USER_PASSWORD,
    bearer,
    create_collection,
    create_record,
    error_of,
    link_token,
    records_path,
)

ALICE = "alice@example.com"
HIDDEN = ("password", "password_hash", "passwordHash", "hash", "tokenKey", "token_key", "secret", "totp_secret",
          "mfa_secret", "recovery_codes", "recovery_hashes", "code", "code_hash", "otp", "reset_token",
          "token", "token_hash", "collection_id", "_id", "credentials")
"""Names under which a store might keep a secret (ours or a peer's)."""
CONTROL = "never_a_field"


@pytest.fixture
async def people(client, admin_token, services, clock, mailbox, run_jobs) -> dict[str, Any]:
    """The auth collection `people` (every rule open, OTP and 2FA on) with alice, whose TOTP secret is
    enabled, who has asked for a password reset and an OTP; the collection `notes` (every rule open)
    with a note whose relation `user` holds alice. Returns alice's id and every secret of hers."""
    await create_collection(client, admin_token, "people", [{"name": "nickname", "type": "text"}], type="auth",
                            otp_enabled=True, mfa_enabled=True, list_rule="", view_rule="")
    people = (await (await client.get("/api/v1/collections")).json())
    people_id = next(c["id"] for c in people if c["name"] == "people")
    await create_collection(client, admin_token, "notes", [
        {"name": "title", "type": "text"},
        {"name": "user", "type": "relation", "collection_id": people_id, "max_select": 1}])
    auth = "/api/v1/collections/people/auth"
    registered = await client.post(f"{auth}/register", json={"email": ALICE, "password": USER_PASSWORD})
    assert registered.status == 201, await registered.text()
    alice_id = (await registered.json())["user"]["id"]
    login = await client.post(f"{auth}/login", json={"email": ALICE, "password": USER_PASSWORD})
    access = (await login.json())["token"]["access_token"]
    setup = await (await client.post(f"{auth}/2fa/setup", headers=bearer(access), json={})).json()
    enabled = await client.post(f"{auth}/2fa/enable", headers=bearer(access),
                                json={"code": pyotp.TOTP(setup["secret"]).at(clock())})
    assert enabled.status == 200, await enabled.text()
    reset = await client.post("/api/v1/auth/request-password-reset", json={"email": ALICE, "collection": "people"})
    assert reset.status == 200, await reset.text()
    await run_jobs()
    reset_token = link_token(mailbox.last_to(ALICE))
    user = await (await services.identity.systems.collection("people")).get(alice_id)
    await create_record(client, admin_token, "notes", {"title": "hello", "user": alice_id})
    return {"id": alice_id, "secrets": {"password_hash": user.password_hash, "totp_secret": setup["secret"],
                                        "reset_token": reset_token, "password": USER_PASSWORD}}


async def answer(client, path: str, token: str | None) -> tuple[int, Any]:
    response = await client.get(path, headers=bearer(token) if token else {})
    text = await response.text()
    return response.status, json.loads(text) if response.content_type == "application/json" else text


def without(body: Any, name: str) -> Any:
    """An error `body` with `name` written as CONTROL in its detail (to compare it with the control's)."""
    return {**body, "detail": body["detail"].replace(f"'{name}'", f"'{CONTROL}'")}


def assert_no_secret(text: str, secrets: dict[str, str]) -> None:
    for what, secret in secrets.items():
        assert secret not in text, f"{what} is in the answer: {text[:300]}"
    assert "$argon2" not in text, text[:300]


QUERIES = {
    "filter": "filter={name}~'$argon2'",
    "filter-equal": "filter={name}!=''",
    "sort": "sort={name}",
    "sort-descending": "sort=-{name}",
}
"""Each names a field (`{name}`) in a record list's query."""


def query_of(query: str, name: str) -> str:
    key, value = QUERIES[query].split("=", 1)
    return f"{key}={quote(value.replace('{name}', name))}"


@pytest.mark.parametrize("collection", ["people", "notes"])
@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("caller", ["admin", "anonymous"])
async def test_a_hidden_name_is_answered_as_a_name_that_never_existed(client, admin_token, people, collection,
                                                                      query, caller):
    token = admin_token if caller == "admin" else None
    control = await answer(client, records_path(collection) + "?" + query_of(query, CONTROL), token)
    assert control[0] == 400 and control[1]["code"] == "invalid_filter", control
    for name in HIDDEN:
        named = await answer(client, records_path(collection) + "?" + query_of(query, name), token)
        assert (named[0], without(named[1], name)) == control, (name, named)


@pytest.mark.parametrize("path", ["user.password_hash", "user.tokenKey", "user.email", "expand.user.password_hash",
                                  "people_via_user.password_hash"])
async def test_a_path_through_a_relation_is_no_filter_nor_sort(client, admin_token, people, path):
    for query in (f"filter={quote(path + '~' + repr('$argon2'))}", f"sort={path}"):
        response = await client.get(records_path("notes") + "?" + query, headers=bearer(admin_token))
        body = await error_of(response, 400, "invalid_filter")
        assert_no_secret(json.dumps(body), people["secrets"])


@pytest.mark.parametrize("secret", ["password_hash", "totp_secret", "reset_token"])
@pytest.mark.parametrize("collection", ["people", "notes"])
async def test_search_finds_no_secret_text(client, admin_token, people, secret, collection):
    """The total of a search for (a piece of) the secret is that of a search for nothing there."""
    text = people["secrets"][secret]
    control = await answer(client, records_path(collection) + "?search=zzzqqq", admin_token)
    for piece in {text, text[:12], "argon2", "argon2id"}:
        found = await answer(client, records_path(collection) + "?search=" + quote(piece), admin_token)
        assert found == control or (found[0] == 400 and found[1]["code"] == "invalid_filter"), (piece, found)
        assert found[0] != 200 or found[1]["total"] == 0


async def test_an_expanded_user_carries_none_of_its_secrets(client, admin_token, people):
    paths = [records_path("notes") + "?expand=user",
             records_path("notes") + "?expand=user&fields=" + quote("*,expand.user.password_hash,expand.user.tokenKey"),
             records_path("notes") + "?expand=user&fields=" + quote("expand.user.*,expand.user.password_hash"),
             records_path("people") + "?expand=notes_via_user",
             records_path("people", people["id"]) + "?expand=notes_via_user.user",
             records_path("people", people["id"]) + "?fields=" + quote("*,password_hash,secret,totp_secret"),
             records_path("people") + "/export/csv",
             "/api/v1/collections/people/auth/me"]
    for path in paths:
        status, body = await answer(client, path, admin_token)
        assert status in (200, 401), (path, body)
        assert_no_secret(json.dumps(body), people["secrets"])
    listed = await answer(client, records_path("notes") + "?expand=user", admin_token)
    user = listed[1]["items"][0]["expand"]["user"]
    assert user["id"] == people["id"]
    assert set(user) <= {"id", "created", "updated", "email", "verified", "nickname", "collection"}, user
    narrowed = await answer(client, records_path("notes") + "?expand=user&fields=" + quote("expand.user.password_hash"),
                            admin_token)
    assert narrowed[1]["items"][0] in ({}, {"expand": {}}, {"expand": {"user": {}}}), narrowed


async def test_no_relation_reaches_the_admin_table_or_a_secret_store(client, admin_token, people):
    """A relation names a collection by id; the stores of secrets are no collection, so a relation to
    one is refused when made or expands to nothing: never to their documents."""
    for store in ("admin_users", "auth_credentials", "mfa_factors", "otp_codes", "one_time_tokens", "api_keys",
                  "sessions"):
        created = await client.post("/api/v1/collections", headers=bearer(admin_token), json={
            "name": f"to_{store}", "schema": [{"name": "link", "type": "relation", "collection_id": store}]})
        if created.status != 201:
            assert 400 <= created.status < 500, await created.text()
            continue
        response = await client.post(records_path(f"to_{store}"), headers=bearer(admin_token),
                                     json={"data": {"link": people["id"]}})
        assert response.status in (201, 422), await response.text()
        listed = await client.get(records_path(f"to_{store}") + "?expand=link", headers=bearer(admin_token))
        assert listed.status in (200, 400), await listed.text()
        assert_no_secret(await listed.text(), people["secrets"])
