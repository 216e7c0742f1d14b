"""Drafts (decisions.md, Drafts, versions and scheduled publishing; issue 39, item 1): a record's working
copy and published copy, `?draft=true`, publish, unpublish, discard, and which record events each write
emits (item 5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cms.services.content.publishing import PublishFailed
from cms.services.delivery.events import RecordEvent
from tests.api.test_locales import read, use_locales, write
from tests.conftest import bearer, create_collection, create_record, error_of, records_path

FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "validation": {"required": True, "max": 40}},
    {"name": "slug", "type": "text", "validation": {"unique": True}},
    {"name": "views", "type": "number"},
]


def record_of(name: str, record_id: str) -> str:
    return records_path(name, record_id)


async def get(client: Any, path: str, token: str | None = None, status: int = 200) -> Any:
    response = await client.get(path, headers=bearer(token) if token else None)
    assert response.status == status, await response.text()
    return await response.json()


async def post(client: Any, path: str, token: str, status: int = 200, **kwargs: Any) -> Any:
    response = await client.post(path, headers=bearer(token), **kwargs)
    assert response.status == status, await response.text()
    return await response.json()


@pytest.fixture
async def posts(client, admin_token) -> str:
    """A collection `posts` with drafts: public reads, signed-in writes."""
    await create_collection(client, admin_token, "posts", FIELDS, drafts=True)
    return "posts"


def events_of(seen: list[RecordEvent]) -> list[tuple[str, str]]:
    return [(e.event, e.record_id) for e in seen]


async def test_a_draft_is_the_editors_until_published(client, admin_token, user_token, posts, seen):
    created = await create_record(client, user_token, posts, {"title": "first"})
    assert created["status"] == "draft"
    assert created["published_at"] is None and created["scheduled_at"] is None
    record_id = created["id"]

    await error_of(await client.get(record_of(posts, record_id)), 404, "not_found")
    assert (await get(client, records_path(posts)))["total"] == 0
    working = await get(client, record_of(posts, record_id) + "?draft=true", user_token)
    assert working == created
    listed = await get(client, records_path(posts) + "?draft=true", user_token)
    assert [r["id"] for r in listed["items"]] == [record_id] and listed["total"] == 1
    assert seen == []  # saving a working copy emits nothing

    published = await post(client, record_of(posts, record_id) + "/publish", user_token)
    assert published["status"] == "published" and published["published_at"] is not None
    assert published["title"] == "first"
    shown = await get(client, record_of(posts, record_id))
    assert shown["status"] == "published" and shown["title"] == "first"
    assert shown["published_at"] == published["published_at"] and shown["scheduled_at"] is None
    assert (await get(client, records_path(posts)))["total"] == 1
    assert events_of(seen) == [("create", record_id)]
    assert seen[0].data["status"] == "published"


async def test_an_edit_waits_for_its_publish(client, admin_token, user_token, posts, seen):
    record_id = (await create_record(client, user_token, posts, {"title": "one", "views": 1}))["id"]
    await post(client, record_of(posts, record_id) + "/publish", user_token)
    before = await get(client, record_of(posts, record_id))

    response = await client.patch(record_of(posts, record_id), headers=bearer(user_token),
                                  json={"data": {"title": "two", "views": None}})
    assert response.status == 200, await response.text()
    changed = await response.json()
    assert changed["status"] == "changed" and changed["title"] == "two" and "views" not in changed
    assert await get(client, record_of(posts, record_id)) == before  # readers see the published copy
    page = await get(client, records_path(posts) + "?filter=" + "title='one'")
    assert page["total"] == 1
    assert len(seen) == 1  # only the first publish's create

    republished = await post(client, record_of(posts, record_id) + "/publish", user_token)
    assert republished["status"] == "published" and republished["title"] == "two"
    after = await get(client, record_of(posts, record_id))
    assert after["title"] == "two" and "views" not in after
    assert events_of(seen) == [("create", record_id), ("update", record_id)]
    assert seen[1].previous is not None and seen[1].previous.data["title"] == "one"


async def test_publishing_what_is_published_changes_nothing(client, user_token, posts, seen):
    record_id = (await create_record(client, user_token, posts, {"title": "same"}))["id"]
    first = await post(client, record_of(posts, record_id) + "/publish", user_token)
    again = await post(client, record_of(posts, record_id) + "/publish", user_token)
    assert again == first
    assert len(seen) == 1


async def test_unpublish_keeps_the_content_as_a_draft(client, user_token, posts, seen):
    record_id = (await create_record(client, user_token, posts, {"title": "gone soon"}))["id"]
    await post(client, record_of(posts, record_id) + "/publish", user_token)
    response = await client.patch(record_of(posts, record_id), headers=bearer(user_token),
                                  json={"data": {"title": "pending"}})
    assert response.status == 200

    unpublished = await post(client, record_of(posts, record_id) + "/unpublish", user_token)
    assert unpublished["status"] == "draft" and unpublished["published_at"] is None
    assert unpublished["title"] == "pending"
    await error_of(await client.get(record_of(posts, record_id)), 404, "not_found")
    assert events_of(seen) == [("create", record_id), ("delete", record_id)]
    await error_of(await client.post(record_of(posts, record_id) + "/unpublish", headers=bearer(user_token)),
                   400, "bad_request")

    await post(client, record_of(posts, record_id) + "/publish", user_token)
    assert events_of(seen)[-1] == ("create", record_id)  # published again: readers see it appear


async def test_discarding_the_working_copy(client, user_token, posts, seen):
    record_id = (await create_record(client, user_token, posts, {"title": "kept"}))["id"]
    path = record_of(posts, record_id)
    await error_of(await client.delete(path + "/draft", headers=bearer(user_token)), 404, "not_found")
    await post(client, path + "/publish", user_token)
    await error_of(await client.delete(path + "/draft", headers=bearer(user_token)), 404, "not_found")
    response = await client.patch(path, headers=bearer(user_token), json={"data": {"title": "thrown away"}})
    assert response.status == 200

    response = await client.delete(path + "/draft", headers=bearer(user_token))
    assert response.status == 204, await response.text()
    working = await get(client, path + "?draft=true", user_token)
    assert working["status"] == "published" and working["title"] == "kept"
    assert events_of(seen) == [("create", record_id)]


async def test_deleting_emits_only_for_what_readers_saw(client, user_token, posts, seen):
    draft_id = (await create_record(client, user_token, posts, {"title": "never seen"}))["id"]
    shown_id = (await create_record(client, user_token, posts, {"title": "seen"}))["id"]
    await post(client, record_of(posts, shown_id) + "/publish", user_token)
    for record_id in (draft_id, shown_id):
        response = await client.delete(record_of(posts, record_id), headers=bearer(user_token))
        assert response.status == 204, await response.text()
        await error_of(await client.get(record_of(posts, record_id) + "?draft=true", headers=bearer(user_token)),
                       404, "not_found")
    assert events_of(seen) == [("create", shown_id), ("delete", shown_id)]


# --- publishing checks everything ----------------------------------------------------------------


async def test_a_draft_saves_what_a_publish_refuses(client, admin_token, user_token, posts, seen):
    created = await create_record(client, user_token, posts, {"views": 3})  # `title` is required
    path = record_of(posts, created["id"])
    body = await error_of(await client.post(path + "/publish", headers=bearer(user_token)), 422, "validation_error")
    assert "title" in body["errors"], body
    assert (await get(client, path + "?draft=true", user_token))["status"] == "draft"
    assert seen == []
    # types and lengths are checked when saving
    body = await error_of(await client.post(records_path(posts), headers=bearer(user_token),
                                            json={"data": {"title": "x" * 41}}), 422, "validation_error")
    assert "title" in body["errors"]
    await error_of(await client.patch(path, headers=bearer(user_token), json={"data": {"views": "many"}}),
                   422, "validation_error")


async def test_unique_values_are_checked_against_published_copies(client, admin_token, posts, seen):
    first = await create_record(client, admin_token, posts, {"title": "a", "slug": "same"})
    second = await create_record(client, admin_token, posts, {"title": "b", "slug": "same"})  # a draft may
    await post(client, record_of(posts, first["id"]) + "/publish", admin_token)
    body = await error_of(await client.post(record_of(posts, second["id"]) + "/publish", headers=bearer(admin_token)),
                          422, "validation_error")
    assert "slug" in body["errors"]
    await error_of(await client.get(record_of(posts, second["id"])), 404, "not_found")
    assert len(seen) == 1


async def test_relations_are_checked_at_publish(client, admin_token, posts):
    await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    authors = (await get(client, "/api/v1/collections"))
    authors_id = next(c["id"] for c in authors if c["name"] == "authors")
    await create_collection(client, admin_token, "notes", [
        {"name": "author", "type": "relation", "collection_id": authors_id}], drafts=True)
    note = await create_record(client, admin_token, "notes", {"author": "no-such-author"})
    body = await error_of(await client.post(record_of("notes", note["id"]) + "/publish",
                                            headers=bearer(admin_token)), 422, "validation_error")
    assert "author" in body["errors"]
    author = await create_record(client, admin_token, "authors", {"name": "Ada"})
    response = await client.patch(record_of("notes", note["id"]), headers=bearer(admin_token),
                                  json={"data": {"author": author["id"]}})
    assert response.status == 200
    await post(client, record_of("notes", note["id"]) + "/publish", admin_token)


# --- who may see working copies --------------------------------------------------------------------


async def test_draft_reads_need_the_update_right(client, admin_token, user_token):
    await create_collection(client, admin_token, "pages", [{"name": "title", "type": "text"}], drafts=True,
                            update_rule=None)
    record = await create_record(client, user_token, "pages", {"title": "mine"})
    path = record_of("pages", record["id"]) + "?draft=true"
    await error_of(await client.get(path, headers=bearer(user_token)), 403, "forbidden")
    await error_of(await client.get(path), 401, "unauthorized")
    listed = await get(client, records_path("pages") + "?draft=true", user_token)
    assert listed["items"] == [] and listed["total"] == 0
    assert (await get(client, path, admin_token))["title"] == "mine"
    await error_of(await client.post(record_of("pages", record["id"]) + "/publish", headers=bearer(user_token)),
                   403, "forbidden")


async def test_draft_lists_filter_sort_and_page_working_copies(client, user_token, posts):
    for title in ("b", "a", "c"):
        await create_record(client, user_token, posts, {"title": title})
    page = await get(client, records_path(posts) + "?draft=true&sort=title&per_page=2", user_token)
    assert [r["title"] for r in page["items"]] == ["a", "b"] and page["total"] == 3
    page = await get(client, records_path(posts) + "?draft=true&filter=" + "title!='a'", user_token)
    assert sorted(r["title"] for r in page["items"]) == ["b", "c"]
    await error_of(await client.get(records_path(posts) + "?draft=true&filter=nope=1", headers=bearer(user_token)),
                   400, "invalid_filter")


async def test_collections_without_drafts_refuse_draft_operations(client, admin_token):
    await create_collection(client, admin_token, "plain", [{"name": "title", "type": "text"}])
    record = await create_record(client, admin_token, "plain", {"title": "x"})
    assert "status" not in record
    path = record_of("plain", record["id"])
    for response in (await client.post(path + "/publish", headers=bearer(admin_token)),
                     await client.post(path + "/unpublish", headers=bearer(admin_token)),
                     await client.get(path + "?draft=true", headers=bearer(admin_token)),
                     await client.get(records_path("plain") + "?draft=true", headers=bearer(admin_token))):
        await error_of(response, 400, "bad_request")


# --- collections turn drafts on and off ------------------------------------------------------------


async def test_turning_drafts_on_publishes_existing_records(client, admin_token, user_token, seen):
    collection = await create_collection(client, admin_token, "news", [{"name": "title", "type": "text"}])
    assert collection["drafts"] is False
    record = await create_record(client, admin_token, "news", {"title": "old"})
    response = await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                                  json={"drafts": True})
    assert response.status == 200, await response.text()
    assert (await response.json())["drafts"] is True
    shown = await get(client, record_of("news", record["id"]))
    assert shown["status"] == "published" and shown["title"] == "old" and shown["published_at"] is not None
    working = await get(client, record_of("news", record["id"]) + "?draft=true", admin_token)
    assert working["status"] == "published"
    listed = await get(client, records_path("news") + "?draft=true", admin_token)
    assert [r["id"] for r in listed["items"]] == [record["id"]]
    events_before = len(seen)
    response = await client.patch(record_of("news", record["id"]), headers=bearer(admin_token),
                                  json={"data": {"title": "new"}})
    assert (await response.json())["status"] == "changed"
    assert (await get(client, record_of("news", record["id"])))["title"] == "old"
    assert len(seen) == events_before

    response = await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                                  json={"drafts": False})
    assert response.status == 200
    shown = await get(client, record_of("news", record["id"]))
    assert shown["title"] == "old" and "status" not in shown  # nothing published, nothing discarded
    response = await client.delete(record_of("news", record["id"]) + "/draft", headers=bearer(admin_token))
    assert response.status == 204, await response.text()


async def test_drafts_reserve_their_keys_and_need_a_base_collection(client, admin_token):
    response = await client.post("/api/v1/collections", headers=bearer(admin_token), json={
        "name": "bad", "schema": [{"name": "status", "type": "text"}], "drafts": True})
    body = await error_of(response, 422, "validation_error")
    assert "schema" in body["errors"]
    response = await client.post("/api/v1/collections", headers=bearer(admin_token), json={
        "name": "members", "type": "auth", "schema": [], "drafts": True})
    await error_of(response, 422, "validation_error")
    response = await client.post("/api/v1/collections", headers=bearer(admin_token), json={
        "name": "odd", "schema": [], "drafts": "yes"})
    await error_of(response, 422, "validation_error")


# --- two publishes at once -------------------------------------------------------------------------


async def test_two_publishes_at_once_publish_once(client, user_token, posts, seen):
    record_id = (await create_record(client, user_token, posts, {"title": "race"}))["id"]
    path = record_of(posts, record_id) + "/publish"
    responses = await asyncio.gather(*(client.post(path, headers=bearer(user_token)) for _ in range(4)))
    bodies = []
    for response in responses:
        assert response.status == 200, await response.text()
        bodies.append(await response.json())
    assert {b["status"] for b in bodies} == {"published"}
    assert len({b["published_at"] for b in bodies}) == 1
    assert events_of(seen) == [("create", record_id)]


# --- the seams of versions and releases ------------------------------------------------------------


async def test_publish_many_is_all_or_nothing(client, admin_token, posts, services, seen):
    """Releases' seam (`Publisher.publish_many`): every item's working copy in one transaction; one
    item that does not validate publishes nothing and is named by its index."""
    if not services.records.repository.capabilities.transactions:
        pytest.skip("the server has no multi-document transactions")
    ids = [(await create_record(client, admin_token, posts, {"title": f"item {i}"}))["id"] for i in range(3)]
    invalid = (await create_record(client, admin_token, posts, {"views": 1}))["id"]  # no title
    collection = await services.catalog.by_name(posts)
    with pytest.raises(PublishFailed) as failed:
        await services.drafts.publisher.publish_many([(collection, i) for i in [*ids, invalid]], by="someone")
    assert failed.value.index == 3 and "title" in (failed.value.error.errors or {})
    assert seen == []
    assert (await get(client, records_path(posts)))["total"] == 0

    hooked: list[tuple[str, str, str | None]] = []

    async def hook(collection: Any, record: Any, by: str | None) -> None:
        hooked.append((collection.name, record.id, by))

    services.drafts.publisher.add_hook(hook)
    published = await services.drafts.publisher.publish_many([(collection, i) for i in ids], by="someone")
    assert [r.state.status for r in published if r.state] == ["published"] * 3
    assert sorted(e.record_id for e in seen if e.event == "create") == sorted(ids)
    assert hooked == [(posts, i, "someone") for i in ids]  # on_published: one call per publish
    assert (await get(client, records_path(posts)))["total"] == 3


async def test_versions_follow_the_published_copy(client, admin_token, seen):
    """With drafts and versions (decisions.md: a version per publish): saving a working copy stores no
    version, each publish one, an unpublish keeps them; a restore writes the working copy."""
    await create_collection(client, admin_token, "notes", [{"name": "title", "type": "text"}], drafts=True,
                            versions=5)
    record_id = (await create_record(client, admin_token, "notes", {"title": "v1"}))["id"]
    path = records_path("notes", record_id)

    async def versions() -> list[Any]:
        return [v["data"]["title"] for v in (await get(client, path + "/versions", admin_token))["items"]]

    assert await versions() == []
    await post(client, path + "/publish", admin_token)
    response = await client.patch(path, headers=bearer(admin_token), json={"data": {"title": "v2"}})
    assert response.status == 200
    assert await versions() == ["v1"]
    await post(client, path + "/publish", admin_token)
    assert await versions() == ["v2", "v1"]
    await post(client, path + "/unpublish", admin_token)
    assert await versions() == ["v2", "v1"]
    restored = await post(client, path + "/versions/1/restore", admin_token)
    assert restored["status"] == "draft" and restored["title"] == "v1"
    await error_of(await client.get(path), 404, "not_found")  # restored into the working copy only


# --- localized fields (decisions.md, Localized fields: publish?locale=) -----------------------------


async def test_publishing_one_locale_of_localized_fields(client, admin_token, seen):
    await use_locales(client, admin_token, [{"code": "en"}, {"code": "de", "fallback": "en"}])
    await create_collection(client, admin_token, "pages", [
        {"name": "title", "type": "text", "localized": True, "validation": {"required": True}},
        {"name": "slug", "type": "text", "localized": True, "validation": {"unique": True}},
        {"name": "views", "type": "number"}], drafts=True)
    page = await write(client, admin_token, "POST", records_path("pages"), {"title": "Hello", "views": 1}, "en",
                       status=201)
    path = records_path("pages", page["id"])
    await write(client, admin_token, "PATCH", path, {"title": "Hallo", "slug": "hallo"}, "de")

    response = await client.post(path + "/publish", headers=bearer(admin_token), params={"locale": "de"})
    body = await error_of(response, 422, "validation_error")  # only de's values: no title in en, required
    assert "title.en" in body["errors"], body
    response = await client.post(path + "/publish", headers=bearer(admin_token), params={"locale": "en"})
    assert response.status == 200, await response.text()
    assert (await response.json())["status"] == "changed"  # de's values are still pending
    shown, _ = await read(client, path, locale="*")
    assert shown["title"] == {"en": "Hello"} and "slug" not in shown and "views" not in shown
    assert (await read(client, path, locale="de"))[0]["title"] == "Hello"  # de falls back to en

    response = await client.post(path + "/publish", headers=bearer(admin_token), params={"locale": "de"})
    assert response.status == 200, await response.text()
    assert (await response.json())["status"] == "changed"  # `views` is not localized: still pending
    shown, _ = await read(client, path, locale="*")
    assert shown["title"] == {"en": "Hello", "de": "Hallo"} and shown["slug"] == {"de": "hallo"}
    await error_of(await client.post(path + "/publish", headers=bearer(admin_token), params={"locale": "xx"}),
                   400, "bad_request")
    published = await post(client, path + "/publish", admin_token)
    assert published["status"] == "published" and published["views"] == 1
    assert [e.event for e in seen] == ["create", "update", "update"]

    # unique per locale, against the published copies
    other = await write(client, admin_token, "POST", records_path("pages"), {"title": "Other"}, "en", status=201)
    await write(client, admin_token, "PATCH", records_path("pages", other["id"]), {"slug": "hallo"}, "de")
    body = await error_of(await client.post(records_path("pages", other["id"]) + "/publish",
                                            headers=bearer(admin_token)), 422, "validation_error")
    assert "slug.de" in body["errors"], body
