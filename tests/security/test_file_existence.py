"""A file's download and delete tell nothing to a caller who may not see its record: the answer is
exactly that of a missing file (issue 28, item 4; the 403-against-404 class of our peers' advisories).
The view rule may refuse the caller outright (null: admins only) or hide the record (a rule on it)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.api.test_files import FILES, auth_user, uploaded
from tests.conftest import bearer, create_collection, create_record, error_of

MISSING = {"code": "not_found", "detail": "File not found"}


@pytest.fixture
async def files(client, admin_token) -> dict[str, Any]:
    """Two files and two callers: `hidden`, a file of alice's record in the auth collection `people`
    (shown to its owner only); `refused`, a file of a record in `vault` (view and list rules null:
    admins only); `bob`, a user of `people` who may see neither; `alice`, the owner."""
    await create_collection(client, admin_token, "people", [], type="auth")
    vault = await create_collection(client, admin_token, "vault", [{"name": "title", "type": "text"}],
                                    list_rule=None, view_rule=None)
    alice_token, alice_id = await auth_user(client, "people", "alice@example.com")
    bob_token, _ = await auth_user(client, "people", "bob@example.com")
    secret = await create_record(client, admin_token, "vault", {"title": "secret"})
    return {
        "hidden": (await uploaded(client, alice_token, b"alice's", "people", alice_id))["id"],
        "refused": (await uploaded(client, admin_token, b"the vault's", "vault", secret["id"]))["id"],
        "alice": alice_token, "bob": bob_token, "vault": vault["id"],
    }


async def answer(response: Any) -> tuple[int, dict[str, Any]]:
    return response.status, await response.json()


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("caller", ["anonymous", "bob"])
@pytest.mark.parametrize("file", ["hidden", "refused"])
async def test_a_file_the_caller_may_not_see_is_answered_as_a_missing_one(client, files, method, caller, file):
    headers = bearer(files[caller]) if caller != "anonymous" else {}
    existing = await client.request(method, f"{FILES}/{files[file]}", headers=headers)
    missing = await client.request(method, f"{FILES}/{uuid.uuid4()}", headers=headers)
    assert await answer(existing) == await answer(missing) == (404, MISSING)


async def test_a_caller_who_may_see_the_record_still_gets_the_file_and_the_update_rules_refusal(
        client, admin_token, files):
    response = await client.get(f"{FILES}/{files['hidden']}", headers=bearer(files["alice"]))
    assert response.status == 200 and await response.read() == b"alice's"
    # may see the vault's records but not change them: the refusal is told, the file stays
    changed = await client.patch(f"/api/v1/collections/{files['vault']}", headers=bearer(admin_token),
                                 json={"view_rule": "", "update_rule": None})
    assert changed.status == 200, await changed.text()
    refused = await client.delete(f"{FILES}/{files['refused']}", headers=bearer(files["bob"]))
    await error_of(refused, 403, "forbidden")
    assert (await client.get(f"{FILES}/{files['refused']}", headers=bearer(files["bob"]))).status == 200
