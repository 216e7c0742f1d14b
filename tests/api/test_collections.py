"""API tests of `/api/v1/collections` (spec: Collections; decisions.md: Records, Response shapes)."""

from __future__ import annotations

from typing import Any

from tests.conftest import bearer, error_of, names_field

COLLECTIONS = "/api/v1/collections"

EVERY_TYPE: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True, "min": 2, "max": 50, "pattern": "^[A-Z]"}},
    {"name": "body", "type": "editor"},
    {"name": "published", "type": "bool"},
    {"name": "contact", "type": "email", "validation": {"unique": True}},
    {"name": "site", "type": "url"},
    {"name": "price", "type": "number", "validation": {"min": 0, "max": 1000}},
    {"name": "released", "type": "date"},
    {"name": "status", "type": "select", "values": ["draft", "published"]},
    {"name": "tags", "type": "select", "values": ["a", "b", "c"], "max_select": 2},
    {"name": "meta", "type": "json"},
    {"name": "attachment", "type": "file", "max_select": 3},
]


async def create(client: Any, token: str, body: dict[str, Any]) -> Any:
    return await client.post(COLLECTIONS, headers=bearer(token), json=body)


async def create_ok(client: Any, token: str, name: str, schema: Any = (), **extra: Any) -> dict[str, Any]:
    response = await create(client, token, {"name": name, "schema": list(schema), **extra})
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def field_names(collection: dict[str, Any]) -> list[str]:
    return [f["name"] for f in collection["schema"]["fields"]]


# --- access -----------------------------------------------------------------------------------


