"""Localized fields (decisions.md, Localized fields; issue 40), end to end over HTTP: the `locales`
setting (codes, default, fallback chains without cycles), `localized: true` fields, reads with
`?locale=` (fallbacks, `*`, `Content-Language`), writes with `?locale=` (one locale merged, `*`
replacing the object), `required` on the default locale, `unique` per locale, and the bad input
(unknown locale 400, a cycle 422, a localized relation 422, `*` with a non-object 422)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.conftest import bearer, create_collection, error_of, records_path

SETTINGS = "/api/v1/settings"
THREE = [{"code": "en"}, {"code": "de", "fallback": "en"}, {"code": "de-AT", "fallback": "de"}]
ARTICLES: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "localized": True, "validation": {"required": True}},
    {"name": "slug", "type": "text", "localized": True, "validation": {"unique": True}},
    {"name": "views", "type": "number"},
    {"name": "tags", "type": "select", "values": ["a", "b", "c"], "max_select": 3, "localized": True},
]
PUBLIC = {"list_rule": "", "view_rule": "", "create_rule": "", "update_rule": "", "delete_rule": ""}


async def set_locales(client: Any, token: str, locales: list[dict[str, Any]] | str) -> Any:
    value = locales if isinstance(locales, str) else json.dumps(locales)
    return await client.post(SETTINGS, headers=bearer(token), json={"key": "locales", "value": value})


async def use_locales(client: Any, token: str, locales: list[dict[str, Any]] = THREE) -> None:
    response = await set_locales(client, token, locales)
    assert response.status == 200, await response.text()


async def write(client: Any, token: str, method: str, path: str, data: dict[str, Any], locale: str | None = None,
                status: int = 200) -> dict[str, Any]:
    query = {} if locale is None else {"locale": locale}
    response = await client.request(method, path, headers=bearer(token), params=query, json={"data": data})
    assert response.status == status, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def read(client: Any, path: str, token: str | None = None, **query: str) -> tuple[dict[str, Any], Any]:
    response = await client.get(path, headers=bearer(token) if token else {}, params=query)
    assert response.status == 200, await response.text()
    return await response.json(), response.headers


async def articles(client: Any, token: str) -> None:
    await use_locales(client, token)
    await create_collection(client, token, "articles", ARTICLES, **PUBLIC)


async def test_the_locales_setting_is_checked(client, admin_token):
    listed = {s["key"]: s for s in await (await client.get(SETTINGS, headers=bearer(admin_token))).json()}
    assert listed["locales"] == {"key": "locales", "value": '[{"code": "en"}]', "category": "content"}
    cycle = [{"code": "en", "fallback": "de"}, {"code": "de", "fallback": "fr"}, {"code": "fr", "fallback": "en"}]
    body = await error_of(await set_locales(client, admin_token, cycle), 422, "validation_error")
    assert "cycle" in body["errors"]["value"][0] and "en -> de -> fr -> en" in body["errors"]["value"][0]
    bad_values: list[tuple[Any, str]] = [
        ([], "non-empty"), ("nope", "JSON list"), ([{"code": "english!"}], "BCP 47"),
        ([{"code": "en"}, {"code": "EN"}], "twice"), ([{"code": "en", "fallback": "de"}], "not a configured"),
        ([{"code": "en", "fallback": "en"}], "itself"), ([{"code": "en", "x": 1}], "object"),
        ([{"code": f"l{i:03d}"} for i in range(101)], "At most")]
    for bad, says in bad_values:
        body = await error_of(await set_locales(client, admin_token, bad), 422, "validation_error")
        assert says in body["errors"]["value"][0], (bad, body)
    await use_locales(client, admin_token, THREE)
    listed = {s["key"]: s for s in await (await client.get(SETTINGS, headers=bearer(admin_token))).json()}
    assert json.loads(listed["locales"]["value"]) == THREE


async def test_a_relation_cannot_be_localized(client, admin_token):
    target = (await create_collection(client, admin_token, "people", []))["id"]
    body = await error_of(await client.post("/api/v1/collections", headers=bearer(admin_token), json={
        "name": "bad", "schema": [{"name": "who", "type": "relation", "collection_id": target, "localized": True}]}),
        422, "validation_error")
    assert "cannot be localized" in body["errors"]["schema"][0]
    created = await create_collection(client, admin_token, "ok", [{"name": "t", "type": "text", "localized": True}])
    assert created["schema"]["fields"][0]["localized"] is True


async def test_reads_resolve_each_locale_through_its_fallbacks(client, admin_token):
    await articles(client, admin_token)
    path = records_path("articles")
    record = await write(client, admin_token, "POST", path, {"title": "Hello", "views": 3}, status=201)
    assert record["title"] == "Hello" and "slug" not in record  # never set: left out, as any empty field
    rid = record["id"]
    await write(client, admin_token, "PATCH", records_path("articles", rid), {"title": "Hallo"}, locale="de")
    one = records_path("articles", rid)
    for locale, title in (("en", "Hello"), ("de", "Hallo"), ("de-AT", "Hallo"), ("DE-at", "Hallo")):
        body, headers = await read(client, one, locale=locale)
        assert body["title"] == title, locale
        assert headers["Content-Language"] == locale if locale != "DE-at" else "de-AT"
    body, headers = await read(client, one)
    assert body["title"] == "Hello" and headers["Content-Language"] == "en"
    body, headers = await read(client, one, locale="*")
    assert body["title"] == {"en": "Hello", "de": "Hallo"} and body["views"] == 3
    assert headers["Content-Language"] == "en, de, de-AT"
    listing, headers = await read(client, path, locale="de-AT")
    assert [item["title"] for item in listing["items"]] == ["Hallo"] and headers["Content-Language"] == "de-AT"
    body = await error_of(await client.get(one, params={"locale": "fr"}), 400, "bad_request")
    assert "Unknown locale 'fr'" in body["detail"]
    await error_of(await client.get(path, params={"locale": "fr"}), 400, "bad_request")


async def test_writes_merge_one_locale_or_replace_the_object(client, admin_token):
    await articles(client, admin_token)
    rid = (await write(client, admin_token, "POST", records_path("articles"),
                       {"title": {"en": "Hi", "de": "Hallo"}, "slug": {"en": "hi"}}, locale="*", status=201))["id"]
    one = records_path("articles", rid)
    # two editors at once, each writing their locale: neither clobbers the other
    await asyncio.gather(write(client, admin_token, "PATCH", one, {"slug": "hallo"}, locale="de"),
                         write(client, admin_token, "PATCH", one, {"slug": "servus"}, locale="de-AT"))
    body, _ = await read(client, one, locale="*")
    assert body["slug"] == {"en": "hi", "de": "hallo", "de-AT": "servus"}
    answer = await write(client, admin_token, "PATCH", one, {"slug": None}, locale="de-AT")
    assert answer["slug"] == "hallo"  # the answer is shown in the write's locale: de-AT falls back to de
    body, _ = await read(client, one, locale="*")
    assert body["slug"] == {"en": "hi", "de": "hallo"}
    await write(client, admin_token, "PATCH", one, {"title": {"en": "Hey"}}, locale="*")
    body, _ = await read(client, one, locale="*")
    assert body["title"] == {"en": "Hey"}
    # `required` is the default locale's value
    body = await error_of(await client.patch(one, headers=bearer(admin_token), params={"locale": "*"},
                                             json={"data": {"title": {"de": "Nur deutsch"}}}), 422, "validation_error")
    assert "title.en" in body["errors"]
    await error_of(await client.patch(one, headers=bearer(admin_token), json={"data": {"title": None}}),
                   422, "validation_error")
    await write(client, admin_token, "PATCH", one, {"title": None}, locale="de")  # no de value: fine
    body = await error_of(await client.post(records_path("articles"), headers=bearer(admin_token),
                                            params={"locale": "de"}, json={"data": {"title": "Nur deutsch"}}),
                          422, "validation_error")
    assert "default locale (en)" in body["errors"]["title"][0]
    # `*` takes objects only, of configured locales
    body = await error_of(await client.patch(one, headers=bearer(admin_token), params={"locale": "*"},
                                             json={"data": {"slug": "plain"}}), 422, "validation_error")
    assert "object of locale code" in body["errors"]["slug"][0]
    body = await error_of(await client.patch(one, headers=bearer(admin_token), params={"locale": "*"},
                                             json={"data": {"slug": {"fr": "x"}}}), 422, "validation_error")
    assert "slug.fr" in body["errors"]
    await error_of(await client.patch(one, headers=bearer(admin_token), params={"locale": "fr"},
                                      json={"data": {"slug": "x"}}), 400, "bad_request")
    body, _ = await read(client, one, locale="*")
    assert body["slug"] == {"en": "hi", "de": "hallo"} and body["title"] == {"en": "Hey"}


async def test_unique_holds_per_locale(client, admin_token):
    await articles(client, admin_token)
    path = records_path("articles")
    first = await write(client, admin_token, "POST", path, {"title": {"en": "A"}, "slug": {"en": "same", "de": "x"}},
                        locale="*", status=201)
    # the same text in another locale is no clash
    await write(client, admin_token, "POST", path, {"title": {"en": "B"}, "slug": {"de": "same"}}, locale="*",
                status=201)
    body = await error_of(await client.post(path, headers=bearer(admin_token), params={"locale": "*"},
                                            json={"data": {"title": {"en": "C"}, "slug": {"de": "same"}}}),
                          400, "already_exists")
    assert "slug.de" in body["errors"]
    await error_of(await client.patch(records_path("articles", first["id"]), headers=bearer(admin_token),
                                      params={"locale": "de"}, json={"data": {"slug": "same"}}), 400, "already_exists")
