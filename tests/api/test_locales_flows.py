"""Localized fields across the service (decisions.md, Localized fields; issue 40): realtime topics
(objects by default, `locale=<code>` resolved, filters with fallbacks decided in memory), webhooks carrying
objects, the CSV round trip with `title:de` columns, batches with `?locale=`, a locale removed from the
setting (values kept, not served), a change of the setting seen at once by another replica, and schema
changes that localize a field or stop localizing it."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

from cms.app import create_app
from cms.wiring import open_services
from tests.api import test_webhooks
from tests.api.test_csv import form
from tests.api.test_locales import PUBLIC, read, set_locales, use_locales, write
from tests.conftest import bearer, create_collection, error_of, records_path
from tests.realtime.sse import Stream, data

config = test_webhooks.config  # loopback receivers are allowed, as in the webhook tests
receiver = test_webhooks.receiver
TWO = [{"code": "en"}, {"code": "de", "fallback": "en"}]
POSTS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "localized": True, "validation": {"required": True}},
    {"name": "body", "type": "editor", "localized": True},
    {"name": "when", "type": "date", "localized": True},
    {"name": "views", "type": "number"},
]


async def posts(client: Any, token: str, locales: list[dict[str, Any]] = TWO) -> str:
    await use_locales(client, token, locales)
    return str((await create_collection(client, token, "posts", POSTS, **PUBLIC))["id"])


async def test_realtime_topics_carry_objects_or_the_locale_asked(client, admin_token, streams: Callable[[], Stream]):
    await posts(client, admin_token)
    objects, german, filtered = streams(), streams(), streams()
    for stream in (objects, german, filtered):
        await stream.open()
    assert (await objects.subscribe(["posts/*"])).status_code == 204
    assert (await german.subscribe(["posts/*?locale=de"])).status_code == 204
    answer = await filtered.subscribe(['posts/*?filter=title = "Hello"&locale=de'])
    assert answer.status_code == 204, answer.text
    refused = await objects.subscribe(["posts/*?locale=fr"])
    assert refused.status_code == 422 and "Unknown locale 'fr'" in refused.json()["errors"]["subscriptions.0"][0]
    made = await write(client, admin_token, "POST", records_path("posts"),
                       {"title": {"en": "Hello"}, "when": {"en": "2026-01-02T03:04:05.000Z"}}, locale="*", status=201)
    shown = data(await objects.next())["record"]
    assert shown["title"] == {"en": "Hello"} and shown["when"] == {"en": "2026-01-02T03:04:05.000Z"}
    assert data(await german.next())["record"]["title"] == "Hello"  # de falls back to en
    assert data(await filtered.next()) == {"action": "create", "record": {**shown, "title": "Hello",
                                                                          "when": "2026-01-02T03:04:05.000Z"}}
    # a German title: the record no longer shows "Hello" in German, so it leaves the filtered topic
    await write(client, admin_token, "PATCH", records_path("posts", made["id"]), {"title": "Hallo"}, locale="de")
    assert data(await objects.next())["record"]["title"] == {"en": "Hello", "de": "Hallo"}
    assert data(await german.next())["record"]["title"] == "Hallo"
    left = data(await filtered.next())
    assert left["action"] == "delete" and left["record"]["title"] == "Hello"


async def test_webhooks_carry_objects(client, admin_token, receiver, run_jobs):
    await posts(client, admin_token)
    await test_webhooks.make_webhook(client, admin_token, receiver.url, events=["create", "update"])
    made = await write(client, admin_token, "POST", records_path("posts"), {"title": "Hi"}, status=201)
    assert made["title"] == "Hi"
    await write(client, admin_token, "PATCH", records_path("posts", made["id"]), {"title": "Hallo"}, locale="de")
    await run_jobs()
    # the two deliveries are separate jobs, which may arrive in either order
    titles = {delivery["event"]: delivery["data"]["title"] for delivery in receiver.deliveries()}
    assert titles == {"create": {"en": "Hi"}, "update": {"en": "Hi", "de": "Hallo"}}


async def test_csv_round_trip_with_a_column_per_locale(client, admin_token):
    await posts(client, admin_token)
    for title, views in (({"en": "One", "de": "Eins"}, 1), ({"en": "Two"}, 2)):
        await write(client, admin_token, "POST", records_path("posts"), {"title": title, "views": views},
                    locale="*", status=201)
    exported = await client.get(records_path("posts") + "/export/csv", headers=bearer(admin_token),
                                params={"locale": "*", "sort": "views"})
    assert exported.status == 200 and exported.headers["Content-Language"] == "en, de"
    rows = list(csv.reader(io.StringIO(await exported.text())))
    assert rows[0] == ["id", "created", "updated", "title:en", "title:de", "body:en", "body:de", "when:en",
                       "when:de", "views"]
    assert [row[3:5] for row in rows[1:]] == [["One", "Eins"], ["Two", ""]]
    german = await client.get(records_path("posts") + "/export/csv", headers=bearer(admin_token),
                              params={"locale": "de", "sort": "views"})
    german_rows = list(csv.reader(io.StringIO(await german.text())))
    assert german_rows[0][3:] == ["title", "body", "when", "views"]
    assert [row[3] for row in german_rows[1:]] == ["Eins", "Two"]
    # the `*` export imports back to the same objects (`title` reads as the default locale's column too)
    response = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token),
                                 data=form(("\r\n".join(",".join(row) for row in rows)).encode()))
    assert response.status == 200, await response.text()
    assert (await response.json()) == {"imported": 2, "failed": []}
    body, _ = await read(client, records_path("posts"), locale="*", sort="views,created", per_page="10")
    assert [item["title"] for item in body["items"]] == [{"en": "One", "de": "Eins"}] * 2 + [{"en": "Two"}] * 2
    mixed = "title,title:de,views\r\nThree,Drei,3\r\n,Vier,4\r\n"
    response = await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token),
                                 data=form(mixed.encode()))
    result = await response.json()
    assert result["imported"] == 1 and result["failed"][0]["row"] == 2 and "title.en" in result["failed"][0]["errors"]
    for header, says in (("title,title:en\r\nA,B\r\n", "duplicate columns"), ("title,title:fr\r\nA,B\r\n", "unknown"),
                         ("title:de,views\r\nA,1\r\n", "required"), ("views:de\r\n1\r\n", "unknown")):
        body = await error_of(await client.post(records_path("posts") + "/import/csv", headers=bearer(admin_token),
                                                data=form(header.encode())), 422, "validation_error")
        assert says in body["detail"], (header, body)


async def test_batches_write_the_locale_of_each_request(client, admin_token, services):
    if not services.records.repository.capabilities.transactions:
        return  # batches need a replica set
    await posts(client, admin_token)
    made = await write(client, admin_token, "POST", records_path("posts"), {"title": "Hi"}, status=201)
    response = await client.post("/api/v1/batch", headers=bearer(admin_token), json={"requests": [
        {"method": "POST", "url": "/api/v1/collections/posts/records?locale=*",
         "body": {"data": {"title": {"en": "A", "de": "Ä"}}}},
        {"method": "PATCH", "url": f"/api/v1/collections/posts/records/{made['id']}?locale=de",
         "body": {"data": {"title": "Hallo"}}}]})
    assert response.status == 200, await response.text()
    answers = await response.json()
    assert answers[0]["body"]["title"] == {"en": "A", "de": "Ä"} and answers[1]["body"]["title"] == "Hallo"
    body, _ = await read(client, records_path("posts", made["id"]), locale="*")
    assert body["title"] == {"en": "Hi", "de": "Hallo"}
    response = await client.post("/api/v1/batch", headers=bearer(admin_token), json={"requests": [
        {"method": "POST", "url": "/api/v1/collections/posts/records?locale=de", "body": {"data": {"title": "B"}}}]})
    assert response.status == 400
    assert "default locale" in json.dumps((await response.json())["failed"])


async def test_a_removed_locale_keeps_its_values_unserved(client, admin_token):
    await posts(client, admin_token, [{"code": "en"}, {"code": "de", "fallback": "en"}, {"code": "fr"}])
    made = await write(client, admin_token, "POST", records_path("posts"),
                       {"title": {"en": "Hi", "de": "Hallo", "fr": "Salut"}}, locale="*", status=201)
    one = records_path("posts", made["id"])
    await use_locales(client, admin_token, TWO)
    body, _ = await read(client, one, locale="*")
    assert body["title"] == {"en": "Hi", "de": "Hallo"}
    await error_of(await client.get(one, params={"locale": "fr"}), 400, "bad_request")
    body, _ = await read(client, records_path("posts"), locale="*", filter='title = "Salut"')
    assert body["items"] == []
    await write(client, admin_token, "PATCH", one, {"title": "Hallöchen"}, locale="de")  # fr stays stored
    await use_locales(client, admin_token, [*TWO, {"code": "fr", "fallback": "en"}])
    body, _ = await read(client, one, locale="fr")
    assert body["title"] == "Salut"


async def test_a_change_of_the_locales_is_seen_at_once_by_another_replica(aiohttp_client, client, config, clock,
                                                                         admin_token):
    await posts(client, admin_token)
    made = await write(client, admin_token, "POST", records_path("posts"), {"title": {"en": "Hi", "de": "Hallo"}},
                       locale="*", status=201)
    async with open_services(config, clock=clock) as second_services:
        replica = await aiohttp_client(create_app(config, services=second_services))
        try:
            body, _ = await read(replica, records_path("posts", made["id"]), locale="de")  # cached there
            assert body["title"] == "Hallo"
            response = await set_locales(client, admin_token, [{"code": "de"}, {"code": "en", "fallback": "de"},
                                                               {"code": "fr", "fallback": "de"}])
            assert response.status == 200
            body, headers = await read(replica, records_path("posts", made["id"]))
            assert body["title"] == "Hallo" and headers["Content-Language"] == "de"  # the new default, at once
            body, _ = await read(replica, records_path("posts", made["id"]), locale="fr")
            assert body["title"] == "Hallo"
        finally:
            await replica.close()


async def test_a_field_becomes_localized_and_back(client, admin_token):
    collection_id = await posts(client, admin_token)
    made = await write(client, admin_token, "POST", records_path("posts"), {"title": "Hi", "views": 3}, status=201)
    one = records_path("posts", made["id"])
    fields = [*POSTS[:3], {"name": "views", "type": "number", "localized": True}]
    response = await client.patch(f"/api/v1/collections/{collection_id}", headers=bearer(admin_token),
                                  json={"schema": fields})
    assert response.status == 200, await response.text()
    body, _ = await read(client, one, locale="*")
    assert body["views"] == {"en": 3}
    await write(client, admin_token, "PATCH", one, {"views": 4}, locale="de")
    body, _ = await read(client, one, locale="de")
    assert body["views"] == 4
    fields = [{"name": "title", "type": "text", "validation": {"required": True}}, *POSTS[1:]]
    response = await client.patch(f"/api/v1/collections/{collection_id}", headers=bearer(admin_token),
                                  json={"schema": fields})
    assert response.status == 200, await response.text()
    body, _ = await read(client, one, locale="*")
    assert body["title"] == "Hi" and body["views"] == 4 and body["when"] is None or "when" not in body
