"""The records table's live updates (issue 27, item 6): `GET /_/collections/{name}/records/live`, a
server-sent event stream for htmx's SSE extension (vendored as `static/htmx-ext-sse.min.js`).

The browser cannot subscribe through `POST /api/v1/realtime` (it holds no bearer token: the admin
UI's tokens live in its HttpOnly cookie), so this same-origin GET does it in-process, as the signed-in
admin: it opens a connection of this process's realtime hub, subscribes it to `<name>/*` with the
admin's principal and the reference of the session's access token (re-checked by the hub for every
event, as any subscription), and answers one event of its own, `records-changed`, whenever records
of the collection changed: at most one per DEBOUNCE_S, so a burst of writes makes the table fetch
itself once (the table's `hx-trigger="sse:records-changed"`). The event carries no record data.

Nothing is missed between the page and its stream, or across reconnects: the page passes the hub's
stream position it was read at (`?after=`), each event carries the position it covers as its SSE
`id`, and a reconnecting EventSource sends it back (`Last-Event-ID`). After subscribing, the stream
asks the hub whether the collection was written since then (`written_since`) and, if so (or if that
can no longer be told), sends `records-changed` at once. Until then the `live` event carries the
position the client came with, not the newer one the stream starts from: a client that reconnects
between the two (its `Last-Event-ID` is `live`'s) is told "changed" again rather than skipping the
writes its table never showed.

The stream ends when the access token expires (the EventSource reconnects; that request refreshes the
session cookie as any page does), when the session is revoked, or when the hub closes it; a GET has no
side effect, so no CSRF token is needed. Without it (no EventSource, the extension not loaded, the
hub at its limit) the page is the plain server-rendered table.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from cms.admin_ui.common import PREFIX, LoginRequired, admin_page
from cms.admin_ui.session import access_token
from cms.models import Principal
from cms.services.delivery.realtime import Connection, Message, RealtimeHub
from cms.services.delivery.realtime.messages import CONNECT, split_event_id
from cms.services.delivery.realtime.stream import entry_order
from cms.services.identity.authn import CredentialRef
from cms.web.context import services

CHANGED_EVENT = "records-changed"
"""The event the table's `hx-trigger="sse:records-changed"` listens to."""
OPEN_EVENT = "live"
"""The first event (no listener needs it). Its id is the position the stream starts from, or, when the
client's table missed writes, the client's own position until the `records-changed` that follows."""
DEBOUNCE_S = 0.3
"""Seconds the stream waits after a change for more before it sends one `records-changed`."""
PING_INTERVAL_S = 20.0
"""Seconds between `: ping` comments (as `/api/v1/realtime`); a client gone is noticed by them."""
CHECK_S = 20.0
"""Seconds between checks, while nothing changes, that the client and the session are still there."""


def live_path(collection_name: str) -> str:
    """The live stream's path of a collection's records table."""
    return f"{PREFIX}/collections/{collection_name}/records/live"


@admin_page
async def live(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/records/live[?after=<stream id>]: `text/event-stream` of
    `records-changed` events (module docstring) until the access token expires, the session is
    revoked, the client leaves or the server stops. Signed out: the sign-in redirect; unknown
    collection: 404; the hub at its connection limit or Redis away: 503. A view's table follows the
    writes to its source."""
    svc = services(request)
    collection = await svc.catalog.by_name(request.match_info["collection_name"])
    watched = collection.view.source if collection.view is not None else collection.name  # a view changes with it
    token = access_token(request)
    if token is None:
        raise LoginRequired()
    principal, ref = await svc.authenticator.reference(token)
    hub = svc.realtime
    conn = await hub.open(None, None)
    try:
        await hub.subscribe(conn.client_id, [f"{watched}/*"], principal, ref)
        after = _after(request)
        changed, position = await hub.written_since(watched, after)
        response = EventSourceResponse(ping_interval=PING_INTERVAL_S, sep="\n")
        await response.prepare(request)
    except BaseException:
        hub.release(conn)
        raise
    try:
        await _relay(hub, conn, response, changed=changed, position=position, ref=ref,
                     open_id=_view_position(after) if changed else position)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        response.stop_streaming()
    return response


def _after(request: web.Request) -> str:
    """Where the page's view of the collection stands: `Last-Event-ID` of a reconnecting EventSource,
    else the page's `?after=` ("0-0" when neither: the hub then answers "changed")."""
    return (request.headers.get("Last-Event-ID") or request.query.get("after") or "0-0").strip()[:64]


def _view_position(after: str) -> str:
    """The stream position the client's table stands at, from its `after` ("0-0" when that is not a
    stream id): the `live` event's id while a `records-changed` is still owed to it."""
    bare = split_event_id(after)[1] or after
    try:
        entry_order(bare)
    except ValueError:
        return "0-0"
    return bare


async def _relay(hub: RealtimeHub, conn: Connection, response: EventSourceResponse, *, changed: bool,
                 position: str, ref: CredentialRef, open_id: str) -> None:
    """Serve `conn` into a flag; send `live` (with `open_id` as its id), then `records-changed`
    (with the newest position it covers as its id) for each change, at most one per DEBOUNCE_S,
    until the stream should end: `conn` closed or its credential refused by the hub, `ref`'s token
    expired, or the client gone."""
    pending = asyncio.Event()
    latest = position

    async def collect(messages: list[Message]) -> None:
        nonlocal latest
        for message in messages:
            if message.event != CONNECT:
                latest = message.position  # this stream's ids are bare positions
                pending.set()

    if changed:
        pending.set()
    serving = asyncio.create_task(hub.serve(conn, collect))
    serving.add_done_callback(lambda _: pending.set())
    try:
        await response.send("on", id=open_id, event=OPEN_EVENT)
        while True:
            left_s = hub.expires_in_s(ref)
            if not pending.is_set() and left_s != 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pending.wait(), CHECK_S if left_s is None else min(CHECK_S, left_s))
            if serving.done() or conn.refused or hub.expires_in_s(ref) == 0 or not response.is_connected():
                return
            if pending.is_set():
                await asyncio.sleep(DEBOUNCE_S)
                pending.clear()
                await response.send("changed", id=latest, event=CHANGED_EVENT)
    finally:
        conn.close("gone")
        await asyncio.gather(serving, return_exceptions=True)


def routes() -> list[web.RouteDef]:
    """The live stream's route (listed by the records screen)."""
    return [web.get(PREFIX + "/collections/{collection_name}/records/live", live)]
