"""The bulk and CSV limits are settings (issue 9, item 4): a change through the settings API
takes effect on the records endpoints."""

from __future__ import annotations

import aiohttp

from tests.conftest import bearer, create_collection, create_record, error_of, records_path


async def set_setting(client, token, key, value):
    response = await client.post("/api/v1/settings", headers=bearer(token), json={"key": key, "value": value})
    assert response.status == 200, await response.text()


async def test_bulk_max_ids_setting_bounds_bulk_requests(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    ids = [(await create_record(client, admin_token, "posts", {"title": str(n)}))["id"] for n in range(3)]
    await set_setting(client, admin_token, "bulk_max_ids", "2")
    response = await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                                 json={"record_ids": ids})
    error = await error_of(response, 422, "validation_error")
    assert "At most 2 ids" in error["errors"]["record_ids"][0]
    ok = await client.post(records_path("posts") + "/bulk-delete", headers=bearer(admin_token),
                           json={"record_ids": ids[:2]})
    assert (await ok.json()) == {"deleted": 2}


async def test_csv_import_limits_are_settings(client, admin_token):
    await create_collection(client, admin_token, "posts", [{"name": "title", "type": "text"}])
    await set_setting(client, admin_token, "csv_import_max_rows", "5")

    def form(content: bytes) -> aiohttp.FormData:
        data = aiohttp.FormData()
        data.add_field("file", content, filename="p.csv", content_type="text/csv")
        return data

    rows = b"title\n" + b"".join(b"r%d\n" % n for n in range(6))
    response = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token), data=form(rows))
    error = await error_of(response, 422, "validation_error")
    assert "more than 5 data rows" in error["errors"]["file"][0]
    await set_setting(client, admin_token, "csv_import_max_mb", "1")
    big = b"title\n" + b"x" * (1024 * 1024) + b"\n"
    response = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token), data=form(big))
    await error_of(response, 413, "payload_too_large")
    assert (await (await client.get(records_path("posts"))).json())["total"] == 0