async def test_reads_are_public_and_writes_need_an_admin(client, admin_token, user_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    path = f"{COLLECTIONS}/{created['id']}"

    response = await client.get(COLLECTIONS)
    assert response.status == 200
    assert [c["name"] for c in await response.json()] == ["posts"]
    response = await client.get(path)
    assert response.status == 200
    assert (await response.json())["id"] == created["id"]

    body = {"name": "other", "schema": []}
    for headers, status, code in [({}, 401, "unauthorized"), (bearer(user_token), 403, "forbidden"),
                                  (bearer("not-a-token"), 401, "unauthorized")]:
        await error_of(await client.post(COLLECTIONS, json=body, headers=headers), status, code)
        await error_of(await client.patch(path, json={"name": "renamed"}, headers=headers), status, code)
        await error_of(await client.delete(path, headers=headers), status, code)
    response = await client.get(path)
    assert (await response.json())["name"] == "posts"
    assert [c["name"] for c in await (await client.get(COLLECTIONS)).json()] == ["posts"]


# --- create -----------------------------------------------------------------------------------


async def test_create_returns_the_collection_shape(client, admin_token):
    response = await create(client, admin_token, {"name": "posts", "type": "base", "schema": EVERY_TYPE})
    assert response.status == 201, await response.text()
    body = await response.json()
    assert set(body) == {"id", "name", "type", "schema", "view", "indexes", "drafts", "otp_enabled", "mfa_enabled",
                         "oauth_enabled", "versions", "created", "updated",
                         "list_rule", "view_rule", "create_rule", "update_rule", "delete_rule", "email_view_rule"}
    assert body["name"] == "posts" and body["type"] == "base" and body["otp_enabled"] is False
    assert body["created"].endswith("Z") and body["created"] == body["updated"]
    assert body["indexes"] == []
    assert set(body["schema"]) == {"fields"}
    assert field_names(body) == [f["name"] for f in EVERY_TYPE]
    by_name = {f["name"]: f for f in body["schema"]["fields"]}
    assert by_name["title"]["validation"] == {"required": True, "min": 2, "max": 50, "pattern": "^[A-Z]",
                                              "unique": False}
    assert by_name["contact"]["validation"]["unique"] is True
    assert by_name["status"]["values"] == ["draft", "published"]
    assert by_name["tags"]["max_select"] == 2
    assert by_name["attachment"]["max_select"] == 3
    assert {f["type"] for f in body["schema"]["fields"]} == {
        "text", "editor", "bool", "email", "url", "number", "date", "select", "json", "file"}

    response = await client.get(f"{COLLECTIONS}/{body['id']}")
    assert await response.json() == body


async def test_schema_is_accepted_as_a_list_or_an_object(client, admin_token):
    fields = [{"name": "title", "type": "text"}]
    as_list = await create_ok(client, admin_token, "as_list", fields)
    response = await create(client, admin_token, {"name": "as_object", "schema": {"fields": fields}})
    assert response.status == 201, await response.text()
    as_object = await response.json()
    assert as_list["schema"] == as_object["schema"]
    assert field_names(as_object) == ["title"]
    response = await create(client, admin_token, {"name": "no_schema"})
    assert response.status == 201
    body = await response.json()
    assert body["schema"] == {"fields": []} and body["type"] == "base"


async def test_relation_field_needs_an_existing_collection(client, admin_token):
    authors = await create_ok(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    books = await create_ok(client, admin_token, "books", [
        {"name": "author", "type": "relation", "collection_id": authors["id"]},
        {"name": "editors", "type": "relation", "collection_id": authors["id"], "max_select": 5},
    ])
    fields = {f["name"]: f for f in books["schema"]["fields"]}
    assert fields["author"]["collection_id"] == authors["id"]
    assert fields["editors"]["max_select"] == 5
    response = await create(client, admin_token, {"name": "broken", "schema": [
        {"name": "author", "type": "relation", "collection_id": "00000000-0000-0000-0000-000000000000"}]})
    body = await error_of(response, 422, "validation_error")
    assert "schema" in body["errors"]
    response = await create(client, admin_token, {"name": "broken", "schema": [
        {"name": "author", "type": "relation"}]})
    await error_of(response, 422, "validation_error")


async def test_valid_collection_names(client, admin_token):
    for name in ["a", "Posts", "blog_posts2", "A" + "b" * 62]:
        assert (await create_ok(client, admin_token, name))["name"] == name


async def test_invalid_collection_names_are_422(client, admin_token):
    for name in ["", "1posts", "_posts", "posts-2", "po sts", "pöst", "a" * 64, "posts.x", "$posts", "posts\n"]:
        body = await error_of(await create(client, admin_token, {"name": name}), 422, "validation_error")
        assert "name" in body["errors"], name
    for bad in [None, 5, ["posts"]]:
        body = await error_of(await create(client, admin_token, {"name": bad}), 422, "validation_error")
        assert "name" in body["errors"]
    body = await error_of(await create(client, admin_token, {"schema": []}), 422, "validation_error")
    assert "name" in body["errors"]
    assert await (await client.get(COLLECTIONS)).json() == []


async def test_duplicate_name_is_already_exists_case_insensitively(client, admin_token):
    await create_ok(client, admin_token, "posts")
    for name in ["posts", "POSTS", "Posts"]:
        await error_of(await create(client, admin_token, {"name": name}), 400, "already_exists")
    assert len(await (await client.get(COLLECTIONS)).json()) == 1


async def test_type_is_base_or_auth(client, admin_token):
    response = await create(client, admin_token, {"name": "customers", "type": "auth", "otp_enabled": True,
                                                  "schema": [{"name": "nickname", "type": "text"}]})
    assert response.status == 201, await response.text()
    body = await response.json()
    assert body["type"] == "auth" and body["otp_enabled"] is True
    auth_default = await create_ok(client, admin_token, "vendors", type="auth")
    assert auth_default["otp_enabled"] is False  # the global otp_enabled default
    for bad in ["views", "", "AUTH", None, 1]:
        body = await error_of(await create(client, admin_token, {"name": "x", "type": bad}), 422,
                              "validation_error")
        assert "type" in body["errors"]


RESERVED = [("base", "id"), ("base", "created"), ("base", "updated"),
            ("auth", "id"), ("auth", "password"), ("auth", "email"), ("auth", "verified")]


async def test_reserved_field_names_are_422(client, admin_token):
    for type_, name in RESERVED:
        response = await create(client, admin_token, {"name": "c", "type": type_,
                                                      "schema": [{"name": name, "type": "text"}]})
        body = await error_of(response, 422, "validation_error")
        assert "schema" in body["errors"], (type_, name)
    assert await (await client.get(COLLECTIONS)).json() == []


async def test_auth_field_names_are_free_in_base_collections(client, admin_token):
    body = await create_ok(client, admin_token, "contacts", [{"name": "email", "type": "email"},
                                                             {"name": "verified", "type": "bool"}])
    assert field_names(body) == ["email", "verified"]


BAD_SCHEMAS: list[tuple[str, Any]] = [
    ("string", "title:text"),
    ("number", 5),
    ("object_with_other_key", {"fields": [], "extra": 1}),
    ("object_fields_not_list", {"fields": {"name": "title", "type": "text"}}),
    ("field_not_object", ["title"]),
    ("missing_name", [{"type": "text"}]),
    ("missing_type", [{"name": "title"}]),
    ("unknown_type", [{"name": "title", "type": "string"}]),
    ("bad_field_name", [{"name": "1title", "type": "text"}]),
    ("dollar_field_name", [{"name": "$where", "type": "text"}]),
    ("dotted_field_name", [{"name": "a.b", "type": "text"}]),
    ("long_field_name", [{"name": "t" * 64, "type": "text"}]),
    ("newline_field_name", [{"name": "title\n", "type": "text"}]),
    ("duplicate_names", [{"name": "title", "type": "text"}, {"name": "Title", "type": "number"}]),
    ("unknown_key", [{"name": "title", "type": "text", "default": "x"}]),
    ("unknown_validation_key", [{"name": "title", "type": "text", "validation": {"size": 3}}]),
    ("validation_not_object", [{"name": "title", "type": "text", "validation": True}]),
    ("required_not_bool", [{"name": "title", "type": "text", "validation": {"required": "maybe"}}]),
    ("min_not_number", [{"name": "n", "type": "number", "validation": {"min": "a"}}]),
    ("min_above_max", [{"name": "n", "type": "number", "validation": {"min": 5, "max": 1}}]),
    ("bad_pattern", [{"name": "title", "type": "text", "validation": {"pattern": "("}}]),
    ("pattern_on_number", [{"name": "n", "type": "number", "validation": {"pattern": "^1"}}]),
    ("select_without_values", [{"name": "s", "type": "select"}]),
    ("select_empty_values", [{"name": "s", "type": "select", "values": []}]),
    ("select_values_not_strings", [{"name": "s", "type": "select", "values": [1, 2]}]),
    ("max_select_zero", [{"name": "s", "type": "select", "values": ["a"], "max_select": 0}]),
    ("max_select_string", [{"name": "s", "type": "select", "values": ["a"], "max_select": "2"}]),
    ("unique_bool", [{"name": "b", "type": "bool", "validation": {"unique": True}}]),
    ("unique_json", [{"name": "j", "type": "json", "validation": {"unique": True}}]),
]


async def test_bad_schema_shapes_are_422_with_errors(client, admin_token):
    for case, schema in BAD_SCHEMAS:
        response = await create(client, admin_token, {"name": "posts", "schema": schema})
        assert response.status == 422, (case, await response.text())
        body = await response.json()
        assert body["code"] == "validation_error", case
        assert names_field(body["errors"], "schema"), (case, body)
    assert await (await client.get(COLLECTIONS)).json() == []


async def test_lone_surrogates_in_schema_are_400_at_the_json_layer(client, admin_token):
    for schema in ([{"name": "s", "type": "select", "values": ["\ud800"]}],
                   [{"name": "t", "type": "text", "validation": {"pattern": "\ud800"}}],
                   [{"name": "r", "type": "relation", "collection_id": "\ud800"}]):
        response = await create(client, admin_token, {"name": "posts", "schema": schema})
        assert response.status == 400, await response.text()
        assert "not valid Unicode" in (await response.json())["detail"]
    assert await (await client.get(COLLECTIONS)).json() == []


async def test_malformed_bodies(client, admin_token):
    response = await client.post(COLLECTIONS, headers={**bearer(admin_token), "Content-Type": "application/json"},
                                 data="{not json")
    await error_of(response, 400, "bad_request")
    response = await client.post(COLLECTIONS, headers=bearer(admin_token), json=["posts"])
    await error_of(response, 400, "bad_request")
    response = await create(client, admin_token, {"name": "posts", "owner": "me"})
    await error_of(response, 422, "validation_error")


async def test_unknown_collection_id_is_404(client, admin_token):
    missing = f"{COLLECTIONS}/00000000-0000-0000-0000-000000000000"
    await error_of(await client.get(missing), 404, "not_found")
    await error_of(await client.patch(missing, headers=bearer(admin_token), json={"name": "x"}), 404, "not_found")
    await error_of(await client.delete(missing, headers=bearer(admin_token)), 404, "not_found")
    await error_of(await client.get(f"{COLLECTIONS}/$where"), 404, "not_found")


# --- update -----------------------------------------------------------------------------------


async def test_rename_moves_the_records_path(client, admin_token, clock):
    created = await create_ok(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    response = await client.post(f"{COLLECTIONS}/posts/records", headers=bearer(admin_token),
                                 json={"data": {"title": "kept"}})
    assert response.status == 201
    clock.advance(seconds=5)
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"name": "articles"})
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["name"] == "articles" and body["id"] == created["id"]
    assert body["schema"] == created["schema"] and body["created"] == created["created"]
    assert body["updated"] > created["updated"]
    await error_of(await client.get(f"{COLLECTIONS}/posts/records"), 404, "not_found")
    page = await (await client.get(f"{COLLECTIONS}/articles/records")).json()
    assert [r["title"] for r in page["items"]] == ["kept"]


async def test_rename_rules(client, admin_token):
    posts = await create_ok(client, admin_token, "posts")
    await create_ok(client, admin_token, "pages")
    path = f"{COLLECTIONS}/{posts['id']}"
    await error_of(await client.patch(path, headers=bearer(admin_token), json={"name": "PAGES"}), 400,
                   "already_exists")
    body = await error_of(await client.patch(path, headers=bearer(admin_token), json={"name": "9x"}), 422,
                          "validation_error")
    assert "name" in body["errors"]
    response = await client.patch(path, headers=bearer(admin_token), json={"name": "Posts"})
    assert response.status == 200, await response.text()
    assert sorted(c["name"] for c in await (await client.get(COLLECTIONS)).json()) == ["Posts", "pages"]


async def test_patch_schema_removes_dropped_fields_from_records(client, admin_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "title", "type": "text"},
                                                             {"name": "secret", "type": "text"}])
    records = f"{COLLECTIONS}/posts/records"
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"title": "t", "secret": "s"}})
    record = await response.json()
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"schema": {"fields": [{"name": "title", "type": "text"},
                                                              {"name": "views", "type": "number"}]}})
    assert response.status == 200, await response.text()
    assert field_names(await response.json()) == ["title", "views"]
    stored = await (await client.get(f"{records}/{record['id']}")).json()
    assert "secret" not in stored and stored["title"] == "t"
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"secret": "s"}})
    body = await error_of(response, 422, "validation_error")
    assert "secret" in body["errors"]
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"views": 3}})
    assert response.status == 201, await response.text()
    # re-adding the field does not bring the old value back
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"schema": [{"name": "title", "type": "text"},
                                                   {"name": "secret", "type": "text"}]})
    assert response.status == 200
    assert "secret" not in await (await client.get(f"{records}/{record['id']}")).json()


