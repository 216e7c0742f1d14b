"""A unique field's clash is named (400 `already_exists`, `errors` naming the field) only to a caller
who may view a record holding the value; any other caller gets the create rule's refusal (401 / 403),
which names neither the field nor the clash, so it cannot test guesses of values it cannot read
(issue 28, item 4; docs/concepts/collections.md, Unique fields)."""

from __future__ import annotations

from typing import Any

from tests.conftest import USER_PASSWORD, bearer, create_collection, create_record, error_of, records_path

FIELDS = [{"name": "code", "type": "text", "validation": {"unique": True}},
          {"name": "owner", "type": "text"}]
OPEN_CREATE = {"create_rule": "", "update_rule": None, "delete_rule": None}


async def create(client, token: str | None, collection: str, data: dict[str, Any]) -> Any:
    return await client.post(records_path(collection), headers=bearer(token) if token else {}, json={"data": data})


async def signed_in_user(client, email: str) -> tuple[str, str]:
    """Register and log in an admin-table user: (access token, user id)."""
    response = await client.post("/api/v1/auth/register", json={"email": email, "password": USER_PASSWORD})
    assert response.status == 201, await response.text()
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": USER_PASSWORD})
    body = await response.json()
    return str(body["token"]["access_token"]), str(body["user"]["id"])


async def test_a_caller_who_may_not_view_the_collection_gets_the_refusal(client, admin_token, user_token):
    await create_collection(client, admin_token, "invites", FIELDS, list_rule=None, view_rule=None, **OPEN_CREATE)
    await create_record(client, admin_token, "invites", {"code": "taken"})
    anonymous = await error_of(await create(client, None, "invites", {"code": "taken"}), 401, "unauthorized")
    signed_in = await error_of(await create(client, user_token, "invites", {"code": "taken"}), 403, "forbidden")
    for body in (anonymous, signed_in):
        assert "errors" not in body and "code" not in body["detail"] and "exist" not in body["detail"], body
    assert signed_in["detail"] == "You may not create records of 'invites'"
    # a free value is stored as before; the admin, who sees every record, is told the clash
    assert (await create(client, user_token, "invites", {"code": "free"})).status == 201
    told = await error_of(await create(client, admin_token, "invites", {"code": "taken"}), 400, "already_exists")
    assert told["errors"] == {"code": ["Value must be unique"]}


async def test_a_caller_who_may_view_the_record_is_told_the_field(client, admin_token, user_token):
    await create_collection(client, admin_token, "handles", FIELDS, list_rule="", view_rule="", **OPEN_CREATE)
    await create_record(client, admin_token, "handles", {"code": "taken"})
    for token in (None, user_token):
        body = await error_of(await create(client, token, "handles", {"code": "taken"}), 400, "already_exists")
        assert body["errors"] == {"code": ["Value must be unique"]}


async def test_under_a_rule_on_the_record_only_its_viewers_are_told(client, admin_token):
    await create_collection(client, admin_token, "notes", FIELDS, list_rule="owner = @request.auth.id",
                            view_rule="owner = @request.auth.id", **OPEN_CREATE)
    ann_token, ann_id = await signed_in_user(client, "ann@example.com")
    bob_token, bob_id = await signed_in_user(client, "bob@example.com")
    assert (await create(client, ann_token, "notes", {"code": "ann-1", "owner": ann_id})).status == 201
    told = await error_of(await create(client, ann_token, "notes", {"code": "ann-1", "owner": ann_id}),
                          400, "already_exists")
    assert told["errors"] == {"code": ["Value must be unique"]}
    hidden = await error_of(await create(client, bob_token, "notes", {"code": "ann-1", "owner": bob_id}),
                            403, "forbidden")
    assert "errors" not in hidden


async def test_a_batch_create_answers_the_same(client, admin_token, user_token):
    await create_collection(client, admin_token, "invites", FIELDS, list_rule=None, view_rule=None, **OPEN_CREATE)
    await create_record(client, admin_token, "invites", {"code": "taken"})
    requests = [{"method": "POST", "url": records_path("invites"), "body": {"data": {"code": "free"}}},
                {"method": "POST", "url": records_path("invites"), "body": {"data": {"code": "taken"}}}]
    response = await client.post("/api/v1/batch", headers=bearer(user_token), json={"requests": requests})
    failed = (await error_of(response, 400, "bad_request"))["failed"]
    assert (failed["index"], failed["status"], failed["body"]["code"]) == (1, 403, "forbidden"), failed
    assert "errors" not in failed["body"]
    response = await client.post("/api/v1/batch", headers=bearer(admin_token), json={"requests": requests})
    failed = (await error_of(response, 400, "bad_request"))["failed"]
    assert (failed["index"], failed["body"]["code"]) == (1, "already_exists"), failed


async def test_an_update_onto_a_value_only_hidden_records_hold_gets_the_update_rule_refusal(client, admin_token):
    owner_only = "owner = @request.auth.id"
    await create_collection(client, admin_token, "notes", FIELDS, list_rule=owner_only, view_rule=owner_only,
                            create_rule="", update_rule=owner_only, delete_rule=None)
    ann_token, ann_id = await signed_in_user(client, "ann@example.com")
    bob_token, bob_id = await signed_in_user(client, "bob@example.com")
    assert (await create(client, ann_token, "notes", {"code": "ann-1", "owner": ann_id})).status == 201
    bobs = await (await create(client, bob_token, "notes", {"code": "bob-1", "owner": bob_id})).json()
    mine = await (await create(client, bob_token, "notes", {"code": "bob-2", "owner": bob_id})).json()

    async def change(code: str) -> Any:
        return await client.patch(records_path("notes", mine["id"]), headers=bearer(bob_token),
                                  json={"data": {"code": code}})

    hidden = await error_of(await change("ann-1"), 403, "forbidden")  # only Ann's record holds it
    assert "errors" not in hidden and "ann-1" not in hidden["detail"]
    told = await error_of(await change(bobs["code"]), 400, "already_exists")  # Bob sees the holder
    assert told["errors"] == {"code": ["Value must be unique"]}
    assert (await change("bob-3")).status == 200
