"""The HTTP side of webhook deliveries: one POST per attempt, signed, with a time-out, no
redirects, and the SSRF rule applied to the address actually connected to (decisions.md, Webhook
deliveries). The aiohttp client session is injected (one per process, STYLE rule 12).

In production mode (`WEBHOOK_ALLOW_PRIVATE` unset) the process's one session (webhooks and OAuth2
provider requests alike) opens its sockets through `guarded_socket`, which refuses every address
that is not public at the moment of connecting: an IP literal in any spelling, and a name whose DNS
changed to a private address after the URL was saved (rebinding). aiohttp itself refuses
non-canonical IPv4 forms (`2130706433`, `0177.0.0.1`, `127.1`).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from cms import __version__
from cms.models import Webhook, WebhookDelivery
from cms.security.addresses import is_public_address
from cms.security.signing import SIGNATURE_HEADER, sign, sign_standard

REQUEST_TIMEOUT_S = 10.0
"""Time-out of one delivery request (connect, send, response), in seconds."""
MAX_RESPONSE_BYTES = 2048
"""How much of a receiver's response body the delivery log keeps."""
CONNECTION_LIMIT = 100
"""Connections of the delivery session, and requests one process has in flight at once."""
SEND_CONCURRENCY = 50
"""Requests one batch (`send_all`) has in flight at once."""
USER_AGENT = f"cms-webhooks/{__version__}"
REFUSED_ADDRESS = "refused: the URL resolves to a loopback, link-local or private address"
REFUSED_HOST = "refused: the URL's host is not a valid name or canonical address"

AddressCheck = Callable[[str], Awaitable[str | None]]
"""hostname -> None when a webhook may target it, else why not (a message for a 422)."""


class AddressRefused(OSError):
    """The address about to be connected to is refused by the SSRF rule."""


def guarded_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """aiohttp's `socket_factory`: a socket for `addr_info` (family, type, proto, name, address),
    or AddressRefused when the address is not public."""
    family, kind, proto, _, address = addr_info
    if not is_public_address(str(address[0])):
        raise AddressRefused(REFUSED_ADDRESS)
    return socket.socket(family=family, type=kind, proto=proto)


def address_check(*, allow_private: bool) -> AddressCheck:
    """The check made when a webhook is saved: with `allow_private`, every host passes; otherwise
    every address the host resolves to must be public (a host that does not resolve is refused)."""

    async def check(hostname: str) -> str | None:
        if allow_private:
            return None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(hostname, None, type=socket.SOCK_STREAM)
        except OSError:
            return f"The host '{hostname[:100]}' does not resolve."
        if not infos or not all(is_public_address(str(info[4][0])) for info in infos):
            return "The URL resolves to a loopback, link-local or private address (WEBHOOK_ALLOW_PRIVATE is off)."
        return None

    return check


def connector(*, allow_private: bool) -> aiohttp.TCPConnector:
    """The connector of the process's session: sockets to public addresses only unless `allow_private`."""
    return aiohttp.TCPConnector(socket_factory=None if allow_private else guarded_socket, limit=CONNECTION_LIMIT)


@dataclass(frozen=True)
class SendResult:
    """One attempt's outcome: the receiver's status and the start of its body, or `error`;
    `retryable` for 5xx, time-outs and connection errors; `duration_ms` of the whole exchange."""

    status_code: int | None
    response_body: str
    duration_ms: int
    error: str | None

    @property
    def success(self) -> bool:
        """A 2xx answer."""
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def retryable(self) -> bool:
        """5xx, time-out or connection error (not a refused address, 3xx or 4xx)."""
        if self.status_code is not None:
            return self.status_code >= 500
        return self.error is not None and not self.error.startswith("refused")


