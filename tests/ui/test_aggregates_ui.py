"""The aggregate explorer in a real browser (issue 42, item 4): pick group fields and aggregates of a
collection, see the groups in a table and a bar or line chart against sums computed here; create a view
from it, whose records page is read-only and equal to the REST list; edit that view in the explorer."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Api, BrowserPage
from tests.ui.test_records_ui import make_collection

ORDERS: list[dict[str, Any]] = [
    {"name": "status", "type": "select", "values": ["new", "paid", "sent"]},
    {"name": "total", "type": "number"}, {"name": "placed", "type": "date"}]
DATA = [("new", 5, "2026-01-03"), ("paid", 10, "2026-01-09"), ("paid", 20, "2026-02-01"), ("sent", 1, "2026-02-02"),
        ("paid", 7, "2026-03-05"), ("new", 2, "2026-03-06")]


def seeded(api: Api) -> str:
    name = make_collection(api, "orders", ORDERS)
    for status_, total, placed in DATA:
        code, body = api.call("POST", f"/api/v1/collections/{name}/records",
                              {"data": {"status": status_, "total": total, "placed": placed}})
        assert code == 201, body
    return name


def sums_by_status() -> dict[str, tuple[int, int]]:
    counts: dict[str, int] = defaultdict(int)
    sums: dict[str, int] = defaultdict(int)
    for status_, total, _ in DATA:
        counts[status_] += 1
        sums[status_] += total
    return {s: (counts[s], sums[s]) for s in sorted(counts)}


def table(ui: Any) -> list[list[str]]:
    return [row.locator("td").all_inner_texts() for row in ui.locator("#groups tbody tr").all()]


def test_explore_groups_as_a_table_and_a_chart(admin_page: BrowserPage, api: Api):
    name = seeded(api)
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/records")
    ui.click("#aggregate-link")
    ui.select_option("#g-status", "value")
    ui.select_option("#fn-0", "count")
    ui.select_option("#fn-1", "sum")
    ui.select_option("#of-1", "total")
    ui.click("#run")
    expected = sums_by_status()
    expect(ui.locator("#groups-total")).to_have_text(str(len(expected)))
    assert table(ui) == [[s, str(c), str(t)] for s, (c, t) in expected.items()]
    expect(ui.locator("#api-url")).to_contain_text(
        f"/api/v1/collections/{name}/aggregate?group_by=status&aggregates=count(),sum(total)")
    bars = ui.locator("#group-chart rect.bar")
    expect(bars).to_have_count(len(expected))
    assert [b.get_attribute("data-label") for b in bars.all()] == list(expected)
    assert [b.get_attribute("data-value") for b in bars.all()] == [str(c) for c, _ in expected.values()]

    # by month, the sum charted as a line
    ui.select_option("#g-status", "")
    ui.select_option("#g-placed", "month")
    ui.select_option("#chart", "sum_total")
    ui.select_option("#kind", "line")
    ui.click("#run")
    expect(ui.locator("#group-chart")).to_have_attribute("data-kind", "line")
    expect(ui.locator("#group-chart polyline")).to_have_count(1)
    points = ui.locator("#group-chart circle")
    expect(points).to_have_count(3)
    assert [p.get_attribute("data-value") for p in points.all()] == ["15", "21", "9"]
    status, body = api.call("GET", f"/api/v1/collections/{name}/aggregate?group_by=placed:month&aggregates=count(),"
                                   "sum(total)")
    assert status == 200 and [g["sum_total"] for g in body["items"]] == [15, 21, 9]

    # a bad pick is explained on the page
    ui.select_option("#fn-1", "avg")
    ui.select_option("#of-1", "status")
    ui.click("#run")
    expect(ui.locator("#aggregate-error")).to_contain_text("avg needs a number field")
    admin_page.watch.assert_clean()


def test_create_a_view_from_the_explorer_then_edit_it(admin_page: BrowserPage, api: Api):
    name = seeded(api)
    view = f"{name}_by_status"
    ui = admin_page.page
    admin_page.goto(f"/_/collections/{name}/aggregate?g-status=value&fn-0=count&fn-1=sum&of-1=total")
    ui.fill("#view-name", view)
    ui.select_option("#view-access", "everyone")
    ui.click("#save-view-button")
    expect(ui.locator(".flash")).to_have_text(f"View {view} created")
    expect(ui.locator("#view-note")).to_contain_text(f"A view of {name}")
    expect(ui.locator("#new-record")).to_have_count(0)
    status, listed = api.call("GET", f"/api/v1/collections/{view}/records", token="")
    assert status == 200, listed  # everyone may list it
    assert [[i["status"], i["count"], i["sum_total"]] for i in listed["items"]] == [
        [s, c, t] for s, (c, t) in sums_by_status().items()]
    shown = [row.get_attribute("data-id") for row in ui.locator("#records tbody tr[data-id]").all()]
    assert shown == [i["id"] for i in listed["items"]]
    assert ui.locator('#records td[data-column="sum_total"]').all_inner_texts() == [
        str(i["sum_total"]) for i in listed["items"]]

    # edit: the explorer with the view's definition, saved back to the view
    admin_page.goto("/_/collections")
    ui.click(f'tr[data-collection="{view}"] a.edit')
    expect(ui.locator("#g-status")).to_have_value("value")
    expect(ui.locator("#of-1")).to_have_value("total")
    ui.select_option("#fn-2", "max")
    ui.select_option("#of-2", "placed")
    ui.click("#run")
    expect(ui.locator('#groups th[data-aggregate="max_placed"]')).to_have_count(1)
    ui.click("#save-view-button")
    expect(ui.locator(".flash")).to_have_text(f"View {view} saved")
    status, collections = api.call("GET", "/api/v1/collections")
    saved = next(c for c in collections if c["name"] == view)
    assert saved["view"]["aggregates"] == "count(),sum(total),max(placed)"
    assert [f["name"] for f in saved["schema"]["fields"]] == ["status", "count", "sum_total", "max_placed"]
    admin_page.watch.assert_clean()
