"""Relations in one request: `expand` and `fields` on record list, view, create, update and batch
(decisions.md, Relations in one request), their limits and errors, one query per segment and page,
and cached reads that stay exact across two app instances."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cms.app import create_app
from cms.services.content.expansion import MAX_BACK_RELATIONS, MAX_EXPANDED_RECORDS
from cms.services.representation.record_view import (
    MAX_EXPAND_DEPTH,
    MAX_EXPAND_PATHS,
    MAX_VIEW_PARAMETER_LENGTH,
)
from cms.store.documents import records_mongo_name
from cms.wiring import open_services
from tests.conftest import COLLECTIONS, bearer, create_collection, create_record, error_of, records_path
from tests.fixtures import CommandLog

BATCH = "/api/v1/batch"
HIDDEN_RULE = 'status != "hidden"'


def relation(name: str, target: dict[str, Any], max_select: int = 1) -> dict[str, Any]:
    return {"name": name, "type": "relation", "collection_id": target["id"], "max_select": max_select}


@pytest.fixture
async def blog(client: Any, admin_token: str) -> dict[str, Any]:
    """teams <- authors (view rule hides `status = hidden`) <- posts (author, tags) <- comments."""
    teams = await create_collection(client, admin_token, "teams", [{"name": "name", "type": "text"}])
    authors = await create_collection(client, admin_token, "authors", [
        {"name": "name", "type": "text"}, {"name": "status", "type": "text"}, relation("team", teams)],
        view_rule=HIDDEN_RULE)
    tags = await create_collection(client, admin_token, "tags", [{"name": "label", "type": "text"}])
    posts = await create_collection(client, admin_token, "posts", [
        {"name": "title", "type": "text"}, relation("author", authors), relation("tags", tags, 5)])
    comments = await create_collection(client, admin_token, "comments", [
        {"name": "body", "type": "text"}, relation("post", posts)])
    return {"teams": teams, "authors": authors, "tags": tags, "posts": posts, "comments": comments}


@pytest.fixture
async def one_post(client: Any, admin_token: str, blog: Any, clock: Any) -> dict[str, Any]:
    """A post by Ada (team Core) with tags x and y, and two comments (c1 older than c2)."""
    team = await create_record(client, admin_token, "teams", {"name": "Core"})
    ada = await create_record(client, admin_token, "authors", {"name": "Ada", "status": "ok", "team": team["id"]})
    x = await create_record(client, admin_token, "tags", {"label": "x"})
    y = await create_record(client, admin_token, "tags", {"label": "y"})
    post = await create_record(client, admin_token, "posts", {"title": "P", "author": ada["id"],
                                                              "tags": [y["id"], x["id"]]})
    c1 = await create_record(client, admin_token, "comments", {"body": "c1", "post": post["id"]})
    clock.advance(seconds=1)
    c2 = await create_record(client, admin_token, "comments", {"body": "c2", "post": post["id"]})
    return {"team": team, "ada": ada, "x": x, "y": y, "post": post, "c1": c1, "c2": c2}


async def get_json(client: Any, path: str, *, status: int = 200, headers: dict[str, str] | None = None,
                   **params: str) -> Any:
    response = await client.get(path, params=params, headers=headers or {})
    assert response.status == status, await response.text()
    return await response.json()


# --- forward, nested, back ------------------------------------------------------------------------


async def test_forward_relations_one_and_many(client: Any, one_post: Any) -> None:
    post, ada = one_post["post"], one_post["ada"]
    listed = await get_json(client, records_path("posts"), expand="author,tags")
    [item] = listed["items"]
    assert item["author"] == ada["id"] and item["tags"] == [one_post["y"]["id"], one_post["x"]["id"]]
    assert item["expand"]["author"] == ada  # the related record as it is shown alone
    assert [t["label"] for t in item["expand"]["tags"]] == ["y", "x"]  # the field's order
    viewed = await get_json(client, records_path("posts", post["id"]), expand="author")
    assert viewed["expand"] == {"author": ada}
    plain = await get_json(client, records_path("posts", post["id"]))
    assert "expand" not in plain and plain == {k: v for k, v in viewed.items() if k != "expand"}
    assert "expand" not in (await get_json(client, records_path("posts")))["items"][0]


async def test_nested_paths_and_back_relations_newest_first(client: Any, one_post: Any) -> None:
    post = one_post["post"]
    two = await get_json(client, records_path("posts", post["id"]), expand="author.team")
    assert two["expand"]["author"]["expand"]["team"] == one_post["team"]
    back = await get_json(client, records_path("posts", post["id"]), expand="comments_via_post")
    assert [c["body"] for c in back["expand"]["comments_via_post"]] == ["c2", "c1"]
    three = await get_json(client, records_path("comments", one_post["c1"]["id"]), expand="post.author.team,post.tags")
    assert three["expand"]["post"]["expand"]["author"]["expand"]["team"]["name"] == "Core"
    assert len(three["expand"]["post"]["expand"]["tags"]) == 2
    # back from the team, then forward again: teams -> authors -> posts
    deep = await get_json(client, records_path("teams", one_post["team"]["id"]),
                          expand="authors_via_team.posts_via_author.tags")
    [author] = deep["expand"]["authors_via_team"]
    [written] = author["expand"]["posts_via_author"]
    assert written["id"] == post["id"] and len(written["expand"]["tags"]) == 2


async def test_back_relations_keep_the_newest_per_record(client: Any, admin_token: str, blog: Any,
                                                         mongo_db: Any, mongo_commands: CommandLog) -> None:
    """At most MAX_BACK_RELATIONS per record, the newest, even when one record's comments would take
    the whole page's budget of one query (then the others are asked again)."""
    busy = await create_record(client, admin_token, "posts", {"title": "busy"})
    quiet = await create_record(client, admin_token, "posts", {"title": "quiet"})
    start = datetime(2020, 1, 1, tzinfo=UTC)
    planted = [{"_id": f"q{n}", "created": start + timedelta(seconds=n), "updated": start, "body": f"q{n}",
                "post": quiet["id"]} for n in range(2)]  # older than every comment of `busy`
    planted += [{"_id": f"b{n:05}", "created": start + timedelta(days=1, seconds=n), "updated": start,
                 "body": f"b{n}", "post": busy["id"]} for n in range(2 * MAX_BACK_RELATIONS + 5)]
    await mongo_db[records_mongo_name(blog["comments"]["id"])].insert_many(planted)
    mongo_commands.commands.clear()
    listed = await get_json(client, records_path("posts"), expand="comments_via_post", sort="title")
    busy_shown, quiet_shown = [p["expand"]["comments_via_post"] for p in listed["items"]]
    assert len(busy_shown) == MAX_BACK_RELATIONS
    assert busy_shown[0]["body"] == f"b{2 * MAX_BACK_RELATIONS + 4}" and busy_shown[-1]["body"] == "b1005"
    assert [c["body"] for c in quiet_shown] == ["q1", "q0"]
    assert len(mongo_commands.named("find", blog["comments"]["id"])) == 2  # a second round for `quiet` only


