"""Queries that agree with answers (decisions.md, Localized fields; issue 40, item 5): `filter`, `sort` and
`search` on a localized field use the resolved value, fallback included, over HTTP, with data where
ignoring the fallback (reading only `title.de`) changes the answer; the read cache keeps each locale apart,
field rules stay exact per locale, `expand` resolves the related records too, and `explain` shows the
fallback query served by an index on `title.<code>`."""

from __future__ import annotations

from typing import Any

from tests.api.test_locales import PUBLIC, read, use_locales, write
from tests.conftest import bearer, create_collection, error_of, records_path

FRUITS: list[dict[str, Any]] = [
    {"name": "title", "type": "text", "localized": True},
    {"name": "rank", "type": "number", "localized": True},
    {"name": "owner", "type": "select", "values": ["apple", "banana", "cherry", "lemon", "none"]},  # not searched
]
ROWS = [  # (key, title, rank): `de` falls back to `en`
    ("apple", {"en": "Apple", "de": "Apfel"}, {"en": 5, "de": 1}),
    ("banana", {"en": "Banana"}, {"en": 2}),
    ("cherry", {"en": "Cherry", "de": "Kirsche"}, {"en": 1, "de": 3}),
    ("lemon", {"de": "Zitrone"}, {}),
    ("none", {}, {}),
]


async def fruits(client: Any, token: str) -> dict[str, str]:
    """The fruit records (key -> id, and "" -> the collection's id) in a collection whose `de` falls back
    to `en`."""
    await use_locales(client, token, [{"code": "en"}, {"code": "de", "fallback": "en"}])
    ids = {"": (await create_collection(client, token, "fruits", FRUITS, **PUBLIC))["id"]}
    for key, title, rank in ROWS:
        data = {"title": title or None, "rank": rank or None, "owner": key}
        ids[key] = (await write(client, token, "POST", records_path("fruits"), data, locale="*", status=201))["id"]
    return ids


async def owners(client: Any, locale: str, **query: str) -> list[str]:
    """The owners of the fruits listed (by owner unless the query sorts)."""
    body, headers = await read(client, records_path("fruits"), locale=locale, **{"sort": "owner", **query})
    assert headers["Content-Language"] == locale
    return [item["owner"] for item in body["items"]]


async def test_filters_match_the_value_shown_fallback_included(client, admin_token):
    await fruits(client, admin_token)
    # `banana` has no `de` title: in German it shows (and matches) its English one
    assert await owners(client, "de", filter='title = "Banana"') == ["banana"]
    assert await owners(client, "en", filter='title = "Apfel"') == []
    assert await owners(client, "de", filter='title = "Apple"') == []  # not shown in de: never matched
    assert await owners(client, "de", filter='title != "Apfel"') == ["banana", "cherry", "lemon", "none"]
    assert await owners(client, "de", filter="title = null") == ["none"]
    assert await owners(client, "en", filter="title = null") == ["lemon", "none"]
    assert await owners(client, "de", filter="title != null") == ["apple", "banana", "cherry", "lemon"]
    assert await owners(client, "de", filter='title ~ "an"') == ["banana"]
    assert await owners(client, "de", filter='title !~ "e"') == ["banana", "none"]
    assert await owners(client, "de", filter="rank <= 2") == ["apple", "banana"]  # banana: its en rank 2
    assert await owners(client, "en", filter="rank <= 2") == ["banana", "cherry"]
    assert await owners(client, "de", filter='rank > 1 && title ~ "a"') == ["banana"]
    assert await owners(client, "de", filter='title = "Zitrone" || owner = "none"') == ["lemon", "none"]
    # with `*` the answer is the objects; queries read the default locale
    body, _ = await read(client, records_path("fruits"), locale="*", filter='title = "Apple"')
    assert [item["title"] for item in body["items"]] == [{"en": "Apple", "de": "Apfel"}]


async def test_sorts_order_by_the_value_shown(client, admin_token):
    await fruits(client, admin_token)
    # by `title.de` alone, banana (no de) would sort first; resolved, it sorts as "Banana"
    assert await owners(client, "de", sort="title") == ["none", "apple", "banana", "cherry", "lemon"]
    assert await owners(client, "de", sort="-title") == ["lemon", "cherry", "banana", "apple", "none"]
    assert await owners(client, "en", sort="title,owner") == ["lemon", "none", "apple", "banana", "cherry"]
    assert await owners(client, "de", sort="rank,owner") == ["lemon", "none", "apple", "banana", "cherry"]
    assert await owners(client, "de", sort="-rank,owner") == ["cherry", "banana", "apple", "lemon", "none"]
    # paging through a sorted result keeps its order
    first, _ = await read(client, records_path("fruits"), locale="de", sort="title", per_page="2")
    second, _ = await read(client, records_path("fruits"), locale="de", sort="title", per_page="2", page="2")
    assert [i["owner"] for i in first["items"] + second["items"]] == ["none", "apple", "banana", "cherry"]
    assert first["total"] == 5
    # the CSV export sorts the same way
    response = await client.get(records_path("fruits") + "/export/csv", headers=bearer(admin_token),
                                params={"locale": "de", "sort": "-title"})
    assert response.status == 200 and response.headers["Content-Language"] == "de"
    lines = (await response.text()).splitlines()[1:]
    assert [line.split(",")[3] for line in lines] == ["Zitrone", "Kirsche", "Banana", "Apfel", ""]


