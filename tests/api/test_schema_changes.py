"""API tests of schema changes over stored records: values convert losslessly to a field's new type or
shape, or the change is 422 and nothing changes (docs/concepts/collections.md, Schema changes)."""

from __future__ import annotations

import csv
import io
from typing import Any

import aiohttp

from tests.conftest import bearer, create_collection, create_record, error_of, records_path

COLLECTIONS = "/api/v1/collections"
SYSTEM = ("id", "created", "updated")


async def patch_schema(client: Any, token: str, collection: dict[str, Any], fields: list[dict[str, Any]]) -> Any:
    return await client.patch(f"{COLLECTIONS}/{collection['id']}", headers=bearer(token), json={"schema": fields})


async def patched(client: Any, token: str, collection: dict[str, Any], fields: list[dict[str, Any]]) -> None:
    response = await patch_schema(client, token, collection, fields)
    assert response.status == 200, await response.text()


async def refused(client: Any, token: str, collection: dict[str, Any], fields: list[dict[str, Any]]) -> list[str]:
    """PATCH the schema, assert 422 and that the collection is as it was; return `errors.schema`."""
    response = await patch_schema(client, token, collection, fields)
    body = await error_of(response, 422, "validation_error")
    assert set(body["errors"]) == {"schema"}, body
    assert await (await client.get(f"{COLLECTIONS}/{collection['id']}")).json() == collection
    messages: list[str] = body["errors"]["schema"]
    return messages


async def stored(client: Any, collection: str = "items") -> dict[str, dict[str, Any]]:
    """Every record of the collection by id, as GET shows it."""
    page = await (await client.get(records_path(collection), params={"per_page": 100})).json()
    return {r["id"]: r for r in page["items"]}


def values(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in SYSTEM}


# --- conversions ----------------------------------------------------------------------------------


async def test_text_to_number_converts_and_the_export_imports_again(client, admin_token):
    items = await create_collection(client, admin_token, "items", [{"name": "title", "type": "text"},
                                                                   {"name": "price", "type": "text"}])
    texts = {"a": "12", "b": "-5", "c": "2.5", "d": "1e+16", "e": None}
    ids = {}
    for title, price in texts.items():
        ids[title] = (await create_record(client, admin_token, "items",
                                          {"title": title, **({"price": price} if price else {})}))["id"]
    before = await stored(client)
    new_fields = [{"name": "title", "type": "text"}, {"name": "price", "type": "number"}]
    await patched(client, admin_token, items, new_fields)

    after = await stored(client)
    prices = {after[ids[t]]["title"]: after[ids[t]].get("price") for t in texts}
    assert prices == {"a": 12, "b": -5, "c": 2.5, "d": 1e16, "e": None}
    assert type(prices["a"]) is int and type(prices["c"]) is float
    assert {rid: r["updated"] for rid, r in after.items()} == {rid: r["updated"] for rid, r in before.items()}
    page = await (await client.get(records_path("items"), params={"filter": "price>2", "sort": "price"})).json()
    assert [r["title"] for r in page["items"]] == ["c", "a", "d"]  # stored as numbers, compared as numbers

    exported = await client.get(records_path("items") + "/export/csv", headers=bearer(admin_token))
    assert exported.status == 200
    content = await exported.read()
    rows = list(csv.reader(io.StringIO(content.decode(), newline="")))
    assert rows[0][-1] == "price" and sorted(row[-1] for row in rows[1:]) == ["", "-5", "12", "1e+16", "2.5"]
    await create_collection(client, admin_token, "copy", new_fields)
    form = aiohttp.FormData()
    form.add_field("file", content, filename="items.csv", content_type="text/csv")
    response = await client.post(records_path("copy") + "/import/csv", headers=bearer(admin_token), data=form)
    assert response.status == 200, await response.text()
    assert await response.json() == {"imported": 5, "failed": []}
    copies = await stored(client, "copy")
    assert sorted(map(str, (values(r) for r in copies.values()))) == sorted(map(str, (values(r) for r in
                                                                                        after.values())))


