"""Handlers of `/api/v1/realtime` (decisions.md, Realtime): the server-sent event stream (through
aiohttp-sse) and the subscription POST. The fan-out itself is `cms.services.delivery.realtime`."""

from __future__ import annotations

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from cms.api.guards import presented_credential, principal_of
from cms.api.schemas.realtime import RealtimeStreamQuerySchema, RealtimeSubscribeSchema
from cms.services.identity.authn import CredentialRef
from cms.web.context import parse_body, parse_query, services

PING_INTERVAL_S = 20.0
"""Seconds between `: ping` comments (decisions.md)."""
SUBSCRIBE_BODY = RealtimeSubscribeSchema()
STREAM_QUERY = RealtimeStreamQuerySchema()


async def open_stream(request: web.Request) -> web.StreamResponse:
    """`GET /api/v1/realtime[?client_id=]`: `text/event-stream` until the client leaves, the stream is
    taken over or closed as slow, or the server stops. 503 past the per-process limit; 403 for a
    resume whose credentials are another principal's than the client's."""
    hub = services(request).realtime
    client_id = parse_query(request, STREAM_QUERY).get("client_id")
    conn = await hub.open(client_id or None, request.headers.get("Last-Event-ID"), principal_of(request))
    response = EventSourceResponse(ping_interval=PING_INTERVAL_S, sep="\n")
    try:
        await response.prepare(request)
    except BaseException:
        hub.release(conn)
        raise

    transport = request.transport
    if transport is not None:
        conn.abort = transport.abort

    async def write(message: bytes) -> None:
        await response.write(message)

    try:
        await hub.serve(conn, write)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        response.stop_streaming()
    return response


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
