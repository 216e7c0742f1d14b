"""Schema as code, bad input and concurrency (decisions.md, Schema as code; issue 43 "Bad input"): every bad
snapshot is a 422 naming what is wrong and changes nothing; a body over the limit is 413; an apply while
another holds the schema lock (another replica) is 409; replicas on one database see an apply at once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from redis.asyncio import Redis

from cms import redis_keys as keys
from cms.app import create_app
from cms.config import Config
from cms.errors import Conflict
from cms.services.operations.shared_lock import SharedLock
from cms.web.schema_snapshot import MAX_SNAPSHOT_BYTES
from cms.wiring import open_services
from tests.api.test_schema_as_code import (
    SCHEMA,
    applied,
    collection_of,
    diff,
    export,
    field_of,
    seed_blog,
)
from tests.conftest import Client, MovableClock, bearer, create_collection, create_record, error_of, records_path


async def refused(client: Client, token: str, snapshot: Any) -> dict[str, Any]:
    """The 422 of a diff and of an apply of `snapshot`; both say the same and nothing changes."""
    before, _ = await export(client, token)
    response = await client.post(SCHEMA + "/diff", headers=bearer(token), json=snapshot)
    body = await error_of(response, 422, "validation_error")
    response = await client.post(SCHEMA + "/apply", headers=bearer(token),
                                 json={"hash": "0" * 64, "snapshot": snapshot, "allow_data_loss": True})
    assert (await error_of(response, 422, "validation_error"))["errors"] == body["errors"]
    assert (await export(client, token))[0] == before
    errors: dict[str, Any] = body["errors"]
    return errors


@pytest.fixture
async def blog(client: Client, admin_token: str) -> dict[str, Any]:
    await seed_blog(client, admin_token)
    _, snapshot = await export(client, admin_token)
    return snapshot


async def test_another_format_is_refused(client: Client, admin_token: str, blog: dict[str, Any]) -> None:
    errors = await refused(client, admin_token, {**blog, "format": 2})
    assert errors == {"format": ["This service reads snapshot format 1."]}
    assert "collections" in await refused(client, admin_token, {"format": 1, "collections": "posts"})
    assert "format" in await refused(client, admin_token, {"collections": []})


async def test_a_relation_to_a_collection_the_snapshot_lacks_is_named(
        client: Client, admin_token: str, blog: dict[str, Any]) -> None:
    field_of(collection_of(blog, "posts"), "author")["collection"] = "ghosts"
    errors = await refused(client, admin_token, blog)
    assert errors == {"collections.posts.schema.3.collection": [
        "Relation to collection 'ghosts', which the snapshot does not define."]}
    # the instance has `authors`, but a snapshot without it deletes it: still refused, named
    field_of(collection_of(blog, "posts"), "author")["collection"] = "authors"
    blog["collections"] = [c for c in blog["collections"] if c["name"] != "authors"]
    errors = await refused(client, admin_token, blog)
    assert "'authors'" in errors["collections.posts.schema.3.collection"][0]


async def test_two_collections_of_one_name_are_refused(client: Client, admin_token: str, blog: dict[str, Any]) -> None:
    posts = collection_of(blog, "posts")
    errors = await refused(client, admin_token, {**blog, "collections": [*blog["collections"], {**posts,
                                                                                              "name": "Posts"}]})
    assert errors["collections"] == ["Two collections are named 'Posts'"]


async def test_a_rename_from_a_missing_field_is_refused(client: Client, admin_token: str, blog: dict[str, Any]) -> None:
    field_of(collection_of(blog, "posts"), "title").update(name="headline", renamed_from="heading")
    errors = await refused(client, admin_token, blog)
    assert errors == {"collections.posts.schema.headline.renamed_from": [
        "Field 'heading' does not exist in collection 'posts'."]}
    field_of(collection_of(blog, "posts"), "headline")["renamed_from"] = "status"  # kept by the new schema
    errors = await refused(client, admin_token, blog)
    assert errors == {"collections.posts.schema.headline.renamed_from": [
        "'status' is a field of the new schema too; it cannot be renamed."]}


@pytest.mark.parametrize("change, key", [
    (lambda c: c.update(type="auth"), "collections.posts.type"),
    (lambda c: c["schema"]["fields"][0].update(type="colour"), "collections.posts.schema.0.type"),
    (lambda c: c.update(bogus=1), "collections.1.bogus"),
    (lambda c: c["schema"]["fields"][3].update(collection_id="abc"), "collections.posts.schema.3"),
    (lambda c: c.update(list_rule="nonsense ==="), "collections.posts"),
    (lambda c: c.update(otp_enabled="yes"), "collections.1.otp_enabled"),
    (lambda c: c.update(indexes=[{"fields": ["nowhere"]}]), "collections.posts.indexes.0.fields"),
    (lambda c: c.update(schema="title"), "collections.1.schema"),
    (lambda c: c.update(name="1posts"), "collections.1posts.name"),
], ids=["type-change", "field-type", "unknown-attribute", "collection-id", "rule", "switch", "index", "schema",
        "name"])
async def test_an_invalid_collection_is_refused_naming_it(client: Client, admin_token: str, blog: dict[str, Any],
                                                          change: Any, key: str) -> None:
    change(collection_of(blog, "posts"))
    errors = await refused(client, admin_token, blog)
    assert key in errors, errors


async def test_bodies_over_the_limit_or_malformed_are_refused(client: Client, admin_token: str,
                                                              blog: dict[str, Any]) -> None:
    padding = "x" * (MAX_SNAPSHOT_BYTES + 1)
    for path in ("/diff", "/apply"):
        response = await client.post(SCHEMA + path, headers=bearer(admin_token), json={**blog, "pad": padding})
        await error_of(response, 413, "payload_too_large")
        response = await client.post(SCHEMA + path, headers={**bearer(admin_token), "Content-Type": "application/json"},
                                     data=b"{not json")
        await error_of(response, 400, "bad_request")
    # a snapshot over the app's ordinary JSON limit but within the snapshot's is read
    big = {**blog, "collections": [*blog["collections"], *(
        {"name": f"c{n}", "type": "base", "schema": {"fields": [{"name": f"f{i}", "type": "text",
                                                                 "view_rule": ""}
                                                                for i in range(80)]},
         "list_rule": "", "view_rule": "", "create_rule": "", "update_rule": "", "delete_rule": ""}
        for n in range(300))]}
    assert len(json.dumps(big)) > 1024 * 1024
    assert len((await diff(client, admin_token, big))["changes"]) == 300


async def test_an_apply_body_needs_a_hash_and_a_snapshot(client: Client, admin_token: str,
                                                         blog: dict[str, Any]) -> None:
    for body, key in (({"snapshot": blog}, "hash"), ({"hash": "abc", "snapshot": blog}, "hash"),
                      ({"hash": blog["hash"]}, "snapshot"),
                      ({"hash": blog["hash"], "snapshot": blog, "allow_data_loss": "yes"}, "allow_data_loss")):
        response = await client.post(SCHEMA + "/apply", headers=bearer(admin_token), json=body)
        assert key in (await error_of(response, 422, "validation_error"))["errors"]
    response = await client.post(SCHEMA + "/apply", headers=bearer(admin_token), json=[blog])
    await error_of(response, 400, "bad_request")


async def test_an_apply_while_another_replica_applies_is_409(client: Client, admin_token: str, config: Config,
                                                             blog: dict[str, Any]) -> None:
    assert config.redis_url
    redis = Redis.from_url(config.redis_url)
    held = asyncio.Event()
    release = asyncio.Event()

    async def another_apply() -> None:
        held.set()
        await release.wait()

    lock = SharedLock(redis, keys.schema_lock(config.mongodb_db), refusal=Conflict)
    holder = asyncio.create_task(lock.run("schema apply", another_apply))
    try:
        await asyncio.wait_for(held.wait(), 5)
        collection_of(blog, "posts")["list_rule"] = None
        response = await client.post(SCHEMA + "/apply", headers=bearer(admin_token),
                                     json={"hash": blog["hash"], "snapshot": blog})
        body = await error_of(response, 409, "conflict")
        assert "schema apply is running" in body["detail"]
    finally:
        release.set()
        await holder
        await redis.aclose()
    assert collection_of(await applied(client, admin_token, blog), "posts")["list_rule"] is None


async def test_two_applies_at_once_one_wins(client: Client, admin_token: str, blog: dict[str, Any]) -> None:
    collection_of(blog, "posts")["list_rule"] = None
    other = json.loads(json.dumps(blog))
    collection_of(other, "posts")["list_rule"] = "id != ''"
    responses = await asyncio.gather(*(
        client.post(SCHEMA + "/apply", headers=bearer(admin_token), json={"hash": blog["hash"], "snapshot": snapshot})
        for snapshot in (blog, other)))
    statuses = sorted(r.status for r in responses)
    assert statuses == [200, 409], [await r.text() for r in responses]
    winner = next(r for r in responses if r.status == 200)
    assert (await export(client, admin_token))[0] == await winner.read()


async def test_every_replica_sees_an_apply_at_once(aiohttp_client: Any, client: Client, admin_token: str,
                                                   config: Config, clock: MovableClock) -> None:
    await create_collection(client, admin_token, "notes", [{"name": "body", "type": "text"}])
    note = await create_record(client, admin_token, "notes", {"body": "hello"})
    async with open_services(config, clock=clock) as replica_services:
        replica = await aiohttp_client(create_app(config, services=replica_services))
        response = await replica.get(records_path("notes", note["id"]), headers=bearer(admin_token))
        assert (await response.json())["body"] == "hello"  # the replica holds the definition now
        _, snapshot = await export(client, admin_token)
        field_of(collection_of(snapshot, "notes"), "body").update(name="text", renamed_from="body")
        await applied(client, admin_token, snapshot)
        response = await replica.get(records_path("notes", note["id"]), headers=bearer(admin_token))
        record = await response.json()
        assert record["text"] == "hello" and "body" not in record
        response = await replica.post(records_path("notes"), headers=bearer(admin_token), json={"data": {"body": "x"}})
        await error_of(response, 422, "validation_error")