async def test_number_to_text_converts(client, admin_token):
    items = await create_collection(client, admin_token, "items", [{"name": "n", "type": "number"}])
    for n in (12, -5, 2.5):
        await create_record(client, admin_token, "items", {"n": n})
    await patched(client, admin_token, items, [{"name": "n", "type": "text"}])
    assert sorted(r["n"] for r in (await stored(client)).values()) == ["-5", "12", "2.5"]


async def test_select_to_multi_select_wraps_the_value(client, admin_token):
    select = {"name": "status", "type": "select", "values": ["a", "b", "c"]}
    items = await create_collection(client, admin_token, "items", [select, {"name": "note", "type": "text"}])
    one = await create_record(client, admin_token, "items", {"status": "b"})
    none = await create_record(client, admin_token, "items", {"note": "no status"})
    await patched(client, admin_token, items, [{**select, "max_select": 3}, {"name": "note", "type": "text"}])
    after = await stored(client)
    assert after[one["id"]]["status"] == ["b"]
    assert "status" not in after[none["id"]] or after[none["id"]]["status"] is None
    assert after[none["id"]]["note"] == "no status"


async def test_multi_select_to_one_value_takes_the_only_item(client, admin_token):
    tags = {"name": "tags", "type": "select", "values": ["a", "b"], "max_select": 2}
    items = await create_collection(client, admin_token, "items", [tags])
    one = await create_record(client, admin_token, "items", {"tags": ["a"]})
    two = await create_record(client, admin_token, "items", {"tags": ["a", "b"]})
    single = [{**tags, "max_select": 1}]

    messages = await refused(client, admin_token, items, single)
    assert messages == [(f'tags: 1 record holds values that cannot be converted to select '
                        f'(e.g. record {two["id"]}: ["a","b"])')]
    assert (await stored(client))[two["id"]]["tags"] == ["a", "b"]

    response = await client.patch(records_path("items", two["id"]), headers=bearer(admin_token),
                                  json={"data": {"tags": ["b"]}})
    assert response.status == 200, await response.text()
    await patched(client, admin_token, items, single)
    after = await stored(client)
    assert (after[one["id"]]["tags"], after[two["id"]]["tags"]) == ("a", "b")


# --- refusals ---------------------------------------------------------------------------------------


async def test_text_to_number_with_two_words_is_422_and_changes_nothing(client, admin_token):
    fields = [{"name": "title", "type": "text"}, {"name": "price", "type": "text"}]
    items = await create_collection(client, admin_token, "items", fields)
    await create_record(client, admin_token, "items", {"title": "same", "price": "12"})
    word = await create_record(client, admin_token, "items", {"title": "same", "price": "twelve"})
    other = await create_record(client, admin_token, "items", {"price": "n/a"})
    before = await stored(client)

    messages = await refused(client, admin_token, items, [
        {"name": "title", "type": "text", "validation": {"unique": True}},
        {"name": "price", "type": "number"},
    ])
    examples = {f'{word["id"]}: "twelve"', f'{other["id"]}: "n/a"'}  # the first in id order
    assert messages in [[f"price: 2 records hold values that cannot be converted to number (e.g. record {e})"]
                        for e in examples]
    assert await stored(client) == before  # "12" was not converted either
    # nor was the unique index of the refused schema left behind
    await create_record(client, admin_token, "items", {"title": "same"})


async def test_number_to_date_is_422_when_records_hold_numbers(client, admin_token):
    items = await create_collection(client, admin_token, "items", [{"name": "when", "type": "number"}])
    record = await create_record(client, admin_token, "items", {"when": 20240301})
    messages = await refused(client, admin_token, items, [{"name": "when", "type": "date"}])
    assert messages == [(f"when: 1 record holds values that cannot be converted to date "
                        f"(e.g. record {record['id']}: 20240301)")]
    assert (await stored(client))[record["id"]]["when"] == 20240301


