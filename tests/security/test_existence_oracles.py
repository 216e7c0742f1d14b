"""A caller who may not see a record learns nothing of whether it exists: every answer about a
hidden record is the answer about a missing one, byte for byte but for the id (issue 28, item 3:
403 against 404; files: `test_file_existence.py`).

Collections are public by the spec (`GET /collections` lists them, with their rules), so only
their changes are checked: a non-admin is refused the same way for a collection that exists and
one that does not. Records: `notes` shows a note to its owner only (every rule
`owner = @request.auth.id`); `vault` to admins only (every rule null)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import bearer, create_collection, create_record, records_path
from tests.security.test_unique_oracle import signed_in_user

OWNER = "owner = @request.auth.id"


@pytest.fixture
async def hidden(client, admin_token) -> dict[str, Any]:
    """alice's note (hidden from bob and from anonymous callers), a vault record (hidden from both),
    bob's token and his own note."""
    await create_collection(client, admin_token, "notes", [{"name": "title", "type": "text"},
                                                           {"name": "owner", "type": "text"}],
                            list_rule=OWNER, view_rule=OWNER, create_rule="", update_rule=OWNER, delete_rule=OWNER)
    await create_collection(client, admin_token, "vault", [{"name": "title", "type": "text"}],
                            list_rule=None, view_rule=None, create_rule=None, update_rule=None, delete_rule=None)
    alice_token, alice_id = await signed_in_user(client, "alice@example.com")
    bob_token, bob_id = await signed_in_user(client, "bob@example.com")
    note = await create_record(client, alice_token, "notes", {"title": "alice's", "owner": alice_id})
    own = await create_record(client, bob_token, "notes", {"title": "bob's", "owner": bob_id})
    secret = await create_record(client, admin_token, "vault", {"title": "secret"})
    return {"notes": note["id"], "vault": secret["id"], "bob": bob_token, "own": own["id"], "admin": admin_token}


async def answer(response: Any, *ids: str) -> tuple[int, str]:
    """Status and body text, with each of `ids` written as `<id>`."""
    text = await response.text()
    for record_id in ids:
        text = text.replace(record_id, "<id>")
    return response.status, text


def caller_headers(hidden: dict[str, Any], caller: str) -> dict[str, str]:
    return bearer(hidden[caller]) if caller != "anonymous" else {}


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
@pytest.mark.parametrize("caller", ["anonymous", "bob"])
@pytest.mark.parametrize("collection", ["notes", "vault"])
async def test_a_hidden_record_is_answered_as_a_missing_one(client, hidden, method, caller, collection):
    missing = str(uuid.uuid4())
    headers = caller_headers(hidden, caller)
    body = {"data": {"title": "changed"}}
    existing = await client.request(method, records_path(collection, hidden[collection]), headers=headers, json=body)
    absent = await client.request(method, records_path(collection, missing), headers=headers, json=body)
    seen = await answer(existing, hidden[collection])
    assert seen == await answer(absent, missing), seen
    assert seen[0] in (401, 403, 404), seen
    got = await client.get(records_path(collection, hidden[collection]), headers=bearer(hidden["admin"]))
    assert (await got.json())["title"] != "changed"


@pytest.mark.parametrize("caller", ["anonymous", "bob"])
@pytest.mark.parametrize("collection", ["notes", "vault"])
async def test_bulk_changes_answer_a_hidden_record_as_a_missing_one(client, hidden, caller, collection):
    """Alone and beside bob's own note (which he may change), a hidden id gets the answer of a
    missing one, and nothing is changed: bulk changes are all or nothing."""
    missing = str(uuid.uuid4())
    headers = caller_headers(hidden, caller)
    for action, extra in (("bulk-update", {"data": {"title": "changed"}}), ("bulk-delete", {})):
        path = records_path(collection) + "/" + action
        for beside in ([], [hidden["own"]]) if collection == "notes" else ([],):
            existing = await client.post(path, headers=headers, json={"record_ids": [*beside, hidden[collection]],
                                                                      **extra})
            absent = await client.post(path, headers=headers, json={"record_ids": [*beside, missing], **extra})
            seen = await answer(existing, hidden[collection])
            assert seen == await answer(absent, missing), seen
            assert seen[0] == (401 if caller == "anonymous" else 403), seen
    for record_id, collection_name in ((hidden[collection], collection), (hidden["own"], "notes")):
        got = await client.get(records_path(collection_name, record_id), headers=bearer(hidden["admin"]))
        assert got.status == 200 and (await got.json())["title"] != "changed"


@pytest.mark.parametrize("collection", ["notes", "vault"])
async def test_a_batch_answers_a_hidden_record_as_a_missing_one(client, hidden, services, collection):
    if not services.records.repository.capabilities.transactions:
        pytest.skip("the server has no multi-document transactions: every batch is refused")
    missing = str(uuid.uuid4())
    for method in ("PATCH", "DELETE"):
        answers = []
        for record_id in (hidden[collection], missing):
            request = {"method": method, "url": records_path(collection, record_id), "body": {"data": {"title": "x"}}}
            response = await client.post("/api/v1/batch", headers=bearer(hidden["bob"]), json={"requests": [request]})
            answers.append(await answer(response, record_id))
        assert answers[0] == answers[1], answers


async def test_an_expansion_leaves_out_a_hidden_record_as_a_missing_one(client, admin_token, hidden):
    await create_collection(client, admin_token, "links", [
        {"name": "note", "type": "relation", "collection_id": await collection_id(client, "notes")}])
    hidden_link = await create_record(client, admin_token, "links", {"note": hidden["notes"]})
    missing_link = await create_record(client, admin_token, "links", {"note": hidden["own"]})
    await client.delete(records_path("notes", hidden["own"]), headers=bearer(hidden["bob"]))
    answers = []
    for link in (hidden_link, missing_link):
        response = await client.get(records_path("links", link["id"]) + "?expand=note", headers=bearer(hidden["bob"]))
        body = await response.json()
        answers.append((response.status, "expand" in body))
    assert answers == [(200, False), (200, False)], answers


async def collection_id(client, name: str) -> str:
    listed = await (await client.get("/api/v1/collections")).json()
    return str(next(c["id"] for c in listed if c["name"] == name))


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
@pytest.mark.parametrize("caller", ["anonymous", "bob"])
async def test_a_non_admin_is_refused_a_collection_change_alike_whether_it_exists(client, hidden, method, caller):
    headers = caller_headers(hidden, caller)
    existing_id = await collection_id(client, "vault")
    missing_id = str(uuid.uuid4())
    by_id = [await answer(await client.request(method, f"/api/v1/collections/{cid}", headers=headers,
                                               json={"name": "renamed"}), cid) for cid in (existing_id, missing_id)]
    by_name = [await answer(await client.request(method, f"/api/v1/collections/{name}", headers=headers,
                                                 json={"name": "renamed"}), name) for name in ("vault", "nothere")]
    assert by_id[0] == by_id[1] and by_name[0] == by_name[1], (by_id, by_name)
    assert by_id[0][0] in (401, 403), by_id
    assert await collection_id(client, "vault") == existing_id
