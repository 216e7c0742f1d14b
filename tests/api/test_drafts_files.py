"""Files in collections with drafts (decisions.md: reads see published copies only; Files in records): a
file a working copy holds is the editors' until it is published; readers reach the files of published
copies; a publish checks that each file is the record's own."""

from __future__ import annotations

from typing import Any

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