async def test_hidden_and_missing_records_are_left_out(client: Any, admin_token: str, one_post: Any,
                                                       mongo_db: Any, blog: Any) -> None:
    post, ada = one_post["post"], one_post["ada"]
    hidden = await create_record(client, admin_token, "authors", {"name": "Bo", "status": "hidden"})
    secret = await create_record(client, admin_token, "posts", {"title": "S", "author": hidden["id"]})
    anonymous = await get_json(client, records_path("posts", secret["id"]), expand="author")
    assert "expand" not in anonymous  # a key with nothing visible is left out; no error
    as_admin = await get_json(client, records_path("posts", secret["id"]), headers=bearer(admin_token),
                              expand="author")
    assert as_admin["expand"]["author"]["name"] == "Bo"  # admins bypass the view rule
    listed = await get_json(client, records_path("authors"), expand="posts_via_author")
    assert {a["name"]: "expand" in a for a in listed["items"]} == {"Ada": True, "Bo": True}
    # a relation naming a record that no longer exists (written past the API): left out
    await mongo_db[records_mongo_name(blog["posts"]["id"])].update_one(
        {"_id": post["id"]}, {"$set": {"tags": ["gone", one_post["x"]["id"]], "author": "gone-too"}})
    shown = await get_json(client, records_path("posts", post["id"]), expand="author,tags")
    assert [t["id"] for t in shown["expand"]["tags"]] == [one_post["x"]["id"]] and "author" not in shown["expand"]
    assert ada["name"] == "Ada"


# --- limits and bad paths ----------------------------------------------------------------------------


