"""Indexes (decisions.md, Indexes and query plans; issue 38): the automatic ones follow relation fields
and rules, declared ones follow `indexes`, and `?explain=true` names the index a list query used."""

from __future__ import annotations

from typing import Any

from cms.config import Config
from cms.store.client import open_client
from cms.store.documents import records_mongo_name
from cms.wiring import Services
from tests.conftest import COLLECTIONS, bearer, create_collection, create_record, error_of, records_path


async def index_keys(config: Config, collection_id: str) -> dict[str, list[tuple[str, int]]]:
    """Name -> key pattern of every index of the collection's records, read through pymongo."""
    assert config.mongodb_url
    mongo = open_client(config.mongodb_url)
    try:
        info = await mongo[config.mongodb_db][records_mongo_name(collection_id)].index_information()
    finally:
        await mongo.close()
    return {name: [(str(k), int(d)) for k, d in spec["key"]] for name, spec in info.items()}


async def patch(client: Any, token: str, collection_id: str, body: dict[str, Any]) -> Any:
    return await client.patch(f"{COLLECTIONS}/{collection_id}", headers=bearer(token), json=body)


async def explain(client: Any, token: str, collection: str, **params: str) -> dict[str, Any]:
    response = await client.get(records_path(collection), headers=bearer(token), params={"explain": "true", **params})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


# --- automatic indexes ---------------------------------------------------------------------------


async def test_relation_and_rule_fields_get_indexes_that_follow_the_schema_and_rules(
        client: Any, admin_token: str, config: Config) -> None:
    users = await create_collection(client, admin_token, "people", [], type="auth")
    posts = await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": users["id"]},
        {"name": "tags", "type": "relation", "collection_id": users["id"], "max_select": 5},
        {"name": "owner", "type": "text"},
    ])
    keys = await index_keys(config, posts["id"])
    assert keys["auto_relation_author"] == [("author", 1)]
    assert keys["auto_relation_tags"] == [("tags", 1)]  # multikey: MongoDB indexes each item of the lists
    assert not any(name.startswith("auto_rule_") for name in keys)

    response = await patch(client, admin_token, posts["id"], {"list_rule": "owner = @request.auth.id",
                                                              "view_rule": "author = @request.auth.id"})
    assert response.status == 200, await response.text()
    keys = await index_keys(config, posts["id"])
    assert keys["auto_rule_owner"] == [("owner", 1)]
    assert "auto_rule_author" not in keys  # the relation index serves it

    response = await patch(client, admin_token, posts["id"], {
        "list_rule": "", "view_rule": "", "schema": [{"name": "title", "type": "text"},
                                                     {"name": "owner", "type": "text"}]})
    assert response.status == 200, await response.text()
    keys = await index_keys(config, posts["id"])
    assert not any(name.startswith("auto_") for name in keys), keys
    assert "created_id" in keys


async def test_a_back_relation_query_uses_the_relation_index(client: Any, admin_token: str,
                                                           services: Services) -> None:
    posts = await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    comments = await create_collection(client, admin_token, "comments", [
        {"name": "body", "type": "text"}, {"name": "post", "type": "relation", "collection_id": posts["id"]}])
    post = await create_record(client, admin_token, "posts", {"title": "p"})
    other = await create_record(client, admin_token, "posts", {"title": "q"})
    for i in range(6):
        await create_record(client, admin_token, "comments", {"body": f"c{i}", "post": post["id"] if i < 2
                                                              else other["id"]})
    body = await explain(client, admin_token, "comments", filter=f'post = "{post["id"]}"')
    assert body["explain"]["index"] == "auto_relation_post", body["explain"]
    assert body["explain"]["collection_scan"] is False
    assert body["explain"]["returned"] == 2 and body["total"] == 2
    # the query `expand=comments_via_post` sends for a page of posts
    plan = await services.records.repository.explain_find(
        comments["id"], {"post": {"$in": [post["id"], other["id"]]}}, [("created", -1), ("_id", -1)], 0, 0)
    assert plan.index == "auto_relation_post" and plan.returned == 6


# --- declared indexes ----------------------------------------------------------------------------


async def test_declared_indexes_are_created_returned_and_dropped(client: Any, admin_token: str,
                                                                 config: Config) -> None:
    declared = [{"fields": ["status", "-created"], "unique": False}, {"fields": ["slug"], "unique": True}]
    posts = await create_collection(client, admin_token, "posts", [
        {"name": "status", "type": "select", "values": ["draft", "live"]}, {"name": "slug", "type": "text"}],
        indexes=declared)
    assert posts["indexes"] == declared
    assert (await (await client.get(f"{COLLECTIONS}/{posts['id']}")).json())["indexes"] == declared
    keys = await index_keys(config, posts["id"])
    assert keys["idx_status_1_created_-1"] == [("status", 1), ("created", -1)]
    assert keys["idx_slug_1"] == [("slug", 1)]
    await create_record(client, admin_token, "posts", {"slug": "a"})
    await create_record(client, admin_token, "posts", {})
    await create_record(client, admin_token, "posts", {})  # absent values do not collide
    response = await client.post(records_path("posts"), headers=bearer(admin_token), json={"data": {"slug": "a"}})
    await error_of(response, 400, "already_exists")

    response = await patch(client, admin_token, posts["id"], {"indexes": [{"fields": ["-id"]}]})
    assert response.status == 200, await response.text()
    assert (await response.json())["indexes"] == [{"fields": ["-id"], "unique": False}]
    keys = await index_keys(config, posts["id"])
    assert keys["idx_id_-1"] == [("_id", -1)]
    assert not any(name in keys for name in ("idx_status_1_created_-1", "idx_slug_1"))


