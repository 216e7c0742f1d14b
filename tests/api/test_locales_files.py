"""Localized file fields (decisions.md, Localized fields; Files in records, thumbnails and file tokens;
issue 40 item 2), end to end over HTTP: a German and an English image on one record, reads with
`?locale=` (fallbacks, `*`), multipart writes into one locale (`field`, `field+`, `field-`), the files a
locale no longer holds deleted and the other locales' kept, a file of another record refused in any
locale, `?locale=*` refusing file parts, the record's deletion taking every locale's files, and with
drafts a per-locale publish keeping the published copy's other locales' files, a discard taking only
the working copy's own."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.api.test_files import stored_counts, uploaded
from tests.api.test_locales import THREE, use_locales
from tests.api.test_media_fields import photo
from tests.conftest import bearer, create_collection, error_of, records_path
from tests.fixtures import wait_until

FILES = "/api/v1/files"
BANNERS: list[dict[str, Any]] = [
    {"name": "title", "type": "text"},
    {"name": "banner", "type": "file", "localized": True, "mime_types": ["image/*"]},
    {"name": "gallery", "type": "file", "localized": True, "max_select": 3},
]
PUBLIC = {"list_rule": "", "view_rule": "", "create_rule": "", "update_rule": "", "delete_rule": ""}


def image(name: str, side: int = 32) -> tuple[str, str, bytes, str]:
    return ("banner", name, photo((side, side)), "image/jpeg")


def form(data: dict[str, Any] | None, *files: tuple[str, str, bytes, str]) -> aiohttp.FormData:
    built = aiohttp.FormData(quote_fields=False, default_to_multipart=True)
    if data is not None:
        built.add_field("data", json.dumps(data), content_type="application/json")
    for name, filename, content, content_type in files:
        built.add_field(name, content, filename=filename, content_type=content_type)
    return built


async def send(client: Any, token: str, method: str, path: str, locale: str | None, data: dict[str, Any] | None,
               *files: tuple[str, str, bytes, str]) -> Any:
    params = {"locale": locale} if locale is not None else {}
    return await client.request(method, path, headers=bearer(token), params=params, data=form(data, *files))


async def sent(client: Any, token: str, method: str, path: str, locale: str | None, data: dict[str, Any] | None,
               *files: tuple[str, str, bytes, str]) -> dict[str, Any]:
    response = await send(client, token, method, path, locale, data, *files)
    assert response.status in (200, 201), await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def read(client: Any, path: str, locale: str) -> dict[str, Any]:
    response = await client.get(path, params={"locale": locale})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def status_of(client: Any, file_id: str, token: str | None = None) -> int:
    response = await client.get(f"{FILES}/{file_id}", headers=bearer(token) if token else None)
    await response.read()
    return int(response.status)


async def gone(client: Any, token: str, *file_ids: str) -> None:
    async def deleted() -> bool:
        return all([await status_of(client, i, token) == 404 for i in file_ids])

    await wait_until(deleted, f"files {file_ids} deleted")


async def banners(client: Any, token: str, **attributes: Any) -> None:
    await use_locales(client, token, THREE)
    await create_collection(client, token, "banners", BANNERS, **{**PUBLIC, **attributes})


async def german_and_english(client: Any, token: str) -> tuple[str, str, str]:
    """A record with a German banner (created with `?locale=de`) and an English one (added with
    `?locale=en`): (record id, German file id, English file id)."""
    created = await sent(client, token, "POST", records_path("banners"), "de", {"title": "Sale"},
                         image("sale-de.jpg"))
    assert isinstance(created["banner"], str)
    german = created["banner"]
    changed = await sent(client, token, "PATCH", records_path("banners", created["id"]), "en", None,
                         image("sale-en.jpg", 40))
    english = changed["banner"]
    assert english != german
    return created["id"], german, english


async def test_each_locale_answers_its_own_image_with_fallbacks(client, admin_token):
    await banners(client, admin_token)
    record_id, german, english = await german_and_english(client, admin_token)
    path = records_path("banners", record_id)
    assert (await read(client, path, "de"))["banner"] == german
    assert (await read(client, path, "en"))["banner"] == english
    assert (await read(client, path, "de-AT"))["banner"] == german  # de-AT falls back to de
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": german}
    assert (await client.get(path)).status == 200
    assert (await read(client, path, "en"))["title"] == "Sale"
    for file_id in (german, english):  # a file of a localized field is visible when the record is
        assert await status_of(client, file_id) == 200
        response = await client.get(f"{FILES}/{file_id}", params={"thumb": "100x100"})
        assert response.status == 200 and response.content_type == "image/jpeg", await response.text()

    only_english = await sent(client, admin_token, "POST", records_path("banners"), None, {"title": "English"},
                              image("en.jpg"))
    other = records_path("banners", only_english["id"])
    assert (await read(client, other, "de"))["banner"] == only_english["banner"]  # de falls back to en
    assert (await read(client, other, "*"))["banner"] == {"en": only_english["banner"]}


async def test_replacing_the_german_image_deletes_it_and_keeps_the_english(client, admin_token):
    await banners(client, admin_token)
    record_id, german, english = await german_and_english(client, admin_token)
    path = records_path("banners", record_id)
    changed = await sent(client, admin_token, "PATCH", path, "de", None, image("neu.jpg", 48))
    new_german = changed["banner"]
    assert new_german not in (german, english)
    await gone(client, admin_token, german)
    assert await status_of(client, english) == 200 and await status_of(client, new_german) == 200
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": new_german}

    # a locale without a value of its own starts empty: `+` never copies its fallback's files
    appended = await sent(client, admin_token, "PATCH", path, "de", None,
                          ("gallery+", "a.txt", b"a", "text/plain"))
    first = appended["gallery"]
    assert len(first) == 1
    appended = await sent(client, admin_token, "PATCH", path, "en", None,
                          ("gallery+", "b.txt", b"b", "text/plain"), ("gallery+", "c.txt", b"c", "text/plain"))
    english_gallery = appended["gallery"]
    assert len(english_gallery) == 2
    appended = await sent(client, admin_token, "PATCH", path, "de", None, ("gallery+", "d.txt", b"d", "text/plain"))
    assert appended["gallery"][0] == first[0] and len(appended["gallery"]) == 2
    german_gallery = appended["gallery"]
    removed = await sent(client, admin_token, "PATCH", path, "de", {"gallery-": [german_gallery[0]]})
    assert removed["gallery"] == german_gallery[1:]
    await gone(client, admin_token, german_gallery[0])
    assert (await read(client, path, "*"))["gallery"] == {"en": english_gallery, "de": german_gallery[1:]}
    assert all([await status_of(client, i) == 200 for i in english_gallery])

    cleared = await client.patch(path, headers=bearer(admin_token), params={"locale": "de"},
                                 json={"data": {"banner": None}})
    assert cleared.status == 200, await cleared.text()
    assert (await cleared.json())["banner"] == english  # de now falls back to en
    await gone(client, admin_token, new_german)
    assert await status_of(client, english) == 200


async def test_a_file_of_another_record_or_field_is_refused_in_any_locale(client, admin_token):
    await banners(client, admin_token)
    record_id, german, english = await german_and_english(client, admin_token)
    other = await sent(client, admin_token, "POST", records_path("banners"), None, {"title": "Other"})
    foreign = (await uploaded(client, admin_token, photo((20, 20)), "banners", other["id"], field="banner"))["id"]
    gallery_file = (await uploaded(client, admin_token, b"notes", "banners", record_id, field="gallery"))["id"]
    path = records_path("banners", record_id)
    for locale, data in [("de", {"banner": foreign}), ("*", {"banner": {"en": english, "de": foreign}}),
                         ("de", {"banner": gallery_file})]:
        response = await client.patch(path, headers=bearer(admin_token), params={"locale": locale},
                                      json={"data": data})
        body = await error_of(response, 422, "validation_error")
        assert "banner" in body["errors"], body
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": german}

    # the record's own uploads may be named per locale with `*`; what a locale no longer holds goes
    mine = (await uploaded(client, admin_token, photo((24, 24)), "banners", record_id, field="banner"))["id"]
    response = await client.patch(path, headers=bearer(admin_token), params={"locale": "*"},
                                  json={"data": {"banner": {"en": english, "de": mine}}})
    assert response.status == 200, await response.text()
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": mine}
    await gone(client, admin_token, german)
    assert await status_of(client, english) == 200


async def test_file_parts_under_every_locale_are_refused(client, admin_token, config):
    await banners(client, admin_token)
    record_id, german, english = await german_and_english(client, admin_token)
    path = records_path("banners", record_id)
    body = await error_of(await send(client, admin_token, "PATCH", path, "*", None, image("x.jpg")),
                          422, "validation_error")
    assert "?locale=" in body["errors"]["banner"][0]
    body = await error_of(await send(client, admin_token, "PATCH", path, "*", {"banner-": [german]}),
                          422, "validation_error")
    assert "banner-" in body["errors"]
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": german}
    assert await stored_counts(config) == (2, 2)  # nothing of the refused form stayed


async def test_deleting_the_record_deletes_every_locales_files(client, admin_token):
    await banners(client, admin_token)
    record_id, german, english = await german_and_english(client, admin_token)
    response = await client.delete(records_path("banners", record_id), headers=bearer(admin_token))
    assert response.status == 204, await response.text()
    await gone(client, admin_token, german, english)


async def test_publishing_one_locale_keeps_the_other_locales_files(client, admin_token):
    await banners(client, admin_token, drafts=True)
    record_id, german, english = await german_and_english(client, admin_token)
    path = records_path("banners", record_id)
    response = await client.post(path + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": german}

    new_german = (await sent(client, admin_token, "PATCH", path, "de", None, image("neu.jpg", 48)))["banner"]
    new_english = (await sent(client, admin_token, "PATCH", path, "en", None, image("new.jpg", 56)))["banner"]
    assert await status_of(client, german) == 200  # the published copy still holds it
    response = await client.post(path + "/publish", headers=bearer(admin_token), params={"locale": "de"})
    assert response.status == 200, await response.text()
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": new_german}
    await gone(client, admin_token, german)
    assert await status_of(client, english) == 200  # published, English
    assert await status_of(client, new_english, admin_token) == 200  # pending in the working copy
    response = await client.delete(path + "/draft", headers=bearer(admin_token))  # discard: en's new file goes
    assert response.status == 204, await response.text()
    await gone(client, admin_token, new_english)
    assert await status_of(client, english) == 200 and await status_of(client, new_german) == 200
    assert (await read(client, path, "*"))["banner"] == {"en": english, "de": new_german}


async def test_appending_to_a_draft_builds_on_its_working_copy(client, admin_token):
    """`<field>+` and `<field>-` on a record of a collection with drafts start from the working copy's
    value of the locale (a record never published has no other)."""
    await banners(client, admin_token, drafts=True)
    made = await sent(client, admin_token, "POST", records_path("banners"), "de", {"title": "Draft"},
                      ("gallery", "a.txt", b"a", "text/plain"))
    path = records_path("banners", made["id"])
    first = made["gallery"][0]
    appended = await sent(client, admin_token, "PATCH", path, "de", None, ("gallery+", "b.txt", b"b", "text/plain"))
    assert appended["gallery"][0] == first and len(appended["gallery"]) == 2 and appended["status"] == "draft"
    second = appended["gallery"][1]
    removed = await sent(client, admin_token, "PATCH", path, "de", {"gallery-": [first]})
    assert removed["gallery"] == [second]
    await gone(client, admin_token, first)
    response = await client.post(path + "/publish", headers=bearer(admin_token))
    assert response.status == 200, await response.text()
    appended = await sent(client, admin_token, "PATCH", path, "de", None, ("gallery+", "c.txt", b"c", "text/plain"))
    assert appended["gallery"][0] == second and len(appended["gallery"]) == 2 and appended["status"] == "changed"
    assert (await read(client, path, "*"))["gallery"] == {"de": [second]}  # readers: the published copy
    assert await status_of(client, second) == 200


async def test_a_localized_protected_or_hidden_files_download_is_as_any_files(client, admin_token, user_token):
    """A file of a localized field downloads under the record's view rule, its field's `view_rule` and,
    `protected`, a file token, whichever locale holds it."""
    await use_locales(client, admin_token, THREE)
    await create_collection(client, admin_token, "posters", [
        {"name": "title", "type": "text"},
        {"name": "scan", "type": "file", "localized": True, "protected": True},
        {"name": "draft", "type": "file", "localized": True, "view_rule": "@request.auth.role = \"admin\""},
    ], **PUBLIC)
    made = await sent(client, admin_token, "POST", records_path("posters"), "de", {"title": "x"},
                      ("scan", "scan.txt", b"scan", "text/plain"), ("draft", "d.txt", b"d", "text/plain"))
    scan, hidden = made["scan"], made["draft"]
    assert await status_of(client, scan, user_token) == 404  # protected: no token
    response = await client.post(f"{FILES}/token", headers=bearer(user_token))
    assert response.status == 200, await response.text()
    token = (await response.json())["token"]
    response = await client.get(f"{FILES}/{scan}", params={"token": token})
    assert response.status == 200 and await response.read() == b"scan"
    assert await status_of(client, hidden, user_token) == 404  # the field's view_rule hides it
    assert await status_of(client, hidden, admin_token) == 200
    shown = await client.get(records_path("posters", made["id"]), headers=bearer(user_token), params={"locale": "*"})
    assert "draft" not in await shown.json()