async def test_new_unique_rule_over_duplicates_is_422_and_changes_nothing(client, admin_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "slug", "type": "text"}])
    path = f"{COLLECTIONS}/{created['id']}"
    records = f"{COLLECTIONS}/posts/records"
    for _ in range(2):
        response = await client.post(records, headers=bearer(admin_token), json={"data": {"slug": "same"}})
        assert response.status == 201
    response = await client.patch(path, headers=bearer(admin_token), json={
        "name": "renamed", "schema": [{"name": "slug", "type": "text", "validation": {"unique": True}}]})
    body = await error_of(response, 422, "validation_error")
    assert "slug" in body["errors"]
    assert await (await client.get(path)).json() == created
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"slug": "same"}})
    assert response.status == 201  # no unique index was left behind
    assert (await (await client.get(records)).json())["total"] == 3


async def test_unique_rule_can_be_added_and_removed(client, admin_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "slug", "type": "text"}])
    path = f"{COLLECTIONS}/{created['id']}"
    records = f"{COLLECTIONS}/posts/records"
    await client.post(records, headers=bearer(admin_token), json={"data": {"slug": "a"}})
    unique = [{"name": "slug", "type": "text", "validation": {"unique": True}}]
    response = await client.patch(path, headers=bearer(admin_token), json={"schema": unique})
    assert response.status == 200, await response.text()
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"slug": "a"}})
    await error_of(response, 400, "already_exists")
    response = await client.patch(path, headers=bearer(admin_token), json={"schema": [{"name": "slug",
                                                                                      "type": "text"}]})
    assert response.status == 200
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"slug": "a"}})
    assert response.status == 201


