"""The records table's live stream (`GET /_/collections/{name}/records/live`,
cms/admin_ui/views/records_live.py): for signed-in admins only, one debounced `records-changed` per
burst of writes to the collection (none for other collections), and nothing missed between the page
and its stream or across a reconnect (`?after=`, `Last-Event-ID`). The table part the stream makes
htmx fetch is `records/table.html` alone."""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from cms.admin_ui.session import SESSION_COOKIE
from cms.admin_ui.views.records_live import CHANGED_EVENT, OPEN_EVENT
from cms.services.delivery.realtime.stream import entry_order
from cms.wiring import Services
from tests.conftest import ADMIN_EMAIL, ADMIN_PASSWORD, Client, bearer, create_collection, create_record, login
from tests.test_admin_ui_errors import admin_cookies, assert_html

FIELDS = [{"name": "title", "type": "text"}]
SSE_CONNECT = re.compile(r'sse-connect="([^"]+)"')


class LiveStream:
    """One open live stream, read in the background; its events in a queue (None: it ended)."""

    def __init__(self, base_url: str, cookies: dict[str, str]) -> None:
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), cookies=cookies,
                                       timeout=httpx.Timeout(30.0, connect=5.0))
        self.events: asyncio.Queue[ServerSentEvent | None] = asyncio.Queue()
        self.status = 0
        self.headers: httpx.Headers | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self, path: str, last_event_id: str | None = None) -> ServerSentEvent:
        """Open `path` and return its first event (`live`)."""
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}

        async def read() -> None:
            try:
                async with aconnect_sse(self._http, "GET", path, headers=headers) as source:
                    self.status, self.headers = source.response.status_code, source.response.headers
                    opened.set_result(None)
                    async for event in source.aiter_sse():
                        await self.events.put(event)
            except (httpx.HTTPError, asyncio.CancelledError):
                pass
            finally:
                if not opened.done():
                    opened.set_result(None)
                await self.events.put(None)

        self._task = asyncio.create_task(read())
        await asyncio.wait_for(opened, 10)
        assert self.status == 200, self.status
        first = await self.next()
        assert first.event == OPEN_EVENT and first.id, first
        return first

    async def next(self, timeout: float = 10.0) -> ServerSentEvent:
        """The next event (fails on timeout or when the stream ended)."""
        event = await asyncio.wait_for(self.events.get(), timeout)
        assert event is not None, "the stream ended"
        return event

    async def count(self, within: float) -> list[ServerSentEvent]:
        """The events that arrive within `within` seconds."""
        got: list[ServerSentEvent] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while (event := await self.events.get()) is not None:
                    got.append(event)
        return got

    async def close(self) -> None:
        """Leave the stream."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._http.aclose()


@pytest.fixture
async def live(client: Client) -> AsyncIterator[Callable[[dict[str, str]], LiveStream]]:
    opened: list[LiveStream] = []

    def make(cookies: dict[str, str]) -> LiveStream:
        stream = LiveStream(str(client.make_url("/")), cookies)
        opened.append(stream)
        return stream

    yield make
    for stream in opened:
        await stream.close()


async def page_live_path(client: Client, cookies: dict[str, str], name: str) -> str:
    """The stream path the records page connects to (with its `?after=`)."""
    response = await client.get(f"/_/collections/{name}/records", cookies=cookies)
    assert_html(response, 200)
    found = SSE_CONNECT.search(await response.text())
    assert found is not None
    return html.unescape(found.group(1))


async def test_the_live_stream_is_for_signed_in_admins_only(client: Client, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    await create_collection(client, cookies[SESSION_COOKIE].split("~")[0], "posts", FIELDS)
    anonymous = await client.get("/_/collections/posts/records/live", allow_redirects=False)
    assert anonymous.status == 303 and anonymous.headers["Location"].startswith("/_/login")
    assert anonymous.headers["Content-Security-Policy"].startswith("default-src 'self'")
    stale = await client.get("/_/collections/posts/records/live", allow_redirects=False,
                             cookies={SESSION_COOKIE: "not~valid"})
    assert stale.status == 303 and stale.headers["Location"].startswith("/_/login")
    assert_html(await client.get("/_/collections/nope/records/live", cookies=cookies), 404)


async def test_a_burst_of_writes_is_one_records_changed_and_other_collections_are_quiet(
        client: Client, services: Services, live: Callable[[dict[str, str]], LiveStream]) -> None:
    cookies = await admin_cookies(client, services)
    token = cookies[SESSION_COOKIE].split("~")[0]
    await create_collection(client, token, "posts", FIELDS)
    await create_collection(client, token, "notes", FIELDS)
    stream = live(cookies)
    first = await stream.open(await page_live_path(client, cookies, "posts"))
    assert stream.headers is not None and stream.headers["Content-Type"].startswith("text/event-stream")
    assert stream.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert await stream.count(0.5) == []  # nothing written since the page was read

    await create_record(client, token, "notes", {"title": "elsewhere"})
    assert await stream.count(0.8) == []
    await asyncio.gather(*(create_record(client, token, "posts", {"title": f"p{n}"}) for n in range(8)))
    changed = await stream.count(1.5)
    assert 1 <= len(changed) <= 3, changed  # debounced: not one per write
    assert {e.event for e in changed} == {CHANGED_EVENT}
    assert all(entry_order(e.id) > entry_order(first.id) for e in changed)


TABLE = "/_/collections/posts/records?per_page=100&sort=-created"
"""The records page of these tests: every record on one page (ROUNDS * 3 * BURST stay below 100)."""
ROUNDS = 6
BURST = 5
"""Records written at once, while a page loads, while its stream opens, while it reconnects."""
CAUGHT_UP_S = 10.0


class Table:
    """What the browser shows: the records of the page, then of each refresh the stream asks for."""

    def __init__(self, client: Client, cookies: dict[str, str]) -> None:
        self.client, self.cookies = client, cookies
        self.shown: set[str] = set()

    async def load(self) -> str:
        """Load the page; return its stream's path (with the page's `?after=`)."""
        response = await self.client.get(TABLE, cookies=self.cookies)
        assert_html(response, 200)
        text = await response.text()
        self.shown = set(ROW_ID.findall(text))
        found = SSE_CONNECT.search(text)
        assert found is not None
        return html.unescape(found.group(1))

    async def refresh(self) -> None:
        """What `records-changed` makes htmx do: fetch the table alone."""
        response = await self.client.get(TABLE, cookies=self.cookies,
                                         headers={"HX-Request": "true", "HX-Target": "records-view"})
        assert_html(response, 200)
        self.shown = set(ROW_ID.findall(await response.text()))

    async def catch_up(self, stream: LiveStream, written: set[str], last_id: str) -> str:
        """Read `stream` as the page does (each `records-changed` refreshes the table) until the table
        shows every record of `written`; fails when it does not within CAUGHT_UP_S (a write was
        missed: no event came for it). Returns the id of the last event read."""
        deadline = asyncio.get_running_loop().time() + CAUGHT_UP_S
        while missing := written - self.shown:
            left_s = deadline - asyncio.get_running_loop().time()
            assert left_s > 0, f"{len(missing)} of {len(written)} records never shown: {sorted(missing)}"
            try:
                event = await stream.next(timeout=left_s)
            except TimeoutError:
                continue  # the assertion above reports it
            last_id = event.id or last_id
            if event.event == CHANGED_EVENT:
                await self.refresh()
        return last_id


ROW_ID = re.compile(r'<tr data-id="([^"]+)"')


async def test_nothing_is_missed_between_the_page_and_its_stream_or_across_a_reconnect(
        client: Client, services: Services, live: Callable[[dict[str, str]], LiveStream]) -> None:
    """Records are written while the page loads, while its stream opens and while it reconnects
    (`Last-Event-ID`), in each of ROUNDS rounds; after each, the table must come to show all of them
    through the stream's `records-changed` alone. A write that falls between the page's read and the
    stream's subscription, or between two connections, and gets no event, leaves the table short."""
    cookies = await admin_cookies(client, services)
    token = cookies[SESSION_COOKIE].split("~")[0]
    await create_collection(client, token, "posts", FIELDS)
    table = Table(client, cookies)
    written: set[str] = set()

    async def burst(label: str) -> None:
        records = await asyncio.gather(*(create_record(client, token, "posts", {"title": f"{label} {n}"})
                                         for n in range(BURST)))
        written.update(record["id"] for record in records)

    for round_number in range(ROUNDS):
        # each burst is the last writes before the table catches up: a later write would refresh the table
        # and hide one that was missed
        path, _ = await asyncio.gather(table.load(), burst(f"{round_number}: while the page loads"))
        stream = live(cookies)
        await table.catch_up(stream, written, (await stream.open(path)).id)
        await stream.close()
        path = await table.load()
        await burst(f"{round_number}: between the page and its stream")
        stream = live(cookies)
        first = await stream.open(path)
        await stream.close()  # the connection drops before the debounced `records-changed`
        again = live(cookies)  # the EventSource reconnects with the last id it saw
        last_id = await table.catch_up(again, written, (await again.open(path, last_event_id=first.id)).id)
        await again.close()
        later = live(cookies)  # and again, while records are written
        resumed, _ = await asyncio.gather(later.open(path, last_event_id=last_id),
                                          burst(f"{round_number}: while it reconnects"))
        await table.catch_up(later, written, resumed.id)
        await later.close()
    assert len(written) == ROUNDS * 3 * BURST and table.shown == written

    # a reconnect from the newest position, with nothing written since, gets no `records-changed`
    path = await table.load()
    quiet = live(cookies)
    newest = await quiet.open(path)
    await quiet.close()
    after = live(cookies)
    await after.open(path, last_event_id=newest.id)
    assert [e.event for e in await after.count(0.5)] == []