async def test_search_finds_words_in_the_value_shown(client, admin_token):
    await fruits(client, admin_token)
    assert await owners(client, "de", search="banana") == ["banana"]
    assert await owners(client, "de", search="apple") == []  # the English word is not shown in German
    assert await owners(client, "en", search="apple") == ["apple"]
    assert await owners(client, "de", search="apf") == ["apple"]
    assert await owners(client, "en", search="zitrone") == []


async def test_the_read_cache_and_etags_keep_locales_apart(client, admin_token):
    ids = await fruits(client, admin_token)
    one = records_path("fruits", ids["apple"])
    seen: dict[str, set[str]] = {}
    for locale in ("en", "de", "en", "de", "*"):
        response = await client.get(one, params={"locale": locale})
        seen.setdefault(locale, set()).add(response.headers["ETag"])
        assert (await response.json())["title"] == {"en": "Apple", "de": "Apfel", "*": {"en": "Apple", "de": "Apfel"}
                                                    }[locale]
    assert len(seen["en"]) == len(seen["de"]) == 1 and len(set.union(*seen.values())) == 3
    await write(client, admin_token, "PATCH", one, {"title": "Apfelchen"}, locale="de")
    body, _ = await read(client, one, locale="de")
    assert body["title"] == "Apfelchen"
    body, _ = await read(client, one, locale="en")
    assert body["title"] == "Apple"


async def test_field_rules_hide_localized_values_per_record(client, admin_token):
    await use_locales(client, admin_token, [{"code": "en"}, {"code": "de", "fallback": "en"}])
    await create_collection(client, admin_token, "notes", [
        {"name": "owner", "type": "text"},
        {"name": "secret", "type": "text", "localized": True, "view_rule": 'owner = "pub"'}], **PUBLIC)
    for owner, secret in (("pub", {"en": "open", "de": "offen"}), ("priv", {"en": "hidden"})):
        await write(client, admin_token, "POST", records_path("notes"), {"owner": owner, "secret": secret},
                    locale="*", status=201)
    body, _ = await read(client, records_path("notes"), locale="de", sort="owner")
    assert [item.get("secret", "-") for item in body["items"]] == ["-", "offen"]
    body, _ = await read(client, records_path("notes"), locale="de", filter='secret = "hidden"')
    assert body["items"] == []  # a fallback value the caller may not see matches nothing
    body, _ = await read(client, records_path("notes"), locale="de", sort="-secret")
    assert [item["owner"] for item in body["items"]] == ["pub", "priv"]  # hidden sorts as null
    body, _ = await read(client, records_path("notes"), admin_token, locale="de", filter='secret = "hidden"')
    assert [item["secret"] for item in body["items"]] == ["hidden"]


async def test_expanded_records_are_resolved_in_the_asked_locale(client, admin_token):
    ids = await fruits(client, admin_token)
    fruits_id = ids[""]
    await create_collection(client, admin_token, "baskets", [
        {"name": "label", "type": "text", "localized": True},
        {"name": "fruit", "type": "relation", "collection_id": fruits_id}], **PUBLIC)
    basket = await write(client, admin_token, "POST", records_path("baskets"),
                         {"label": {"en": "Basket", "de": "Korb"}, "fruit": ids["banana"]}, locale="*", status=201)
    body, _ = await read(client, records_path("baskets", basket["id"]), locale="de", expand="fruit")
    assert body["label"] == "Korb" and body["expand"]["fruit"]["title"] == "Banana"
    body, _ = await read(client, records_path("baskets"), locale="*", expand="fruit")
    assert body["items"][0]["expand"]["fruit"]["title"] == {"en": "Banana"}
    body, _ = await read(client, records_path("fruits"), locale="de", expand="baskets_via_fruit",
                         filter='owner = "banana"')
    assert body["items"][0]["expand"]["baskets_via_fruit"][0]["label"] == "Korb"


async def test_a_declared_index_on_a_localized_field_is_made_per_locale(client, admin_token, sync_db):
    """Each branch of a fallback query is an equality or a range on one `title.<code>` path, which an
    index per locale serves (on MongoDB; the embedded server reads every document whatever the index)."""
    ids = await fruits(client, admin_token)
    response = await client.patch(f"/api/v1/collections/{ids['']}", headers=bearer(admin_token),
                                  json={"indexes": [{"fields": ["title", "-rank"]}]})
    assert response.status == 200, await response.text()
    made = sync_db[f"records_{ids[''].replace('-', '')}"].index_information()
    assert made["idx_title_1_rank_-1.en"]["key"] == [("title.en", 1), ("rank.en", -1)]
    assert made["idx_title_1_rank_-1.de"]["key"] == [("title.de", 1), ("rank.de", -1)]
    await use_locales(client, admin_token, [{"code": "en"}, {"code": "de", "fallback": "en"}, {"code": "fr"}])
    made = sync_db[f"records_{ids[''].replace('-', '')}"].index_information()
    assert made["idx_title_1_rank_-1.fr"]["key"] == [("title.fr", 1), ("rank.fr", -1)]
    response = await client.get(records_path("fruits"), headers=bearer(admin_token),
                                params={"locale": "de", "filter": 'title = "Banana"', "explain": "true"})
    if response.status == 400:  # a server without `explain`
        await error_of(response, 400, "bad_request")
        return
    body = await response.json()
    assert [item["owner"] for item in body["items"]] == ["banana"] and body["explain"]["returned"] == 1
