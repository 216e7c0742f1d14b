"""Files in collections with drafts (decisions.md: reads see published copies only; Files in records): a
file a working copy holds is the editors' until it is published; readers reach the files of published
copies; a publish checks that each file is the record's own."""

from __future__ import annotations

from typing import Any

from cms.store.client import open_client
from tests.api.test_media_fields import PHOTOS, change_with_files, created_with_files, photo
from tests.conftest import bearer, create_collection, records_path
from tests.fixtures import wait_until

FILES = "/api/v1/files"


async def status_of(client: Any, file_id: str, token: str | None = None) -> int:
    response = await client.get(f"{FILES}/{file_id}", headers=bearer(token) if token else None)
    await response.read()
    return int(response.status)


async def test_a_drafts_files_are_the_editors_until_published(client, admin_token, user_token):
    await create_collection(client, admin_token, "photos", PHOTOS, drafts=True, update_rule=None)
    record = await created_with_files(client, admin_token, "photos", {"title": "Holidays"},
                                      ("cover", "beach.jpg", photo(), "image/jpeg"))
    first = record["cover"]
    assert record["status"] == "draft"
    assert await status_of(client, first) == 404  # readers: the record is not published
    assert await status_of(client, first, user_token) == 404  # may view, may not update: not an editor
    assert await status_of(client, first, admin_token) == 200  # an editor

    response = await client.post(records_path("photos", record["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()  # its own file: the publish checks it
    assert await status_of(client, first) == 200

    response = await change_with_files(client, admin_token, "photos", record["id"], {"title": "New cover"},
                                       ("cover", "other.jpg", photo((32, 32)), "image/jpeg"))
    assert response.status == 200, await response.text()
    second = (await response.json())["cover"]
    assert await status_of(client, second) == 404  # pending in the working copy
    assert await status_of(client, second, admin_token) == 200
    assert await status_of(client, first) == 200  # what readers see still holds it
    response = await client.post(records_path("photos", record["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    assert await status_of(client, second) == 200

    async def first_gone() -> bool:  # the publish took it out of the field: deleted once committed
        return await status_of(client, first, admin_token) == 404

    await wait_until(first_gone, "the replaced file deleted")


async def in_storage(config: Any, file_id: str) -> tuple[int, int]:
    """(documents of `file_id` in fs.files, its chunks in fs.chunks), read with a client of our own."""
    mongo = open_client(config.mongodb_url)
    try:
        db = mongo[config.mongodb_db]
        return (await db["fs.files"].count_documents({"_id": file_id}),
                await db["fs.chunks"].count_documents({"files_id": file_id}))
    finally:
        await mongo.close()


async def test_a_discarded_drafts_own_files_are_deleted(client, admin_token, config):
    """Issue 39: the files only a discarded working copy held go with it (404, gone from GridFS); the
    published copy's files stay."""
    await create_collection(client, admin_token, "photos", PHOTOS, drafts=True)
    record = await created_with_files(client, admin_token, "photos", {"title": "Holidays"},
                                      ("cover", "beach.jpg", photo(), "image/jpeg"))
    published = record["cover"]
    response = await client.post(records_path("photos", record["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    response = await change_with_files(client, admin_token, "photos", record["id"], {"title": "Other"},
                                       ("cover", "other.jpg", photo((32, 32)), "image/jpeg"),
                                       ("notes", "a.txt", b"notes", "text/plain"))
    assert response.status == 200, await response.text()
    changed = await response.json()
    pending = [changed["cover"], *changed["notes"]]
    for file_id in pending:
        assert await in_storage(config, file_id) == (1, 1)

    response = await client.delete(records_path("photos", record["id"]) + "/draft", headers=bearer(admin_token))
    assert response.status == 204, await response.text()
    for file_id in pending:
        assert await status_of(client, file_id, admin_token) == 404
        assert await in_storage(config, file_id) == (0, 0)
    assert await status_of(client, published) == 200  # readers' file stays
    assert await in_storage(config, published) == (1, 1)


async def test_deleting_a_record_never_published_deletes_its_files(client, admin_token, config):
    await create_collection(client, admin_token, "photos", PHOTOS, drafts=True)
    record = await created_with_files(client, admin_token, "photos", {"title": "Draft"},
                                      ("cover", "beach.jpg", photo(), "image/jpeg"))
    assert await in_storage(config, record["cover"]) == (1, 1)
    response = await client.delete(records_path("photos", record["id"]), headers=bearer(admin_token))
    assert response.status == 204, await response.text()
    assert await in_storage(config, record["cover"]) == (0, 0)


async def test_a_file_replaced_again_in_a_working_copy_is_deleted(client, admin_token, config):
    """A file uploaded into a working copy and replaced by another before a publish goes at once; the
    published copy's file stays until a publish replaces it."""
    await create_collection(client, admin_token, "photos", PHOTOS, drafts=True)
    record = await created_with_files(client, admin_token, "photos", {"title": "Holidays"},
                                      ("cover", "beach.jpg", photo(), "image/jpeg"))
    published = record["cover"]
    response = await client.post(records_path("photos", record["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    covers = []
    for size in ((32, 32), (48, 48)):
        response = await change_with_files(client, admin_token, "photos", record["id"], None,
                                           ("cover", "other.jpg", photo(size), "image/jpeg"))
        assert response.status == 200, await response.text()
        covers.append((await response.json())["cover"])
    assert await in_storage(config, covers[0]) == (0, 0)  # replaced before any publish
    assert await status_of(client, covers[0], admin_token) == 404
    assert await in_storage(config, covers[1]) == (1, 1)
    assert await in_storage(config, published) == (1, 1)  # readers still see it
    assert await status_of(client, published) == 200


async def test_bulk_changes_of_drafts_delete_the_files_they_drop(client, admin_token, config):
    """A bulk update clearing a file field deletes the files only the working copies held (a published
    copy's stay); a bulk delete deletes the files of records never published."""
    await create_collection(client, admin_token, "photos", PHOTOS, drafts=True)
    made = [await created_with_files(client, admin_token, "photos", {"title": f"p{n}"},
                                     ("cover", "beach.jpg", photo((40 + n, 40)), "image/jpeg")) for n in range(3)]
    response = await client.post(records_path("photos", made[0]["id"]) + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    response = await client.post(records_path("photos") + "/bulk-update", headers=bearer(admin_token),
                                 json={"record_ids": [m["id"] for m in made[:2]], "data": {"cover": None}})
    assert response.status == 200, await response.text()
    assert await in_storage(config, made[0]["cover"]) == (1, 1)  # the published copy holds it
    assert await status_of(client, made[0]["cover"]) == 200
    assert await in_storage(config, made[1]["cover"]) == (0, 0)  # only the draft held it

    response = await client.post(records_path("photos") + "/bulk-delete", headers=bearer(admin_token),
                                 json={"record_ids": [m["id"] for m in made]})
    assert response.status == 200, await response.text()
    assert await in_storage(config, made[2]["cover"]) == (0, 0)  # never published: no event, the hook

    async def published_file_gone() -> bool:  # the `delete` event's clean-up
        return await in_storage(config, made[0]["cover"]) == (0, 0)

    await wait_until(published_file_gone, "the published record's file deleted")
