"""The backups screen (`/_/backups`) in a real browser (issue 15, scenario "back up, delete a
collection, restore it"): a backup made in the UI, the collection deleted through the API, the
backup restored in the UI (after a confirmation page, with the job's progress and result), and the
collection and its records back through the API; download and delete too."""

from __future__ import annotations

import uuid
from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage
from tests.ui.test_audit_ui import readme_screenshot

JOB_TIMEOUT_MS = 60_000


def backups(api: Api) -> dict[str, dict[str, Any]]:
    status, body = api.call("GET", "/api/v1/backups")
    assert status == 200, body
    return {b["filename"]: b for b in body}


def finished_job(page: Any) -> str:
    """Wait for the job page's result; its text."""
    expect(page.locator('#job[data-state="done"]')).to_be_visible(timeout=JOB_TIMEOUT_MS)
    return str(page.locator("#job-result").inner_text())


def test_back_up_delete_a_collection_and_restore_it(admin_page: BrowserPage, api: Api):
    page = admin_page.page
    name = f"backed_{uuid.uuid4().hex[:6]}"
    status, collection = api.call("POST", "/api/v1/collections", {
        "name": name, "schema": [{"name": "title", "type": "text"}, {"name": "n", "type": "number"}]})
    assert status == 201, collection
    titles = {f"record {i} <b>" for i in range(5)}
    for i, title in enumerate(sorted(titles)):
        assert api.call("POST", f"/api/v1/collections/{name}/records", {"data": {"title": title, "n": i}})[0] == 201
    known = set(backups(api))

    admin_page.goto("/_/backups")
    with page.expect_navigation():
        page.locator("#create-backup button[type=submit]").click()
    assert "/_/backups/jobs/" in page.url
    result = finished_job(page)
    (filename,) = set(backups(api)) - known
    assert result.startswith(f"Backup {filename} written")
    with page.expect_navigation():
        page.click("#back-to-backups")
    row = page.locator(f'tr[data-filename="{filename}"]')
    assert row.locator("td[data-size]").get_attribute("data-size") == str(backups(api)[filename]["size"])
    assert filename in page.locator("#jobs").inner_text()

    with page.expect_download() as download:
        row.locator("a.download").click()
    saved = download.value.path()
    assert download.value.suggested_filename == filename
    with open(saved, "rb") as archive:
        data = archive.read()
    assert len(data) == backups(api)[filename]["size"] and data[:2] == b"\x1f\x8b"  # the gzip archive itself

    assert api.call("DELETE", f"/api/v1/collections/{collection['id']}")[0] == 204
    assert api.call("GET", f"/api/v1/collections/{name}/records")[0] == 404

    with page.expect_navigation():
        row.locator("a.restore").click()
    assert filename in page.locator("#confirm").inner_text()
    assert "replaced" in page.locator("#confirm .warning").inner_text()
    with page.expect_navigation():
        page.click("#confirm-button")
    result = finished_job(page)
    assert result.startswith(f"Backup {filename} restored:"), result

    status, restored = api.call("GET", f"/api/v1/collections/{collection['id']}")
    assert status == 200 and restored["id"] == collection["id"]
    status, records = api.call("GET", f"/api/v1/collections/{name}/records?per_page=50")
    assert status == 200, records
    assert records["total"] == 5 and {r["title"] for r in records["items"]} == titles
    status, audit = api.call("GET", "/api/v1/audit?event_type=backup_restored&limit=1")
    assert audit["items"][0]["details"]["filename"] == filename

    admin_page.goto("/_/backups")
    readme_screenshot(page, "backups")
    admin_page.goto(f"/_/backups/{filename}/delete")
    with page.expect_navigation():
        page.click("#confirm-button")
    assert page.locator(".flash.success").inner_text() == f"Backup {filename} deleted."
    assert page.locator(f'tr[data-filename="{filename}"]').count() == 0
    assert filename not in backups(api)
    admin_page.watch.assert_clean()


def test_unknown_backup_is_404(admin_page: BrowserPage, api: Api):
    for path, status in (("/_/backups/backup-20000101-000000.tar.gz/restore", 404),
                         ("/_/backups/passwd/download", 400),  # as GET /api/v1/backups/passwd
                         ("/_/backups/backup-20000101-000000.tar.gz/download", 404), ("/_/backups/jobs/nope", 404)):
        response = admin_page.page.request.get(admin_page.base + path, max_redirects=0)
        assert response.status == status, path
        assert "text/html" in response.headers["content-type"]
    before = backups(api)
    refused = admin_page.page.request.post(admin_page.base + "/_/backups", max_redirects=0)
    assert refused.status == 403  # no CSRF token: no backup
    assert backups(api) == before
    assert "backup-20000101-000000.tar.gz" not in backups(api)
    admin_page.watch.assert_clean()