async def test_depth_and_count_limits(client: Any, one_post: Any) -> None:
    team = one_post["team"]["id"]
    six = ".".join(["authors_via_team", "posts_via_author", "author", "posts_via_author", "author", "team"])
    assert len(six.split(".")) == MAX_EXPAND_DEPTH
    deep = await get_json(client, records_path("teams", team), expand=six)
    assert deep["expand"]["authors_via_team"][0]["expand"]["posts_via_author"][0]["id"] == one_post["post"]["id"]
    error = await error_of(await client.get(records_path("teams", team), params={"expand": six + ".authors_via_team"}),
                           400, "invalid_filter")
    assert "expand" in error["detail"] and "'authors_via_team'" in error["detail"], error
    post = records_path("posts", one_post["post"]["id"])
    ten = ",".join(["author"] * MAX_EXPAND_PATHS)  # counted as sent: repeats included
    assert (await get_json(client, post, expand=ten))["expand"]["author"]["name"] == "Ada"
    error = await error_of(await client.get(post, params={"expand": ten + ",author.team"}), 400, "invalid_filter")
    assert "expand" in error["detail"] and str(MAX_EXPAND_PATHS) in error["detail"], error
    long = "a" * (MAX_VIEW_PARAMETER_LENGTH + 1)
    for parameter in ("expand", "fields"):
        error = await error_of(await client.get(post, params={parameter: long}), 400, "invalid_filter")
        assert error["detail"].startswith(parameter), error


@pytest.mark.parametrize("path, segment", [
    ("nope", "nope"), ("title", "title"), ("author.nope", "nope"), ("author.team.name", "name"),
    ("comments_via_body", "comments_via_body"), ("teams_via_name", "teams_via_name"),
    ("authors_via_team", "authors_via_team"), ("author..team", "empty"),
])
async def test_a_bad_path_is_400_naming_expand_and_the_segment(client: Any, admin_token: str, one_post: Any,
                                                              path: str, segment: str) -> None:
    for url in (records_path("posts"), records_path("posts", one_post["post"]["id"])):
        error = await error_of(await client.get(url, params={"expand": path}), 400, "invalid_filter")
        assert error["detail"].startswith("expand:") and segment in error["detail"], error
    # on a write it is refused before anything changes
    response = await client.post(records_path("posts"), params={"expand": path}, headers=bearer(admin_token),
                                 json={"data": {"title": "never"}})
    await error_of(response, 400, "invalid_filter")
    titles = [p["title"] for p in (await get_json(client, records_path("posts")))["items"]]
    assert titles == ["P"]


# --- fields ---------------------------------------------------------------------------------------------


async def test_fields_keep_the_keys_asked_for(client: Any, one_post: Any) -> None:
    post = one_post["post"]
    listed = await get_json(client, records_path("posts"), fields="id,title,nope")
    assert listed["items"] == [{"id": post["id"], "title": "P"}]  # unknown names ignored
    assert set(listed) == {"items", "total", "page", "per_page"} and listed["total"] == 1
    narrowed = await get_json(client, records_path("posts", post["id"]), expand="author,tags",
                              fields="id,expand.author.name,expand.tags.label")
    assert narrowed == {"id": post["id"],
                        "expand": {"author": {"name": "Ada"}, "tags": [{"label": "y"}, {"label": "x"}]}}
    starred = await get_json(client, records_path("posts", post["id"]), expand="author,tags",
                             fields="*,expand.author.name")
    assert {k: v for k, v in starred.items() if k != "expand"} == post
    assert starred["expand"] == {"author": {"name": "Ada"}}  # the deeper name narrows `expand` even with `*`
    everything = await get_json(client, records_path("posts", post["id"]), expand="author", fields="*")
    assert everything["expand"]["author"] == one_post["ada"]
    nested = await get_json(client, records_path("posts", post["id"]), expand="author.team",
                            fields="title,expand.author.expand.team.name")
    assert nested == {"title": "P", "expand": {"author": {"expand": {"team": {"name": "Core"}}}}}


# --- one query per segment and page ------------------------------------------------------------------------


async def test_one_query_per_segment_and_page(client: Any, admin_token: str, blog: Any,
                                              mongo_commands: CommandLog) -> None:
    tag = await create_record(client, admin_token, "tags", {"label": "t"})
    for n in range(30):
        team = await create_record(client, admin_token, "teams", {"name": f"team{n}"})
        author = await create_record(client, admin_token, "authors", {"name": f"a{n}", "status": "ok",
                                                                      "team": team["id"]})
        post = await create_record(client, admin_token, "posts", {"title": f"p{n}", "author": author["id"],
                                                                  "tags": [tag["id"]]})
        for c in range(2):
            await create_record(client, admin_token, "comments", {"body": f"c{n}.{c}", "post": post["id"]})
    expand = "author.team,tags,comments_via_post"
    counts = []
    for per_page in ("5", "30"):
        mongo_commands.commands.clear()
        page = await get_json(client, records_path("posts"), expand=expand, per_page=per_page)
        assert len(page["items"]) == int(per_page)
        assert all(len(p["expand"]["comments_via_post"]) == 2 and p["expand"]["author"]["expand"]["team"]
                   for p in page["items"])
        counts.append({name: len(mongo_commands.named("find", blog[name]["id"]))
                       for name in ("posts", "authors", "teams", "tags", "comments")})
    # posts: the id scan of the query's result set and the page's `_id $in`; the second page size
    # reuses the result set (issue 31)
    assert counts == [{"posts": 2, "authors": 1, "teams": 1, "tags": 1, "comments": 1},
                      {"posts": 1, "authors": 1, "teams": 1, "tags": 1, "comments": 1}]