async def test_failed_rename_leaves_the_unique_indexes_alone(client, admin_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "slug", "type": "text",
                                                              "validation": {"unique": True}}])
    await create_ok(client, admin_token, "pages")
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"name": "pages", "schema": [{"name": "slug", "type": "text"}]})
    await error_of(response, 400, "already_exists")
    records = f"{COLLECTIONS}/posts/records"
    assert (await client.post(records, headers=bearer(admin_token), json={"data": {"slug": "a"}})).status == 201
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"slug": "a"}})
    await error_of(response, 400, "already_exists")


async def test_patch_validates_like_create(client, admin_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    path = f"{COLLECTIONS}/{created['id']}"
    for case, schema in BAD_SCHEMAS:
        response = await client.patch(path, headers=bearer(admin_token), json={"schema": schema})
        assert response.status == 422, (case, await response.text())
    for body in [{"type": "auth"}, {"schema": None}, {"name": None}, {"otp_enabled": [1]}]:
        response = await client.patch(path, headers=bearer(admin_token), json=body)
        await error_of(response, 422, "validation_error")
    assert await (await client.get(path)).json() == created


async def test_otp_enabled_on_auth_collections(client, admin_token):
    created = await create_ok(client, admin_token, "customers", [{"name": "nickname", "type": "text"}], type="auth")
    path = f"{COLLECTIONS}/{created['id']}"
    response = await client.patch(path, headers=bearer(admin_token), json={"otp_enabled": True})
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["otp_enabled"] is True and body["schema"] == created["schema"]
    assert (await (await client.get(path)).json())["otp_enabled"] is True
    response = await client.patch(path, headers=bearer(admin_token), json={"otp_enabled": False})
    assert (await response.json())["otp_enabled"] is False
    response = await client.patch(path, headers=bearer(admin_token), json={"schema": [{"name": "email",
                                                                                      "type": "email"}]})
    await error_of(response, 422, "validation_error")


async def test_otp_enabled_is_refused_on_base_collections(client, admin_token):
    response = await create(client, admin_token, {"name": "posts", "otp_enabled": True})
    body = await error_of(response, 422, "validation_error")
    assert "otp_enabled" in body["errors"]
    created = await create_ok(client, admin_token, "posts")
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token),
                                  json={"otp_enabled": True})
    body = await error_of(response, 422, "validation_error")
    assert "otp_enabled" in body["errors"]