async def test_the_refresh_gets_the_table_alone(client: Client, services: Services) -> None:
    cookies = await admin_cookies(client, services)
    token = cookies[SESSION_COOKIE].split("~")[0]
    await create_collection(client, token, "posts", FIELDS)
    record = await create_record(client, token, "posts", {"title": "hello"})
    response = await client.get("/_/collections/posts/records?sort=-created", cookies=cookies,
                                headers={"HX-Request": "true", "HX-Target": "records-view"})
    assert_html(response, 200)
    text = await response.text()
    assert "<html" not in text and 'id="query-form"' not in text
    assert f'data-id="{record["id"]}"' in text and '<strong id="total">1</strong>' in text
    page = await (await client.get("/_/collections/posts/records?sort=-created", cookies=cookies)).text()
    assert 'hx-get="/_/collections/posts/records?sort=-created"' in page and 'id="live-status"' in page



async def test_a_signed_out_session_gets_no_more_events(
        client: Client, services: Services, live: Callable[[dict[str, str]], LiveStream]) -> None:
    cookies = await admin_cookies(client, services)
    session_token = cookies[SESSION_COOKIE].split("~")[0]
    other = (await login(client, ADMIN_EMAIL, ADMIN_PASSWORD))["token"]["access_token"]  # another session
    await create_collection(client, other, "posts", FIELDS)
    stream = live(cookies)
    await stream.open(await page_live_path(client, cookies, "posts"))
    await create_record(client, other, "posts", {"title": "seen"})
    assert (await stream.next()).event == CHANGED_EVENT
    response = await client.post("/api/v1/auth/logout", headers=bearer(session_token))
    assert response.status == 200, await response.text()
    await create_record(client, other, "posts", {"title": "not for a revoked session"})
    assert [e for e in await stream.count(1.0) if e.event == CHANGED_EVENT] == []
