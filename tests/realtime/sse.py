"""A realtime client for tests: one SSE stream read in the background with httpx-sse, its events in a
queue, and the subscription POST."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse

REALTIME = "/api/v1/realtime"


class Stream:
    """One open `GET /api/v1/realtime` of `base_url` (optionally a resume)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.events: asyncio.Queue[ServerSentEvent | None] = asyncio.Queue()
        self.client_id = ""
        self.last_id = ""
        self.status = 0
        self._task: asyncio.Task[None] | None = None
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0))

    async def open(self, client_id: str | None = None, last_event_id: str | None = None,
                   headers: dict[str, str] | None = None) -> ServerSentEvent:
        """Open the stream (with `headers`, e.g. a resume's credentials) and return its first event (`connect`)."""
        params = {"client_id": client_id} if client_id else {}
        headers = {**(headers or {}), **({"Last-Event-ID": last_event_id} if last_event_id else {})}
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def read() -> None:
            try:
                async with aconnect_sse(self._http, "GET", self.base_url + REALTIME, params=params,
                                        headers=headers) as source:
                    self.status = source.response.status_code
                    if not opened.done():
                        opened.set_result(None)
                    if self.status != 200:
                        return
                    async for event in source.aiter_sse():
                        if event.id:
                            self.last_id = event.id
                        await self.events.put(event)
            except (httpx.HTTPError, asyncio.CancelledError):
                pass
            finally:
                if not opened.done():
                    opened.set_result(None)
                await self.events.put(None)

        self._task = asyncio.create_task(read())
        await asyncio.wait_for(opened, 10)
        if self.status != 200:
            raise AssertionError(f"realtime stream answered {self.status}")
        first = await self.next()
        assert first.event == "connect", first
        self.client_id = first.json()["client_id"]
        return first

    async def next(self, timeout: float = 10.0) -> ServerSentEvent:
        """The next event. Fails on timeout or when the stream ended."""
        event = await asyncio.wait_for(self.events.get(), timeout)
        assert event is not None, "the stream ended"
        return event

    async def ended(self, timeout: float = 10.0) -> bool:
        """Whether the stream ends within `timeout` (events before the end are dropped)."""
        await self.until_end(timeout)
        return True

    async def until_end(self, timeout: float = 10.0) -> list[ServerSentEvent]:
        """The events that arrive before the stream ends. Fails unless it ends within `timeout`."""
        arrived: list[ServerSentEvent] = []
        async with asyncio.timeout(timeout):
            while (event := await self.events.get()) is not None:
                arrived.append(event)
        return arrived

    async def nothing(self, within: float = 0.5) -> None:
        """Assert no event arrives within `within` seconds."""
        with contextlib.suppress(TimeoutError):
            event = await asyncio.wait_for(self.events.get(), within)
            raise AssertionError(f"unexpected event {event}")

    async def subscribe(self, topics: list[str], headers: dict[str, str] | None = None,
                        client_id: str | None = None) -> httpx.Response:
        """POST the subscriptions; returns the answer."""
        return await self._http.post(self.base_url + REALTIME, headers=headers or {},
                                     json={"client_id": client_id or self.client_id, "subscriptions": topics})

    async def close(self) -> None:
        """Close the stream (the client may resume later)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._http.aclose()


def data(event: ServerSentEvent) -> Any:
    """The event's JSON data."""
    return event.json()