# --- delete -----------------------------------------------------------------------------------


async def test_delete_removes_the_records(client, admin_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "title", "type": "text",
                                                              "validation": {"unique": True}}])
    records = f"{COLLECTIONS}/posts/records"
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"title": "old"}})
    record = await response.json()
    response = await client.delete(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token))
    assert response.status == 204 and await response.read() == b""
    await error_of(await client.get(f"{COLLECTIONS}/{created['id']}"), 404, "not_found")
    await error_of(await client.get(records), 404, "not_found")
    await error_of(await client.get(f"{records}/{record['id']}"), 404, "not_found")
    await error_of(await client.delete(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token)), 404,
                   "not_found")

    again = await create_ok(client, admin_token, "posts", [{"name": "title", "type": "text",
                                                            "validation": {"unique": True}}])
    assert again["id"] != created["id"]
    assert await (await client.get(records)).json() == {"items": [], "total": 0, "page": 1, "per_page": 30}
    response = await client.post(records, headers=bearer(admin_token), json={"data": {"title": "old"}})
    assert response.status == 201, await response.text()


async def test_a_collection_referenced_by_a_relation_cannot_be_deleted(client, admin_token):
    authors = await create_ok(client, admin_token, "authors")
    books = await create_ok(client, admin_token, "books", [{"name": "author", "type": "relation",
                                                            "collection_id": authors["id"]}])
    response = await client.delete(f"{COLLECTIONS}/{authors['id']}", headers=bearer(admin_token))
    body = await error_of(response, 400, "bad_request")
    assert "books.author" in body["detail"]
    assert (await client.get(f"{COLLECTIONS}/{authors['id']}")).status == 200
    response = await client.patch(f"{COLLECTIONS}/{books['id']}", headers=bearer(admin_token), json={"schema": []})
    assert response.status == 200
    response = await client.delete(f"{COLLECTIONS}/{authors['id']}", headers=bearer(admin_token))
    assert response.status == 204


