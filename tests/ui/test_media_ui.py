"""File fields in the admin UI, in a real browser (issue 41, item 5): thumbnails in the records table
and the editor, upload by drag and drop, remove, replace, and a protected field's file shown through
a file token."""

from __future__ import annotations

import io
from typing import Any

from PIL import Image
from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage
from tests.ui.test_records_ui import make_collection


def png(colour: tuple[int, int, int], size: tuple[int, int] = (300, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


def drop(ui: Any, zone: str, files: list[tuple[str, bytes, str]]) -> None:
    """Drop `files` (name, bytes, type) on the drop zone `zone`, as a file manager would."""
    transfer = ui.evaluate_handle("""files => {
        const transfer = new DataTransfer();
        for (const [name, bytes, type] of files) {
            transfer.items.add(new File([new Uint8Array(bytes)], name, {type}));
        }
        return transfer;
    }""", [[name, list(content), kind] for name, content, kind in files])
    ui.dispatch_event(zone, "dragenter", {"dataTransfer": transfer})
    ui.dispatch_event(zone, "drop", {"dataTransfer": transfer})


def loaded_width(ui: Any, selector: str) -> int:
    image = ui.locator(selector)
    expect(image).to_have_count(1)
    ui.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    return int(image.evaluate("img => img.naturalWidth"))


def record(api: Api, name: str, record_id: str) -> dict[str, Any]:
    status, body = api.call("GET", f"/api/v1/collections/{name}/records/{record_id}")
    assert status == 200, body
    return dict(body)


def test_drop_remove_and_replace_files_with_thumbnails_in_editor_and_table(admin_page: BrowserPage, api: Api):
    name = make_collection(api, "media", [{"name": "title", "type": "text"},
                                          {"name": "cover", "type": "file", "mime_types": ["image/*"]},
                                          {"name": "gallery", "type": "file", "max_select": 5}])
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/new")
    ui.fill("#field-title", "dropped")
    drop(ui, "#drop-cover", [("red.png", png((255, 0, 0)), "image/png")])
    drop(ui, "#drop-gallery", [("green.png", png((0, 255, 0)), "image/png")])
    drop(ui, "#drop-gallery", [("notes.txt", b"some notes", "text/plain")])  # added to the first drop
    expect(ui.locator("#chosen-files-gallery")).to_have_text("green.png, notes.txt")
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record created")
    record_id = ui.locator("#record-id").inner_text()
    saved = record(api, name, record_id)
    cover, (green, notes) = saved["cover"], saved["gallery"]
    assert loaded_width(ui, f'li[data-file="{cover}"] img.preview') == 100  # the 100x100 thumbnail
    assert loaded_width(ui, f'li[data-file="{green}"] img.preview') == 100
    expect(ui.locator(f'li[data-file="{notes}"] a.file-link')).to_have_text("notes.txt")
    expect(ui.locator(f'li[data-file="{notes}"] img')).to_have_count(0)

    # the table shows the thumbnails too, and the text file by its name
    admin_page.goto(f"/_/collections/{name}/records")
    row = f'tr[data-id="{record_id}"]'
    assert loaded_width(ui, f'{row} td[data-column="cover"] img.thumb') == 100
    expect(ui.locator(f'{row} td[data-column="gallery"] img.thumb')).to_have_count(1)
    expect(ui.locator(f'{row} td[data-column="gallery"] a.file-name')).to_have_text("notes.txt")

    # remove one of the gallery, replace the cover (dropped), add one more to the gallery (chosen)
    admin_page.goto(f"/_/collections/{name}/records/{record_id}")
    ui.check(f"#remove-{green}")
    drop(ui, "#drop-cover", [("blue.png", png((0, 0, 255)), "image/png")])
    ui.set_input_files("#upload-gallery", files=[{"name": "more.txt", "mimeType": "text/plain", "buffer": b"more"}])
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record saved")
    changed = record(api, name, record_id)
    assert changed["cover"] != cover and changed["gallery"][0] == notes and len(changed["gallery"]) == 2
    for gone in (cover, green):  # replaced and removed files are deleted once the record is saved
        assert api.call("GET", f"/api/v1/files/{gone}")[0] == 404
    thumb = ui.locator(f'li[data-file="{changed["cover"]}"] img.preview')
    assert loaded_width(ui, f'li[data-file="{changed["cover"]}"] img.preview') == 100
    blue = thumb.evaluate("""img => { const c = document.createElement('canvas'); c.width = c.height = 1;
        const g = c.getContext('2d'); g.drawImage(img, 50, 50, 1, 1, 0, 0, 1, 1);
        return Array.from(g.getImageData(0, 0, 1, 1).data.slice(0, 3)); }""")
    assert blue[2] > 200 and blue[0] < 50, blue

    # a file of another type than the field takes is refused, and nothing changes
    admin_page.watch.allow(r"status of 422")
    drop(ui, "#drop-cover", [("fake.png", b"not a picture", "image/png")])
    ui.click("#save-record")
    expect(ui.locator('[data-error-for="cover"]')).to_contain_text("is not one of image/*")
    assert record(api, name, record_id)["cover"] == changed["cover"]
    admin_page.watch.assert_clean()


def test_a_protected_file_is_shown_through_a_file_token(admin_page: BrowserPage, api: Api):
    name = make_collection(api, "secret", [{"name": "scan", "type": "file", "protected": True}])
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records/new")
    ui.set_input_files("#upload-scan", files=[{"name": "scan.png", "mimeType": "image/png",
                                                "buffer": png((10, 10, 10))}])
    ui.click("#save-record")
    expect(ui.locator(".flash")).to_have_text("Record created")
    record_id = ui.locator("#record-id").inner_text()
    scan = record(api, name, record_id)["scan"]
    preview = f'li[data-file="{scan}"] img.preview'
    assert "token=" in (ui.locator(preview).get_attribute("src") or "")
    assert loaded_width(ui, preview) == 100
    assert api.call("GET", f"/api/v1/files/{scan}")[0] == 404  # a header is not enough for a protected file
    link = ui.locator(f'li[data-file="{scan}"] a.file-link').get_attribute("href") or ""
    without_token = ui.request.get(admin_page.base + link.partition("?")[0])
    assert without_token.status == 404
    admin_page.watch.allow(r"status of 404")
    admin_page.watch.assert_clean()