class WebhookSender:
    """POSTs deliveries with `session` (whose connector applies the SSRF rule) and a time-out of
    `timeout_s` seconds per request. At most CONNECTION_LIMIT requests are in flight at once, however
    many batches run: a request waits for its turn before its time-out starts, not in the connector's
    pool, where the wait would count against it."""

    def __init__(self, session: aiohttp.ClientSession, *, timeout_s: float = REQUEST_TIMEOUT_S,
                 max_in_flight: int = CONNECTION_LIMIT) -> None:
        self._session = session
        self._timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._in_flight = asyncio.Semaphore(max_in_flight)

    async def send_all(self, requests: Sequence[tuple[Webhook, WebhookDelivery]], *,
                       concurrency: int = SEND_CONCURRENCY, start_within_s: float | None = None
                       ) -> list[SendResult | None]:
        """`send` each (webhook, delivery), at most `concurrency` at a time; the results in the
        order of `requests`. With `start_within_s`, a request that could not start within that
        many seconds (slow receivers hold the slots) is not sent, and its result is None. Never
        raises for network trouble."""
        slots = asyncio.Semaphore(concurrency)
        waiting: set[asyncio.Task[Any]] = set()
        expired = False

        def expire() -> None:  # one timer per batch, not one per request
            nonlocal expired
            expired = True
            for task in waiting:
                task.cancel()

        async def one(webhook: Webhook, delivery: WebhookDelivery) -> SendResult | None:
            task = asyncio.current_task()
            assert task is not None
            waiting.add(task)
            try:
                await slots.acquire()
                try:
                    await self._in_flight.acquire()
                except BaseException:
                    slots.release()
                    raise
            except asyncio.CancelledError:
                waiting.discard(task)
                if expired and task.uncancel() == 0:  # given up by `expire`, not cancelled from outside
                    return None
                raise
            waiting.discard(task)
            try:
                return await self._post(webhook, delivery)
            finally:
                self._in_flight.release()
                slots.release()

        timer = (None if start_within_s is None
                 else asyncio.get_running_loop().call_later(start_within_s, expire))
        try:
            return list(await asyncio.gather(*(one(w, d) for w, d in requests)))
        finally:
            if timer is not None:
                timer.cancel()

    async def send(self, webhook: Webhook, delivery: WebhookDelivery) -> SendResult:
        """One attempt: POST `delivery.body` to `webhook.url` with the headers of decisions.md and
        the Standard Webhooks headers, once one of the process's in-flight slots is free. Never
        raises for network trouble: it is in the result."""
        async with self._in_flight:
            return await self._post(webhook, delivery)

    async def _post(self, webhook: Webhook, delivery: WebhookDelivery) -> SendResult:
        body = delivery.body.encode("utf-8")
        started = time.monotonic()
        try:
            async with self._session.post(webhook.url, data=body, headers=delivery_headers(webhook, delivery, body),
                                          allow_redirects=False, timeout=self._timeout) as response:
                excerpt = await response.content.read(MAX_RESPONSE_BYTES)
                return SendResult(response.status, excerpt.decode("utf-8", "replace"), _ms_since(started), None)
        except TimeoutError:
            return SendResult(None, "", _ms_since(started), f"timed out after {self._timeout_s:g} s")
        except aiohttp.InvalidUrlClientError:  # e.g. a non-canonical IPv4 form, which aiohttp refuses
            return SendResult(None, "", _ms_since(started), REFUSED_HOST)
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, AddressRefused):
                return SendResult(None, "", _ms_since(started), REFUSED_ADDRESS)
            return SendResult(None, "", _ms_since(started), f"connection failed: {type(exc).__name__}")
        except (aiohttp.ClientError, OSError) as exc:
            return SendResult(None, "", _ms_since(started), f"request failed: {type(exc).__name__}")


def delivery_headers(webhook: Webhook, delivery: WebhookDelivery, body: bytes) -> dict[str, Any]:
    """The request headers of one attempt: Content-Type, User-Agent, X-Webhook-Event,
    X-Webhook-Delivery, X-Webhook-Signature (with a secret), and the Standard Webhooks
    `webhook-id` (the delivery id), `webhook-timestamp` (Unix seconds, now) and `webhook-signature`."""
    timestamp_s = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Webhook-Event": delivery.event,
        "X-Webhook-Delivery": delivery.id,
        "webhook-id": delivery.id,
        "webhook-timestamp": str(timestamp_s),
    }
    if webhook.secret:
        headers[SIGNATURE_HEADER] = sign(webhook.secret, body)
        headers["webhook-signature"] = sign_standard(webhook.secret, delivery.id, timestamp_s, body)
    return headers


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
