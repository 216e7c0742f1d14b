"""The shapes of `/api/v1/realtime` (decisions.md, Realtime): the subscription body and the stream's
query."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from cms.services.delivery.realtime.topics import MAX_TOPIC_LENGTH, MAX_TOPICS

TOPICS_EXAMPLE = ["posts/*?filter=published=true&expand=author", "posts/6650c0ffee0000000000aaaa"]


class RealtimeStreamQuerySchema(Schema):
    """`GET /api/v1/realtime`: a resume names its client (with the `Last-Event-ID` header)."""

    client_id = fields.String(validate=validate.Length(max=64), metadata={
        "description": "Resume this client: keep its subscriptions and, with the `Last-Event-ID` header, first "
                       "receive the events it missed (else one `resync` event). An unknown or forgotten client "
                       "gets a new `client_id` and `resync`."})


class RealtimeSubscribeSchema(Schema):
    """`POST /api/v1/realtime`: the client's whole new set of topics (an empty list clears it)."""

    client_id = fields.String(required=True, validate=validate.Length(min=1, max=64),
                              metadata={"description": "From the stream's `connect` event"})
    subscriptions = fields.List(fields.Raw(metadata={"type": "string", "maxLength": MAX_TOPIC_LENGTH}),
                                required=True, metadata={
        "description": f"At most {MAX_TOPICS:,} topics of at most {MAX_TOPIC_LENGTH:,} characters: "
                       "`<collection>/*` (the list rule decides) or `<collection>/<record id>` (the view rule), "
                       "each with optional `?filter=<expr>&expand=<paths>&fields=<names>`",
        "example": TOPICS_EXAMPLE})