# --- exact caching across two instances ------------------------------------------------------------------------


async def test_cached_expanded_reads_stay_exact_across_two_instances(
        aiohttp_client: Any, config: Any, clock: Any, client: Any, admin_token: str, one_post: Any, blog: Any,
        mongo_commands: CommandLog) -> None:
    post, ada = one_post["post"], one_post["ada"]
    headers = bearer(admin_token)
    path = records_path("posts", post["id"])
    expand = "author.team,comments_via_post"
    async with open_services(config, clock=clock) as other_services:
        other = await aiohttp_client(create_app(config, services=other_services))
        await other_services.index_sync.finished()  # its start-up look-ups are not this instance's reads

        async def read() -> Any:
            listed = await get_json(client, records_path("posts"), expand=expand)
            one = await get_json(client, path, expand=expand)
            assert listed["items"] == [one]
            return one

        await read()
        mongo_commands.commands.clear()
        await read()  # served from the cache: no query at all
        assert not [c for c in mongo_commands.commands if c.name == "find"]
        # a write to the related collection through the other instance
        assert (await other.patch(records_path("authors", ada["id"]), headers=headers,
                                  json={"data": {"name": "Ada L."}})).status == 200
        assert (await read())["expand"]["author"]["name"] == "Ada L."
        # two levels down
        assert (await other.patch(records_path("teams", one_post["team"]["id"]), headers=headers,
                                  json={"data": {"name": "Kernel"}})).status == 200
        assert (await read())["expand"]["author"]["expand"]["team"]["name"] == "Kernel"
        # a create in a back-relation's collection
        clock.advance(seconds=1)
        assert (await other.post(records_path("comments"), headers=headers,
                                 json={"data": {"body": "c3", "post": post["id"]}})).status == 201
        assert [c["body"] for c in (await read())["expand"]["comments_via_post"]] == ["c3", "c2", "c1"]
        # the related collection's rules: hidden now, then its record again
        response = await other.patch(f"{COLLECTIONS}/{blog['authors']['id']}", headers=headers,
                                     json={"view_rule": 'status = "vip"'})
        assert response.status == 200, await response.text()
        assert "author" not in (await read())["expand"]
        assert (await other.patch(records_path("authors", ada["id"]), headers=headers,
                                  json={"data": {"status": "vip"}})).status == 200
        assert (await read())["expand"]["author"]["status"] == "vip"
        # a delete in a back-relation's collection
        assert (await other.delete(records_path("comments", one_post["c1"]["id"]), headers=headers)).status == 204
        assert [c["body"] for c in (await read())["expand"]["comments_via_post"]] == ["c3", "c2"]


async def test_callers_with_different_views_of_a_related_collection_never_share_an_entry(
        client: Any, admin_token: str, one_post: Any) -> None:
    hidden = await create_record(client, admin_token, "authors", {"name": "Bo", "status": "hidden"})
    secret = await create_record(client, admin_token, "posts", {"title": "S", "author": hidden["id"]})
    path = records_path("posts", secret["id"])
    admin = await client.get(path, params={"expand": "author"}, headers=bearer(admin_token))
    assert (await admin.json())["expand"]["author"]["name"] == "Bo"
    anonymous = await client.get(path, params={"expand": "author"})
    assert "expand" not in await anonymous.json()
    assert anonymous.headers["Cache-Control"].startswith("private")  # the author's rule depends on the record
    assert admin.headers["ETag"] != anonymous.headers["ETag"]


# --- writes and batches -------------------------------------------------------------------------------------------


