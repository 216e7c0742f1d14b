"""Realtime: record subscriptions over server-sent events, across replicas (decisions.md, Realtime).

`stream` is the shared Redis Stream (events and control entries, client states), `publisher` appends
record events to it, `hub` holds one process's streams (its parts: `connections`, `binding`,
`rendering`, `fanout`, `replay`, `reader`, `housekeeping`; `client_state` is a client's state in Redis
and its owner), `messages` is what the hub hands the HTTP layer, `topics` parses and checks
subscriptions."""

from cms.services.delivery.realtime.connections import Connection
from cms.services.delivery.realtime.hub import RealtimeHub
from cms.services.delivery.realtime.messages import Message
from cms.services.delivery.realtime.publisher import RealtimePublisher
from cms.services.delivery.realtime.stream import EventStream

__all__ = ["Connection", "EventStream", "Message", "RealtimeHub", "RealtimePublisher"]