BAD_INDEXES: list[tuple[str, Any, str]] = [
    ("not a list", {"fields": ["slug"]}, "indexes"),
    ("too many", [{"fields": [f"f{i}"]} for i in range(17)], "indexes"),
    ("empty fields", [{"fields": []}], "indexes.0.fields"),
    ("no fields", [{"unique": True}], "indexes.0"),
    ("unknown key", [{"fields": ["slug"], "sparse": True}], "indexes.0"),
    ("too many fields", [{"fields": ["slug", "a", "b", "c", "d", "e", "f", "g", "h"]}], "indexes.0.fields"),
    ("unknown field", [{"fields": ["slug"]}, {"fields": ["nope"]}], "indexes.1.fields"),
    ("field named twice", [{"fields": ["slug", "-slug"]}], "indexes.0.fields"),
    ("duplicate entry", [{"fields": ["slug", "created"]}, {"fields": ["slug", "-created"]}], "indexes.1"),
    ("bad unique", [{"fields": ["slug"], "unique": "yes"}], "indexes.0.unique"),
    ("a service index", [{"fields": ["created", "id"]}], "indexes.0"),
    ("double dash", [{"fields": ["--slug"]}], "indexes.0.fields"),
]


async def test_bad_declared_indexes_are_422_under_indexes(client: Any, admin_token: str, config: Config) -> None:
    posts = await create_collection(client, admin_token, "posts", [{"name": "slug", "type": "text"}])
    before = await index_keys(config, posts["id"])
    for case, indexes, key in BAD_INDEXES:
        response = await client.post(COLLECTIONS, headers=bearer(admin_token), json={
            "name": "other", "schema": [{"name": "slug", "type": "text"}], "indexes": indexes})
        body = await error_of(response, 422, "validation_error")
        assert key in body["errors"], (case, body)
        response = await patch(client, admin_token, posts["id"], {"indexes": indexes})
        body = await error_of(response, 422, "validation_error")
        assert key in body["errors"], (case, body)
    assert (await client.get(f"{COLLECTIONS}/other")).status == 404
    assert await index_keys(config, posts["id"]) == before
    # a schema change dropping a field a declared index names is refused too
    response = await patch(client, admin_token, posts["id"], {"indexes": [{"fields": ["slug"]}]})
    assert response.status == 200, await response.text()
    response = await patch(client, admin_token, posts["id"], {"schema": []})
    body = await error_of(response, 422, "validation_error")
    assert "indexes.0.fields" in body["errors"]


async def test_a_unique_declared_index_over_duplicates_is_422_naming_one_and_changes_nothing(
        client: Any, admin_token: str, config: Config) -> None:
    posts = await create_collection(client, admin_token, "posts", [
        {"name": "slug", "type": "text"}, {"name": "lang", "type": "text"}],
        indexes=[{"fields": ["lang"]}])
    for slug, lang in [("a", "en"), ("a", "fr"), ("b", "en"), ("b", "en")]:
        await create_record(client, admin_token, "posts", {"slug": slug, "lang": lang})
    before = await index_keys(config, posts["id"])
    path = f"{COLLECTIONS}/{posts['id']}"
    stored = await (await client.get(path)).json()
    response = await patch(client, admin_token, posts["id"], {
        "name": "renamed", "indexes": [{"fields": ["slug", "lang"], "unique": True}]})
    body = await error_of(response, 422, "validation_error")
    assert "slug='b'" in body["errors"]["indexes.0"][0] and "lang='en'" in body["errors"]["indexes.0"][0], body
    assert await (await client.get(path)).json() == stored
    assert await index_keys(config, posts["id"]) == before


# --- explain ---------------------------------------------------------------------------------------


async def test_explain_names_the_index_of_a_range_filter(client: Any, admin_token: str) -> None:
    await create_collection(client, admin_token, "packages", [{"name": "views", "type": "number"}],
                            indexes=[{"fields": ["views"]}])
    for views in range(0, 200, 10):
        await create_record(client, admin_token, "packages", {"views": views})
    body = await explain(client, admin_token, "packages", filter="views>=150", sort="-created", per_page="3")
    assert body["explain"]["index"] == "idx_views_1", body["explain"]
    assert body["explain"]["collection_scan"] is False
    assert body["explain"]["docs_examined"] == 5
    assert body["total"] == 5 and len(body["items"]) == 3
    plain = await explain(client, admin_token, "packages", filter="id != ''", sort="views")
    assert set(plain["explain"]) == {"index", "collection_scan", "docs_examined", "returned"}


async def test_explain_is_for_admins_only(client: Any, admin_token: str, user_token: str) -> None:
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    response = await client.get(records_path("posts"), params={"explain": "true"})
    await error_of(response, 401, "unauthorized")
    response = await client.get(records_path("posts"), headers=bearer(user_token), params={"explain": "true"})
    await error_of(response, 403, "forbidden")
    response = await client.get(records_path("posts"), headers=bearer(user_token), params={"explain": "false"})
    assert response.status == 200 and "explain" not in await response.json()
