"""The records screen in a real browser (issue 15): the record editor (S3: add a record, a refused
invalid one), the table (S4: filter, sort and page 60 records against the REST API's `total` and
order), files (upload and preview), delete with confirmation, and stored HTML shown as text."""

from __future__ import annotations

import base64
import uuid
from typing import Any
from urllib.parse import quote

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage

XSS = "<script>alert(1)</script>"
PNG = base64.b64decode(  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def make_collection(api: Api, prefix: str, schema: list[dict[str, Any]]) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    status, body = api.call("POST", "/api/v1/collections", {"name": name, "schema": schema})
    assert status == 201, body
    return name


def rest_list(api: Api, name: str, **query: Any) -> dict[str, Any]:
    qs = "&".join(f"{k}={quote(str(v))}" for k, v in query.items())
    status, body = api.call("GET", f"/api/v1/collections/{name}/records?{qs}")
    assert status == 200, body
    return dict(body)


def shown_ids(ui: BrowserPage) -> list[str]:
    return [str(i) for i in ui.page.locator("#records tbody tr[data-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.id)")]


def test_add_record_in_the_editor_and_an_invalid_one_is_refused(admin_page: BrowserPage, api: Api):
    admin_page.watch.allow(r"status of 422")
    name = make_collection(api, "s3", [
        {"name": "title", "type": "text", "validation": {"required": True}},
        {"name": "body", "type": "editor"},
        {"name": "views", "type": "number"},
        {"name": "published", "type": "bool"},
        {"name": "contact", "type": "email"},
        {"name": "site", "type": "url"},
        {"name": "when", "type": "date"},
        {"name": "kind", "type": "select", "values": ["news", "blog"]},
        {"name": "meta", "type": "json"},
    ])
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records")
    ui.click("#new-record")
    ui.fill("#field-title", "Hello")
    ui.fill("#field-body", "Some <b>text</b>")
    ui.fill("#field-views", "42")
    ui.check("#field-published")
    ui.fill("#field-contact", "a@example.com")
    ui.fill("#field-site", "https://example.com/x")
    ui.fill("#field-when", "2024-05-06T07:08:09")
    ui.select_option("#field-kind", "blog")
    ui.fill("#field-meta", '{"a": [1, 2]}')
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record created")
    record_id = ui.locator("#record-id").inner_text()

    status, record = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")
    assert status == 200, record
    assert {k: record[k] for k in ("title", "body", "views", "published", "contact", "site", "when", "kind", "meta")} \
        == {"title": "Hello", "body": "Some <b>text</b>", "views": 42, "published": True,
            "contact": "a@example.com", "site": "https://example.com/x", "when": "2024-05-06T07:08:09.000Z",
            "kind": "blog", "meta": {"a": [1, 2]}}
    expect(ui.locator("#field-when")).to_have_value("2024-05-06T07:08:09")  # the editor shows it back

    # an invalid record: the required title left empty and a wrong type; nothing is stored
    admin_page.goto(f"/_/collections/{name}/records/new")
    ui.fill("#field-contact", "not-an-email")
    ui.fill("#field-meta", "{not json")
    ui.click("#save-record")
    expect(ui.locator('[data-error-for="meta"]')).to_contain_text("Not valid JSON")
    ui.fill("#field-meta", "[1]")
    ui.click("#save-record")
    expect(ui.locator('[data-error-for="title"]')).to_have_text("Missing data for required field.")
    expect(ui.locator('[data-error-for="contact"]')).to_have_text("Not a valid email address.")
    expect(ui.locator("#field-contact")).to_have_value("not-an-email")  # the form keeps what was typed
    assert rest_list(api, name)["total"] == 1

    # editing: the same checks, and a refused change leaves the record as it was
    admin_page.goto(f"/_/collections/{name}/records/{record_id}")
    ui.fill("#field-title", "")
    ui.click("#save-record")
    expect(ui.locator('[data-error-for="title"]')).to_have_text("Missing data for required field.")
    assert api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")[1]["title"] == "Hello"
    ui.fill("#field-title", "Changed")
    ui.fill("#field-views", "")
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record saved")
    status, record = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")
    assert record["title"] == "Changed" and "views" not in record and record["published"] is True
    admin_page.watch.assert_clean()


def test_filter_sort_and_page_sixty_records(admin_page: BrowserPage, api: Api):
    admin_page.watch.allow(r"status of 400")
    name = make_collection(api, "s4", [
        {"name": "title", "type": "text"}, {"name": "n", "type": "number"},
        {"name": "grp", "type": "select", "values": ["odd", "even"]},
    ])
    for i in range(60):
        status, body = api.call("POST", f"/api/v1/collections/{name}/records", {"data": {
            "title": XSS if i == 7 else f"item {i:02d}", "n": (i * 37) % 60, "grp": "odd" if i % 2 else "even"}})
        assert status == 201, body
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records")
    expect(ui.locator("#total")).to_have_text("60")
    assert shown_ids(admin_page) == [r["id"] for r in rest_list(api, name)["items"]]  # 30, by created

    flt = 'n >= 10 && grp = "odd"'
    ui.fill("#filter", flt)
    ui.click("#apply")
    expected = rest_list(api, name, filter=flt)
    expect(ui.locator("#total")).to_have_text(str(expected["total"]))
    assert 0 < expected["total"] < 30

    ui.click('#records th[data-column="n"] a')  # ascending
    expect(ui.locator('#records th[data-column="n"]')).to_have_attribute("aria-sort", "ascending")
    assert shown_ids(admin_page) == [r["id"] for r in rest_list(api, name, filter=flt, sort="n")["items"]]
    ui.click('#records th[data-column="n"] a')  # descending
    expect(ui.locator('#records th[data-column="n"]')).to_have_attribute("aria-sort", "descending")
    descending = rest_list(api, name, filter=flt, sort="-n")
    assert shown_ids(admin_page) == [r["id"] for r in descending["items"]]
    assert [int(t) for t in ui.locator('#records td[data-column="n"]').all_inner_texts()] == \
        [r["n"] for r in descending["items"]]

    ui.select_option("#per-page", "10")
    ui.click("#apply")
    expect(ui.locator("#page-info")).to_have_text(f"Page 1 of {-(-expected['total'] // 10)}")
    ui.click("#next-page")
    expect(ui.locator("#page-info")).to_contain_text("Page 2 of")
    page2 = rest_list(api, name, filter=flt, sort="-n", page=2, per_page=10)
    assert shown_ids(admin_page) == [r["id"] for r in page2["items"]]
    expect(ui.locator("#total")).to_have_text(str(page2["total"]))

    # search, combined with the filter, as the API does it
    ui.fill("#filter", "")
    ui.fill("#search", "item 1")
    ui.click("#apply")
    searched = rest_list(api, name, search="item 1", sort="-n", per_page=10)
    expect(ui.locator("#total")).to_have_text(str(searched["total"]))
    assert shown_ids(admin_page) == [r["id"] for r in searched["items"]]

    # column choice, kept in the query string (and through sorting)
    ui.locator(".records-columns summary").click()
    ui.uncheck('#columns-form input[value="grp"]')
    ui.uncheck('#columns-form input[value="updated"]')
    ui.click("#apply-columns")
    expect(ui.locator('#records th[data-column="grp"]')).to_have_count(0)
    assert "cols=title" in ui.url
    ui.click('#records th[data-column="title"] a')
    expect(ui.locator('#records th[data-column="title"]')).to_have_attribute("aria-sort", "ascending")
    expect(ui.locator('#records th[data-column="grp"]')).to_have_count(0)
    expect(ui.locator('#records th[data-column="n"]')).to_have_count(1)

    # a filter that does not parse: the service's InvalidFilter message inline
    status, refused = api.call("GET", f"/api/v1/collections/{name}/records?filter={quote('n >>> 3')}")
    assert status == 400 and refused["code"] == "invalid_filter"
    ui.fill("#search", "")
    ui.fill("#filter", "n >>> 3")
    ui.click("#apply")
    expect(ui.locator("#records-error")).to_contain_text(refused["detail"])
    expect(ui.locator("#filter")).to_have_value("n >>> 3")
    admin_page.watch.assert_clean()


def test_stored_script_is_shown_as_text_in_the_table_and_editor(admin_page: BrowserPage, api: Api):
    name = make_collection(api, "xss", [{"name": "title", "type": "text"}, {"name": "notes", "type": "editor"},
                                        {"name": "meta", "type": "json"}])
    data = {"title": XSS, "notes": XSS + "<img src=x onerror=alert(2)>", "meta": {"k": XSS}}
    status, record = api.call("POST", f"/api/v1/collections/{name}/records", {"data": data})
    assert status == 201, record
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records")
    expect(ui.locator(f'tr[data-id="{record["id"]}"] td[data-column="title"]')).to_have_text(XSS)
    assert ui.locator("main script, main img").count() == 0
    ui.click(f'tr[data-id="{record["id"]}"] td.id a')
    expect(ui.locator("#field-title")).to_have_value(XSS)
    expect(ui.locator("#field-notes")).to_have_value(XSS + "<img src=x onerror=alert(2)>")
    assert XSS in ui.locator("#field-meta").input_value()
    assert ui.locator("main script, main img").count() == 0
    assert ui.locator("script").count() == 2  # htmx and app.js only
    ui.click("#save-record")  # saving it unchanged keeps it as it was
    expect(ui.locator(".flash")).to_have_text("Record saved")
    status, after = api.call("GET", f"/api/v1/collections/{name}/records/{record['id']}")
    assert (after["title"], after["notes"], after["meta"]) == (record["title"], record["notes"], record["meta"])
    admin_page.watch.assert_clean()  # no dialog opened


def test_file_upload_preview_and_delete_with_confirmation(admin_page: BrowserPage, api: Api, tmp_path):
    admin_page.watch.allow(r"status of 422")
    name = make_collection(api, "files", [{"name": "title", "type": "text", "validation": {"required": True}},
                                          {"name": "picture", "type": "file"},
                                          {"name": "docs", "type": "file", "max_select": 3}])
    image, text, big = tmp_path / "dot.png", tmp_path / "notes.txt", tmp_path / "big.bin"
    image.write_bytes(PNG)
    text.write_text("hello file")
    big.write_bytes(bytes(range(256)) * (3 * 4096))  # 3 MiB: past the app's client_max_size of 1 MiB
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/new")
    ui.set_input_files("#upload-picture", str(image))  # refused (no title): neither record nor file is kept
    ui.click("#save-record")
    expect(ui.locator('[data-error-for="title"]')).to_have_text("Missing data for required field.")
    assert rest_list(api, name)["total"] == 0
    ui.fill("#field-title", "with files")
    ui.set_input_files("#upload-picture", str(image))
    ui.set_input_files("#upload-docs", [str(text)])
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record created")
    record_id = ui.locator("#record-id").inner_text()
    status, record = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")
    assert status == 200 and record["title"] == "with files"
    picture, docs = record["picture"], record["docs"]
    assert isinstance(picture, str) and len(docs) == 1
    preview = ui.locator(f'li[data-file="{picture}"] img.preview')
    expect(preview).to_have_count(1)
    # the preview is the file's 100x100 thumbnail (the 1x1 picture, scaled to cover it)
    ui.wait_for_function("img => img.complete && img.naturalWidth === 100", arg=preview.element_handle())
    response = ui.request.get(admin_page.base + f"/api/v1/files/{picture}",
                              headers={"Authorization": f"Bearer {api.token}"})
    assert response.status == 200 and response.body() == PNG
    assert ui.locator(f'li[data-file="{docs[0]}"] a.file-link').inner_text() == "notes.txt"

    # a second, large document is appended to the multi-file field (the form is read as a stream)
    ui.set_input_files("#upload-docs", [str(big)])
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record saved")
    status, record = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")
    assert len(record["docs"]) == 2 and record["docs"][0] == docs[0] and record["picture"] == picture
    response = ui.request.get(admin_page.base + f"/api/v1/files/{record['docs'][1]}",
                              headers={"Authorization": f"Bearer {api.token}"})
    assert response.status == 200 and response.body() == big.read_bytes()

    ui.click("#delete-record")
    expect(ui.locator("#delete-id")).to_have_text(record_id)
    ui.click("#confirm-delete")
    expect(ui.locator(".flash")).to_have_text("Record deleted")
    assert api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")[0] == 404
    assert api.call("GET", f"/api/v1/files/{picture}")[0] == 404  # its files went with it
    admin_page.watch.assert_clean()


def test_editor_form_without_the_csrf_token_is_refused(admin_page: BrowserPage, api: Api):
    name = make_collection(api, "csrf", [{"name": "title", "type": "text"}])
    status, record = api.call("POST", f"/api/v1/collections/{name}/records", {"data": {"title": "kept"}})
    assert status == 201, record
    base = f"{admin_page.base}/_/collections/{name}/records"
    request = admin_page.page.request
    for target in (base + "/new", f"{base}/{record['id']}"):
        for form in ({"title": "forged"}, {"csrf_token": "0" * 64, "title": "forged"},
                     {"title": "forged", "csrf_token": "0" * 64}):
            response = request.post(target, multipart=form, max_redirects=0)
            assert response.status == 403, (target, form)
            assert "CSRF" in response.text()
    response = request.post(f"{base}/{record['id']}/delete", form={"csrf_token": "x"}, max_redirects=0)
    assert response.status == 403
    listed = rest_list(api, name)
    assert listed["total"] == 1 and listed["items"][0]["title"] == "kept"  # nothing changed
    admin_page.goto(f"/_/collections/{name}/records")
    expect(admin_page.page.locator("#total")).to_have_text("1")
    admin_page.watch.assert_clean()


def test_relation_labels_in_the_table_and_picking_a_related_record_by_search(admin_page: BrowserPage, api: Api):
    # the label is the first text-like field of the related collection ("name", after a number field)
    people = f"people_{uuid.uuid4().hex[:6]}"
    status, people_def = api.call("POST", "/api/v1/collections", {"name": people, "schema": [
        {"name": "code", "type": "number"}, {"name": "name", "type": "text"}]})
    assert status == 201, people_def
    ids = {}
    for code, person in enumerate(("Ann Lee", "Bob Stone", "Cy Stone")):
        status, record = api.call("POST", f"/api/v1/collections/{people}/records",
                                  {"data": {"code": code, "name": person}})
        assert status == 201, record
        ids[person] = record["id"]
    name = make_collection(api, "books", [
        {"name": "title", "type": "text"},
        {"name": "author", "type": "relation", "collection_id": people_def["id"]},
        {"name": "editors", "type": "relation", "collection_id": people_def["id"], "max_select": 2}])
    status, book = api.call("POST", f"/api/v1/collections/{name}/records", {"data": {
        "title": "First", "author": ids["Ann Lee"], "editors": [ids["Bob Stone"], ids["Ann Lee"]]}})
    assert status == 201, book

    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records")
    row = ui.locator(f'tr[data-id="{book["id"]}"]')
    expect(row.locator('td[data-column="author"]')).to_have_text("Ann Lee")
    expect(row.locator('td[data-column="editors"]')).to_have_text("Bob Stone, Ann Lee")
    link = row.locator('td[data-column="author"] a')
    assert link.get_attribute("href") == f"/_/collections/{people}/records/{ids['Ann Lee']}"

    # a new book: the author picked by searching, two editors picked one search at a time
    ui.click("#new-record")
    ui.fill("#field-title", "Second")
    ui.fill("#pick-author", "stone")
    options = ui.locator("#options-author .relation-option")
    expect(options).to_have_count(2)  # Bob Stone and Cy Stone, newest first
    expect(options.first).to_contain_text("Cy Stone")
    ui.locator(f'#options-author .relation-option[data-id="{ids["Bob Stone"]}"]').click()
    expect(ui.locator("#field-author")).to_have_value(ids["Bob Stone"])
    expect(ui.locator("#chosen-author li")).to_have_text([f"Bob Stone {ids['Bob Stone']} ×"])
    for person in ("Cy Stone", "Ann Lee"):
        ui.fill("#pick-editors", person.split()[0])
        ui.locator(f'#options-editors .relation-option[data-id="{ids[person]}"]').click()
    ui.fill("#pick-editors", "Bob")  # a third is refused: max_select 2
    ui.locator(f'#options-editors .relation-option[data-id="{ids["Bob Stone"]}"]').click()
    expect(ui.locator('[data-field="editors"] .relation-note')).to_have_text("At most 2 records: remove one first.")
    expect(ui.locator("#field-editors")).to_have_value(f"{ids['Cy Stone']}, {ids['Ann Lee']}")
    ui.locator(f'#chosen-editors li[data-id="{ids["Cy Stone"]}"] .relation-remove').click()
    ui.locator(f'#options-editors .relation-option[data-id="{ids["Bob Stone"]}"]').click()
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record created")
    record_id = ui.locator("#record-id").inner_text()
    status, saved = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")
    assert status == 200 and saved["author"] == ids["Bob Stone"], saved
    assert saved["editors"] == [ids["Ann Lee"], ids["Bob Stone"]]
    # the saved editor shows the values with their labels
    expect(ui.locator("#chosen-editors .relation-label")).to_have_text(["Ann Lee", "Bob Stone"])
    expect(ui.locator("#chosen-author .relation-label")).to_have_text(["Bob Stone"])

    # an id typed by hand that names no record: refused, and shown back bare (no label) with the error
    admin_page.watch.allow(r"status of 422")
    missing = "00000000-0000-0000-0000-000000000000"
    ui.fill("#field-author", missing)
    expect(ui.locator("#chosen-author li")).to_have_text([f"{missing} ×"])
    ui.click("#save-record")
    expect(ui.locator('[data-error-for="author"]')).to_have_text("Unknown record id.")
    expect(ui.locator("#field-author")).to_have_value(missing)
    expect(ui.locator(f'#chosen-author li[data-id="{missing}"] code.muted')).to_have_count(1)
    expect(ui.locator("#chosen-editors .relation-label")).to_have_text(["Ann Lee", "Bob Stone"])
    assert api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")[1]["author"] == ids["Bob Stone"]
    admin_page.watch.assert_clean()


def test_records_table_updates_live_without_a_reload(admin_page: BrowserPage, api: Api):
    name = make_collection(api, "live", [{"name": "title", "type": "text"}])
    status, first = api.call("POST", f"/api/v1/collections/{name}/records", {"data": {"title": "before"}})
    assert status == 201, first
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records")
    expect(ui.locator("#total")).to_have_text("1")
    expect(ui.locator("#live-status")).to_have_attribute("data-state", "open")
    ui.evaluate("window.sameDocument = true")  # gone if the page reloads

    status, created = api.call("POST", f"/api/v1/collections/{name}/records", {"data": {"title": "from the API"}})
    assert status == 201, created
    row = ui.locator(f'#records tr[data-id="{created["id"]}"]')
    expect(row).to_have_count(1, timeout=10_000)  # the table fetched itself
    expect(row.locator('td[data-column="title"]')).to_have_text("from the API")
    expect(ui.locator("#total")).to_have_text("2")

    # a burst: every write shows, in fewer table fetches than writes; the page stays the same document
    refreshes: list[str] = []
    ui.on("request", lambda r: refreshes.append(r.url) if f"/collections/{name}/records?" in r.url else None)
    for n in range(5):
        assert api.call("POST", f"/api/v1/collections/{name}/records", {"data": {"title": f"burst {n}"}})[0] == 201
    assert api.call("DELETE", f"/api/v1/collections/{name}/records/{first['id']}")[0] == 204
    expect(ui.locator("#total")).to_have_text("6", timeout=10_000)
    expect(ui.locator(f'#records tr[data-id="{first["id"]}"]')).to_have_count(0)
    assert ui.evaluate("window.sameDocument") is True
    assert 1 <= len(refreshes) < 6, refreshes
    expect(ui.locator("#live-status")).to_have_attribute("data-state", "open")
    admin_page.watch.assert_clean()
