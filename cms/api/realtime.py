"""Handlers of `/api/v1/realtime` (decisions.md, Realtime): the server-sent event stream (the hub's
messages framed by aiohttp-sse, `cms.web.sse`) and the subscription POST. The fan-out itself is
`cms.services.delivery.realtime`."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from cms.api.guards import presented_credential, principal_of
from cms.api.schemas.realtime import RealtimeStreamQuerySchema, RealtimeSubscribeSchema
from cms.services.delivery.realtime import Message
from cms.services.delivery.realtime.messages import event_id
from cms.services.identity.authn import CredentialRef
from cms.web.context import parse_body, parse_query, services
from cms.web.sse import BatchingEventSource

PING_INTERVAL_S = 20.0
"""Seconds between `: ping` comments (decisions.md)."""
FRAMED_KEPT = 4_096
"""Framed messages kept (`_framed`): more than the messages one event makes (one per way of seeing it)."""
SUBSCRIBE_BODY = RealtimeSubscribeSchema()
STREAM_QUERY = RealtimeStreamQuerySchema()


async def open_stream(request: web.Request) -> web.StreamResponse:
    """`GET /api/v1/realtime[?client_id=]`: `text/event-stream` until the client leaves, the stream is
    taken over or closed as slow, or the server stops. 503 past the per-process limit; 403 for a
    resume whose credentials are another principal's than the client's."""
    hub = services(request).realtime
    client_id = parse_query(request, STREAM_QUERY).get("client_id")
    conn = await hub.open(client_id or None, request.headers.get("Last-Event-ID"), principal_of(request))
    response = BatchingEventSource(ping_interval=PING_INTERVAL_S, sep="\n")
    try:
        await response.prepare(request)
    except BaseException:
        hub.release(conn)
        raise

    transport = request.transport
    if transport is not None:
        conn.abort = transport.abort

    client_id = conn.client_id

    async def send(messages: Sequence[Message]) -> None:
        await response.send_framed([(event_id(client_id, m.position), await _framed(response, m)) for m in messages])

    try:
        await hub.serve(conn, send)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        response.stop_streaming()
    return response


_framed_by_id: dict[int, tuple[Message, bytes]] = {}
"""The recently framed messages by `id()`, each kept with its message (so the id is not reused meanwhile)."""


async def _framed(response: BatchingEventSource, message: Message) -> bytes:
    """`message` framed by aiohttp-sse without its `id:` line (`BatchingEventSource.frame`), once for every
    stream that sends it: the hub shares one Message among the subscribers who see an event the same way."""
    kept = _framed_by_id.get(id(message))
    if kept is not None and kept[0] is message:
        return kept[1]
    framed = await response.frame(message.data.decode(), message.event)
    if len(_framed_by_id) >= FRAMED_KEPT:
        del _framed_by_id[next(iter(_framed_by_id))]
    _framed_by_id[id(message)] = (message, framed)
    return framed


async def subscribe(request: web.Request) -> web.Response:
    """`POST /api/v1/realtime` `{client_id, subscriptions}`: 204 once the new set is in force on
    every replica; 404 for a client that is not connected, 422 for a bad topic."""
    body = await parse_body(request, SUBSCRIBE_BODY, required=True)
    principal = principal_of(request)
    ref: CredentialRef | None = None
    credential = presented_credential(request)
    if principal is not None and credential is not None:
        principal, ref = await services(request).authenticator.reference(credential)
    await services(request).realtime.subscribe(body["client_id"], body["subscriptions"], principal, ref)
    return web.Response(status=204)
