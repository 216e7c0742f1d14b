"""The record editor's relation picker (`GET /_/collections/{name}/relations/{field}?q=`,
cms/admin_ui/views/relations.py): the related collection's records as the API's `search` lists them
for the same caller (its list rule: a locked collection still opens to an admin, as in the API), at
most PICK_RESULTS of them, for a search of at most MAX_PICK_QUERY_CHARS characters; and only for
admins (a signed-in user is refused even where the API's rules would let them list)."""

from __future__ import annotations

import re
from typing import Any

from cms.admin_ui.session import SESSION_COOKIE
from cms.admin_ui.views.relations import MAX_PICK_QUERY_CHARS, PICK_RESULTS
from cms.wiring import Services
from tests.conftest import bearer, create_collection, create_record, login, records_path
from tests.test_admin_ui_errors import admin_cookies, assert_html

OPTION = re.compile(r'class="relation-option" data-id="([^"]+)" data-label="([^"]*)"')


async def people_and_books(client: Any, admin_token: str, rule: str | None = None) -> dict[str, Any]:
    """`people` (list and view rules `rule`, default locked: admins only) with 15 Stones and one
    Lee, and `books` whose `author` points at people."""
    people = await create_collection(client, admin_token, "people", [
        {"name": "code", "type": "number"}, {"name": "name", "type": "text"}],
        list_rule=rule, view_rule=rule)
    for n in range(15):
        await create_record(client, admin_token, "people", {"code": n, "name": f"Stone {n}"})
    await create_record(client, admin_token, "people", {"code": 99, "name": "Ann Lee"})
    await create_collection(client, admin_token, "books", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": people["id"]}])
    return people


async def pick(client: Any, cookies: dict[str, str], q: str, field: str = "author") -> Any:
    return await client.get(f"/_/collections/books/relations/{field}", params={"q": q}, cookies=cookies)


async def test_the_picker_lists_what_the_api_search_lists_for_the_admin_at_most_ten(
        client: Any, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    token = cookies[SESSION_COOKIE].split("~")[0]
    await people_and_books(client, token)
    response = await pick(client, cookies, "stone")
    assert_html(response, 200)
    text = await response.text()
    options = OPTION.findall(text)
    assert len(options) == PICK_RESULTS and f"{PICK_RESULTS} of 15 shown" in text
    api = await (await client.get(records_path("people"), headers=bearer(token),
                                  params={"search": "stone", "sort": "-created", "per_page": PICK_RESULTS})).json()
    assert [(r["id"], r["name"]) for r in api["items"]] == options  # same records and order, labelled by "name"

    lee = OPTION.findall(await (await pick(client, cookies, "  lee ")).text())
    assert [label for _, label in lee] == ["Ann Lee"]
    everyone = await pick(client, cookies, "")
    assert len(OPTION.findall(await everyone.text())) == PICK_RESULTS and "10 of 16 shown" in await everyone.text()


async def test_the_picker_bounds_its_search_and_needs_a_relation_field(client: Any, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    await people_and_books(client, cookies[SESSION_COOKIE].split("~")[0])
    longest = await pick(client, cookies, "x" * MAX_PICK_QUERY_CHARS)
    assert_html(longest, 200)
    assert OPTION.findall(await longest.text()) == [] and "No matching records." in await longest.text()
    too_long = await pick(client, cookies, "stone" + "x" * MAX_PICK_QUERY_CHARS)
    assert_html(too_long, 422)
    text = await too_long.text()
    assert OPTION.findall(text) == [] and f"at most {MAX_PICK_QUERY_CHARS} characters" in text
    for field in ("title", "nope"):
        assert_html(await pick(client, cookies, "stone", field), 404)
    response = await client.get("/_/collections/nope/relations/author", cookies=cookies)
    assert_html(response, 404)


async def test_the_picker_refuses_a_signed_in_user_who_is_not_an_admin(client: Any, services: Services) -> None:
    admin = await admin_cookies(client, services)
    await people_and_books(client, admin[SESSION_COOKIE].split("~")[0], rule="")  # open to everyone
    response = await client.post("/api/v1/auth/register", json={"email": "u@example.com", "password": "pass-word-123"})
    assert response.status == 201, await response.text()
    token = (await login(client, "u@example.com", "pass-word-123"))["token"]
    user = {SESSION_COOKIE: f"{token['access_token']}~{token['refresh_token']}"}
    assert (await client.get(records_path("people"), headers=bearer(token["access_token"]))).status == 200
    response = await pick(client, user, "stone")
    assert_html(response, 403)
    assert OPTION.findall(await response.text()) == []
