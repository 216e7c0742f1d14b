"""Realtime: record subscriptions over server-sent events, across replicas (decisions.md, Realtime).

`stream` is the shared Redis Stream (events and control entries, client states), `publisher` appends
record events to it, `hub` holds one process's streams and fans entries out to them, `topics`
parses and checks subscriptions."""

from cms.services.delivery.realtime.hub import Connection, RealtimeHub
from cms.services.delivery.realtime.publisher import RealtimePublisher
from cms.services.delivery.realtime.stream import EventStream

__all__ = ["Connection", "EventStream", "RealtimeHub", "RealtimePublisher"]