async def test_removing_a_select_value_in_use_is_422(client, admin_token):
    status = {"name": "status", "type": "select", "values": ["draft", "live", "archived"]}
    items = await create_collection(client, admin_token, "items", [status])
    await create_record(client, admin_token, "items", {"status": "draft"})
    old = await create_record(client, admin_token, "items", {"status": "archived"})
    messages = await refused(client, admin_token, items, [{**status, "values": ["draft", "live"]}])
    assert messages == [(f'status: 1 record holds values that cannot be converted to select '
                        f'(e.g. record {old["id"]}: "archived")')]
    await patched(client, admin_token, items, [{**status, "values": ["draft", "archived"]}])  # "live" unused


async def test_lower_max_and_new_pattern_are_checked_against_stored_values(client, admin_token):
    fields = [{"name": "n", "type": "number"}, {"name": "code", "type": "text"}]
    items = await create_collection(client, admin_token, "items", fields)
    await create_record(client, admin_token, "items", {"n": 50, "code": "abc"})
    messages = await refused(client, admin_token, items, [
        {"name": "n", "type": "number", "validation": {"max": 10}},
        {"name": "code", "type": "text", "validation": {"pattern": "^[A-Z]+$", "required": True}},
    ])
    assert [m.split(":")[0] for m in messages] == ["n", "code"]
    # `required` newly set is not checked: records without a value may stay
    await create_record(client, admin_token, "items", {"n": 1})
    await patched(client, admin_token, items, [
        {"name": "n", "type": "number", "validation": {"max": 50}},
        {"name": "code", "type": "text", "validation": {"pattern": "^[a-z]+$", "required": True}},
    ])


async def test_converted_duplicates_of_a_unique_field_are_422(client, admin_token):
    fields = [{"name": "code", "type": "text", "validation": {"unique": True}}]
    items = await create_collection(client, admin_token, "items", fields)
    first = await create_record(client, admin_token, "items", {"code": "12"})
    second = await create_record(client, admin_token, "items", {"code": "12.0"})
    messages = await refused(client, admin_token, items, [{**fields[0], "type": "number"}])
    last = max((first["id"], "12"), (second["id"], "12.0"))  # records are read in id order
    assert messages == [(f"code: 1 record holds values that would duplicate another record's once converted to "
                        f"number, and the field is unique (e.g. record {last[0]}: {last[1]})")]
    assert sorted(r["code"] for r in (await stored(client)).values()) == ["12", "12.0"]


async def test_text_to_relation_needs_existing_records(client, admin_token):
    authors = await create_collection(client, admin_token, "authors", [{"name": "name", "type": "text"}])
    ann = await create_record(client, admin_token, "authors", {"name": "Ann"})
    items = await create_collection(client, admin_token, "items", [{"name": "author", "type": "text"}])
    good = await create_record(client, admin_token, "items", {"author": ann["id"]})
    bad = await create_record(client, admin_token, "items", {"author": "gone"})
    relation = [{"name": "author", "type": "relation", "collection_id": authors["id"]}]
    messages = await refused(client, admin_token, items, relation)
    assert messages == [(f'author: 1 record holds values that cannot be converted to relation '
                        f'(e.g. record {bad["id"]}: "gone")')]
    response = await client.delete(records_path("items", bad["id"]), headers=bearer(admin_token))
    assert response.status == 204
    await patched(client, admin_token, items, relation)
    assert (await stored(client))[good["id"]]["author"] == ann["id"]


async def test_any_type_change_of_an_empty_collection_is_accepted(client, admin_token):
    fields: list[dict[str, Any]] = [{"name": "a", "type": "text"}, {"name": "b", "type": "number"},
                                    {"name": "c", "type": "select", "values": ["x", "y"], "max_select": 2}]
    items = await create_collection(client, admin_token, "items", fields)
    for new_types in [("date", "bool", "json"), ("number", "date", "text"), ("bool", "json", "email")]:
        await patched(client, admin_token, items, [{"name": n, "type": t} for n, t in zip("abc", new_types,
                                                                                           strict=True)])
    body = await (await client.get(f"{COLLECTIONS}/{items['id']}")).json()
    assert [f["type"] for f in body["schema"]["fields"]] == ["bool", "json", "email"]
