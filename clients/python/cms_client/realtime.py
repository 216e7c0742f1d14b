"""Realtime for the async client (decisions.md, Realtime): one server-sent event stream (httpx-sse) per client,
subscriptions posted with the client's credentials, resume with `Last-Event-ID` after a drop (backoff 0.1 s
doubling to 5 s), subscriptions re-posted when the service knows the client under a new id or the
credentials change (a refresh, a login, a logout), and `resync` handed to `on_resync` listeners. The blocking
client's `SyncRealtime` runs the same `AsyncRealtime` on an event loop of its own thread.

The service binds a client id to the principal of its first POST with credentials and refuses (403 `forbidden`)
a POST of anyone else, anonymous included. When a re-post after a login as another user or a logout is refused,
the client drops that id and its stream, opens a new stream (a new client id) at once, posts the same topics
there with the new credentials and, once they are in force, calls the `on_resync` listeners: what the
application shows was the old principal's view. Callbacks stay subscribed; the 403 never reaches the caller."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypedDict, TypeVar
from urllib.parse import quote, urlencode

import httpx
from httpx_sse import EventSource, ServerSentEvent

from cms_client import _resources
from cms_client._core import Call, Flow, build_request, error_from
from cms_client.auth_store import AuthStore
from cms_client.errors import CmsError, CmsNetworkError

T = TypeVar("T")

log = logging.getLogger("cms_client.realtime")

RECONNECT_MIN_S = 0.1
"""First wait before reconnecting after a drop, in seconds; doubled per failed try."""
RECONNECT_MAX_S = 5.0
"""Longest wait between reconnection tries, in seconds."""
CONNECT_TIMEOUT_S = 30.0
"""How long `subscribe` waits for the stream's `connect` event, in seconds."""
READ_TIMEOUT_S = 60.0
"""A stream silent this long (the service pings every 20 s) counts as dropped, in seconds."""
SEEN_IDS = 10_000
"""How many recent event ids are remembered so that no event reaches a callback twice."""


class RealtimeEvent(TypedDict):
    """One record event, the same in both clients: the `topic` as subscribed (`posts/*?filter=...`), the event
    `id` (increasing per stream), `action` (`create`, `update`, `delete`) and the `record` as the subscriber may
    see it."""

    topic: str
    id: str
    action: str
    record: dict[str, Any]


class RealtimeTransport(Protocol):
    """What realtime needs of a client: its URL, auth store, an `httpx.AsyncClient` for the stream and a way to
    run a flow (the subscription POST) with the client's credentials and refresh."""

    base_url: str
    store: AuthStore
    http: httpx.AsyncClient

    async def run(self, flow: Flow[T], timeout: float | None = None) -> T:
        """Drive `flow` to its result."""
        ...


class BlockingTransport(Protocol):
    """What the blocking client's transport offers realtime (`SyncTransport`)."""

    base_url: str
    store: AuthStore

    def run(self, flow: Flow[T], timeout: float | None = None) -> T:
        """Drive `flow` to its result."""
        ...


Callback = Callable[[RealtimeEvent], Awaitable[None] | None]
"""Called with each event of a topic; may be a plain or an async function."""
ResyncListener = Callable[[], Awaitable[None] | None]
"""Called when the service could not replay missed events: reload the data."""


def topic_string(topic: str, filter: str | None = None, expand: str | None = None, fields: str | None = None) -> str:
    """The topic as posted and as the service names its events: `posts/*?filter=...&expand=...&fields=...`."""
    options = {key: value for key, value in (("filter", filter), ("expand", expand), ("fields", fields)) if value}
    if not options:
        return topic
    # percent-encoded as JavaScript's encodeURIComponent does (a space is %20, never +), as the JS client names topics
    return topic + ("&" if "?" in topic else "?") + urlencode(options, safe="!*'()", quote_via=quote)


