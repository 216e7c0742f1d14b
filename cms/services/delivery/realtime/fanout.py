"""One record event to the connections that may receive it (decisions.md, Realtime): each connection's
credential checked, each topic's `SubscriberView` bound, the decision and the shared message taken from
`EventRenderings`, the message queued (live) or returned (replay). No database query unless a topic expands
a relation (`rendering.render`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime

from cms.errors import NotFound, Unauthorized
from cms.services.caching.catalog import Catalog
from cms.services.delivery.realtime.binding import bind
from cms.services.delivery.realtime.client_state import client_tag
from cms.services.delivery.realtime.connections import Connection
from cms.services.delivery.realtime.messages import Message
from cms.services.delivery.realtime.rendering import EventRenderings, Pending, RecordChange
from cms.services.delivery.realtime.stream import Entry
from cms.services.identity.authn import Authenticator
from cms.store.records import RecordRepository

log = logging.getLogger("cms.realtime")

FANOUT_SLICE = 64
"""Connections one live fan-out serves before it lets the event loop run other work (the answers of
creates waiting behind a large fan-out; docs/performance.md, "Realtime under a steady stream")."""


class Fanout:
    """Delivers record entries (`deliver`). `catalog`, `records`: collection definitions and the records'
    store (expansions only); `authenticator`: re-checks credentials whenever `session_epoch()` (None when
    Redis failed) moves; `clock`: aware UTC time, for access tokens' expiry (checked for every event)."""

    def __init__(self, catalog: Catalog, records: RecordRepository, authenticator: Authenticator, *,
                 session_epoch: Callable[[], Awaitable[str | None]], clock: Callable[[], datetime]) -> None:
        self._catalog = catalog
        self._records = records
        self._authenticator = authenticator
        self._session_epoch = session_epoch
        self._clock = clock

    async def deliver(self, entry: Entry, conns: Iterable[Connection], *, replaying: bool) -> list[Message]:
        """Deliver the RECORD `entry` to `conns`: pushed to their queues, or, for a replay, returned in
        order. A live entry a resuming connection's replay sent already is skipped (the seam)."""
        try:
            change = RecordChange.decode(entry.body)
            collection = await self._catalog.by_name(change.collection)
        except NotFound:
            return []
        except (ValueError, KeyError, TypeError):
            log.warning("realtime: unreadable entry %s skipped", entry.id)
            return []
        renderings = EventRenderings(entry, change, collection, self._records)
        epoch = await self._session_epoch()
        now = self._clock()
        order = entry.order
        out: list[Message] = []
        for served, conn in enumerate(conns, start=1):
            if not replaying and served % FANOUT_SLICE == 0:
                await asyncio.sleep(0)  # `conns` is the caller's own list: the hub may change meanwhile
            if conn.closed or (not replaying and conn.replay_from is not None and order <= conn.replayed_through):
                continue
            ref = conn.ref
            if ref is None:
                principal = None
            elif conn.refused or (ref.expires_at is not None and now >= ref.expires_at):
                continue
            elif (epoch is None or conn.checked_epoch != epoch) and not await self._revalidate(conn, epoch):
                continue
            else:
                principal = conn.principal
            for subscription in conn.subscriptions:
                topic = subscription.topic
                if topic.collection != change.collection:
                    continue
                view = subscription.current_view(collection, principal)
                if view is None:
                    view = subscription.view = await bind(self._catalog, topic, collection, principal)
                message = renderings.message_at_once(topic, view)
                if message is Pending.RENDERING:
                    message = await renderings.message(topic, view)
                if message is None:
                    continue
                if replaying:
                    out.append(message)
                else:
                    conn.push(order, message)
        return out

    async def _revalidate(self, conn: Connection, epoch: str | None) -> bool:
        """Check `conn`'s credential again (the session epoch moved, or could not be read): its principal
        now, kept as checked under `epoch`; False (and no more events until a new POST) once the
        credential is no longer valid."""
        assert conn.ref is not None
        try:
            conn.principal = await self._authenticator.revalidate(conn.ref)
        except Unauthorized:
            conn.refused = True
            log.info("realtime client %s: its credential is no longer valid; events stop", client_tag(conn.client_id))
            return False
        conn.checked_epoch = epoch
        return True