async def test_create_and_update_answer_the_expanded_record(client: Any, admin_token: str, one_post: Any) -> None:
    ada, x = one_post["ada"], one_post["x"]
    response = await client.post(records_path("posts"), params={"expand": "author.team"}, headers=bearer(admin_token),
                                 json={"data": {"title": "new", "author": ada["id"]}})
    assert response.status == 201, await response.text()
    created = await response.json()
    assert created["author"] == ada["id"] and created["expand"]["author"]["expand"]["team"]["name"] == "Core"
    response = await client.patch(records_path("posts", created["id"]), headers=bearer(admin_token),
                                  params={"expand": "tags", "fields": "id,expand"}, json={"data": {"tags": [x["id"]]}})
    assert response.status == 200, await response.text()
    assert await response.json() == {"id": created["id"], "expand": {"tags": [x]}}


@pytest.fixture
def transactions(services: Any) -> None:
    if not services.records.repository.capabilities.transactions:
        pytest.skip("the server has no multi-document transactions: batches cannot run here")


async def test_batch_requests_answer_as_alone(client: Any, admin_token: str, one_post: Any,
                                             transactions: None) -> None:
    ada, post = one_post["ada"], one_post["post"]
    requests = [
        {"method": "POST", "url": "/api/v1/collections/posts/records?expand=author&fields=title,expand.author.name",
         "body": {"data": {"title": "B", "author": ada["id"]}}},
        {"method": "PATCH",
         "url": f"/api/v1/collections/posts/records/{post['id']}?expand=comments_via_post,author,tags",
         "body": {"data": {"title": "P2"}}},
        {"method": "POST", "url": "/api/v1/collections/comments/records?expand=post",
         "body": {"data": {"body": "c9", "post": post["id"]}}},
    ]
    response = await client.post(BATCH, headers=bearer(admin_token), json={"requests": requests})
    assert response.status == 200, await response.text()
    first, second, third = [a["body"] for a in await response.json()]
    assert first == {"title": "B", "expand": {"author": {"name": "Ada"}}}
    assert [c["body"] for c in second["expand"]["comments_via_post"]] == ["c2", "c1"]
    assert second["expand"]["author"]["name"] == "Ada" and len(second["expand"]["tags"]) == 2
    assert third["expand"]["post"]["title"] == "P2"  # sees the batch's own earlier write
    bad = [requests[0], {**requests[1], "url": f"/api/v1/collections/posts/records/{post['id']}?expand=nope"}]
    body = await error_of(await client.post(BATCH, headers=bearer(admin_token), json={"requests": bad}),
                          400, "bad_request")
    assert body["failed"]["index"] == 1 and body["failed"]["body"]["code"] == "invalid_filter"
    assert "expand" in body["failed"]["body"]["detail"] and "nope" in body["failed"]["body"]["detail"]


async def test_the_document_shows_expand_and_fields(client: Any) -> None:
    document = await get_json(client, "/openapi.json")
    operations = document["paths"]["/api/v1/collections/{collection_name}/records"]
    single = document["paths"]["/api/v1/collections/{collection_name}/records/{record_id}"]
    for operation in (operations["get"], operations["post"], single["get"], single["patch"]):
        parameters = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
        assert parameters["expand"]["schema"]["example"] == "author.team,comments_via_post"
        assert parameters["fields"]["schema"]["example"] == "id,title,expand.author.name"


async def test_one_request_loads_at_most_max_expanded_records(client: Any, admin_token: str, blog: Any,
                                                              mongo_db: Any) -> None:
    """Every level multiplies what a page embeds; past MAX_EXPANDED_RECORDS over all segments the
    request is refused (400 naming `expand`) rather than loading them: 11 posts of a full
    back-relation each (11,000 comments) pass it, 10 posts (10,000) do not."""
    start = datetime(2020, 1, 1, tzinfo=UTC)
    posts = [await create_record(client, admin_token, "posts", {"title": f"p{n:02}"}) for n in range(11)]
    planted = [{"_id": f"c{p:02}-{n:04}", "created": start + timedelta(seconds=n), "updated": start,
                "body": "c", "post": post["id"]} for p, post in enumerate(posts) for n in range(MAX_BACK_RELATIONS)]
    assert len(planted) == MAX_EXPANDED_RECORDS + MAX_BACK_RELATIONS
    await mongo_db[records_mongo_name(blog["comments"]["id"])].insert_many(planted)
    refused = await get_json(client, records_path("posts"), status=400, expand="comments_via_post")
    assert refused["code"] == "invalid_filter" and refused["detail"].startswith("expand:"), refused
    ten = await get_json(client, records_path("posts"), expand="comments_via_post", sort="title", per_page="10")
    assert [len(p["expand"]["comments_via_post"]) for p in ten["items"]] == [MAX_BACK_RELATIONS] * 10