class AsyncRealtime:
    """`client.realtime`: subscribe callbacks to topics over one stream, opened on the first subscription and
    closed with the last `unsubscribe` (or `close`)."""

    def __init__(self, transport: RealtimeTransport) -> None:
        self._t = transport
        self._callbacks: dict[str, list[Callback]] = {}
        self._resync_listeners: list[ResyncListener] = []
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._post_lock = asyncio.Lock()
        self._client_id: str | None = None
        self._last_event_id: str | None = None
        self._posted: tuple[str, str, tuple[str, ...]] | None = None
        self._seen: deque[str] = deque(maxlen=SEEN_IDS)
        self._principal_changed = False
        """The client id was dropped for another principal's: tell `on_resync` once the new set is in force."""
        self._background: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_listening = transport.store.on_change(self._credentials_changed)

    @property
    def client_id(self) -> str | None:
        """The id the service knows this client by (None before the first `connect`)."""
        return self._client_id

    async def subscribe(self, topic: str, callback: Callback, *, filter: str | None = None,
                        expand: str | None = None, fields: str | None = None) -> Callable[[], Awaitable[None]]:
        """Call `callback(event)` for each event of `topic` (`<collection>/*` or `<collection>/<record id>`),
        narrowed by `filter` and shaped by `expand` / `fields`. Returns once the service has the subscription in
        force (events of later writes reach the callback); the returned coroutine function unsubscribes.
        Raises CmsError 422 (unknown collection, bad filter) or CmsNetworkError (no stream within 30 s)."""
        key = topic_string(topic, filter, expand, fields)
        self._callbacks.setdefault(key, []).append(callback)
        self._ensure_stream()
        try:
            await self._post_subscriptions()
        except BaseException:
            await self._remove(key, callback)
            raise

        async def unsubscribe() -> None:
            await self._remove(key, callback)

        return unsubscribe

    async def unsubscribe(self, topic: str | None = None) -> None:
        """Drop every callback of `topic`, as subscribed (`posts/*?filter=...`) or by its bare topic (`posts/*`
        drops it with every filter); None: every topic. The stream closes with the last one."""
        if topic is not None:
            for key in [key for key in self._callbacks if topic in (key, key.split("?", 1)[0])]:
                self._callbacks.pop(key, None)
        if topic is None or not self._callbacks:
            await self.close()
        elif self._connected.is_set():
            await self._post_subscriptions()

    def on_resync(self, listener: ResyncListener) -> Callable[[], None]:
        """Call `listener()` when the service sends `resync` (events were missed and cannot be replayed: reload
        the data), and when the subscriptions moved to a new stream because the credentials are now another
        principal's (a login as another user, a logout): the events from then on follow the new principal's
        rules. Returns the function that stops it."""
        self._resync_listeners.append(listener)
        return lambda: self._resync_listeners.remove(listener) if listener in self._resync_listeners else None

    async def close(self) -> None:
        """Close the stream and forget every subscription."""
        self._callbacks.clear()
        task, self._task = self._task, None
        for pending in [*self._background, *([task] if task else [])]:
            pending.cancel()
        for pending in [*self._background, *([task] if task else [])]:
            try:
                await pending
            except (asyncio.CancelledError, Exception):
                pass
        self._connected.clear()
        self._client_id = self._last_event_id = None
        self._posted = None
        self._principal_changed = False

    async def _remove(self, key: str, callback: Callback) -> None:
        callbacks = self._callbacks.get(key, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            self._callbacks.pop(key, None)
        if not self._callbacks:
            await self.close()
        elif self._connected.is_set():
            await self._post_subscriptions()

    def _ensure_stream(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="cms-client-realtime")

    async def _post_subscriptions(self) -> None:
        """Post the current topics unless the service already has them for this client id and credentials. A
        POST refused as another principal's (403 `forbidden`) is made again, once, on a new stream."""
        moved = notify = False
        async with self._post_lock:
            while True:
                try:
                    await asyncio.wait_for(self._connected.wait(), CONNECT_TIMEOUT_S)
                except TimeoutError as exc:
                    message = f"realtime: no stream from {self._t.base_url} within {CONNECT_TIMEOUT_S} s"
                    raise CmsNetworkError(message) from exc
                client_id, topics = self._client_id, tuple(sorted(self._callbacks))
                if client_id is None or self._posted == (client_id, self._t.store.token, topics):
                    break
                try:
                    await self._t.run(_resources.realtime_subscribe(client_id, topics))
                except CmsError as exc:
                    if exc.status != 403 or exc.code != "forbidden" or moved or self._client_id != client_id:
                        raise
                    moved = True
                    await self._drop_client()
                    if not self._callbacks:
                        return  # closed meanwhile
                    continue
                self._posted = (client_id, self._t.store.token, topics)
                notify, self._principal_changed = self._principal_changed, False
                break
        if notify:  # outside the lock: a listener may subscribe
            for listener in list(self._resync_listeners):
                await _call(listener)

    async def _drop_client(self) -> None:
        """Give up the client id (bound to another principal) and its stream, and open a new stream."""
        self._connected.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])  # raises neither the task's error nor swallows our own cancellation
        self._client_id = self._last_event_id = None
        self._posted = None
        self._seen.clear()
        self._principal_changed = True
        if self._callbacks:
            self._ensure_stream()

    def _credentials_changed(self, store: AuthStore) -> None:
        if self._task is None or self._loop is None or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._repost_later)

    def _repost_later(self) -> None:
        if self._task is None:
            return
        task = asyncio.get_running_loop().create_task(self._repost())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _repost(self) -> None:
        try:
            await self._post_subscriptions()
        except (CmsError, CmsNetworkError) as exc:
            # the stream dropped meanwhile (404: client not connected): its reconnection posts again
            log.info("realtime: re-posting subscriptions failed (%s); retried after reconnecting", exc)

    async def _run(self) -> None:
        delay_s = RECONNECT_MIN_S
        while True:
            try:
                await self._stream()
            except (httpx.HTTPError, CmsError, CmsNetworkError, ValueError) as exc:
                log.info("realtime: stream dropped (%s: %s); reconnecting in %.1f s", type(exc).__name__, exc, delay_s)
            if self._connected.is_set():
                delay_s = RECONNECT_MIN_S
            self._connected.clear()
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, RECONNECT_MAX_S)

    async def _stream(self) -> None:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
        if self._last_event_id:
            headers["Last-Event-ID"] = self._last_event_id
        call = Call[None]("GET", "/api/v1/realtime", params={"client_id": self._client_id}, headers=headers,
                          auth=False)
        request = build_request(self._t.base_url, call, self._t.store, None)
        request.extensions["timeout"] = httpx.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S).as_dict()
        response = await self._t.http.send(request, stream=True)
        try:
            if response.status_code != 200:
                await response.aread()
                raise error_from(response)
            async for event in EventSource(response).aiter_sse():
                await self._handle(event)
        finally:
            await response.aclose()

    async def _handle(self, event: ServerSentEvent) -> None:
        if event.id:
            seen_key = f"{event.id}\n{event.event}"  # a write matching several topics is one id, once per topic
            if seen_key in self._seen:
                return
            self._seen.append(seen_key)
            self._last_event_id = event.id
        if event.event == "connect":
            client_id = str(event.json()["client_id"])
            if client_id != self._client_id:
                self._client_id, self._posted = client_id, None
            self._connected.set()
            self._repost_later()
        elif event.event == "resync":
            for listener in list(self._resync_listeners):
                await _call(listener)
        else:
            data = event.json()
            payload: RealtimeEvent = {"topic": event.event, "id": event.id, "action": data["action"],
                                      "record": data["record"]}
            for callback in list(self._callbacks.get(event.event, [])):
                await _call(callback, payload)