async def test_list_is_sorted_by_name_case_insensitively(client, admin_token):
    for name in ["zeta", "alpha", "Mid"]:
        await create_ok(client, admin_token, name)
    names = [c["name"] for c in await (await client.get(COLLECTIONS)).json()]
    assert names == ["alpha", "Mid", "zeta"]


async def test_collection_changes_are_audited(client, admin_token, services):
    created = await create(client, admin_token, {"name": "audited", "schema": []})
    collection_id = (await created.json())["id"]
    await client.patch(f"{COLLECTIONS}/{collection_id}", headers=bearer(admin_token), json={"name": "audited2"})
    await client.delete(f"{COLLECTIONS}/{collection_id}", headers=bearer(admin_token))
    for event_type in ("collection_created", "collection_updated", "collection_deleted"):
        assert await services.audit.count(event_type=event_type) == 1, event_type


async def test_bad_field_definition_errors_are_flat_dotted_keys(client, admin_token):
    response = await create(client, admin_token, {"name": "posts", "schema": [
        {"name": "1bad", "type": "text"},
        {"name": "ok", "type": "text", "validation": {"min": "a"}},
    ]})
    body = await error_of(response, 422, "validation_error")
    assert body["errors"]["schema.0.name"] == ["Invalid field name."], body
    assert isinstance(body["errors"]["schema.1.validation.min"], list), body
    for messages in body["errors"].values():
        assert isinstance(messages, list) and all(isinstance(m, str) for m in messages), body


async def test_patch_without_a_body_is_400_and_changes_nothing(client, admin_token):
    created = await create_ok(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    response = await client.patch(f"{COLLECTIONS}/{created['id']}", headers=bearer(admin_token))
    assert response.status == 400, await response.text()
    assert (await response.json())["code"] == "bad_request"
    assert await (await client.get(f"{COLLECTIONS}/{created['id']}")).json() == created
