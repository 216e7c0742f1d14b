"""API tests of the record list: page, per_page, sort, filter, search (spec: List query
parameters, Limits; decisions.md: Records)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import bearer, create_collection, create_record, error_of, records_path, seed_collection

FIELDS: list[dict[str, Any]] = [
    {"name": "title", "type": "text"},
    {"name": "body", "type": "editor"},
    {"name": "contact", "type": "email"},
    {"name": "site", "type": "url"},
    {"name": "views", "type": "number"},
    {"name": "published", "type": "bool"},
    {"name": "released", "type": "date"},
    {"name": "status", "type": "select", "values": ["draft", "live", "old"]},
    {"name": "tags", "type": "select", "values": ["x", "y", "z"], "max_select": 3},
    {"name": "meta", "type": "json"},
]

# Six records, created one second apart in this order.
ROWS: list[dict[str, Any]] = [
    {"title": "Alpha post", "body": "<p>first words</p>", "contact": "ann@example.com",
     "site": "https://alpha.example.com", "views": 10, "published": True, "released": "2024-01-10",
     "status": "live", "tags": ["x"], "meta": {"n": 1}},
    {"title": "Beta post", "body": "second Words", "contact": "bob@example.org", "views": 5, "published": False,
     "released": "2024-02-10", "status": "draft", "tags": ["x", "y"], "meta": {"n": 2}},
    {"title": "Gamma", "body": "third", "views": 20, "published": True, "released": "2024-03-10",
     "status": "live", "tags": ["z"], "meta": 12345},
    {"title": "delta O'Hara", "views": 5, "published": True, "status": "old"},
    {"title": "Epsilon = 1 && 2", "views": 7.5, "published": False, "released": "2023-12-31T23:00:00Z"},
    {"title": "zeta 12345", "site": "http://zeta.test/path"},
]


@pytest.fixture
async def posts(client: Any, admin_token: str, clock: Any) -> list[dict[str, Any]]:
    """The `posts` collection with ROWS; returns the created records in order."""
    return await seed_collection(client, admin_token, "posts", FIELDS, ROWS, clock)


async def listing(client: Any, **params: Any) -> dict[str, Any]:
    """GET the posts list with `params`, asserting 200."""
    response = await client.get(records_path("posts"), params=params)
    assert response.status == 200, (params, await response.text())
    body: dict[str, Any] = await response.json()
    return body


async def titles(client: Any, **params: Any) -> list[str]:
    """Titles of the listed posts (default order: created, oldest first)."""
    return [r["title"] for r in (await listing(client, **params))["items"]]


def first(n: int) -> list[str]:
    return [row["title"] for row in ROWS[:n]]


# --- page and per_page -------------------------------------------------------------------------


async def test_defaults_and_shape(client, posts):
    body = await listing(client)
    assert set(body) == {"items", "total", "page", "per_page"}
    assert body["total"] == 6 and body["page"] == 1 and body["per_page"] == 30
    assert body["items"] == posts  # oldest first, full records


async def test_paging(client, posts):
    body = await listing(client, page=2, per_page=4)
    assert [r["title"] for r in body["items"]] == [ROWS[4]["title"], ROWS[5]["title"]]
    assert (body["total"], body["page"], body["per_page"]) == (6, 2, 4)
    body = await listing(client, page=3, per_page=4)
    assert body["items"] == [] and body["total"] == 6
    body = await listing(client, per_page=500)
    assert body["per_page"] == 100 and len(body["items"]) == 6
    pages = [await titles(client, page=p, per_page=2, sort="-views") for p in (1, 2, 3)]
    assert [title for page in pages for title in page] == await titles(client, sort="-views")


async def test_bad_paging_is_422(client, posts):
    for params in [{"page": 0}, {"page": -1}, {"per_page": 0}, {"per_page": -5}, {"per_page": "abc"},
                   {"page": "1.5"}, {"page": ""}, {"page": "1e3"}, {"per_page": "ten"}]:
        response = await client.get(records_path("posts"), params=params)
        body = await error_of(response, 422, "validation_error")
        assert set(body["errors"]) <= {"page", "per_page"} and body["errors"], params


async def test_total_counts_the_same_query(client, posts):
    body = await listing(client, filter="published=true", per_page=1)
    assert body["total"] == 3 and len(body["items"]) == 1
    body = await listing(client, search="post", per_page=1, page=2)
    assert body["total"] == 2 and [r["title"] for r in body["items"]] == ["Beta post"]


# --- sort --------------------------------------------------------------------------------------


async def test_sort(client, posts):
    assert await titles(client, sort="-created") == [row["title"] for row in reversed(ROWS)]
    assert await titles(client, sort="created") == first(6)
    assert await titles(client, sort="title") == sorted(first(6))
    by_views = await titles(client, sort="-views,title")
    assert by_views == ["Gamma", "Alpha post", "Epsilon = 1 && 2", "Beta post", "delta O'Hara", "zeta 12345"]
    assert await titles(client, sort="views,-title") == [
        "zeta 12345", "delta O'Hara", "Beta post", "Epsilon = 1 && 2", "Alpha post", "Gamma"]
    assert await titles(client, sort=" -views , +title ") == by_views
    assert await titles(client, sort="released,title", per_page=2) == ["delta O'Hara", "zeta 12345"]
    ids = [r["id"] for r in (await listing(client, sort="-id"))["items"]]
    assert ids == sorted((r["id"] for r in posts), reverse=True)


async def test_bad_sort_is_invalid_filter(client, posts):
    for sort in ["nope", "-nope", "title,nope", "$natural", "title,,views", "title,title", "-", "a b",
                 "_id", "meta.n", "password"]:
        response = await client.get(records_path("posts"), params={"sort": sort})
        await error_of(response, 400, "invalid_filter")


# --- filter ------------------------------------------------------------------------------------


FILTERS: list[tuple[str, list[str]]] = [
    ("title='Alpha post'", ["Alpha post"]),
    ('title="Alpha post"', ["Alpha post"]),
    ("title=Gamma", ["Gamma"]),
    ("title=gamma", []),
    ("title!=Gamma", [t for t in first(6) if t != "Gamma"]),
    ("title~POST", ["Alpha post", "Beta post"]),
    ("title!~post", ["Gamma", "delta O'Hara", "Epsilon = 1 && 2", "zeta 12345"]),
    ("title~'o\\'h'", ["delta O'Hara"]),
    ("title='Epsilon = 1 && 2'", ["Epsilon = 1 && 2"]),
    ("title~'.*'", []),
    ("title~'('", []),
    ("title~12345", ["zeta 12345"]),
    ("views=5", ["Beta post", "delta O'Hara"]),
    ("views>5", ["Alpha post", "Gamma", "Epsilon = 1 && 2"]),
    ("views>=7.5", ["Alpha post", "Gamma", "Epsilon = 1 && 2"]),
    ("views<7.5", ["Beta post", "delta O'Hara"]),
    ("views<=5", ["Beta post", "delta O'Hara"]),
    ("views='10'", ["Alpha post"]),
    ("views=null", ["zeta 12345"]),
    ("views!=null", first(5)),
    ("published=true", ["Alpha post", "Gamma", "delta O'Hara"]),
    ("published=false", ["Beta post", "Epsilon = 1 && 2"]),
    ("published!=true", ["Beta post", "Epsilon = 1 && 2", "zeta 12345"]),
    ("published='true'", ["Alpha post", "Gamma", "delta O'Hara"]),
    ("released>2024-01-31", ["Beta post", "Gamma"]),
    ("released>='2024-01-10'", ["Alpha post", "Beta post", "Gamma"]),
    ("released<2024-01-01", ["Epsilon = 1 && 2"]),
    ("released=2024-01-10T00:00:00Z", ["Alpha post"]),
    ("released=null", ["delta O'Hara", "zeta 12345"]),
    ("status=live", ["Alpha post", "Gamma"]),
    ("tags=x", ["Alpha post", "Beta post"]),
    ("tags~Y", ["Beta post"]),
    ("meta=12345", ["Gamma"]),
    ("meta!=null", ["Alpha post", "Beta post", "Gamma"]),
    ("contact~example.org", ["Beta post"]),
    ("site~zeta", ["zeta 12345"]),
    ("body~words", ["Alpha post", "Beta post"]),
    ("published=true && views>5", ["Alpha post", "Gamma"]),
    ("views=5||views=20", ["Beta post", "Gamma", "delta O'Hara"]),
    ("status=old || status=live && views>10", ["Gamma", "delta O'Hara"]),
    ("(status=old || status=live) && views>=10", ["Alpha post", "Gamma"]),
    ("((title~a) && (published=true || views=null))", ["Alpha post", "Gamma", "delta O'Hara", "zeta 12345"]),
    ("created>'2000-01-01' && updated<'2100-01-01'", first(6)),
    ("title~'\x00'", []),
    ("title!~'\x00'", first(6)),
    ("title=$ne", []),
    ("title='$ne'", []),
    ("title={\"$ne\":null}", []),
]


async def test_filter_grammar(client, posts):
    for filter_expr, expected in FILTERS:
        body = await listing(client, filter=filter_expr)
        got = [r["title"] for r in body["items"]]
        assert sorted(got) == sorted(expected), filter_expr
        assert body["total"] == len(expected), filter_expr


async def test_filter_by_id_and_created(client, posts):
    assert await titles(client, filter=f"id={posts[2]['id']}") == ["Gamma"]
    assert await titles(client, filter=f"id!='{posts[2]['id']}' && views>=10") == ["Alpha post"]
    assert await titles(client, filter=f"created>='{posts[4]['created']}'") == first(6)[4:]
    assert await titles(client, filter=f"created={posts[1]['created']}") == ["Beta post"]


BAD_FILTERS: list[tuple[str, str]] = [
    ("nope=1", "position 0"),
    ("title=a && nope=1", "position 11"),
    ("(title=a || Title=b)", "position 12"),
    ("password=x", "position 0"),
    ("_id=1", "position 0"),
    ("$where=1", "position 0"),
    ("meta.n=1", "position"),
    ("title", "position"),
    ("title=", "position"),
    ("title==a", "position"),
    ("(title=a", "position"),
    ("title=a)", "position"),
    ("title=a &&", "position"),
    ("&& title=a", "position"),
    ("title='open", "position"),
    ("title=a & views=1", "position"),
    ("views>abc", "position"),
    ("views~5", "position"),
    ("published>true", "position"),
    ("published=yes", "position"),
    ("released>yesterday", "position"),
    ("meta>1", "position"),
    ("views>null", "position"),
    ("views=99999999999999999999", "position"),
    ("(" * 20 + "title=a" + ")" * 20, "position"),
    ("title=a" + " && title=a" * 100, "position"),
]


async def test_bad_filters_are_invalid_filter_with_position(client, posts):
    for filter_expr, where in BAD_FILTERS:
        response = await client.get(records_path("posts"), params={"filter": filter_expr})
        body = await error_of(response, 400, "invalid_filter")
        assert where in body["detail"], (filter_expr, body)


async def test_empty_filter_and_search_match_everything(client, posts):
    assert (await listing(client, filter="", search=""))["total"] == 6
    assert (await listing(client, filter="   ", search="  "))["total"] == 6


async def test_injection_attempts_change_nothing(client, posts, admin_token):
    everything = await listing(client)
    for params in [
        {"filter[title][$ne]": "x"},
        {"filter": "title=Gamma", "filter[$or]": "1"},
        {"$where": "1", "sort[$natural]": "-1"},
        {"page[$gt]": "0"},
    ]:
        response = await client.get(records_path("posts"), params=params)
        assert response.status == 200, (params, await response.text())
        body = await response.json()
        expected = ["Gamma"] if params.get("filter") == "title=Gamma" else [r["title"] for r in everything["items"]]
        assert [r["title"] for r in body["items"]] == expected, params
    for params in [{"filter": "title=$ne"}, {"filter": "title={'$gt': ''}"}, {"filter": "title=a' || '1'='1"},
                   {"filter": "title~'.*' || title~^"}, {"sort": "$natural"}, {"sort": "-$natural"},
                   {"sort": '{"title": 1}'}, {"search": "$where"}, {"search": ".* ^ ( [ \\"},
                   {"filter": "function(){return true}"}, {"filter": "views=1; db.dropDatabase()"}]:
        response = await client.get(records_path("posts"), params=params)
        assert response.status in (200, 400), (params, await response.text())
        if response.status == 200:
            assert (await response.json())["total"] == 0, params
        else:
            assert (await response.json())["code"] == "invalid_filter", params
    assert await listing(client) == everything
    response = await client.get(f"{records_path('posts')}?filter=title%3D%24ne&filter=title%3DGamma")
    assert response.status == 200


# --- search ------------------------------------------------------------------------------------


SEARCHES: list[tuple[str, list[str]]] = [
    ("post", ["Alpha post", "Beta post"]),
    ("POST alpha", ["Alpha post"]),
    ("alpha   POST", ["Alpha post"]),
    ("words", ["Alpha post", "Beta post"]),  # editor
    ("example.org", ["Beta post"]),  # email
    ("zeta.test/path", ["zeta 12345"]),  # url
    ("first second", []),  # every word must match
    ("12345", ["zeta 12345"]),  # in a title, not in the json or number fields
    ("20", []),  # number field is not searched
    ("live", []),  # select is not searched
    ("o'hara", ["delta O'Hara"]),
    ("&&", ["Epsilon = 1 && 2"]),
    (".*", []),
    ("(", []),
    ("a\x00", []),
]


async def test_search(client, posts):
    for text, expected in SEARCHES:
        body = await listing(client, search=text)
        assert sorted(r["title"] for r in body["items"]) == sorted(expected), text
        assert body["total"] == len(expected), text


async def test_search_combines_with_filter_and_sort(client, posts):
    assert await titles(client, search="post", filter="published=false") == ["Beta post"]
    assert await titles(client, search="example", filter="views>=10 || views<6", sort="-views") == [
        "Alpha post", "Beta post"]
    assert await titles(client, search="a", filter="title!~post", sort="-title", per_page=2) == [
        "zeta 12345", "delta O'Hara"]


async def test_search_limits(client, posts):
    response = await client.get(records_path("posts"), params={"search": " ".join(["w"] * 11)})
    await error_of(response, 400, "invalid_filter")
    response = await client.get(records_path("posts"), params={"search": "x" * 501})
    await error_of(response, 422, "validation_error")


async def test_search_on_a_collection_without_text_fields(client, admin_token):
    await create_collection(client, admin_token, "numbers", [{"name": "n", "type": "number"}])
    await create_record(client, admin_token, "numbers", {"n": 1})
    response = await client.get(records_path("numbers"), params={"search": "1"})
    assert (await response.json())["total"] == 0
    response = await client.get(records_path("numbers"), params={"filter": "n=1"})
    assert (await response.json())["total"] == 1


async def test_list_of_unknown_collection_is_404(client):
    await error_of(await client.get(records_path("nope"), params={"filter": "x=1"}), 404, "not_found")


async def test_filter_values_cannot_become_operators_in_writes(client, posts, admin_token):
    """Filters are reads only; a write that looks like a query is plain data or refused."""
    response = await client.post(records_path("posts"), headers=bearer(admin_token),
                                 json={"data": {"title": "$ne", "meta": {"x": "$gt"}}})
    assert response.status == 201
    assert await titles(client, filter="title='$ne'") == ["$ne"]