async def _call(function: Callable[..., Awaitable[None] | None], *args: Any) -> None:
    """Call a user's callback; its failure is logged, never stops the stream."""
    try:
        result = function(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("realtime: a callback failed")


async def _awaited(work: Awaitable[T]) -> T:
    return await work


class _ThreadedTransport:
    """A `RealtimeTransport` over the blocking client's transport: the subscription POST runs in a worker thread
    through it, so refreshes stay one at a time (its lock) whichever thread asks."""

    def __init__(self, blocking: BlockingTransport, http: httpx.AsyncClient) -> None:
        self._blocking = blocking
        self.base_url = blocking.base_url
        self.store = blocking.store
        self.http = http

    async def run(self, flow: Flow[T], timeout: float | None = None) -> T:
        """Drive `flow` in a worker thread with the blocking transport."""
        return await asyncio.to_thread(self._blocking.run, flow, timeout)


class SyncRealtime:
    """`client.realtime` of the blocking client: the `AsyncRealtime` protocol run on an event loop in a daemon
    thread (`cms-client-realtime`), started by the first `subscribe` and stopped by `close`. Callbacks run in
    that thread: keep them short (hand events to a `queue.Queue`), and do not call realtime from them
    (RuntimeError)."""

    def __init__(self, transport: BlockingTransport) -> None:
        self._blocking = transport
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._realtime: AsyncRealtime | None = None
        self._http: httpx.AsyncClient | None = None

    @property
    def client_id(self) -> str | None:
        """The id the service knows this client by (None before the first `connect`)."""
        return self._realtime.client_id if self._realtime is not None else None

    def subscribe(self, topic: str, callback: Callable[[RealtimeEvent], None], *, filter: str | None = None,
                  expand: str | None = None, fields: str | None = None) -> Callable[[], None]:
        """Call `callback(event)` (in the realtime thread) for each event of `topic`, as `AsyncRealtime.subscribe`:
        returns once the subscription is in force; the returned function unsubscribes. CmsError 422,
        CmsNetworkError (no stream within 30 s)."""
        realtime = self._start()
        unsubscribe = self._wait(realtime.subscribe(topic, callback, filter=filter, expand=expand, fields=fields))

        def stop() -> None:
            if self._realtime is realtime:  # after `close`, nothing is left to stop
                self._wait(unsubscribe())

        return stop

    def unsubscribe(self, topic: str | None = None) -> None:
        """Drop every callback of `topic` (see `AsyncRealtime.unsubscribe`); None: every topic."""
        if self._realtime is not None:
            self._wait(self._realtime.unsubscribe(topic))

    def on_resync(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener()` (in the realtime thread) when events were missed or the principal changed (see
        `AsyncRealtime.on_resync`) until `close`; returns the function that stops it."""
        return self._start().on_resync(listener)

    def close(self) -> None:
        """Close the stream, forget every subscription and stop the thread."""
        with self._lock:
            realtime, loop, thread, http = self._realtime, self._loop, self._thread, self._http
            self._realtime = self._loop = self._thread = self._http = None
        if realtime is None or loop is None or thread is None or http is None:
            return
        realtime._stop_listening()
        asyncio.run_coroutine_threadsafe(realtime.close(), loop).result()
        asyncio.run_coroutine_threadsafe(http.aclose(), loop).result()
        asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop).result()  # to_thread's workers
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def _start(self) -> AsyncRealtime:
        with self._lock:
            if self._realtime is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="cms-client-realtime", daemon=True)
                thread.start()
                http = httpx.AsyncClient()
                realtime = AsyncRealtime(_ThreadedTransport(self._blocking, http))
                self._loop, self._thread, self._http, self._realtime = loop, thread, http, realtime
            return self._realtime

    def _wait(self, work: Awaitable[T]) -> T:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or threading.current_thread() is thread:
            if inspect.iscoroutine(work):
                work.close()
            if loop is None or thread is None:
                raise CmsNetworkError("realtime is closed")
            raise RuntimeError("realtime: call subscribe/unsubscribe from another thread than its callbacks'")
        return asyncio.run_coroutine_threadsafe(_awaited(work), loop).result()
