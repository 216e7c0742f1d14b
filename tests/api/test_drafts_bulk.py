"""Bulk update, bulk delete and CSV import on a collection with drafts (decisions.md, Drafts, versions and
scheduled publishing; docs/concepts/drafts.md, Bulk writes and CSV import; issue 39): a bulk update writes
the working copies (types and lengths checked, `required` and `unique` at publish) and readers see nothing
of it; a bulk delete deletes both copies with a `delete` event for the published ones; a CSV import creates
drafts; the rules are checked on every record first, all or nothing."""

from __future__ import annotations

from tests.api.test_csv import csv_bytes, import_csv
from tests.api.test_drafts import FIELDS, events_of, get, post, posts, record_of
from tests.conftest import bearer, create_collection, create_record, error_of, records_path

__all__ = ["posts"]  # the fixture


def bulk(name: str, action: str) -> str:
    return records_path(name) + f"/bulk-{action}"


async def test_bulk_update_writes_the_working_copies(client, admin_token, posts, seen):
    published = await create_record(client, admin_token, posts, {"title": "one", "slug": "one"})
    await post(client, record_of(posts, published["id"]) + "/publish", admin_token)
    draft = await create_record(client, admin_token, posts, {"title": "two"})
    seen.clear()
    ids = [published["id"], draft["id"]]

    response = await client.post(bulk(posts, "update"), headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"views": 7, "slug": "same"}})
    assert response.status == 200, await response.text()
    assert await response.json() == {"updated": 2}  # `unique` waits for the publish
    assert seen == []  # working copies: no record event
    reader = await get(client, record_of(posts, published["id"]))
    assert "views" not in reader and reader["slug"] == "one"  # readers: as published
    first = await get(client, record_of(posts, published["id"]) + "?draft=true", admin_token)
    second = await get(client, record_of(posts, draft["id"]) + "?draft=true", admin_token)
    assert (first["status"], first["views"], first["slug"]) == ("changed", 7, "same")
    assert (second["status"], second["views"]) == ("draft", 7)

    response = await client.post(bulk(posts, "update"), headers=bearer(admin_token),
                                 json={"record_ids": ids, "data": {"title": "x" * 41}})
    body = await error_of(response, 422, "validation_error")  # lengths are checked: nothing written
    assert "title" in body["errors"], body
    response = await client.post(bulk(posts, "update"), headers=bearer(admin_token),
                                 json={"record_ids": [*ids, "missing"], "data": {"views": 9}})
    body = await error_of(response, 422, "validation_error")
    assert body["errors"] == {"missing": ["Record not found."]}, body
    assert (await get(client, record_of(posts, draft["id"]) + "?draft=true", admin_token))["views"] == 7

    response = await client.post(record_of(posts, published["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    assert (await get(client, record_of(posts, published["id"])))["views"] == 7


async def test_bulk_changes_check_the_rules_on_every_working_copy(client, admin_token, user_token):
    await create_collection(client, admin_token, "notes", FIELDS, drafts=True, update_rule="views < 5",
                            delete_rule="views < 5")
    low = await create_record(client, admin_token, "notes", {"title": "low", "views": 1})
    high = await create_record(client, admin_token, "notes", {"title": "high", "views": 9})
    ids = [low["id"], high["id"]]
    for action, body in (("update", {"record_ids": ids, "data": {"title": "new"}}), ("delete", {"record_ids": ids})):
        response = await client.post(bulk("notes", action), headers=bearer(user_token), json=body)
        answer = await error_of(response, 403, "forbidden")
        assert list(answer["errors"]) == [high["id"]], answer
    shown = await get(client, record_of("notes", low["id"]) + "?draft=true", admin_token)
    assert shown["title"] == "low"  # all or nothing


async def test_bulk_delete_deletes_both_copies(client, admin_token, posts, seen):
    published = await create_record(client, admin_token, posts, {"title": "one"})
    await post(client, record_of(posts, published["id"]) + "/publish", admin_token)
    response = await client.patch(record_of(posts, published["id"]), headers=bearer(admin_token),
                                  json={"data": {"title": "one, changed"}})
    assert response.status == 200, await response.text()
    draft = await create_record(client, admin_token, posts, {"title": "two"})
    seen.clear()

    response = await client.post(bulk(posts, "delete"), headers=bearer(admin_token),
                                 json={"record_ids": [published["id"], draft["id"]]})
    assert response.status == 200, await response.text()
    assert await response.json() == {"deleted": 2}
    assert events_of(seen) == [("delete", published["id"])]  # readers knew only the published one
    for record_id in (published["id"], draft["id"]):
        await error_of(await client.get(record_of(posts, record_id)), 404, "not_found")
        await error_of(await client.get(record_of(posts, record_id) + "?draft=true", headers=bearer(admin_token)),
                       404, "not_found")
    assert (await get(client, records_path(posts) + "?draft=true", admin_token))["total"] == 0


async def test_bulk_changes_reach_records_published_before_drafts_were_on(client, admin_token, seen):
    collection = await create_collection(client, admin_token, "news", FIELDS)
    old = await create_record(client, admin_token, "news", {"title": "old"})
    response = await client.patch(f"/api/v1/collections/{collection['id']}", headers=bearer(admin_token),
                                  json={"drafts": True})
    assert response.status == 200, await response.text()
    response = await client.post(bulk("news", "update"), headers=bearer(admin_token),
                                 json={"record_ids": [old["id"]], "data": {"views": 3}})
    assert response.status == 200, await response.text()
    working = await get(client, record_of("news", old["id"]) + "?draft=true", admin_token)
    assert (working["status"], working["views"], working["title"]) == ("changed", 3, "old")
    assert "views" not in await get(client, record_of("news", old["id"]))


async def test_csv_import_creates_drafts(client, admin_token, posts, seen):
    content = csv_bytes([["title", "slug", "views"], ["first", "same", "1"], ["", "same", "2"],
                         ["x" * 41, "", "3"], ["fourth", "", "not a number"]])
    result = await import_csv(client, admin_token, content, posts)
    assert result["imported"] == 2, result  # no title, a repeated slug: fine in a working copy
    assert [failure["row"] for failure in result["failed"]] == [3, 4], result  # too long, not a number
    assert seen == []
    assert (await get(client, records_path(posts)))["total"] == 0  # readers: nothing published
    drafts = (await get(client, records_path(posts) + "?draft=true&sort=views", admin_token))["items"]
    assert [(d["status"], d.get("title"), d["views"]) for d in drafts] == [("draft", "first", 1), ("draft", None, 2)]
    response = await client.post(record_of(posts, drafts[1]["id"]) + "/publish", headers=bearer(admin_token))
    body = await error_of(response, 422, "validation_error")  # `required` at publish
    assert "title" in body["errors"], body
    await post(client, record_of(posts, drafts[0]["id"]) + "/publish", admin_token)
    assert (await get(client, records_path(posts)))["total"] == 1


async def test_csv_import_without_required_columns_into_drafts(client, admin_token, posts):
    result = await import_csv(client, admin_token, csv_bytes([["views"], ["5"]]), posts)
    assert result == {"imported": 1, "failed": []}
