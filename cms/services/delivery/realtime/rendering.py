"""What one record event looks like to each subscriber (decisions.md, Realtime): the decision (create,
update or delete, leave and enter) and the rendering, each made once per way of seeing the event.

`EventRenderings` holds one record entry's change and caches, for every subscriber that sees it the same
way, the documents the rules are decided on, the rendered bodies and the whole `Message`: a plain topic
(no `expand`, no `fields`) costs no I/O and no per-subscriber rendering at all. `render` is the one step
that turns a record into what a subscriber is shown (where per-subscriber field redaction belongs).
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from cms.errors import CmsError
from cms.models import Collection, Record
from cms.services.access import record_document
from cms.services.delivery.realtime.binding import SubscriberView
from cms.services.delivery.realtime.messages import Message
from cms.services.delivery.realtime.stream import Entry
from cms.services.delivery.realtime.topics import Topic
from cms.services.representation import records as represent
from cms.store.records import RecordRepository

log = logging.getLogger("cms.realtime")

CREATE, UPDATE, DELETE = "create", "update", "delete"
AFTER, BEFORE = "after", "before"
"""Which record of a change a subscriber is shown: as it is after the write (as it was, for a delete), or
as it was before an update (the record an update made leave the subscriber's view)."""


class Pending(enum.Enum):
    """`EventRenderings.message_at_once`'s answer when the message needs I/O (`message` renders it)."""

    RENDERING = "rendering"


@dataclass(frozen=True)
class RecordChange:
    """A decoded record entry: `collection` (name), `action`, `record_id`, `record` (the record's JSON
    after the write, or as it was for a delete; None when unknown) and `previous` (for an update, its
    JSON before; None when unknown)."""

    collection: str
    action: str
    record_id: str
    record: dict[str, Any] | None
    previous: dict[str, Any] | None

    @classmethod
    def decode(cls, body: bytes) -> RecordChange:
        """The change a RECORD entry's body holds (`publisher`). Raises ValueError, KeyError or TypeError."""
        raw = orjson.loads(body)
        return cls(collection=str(raw["n"]), action=str(raw["a"]), record_id=str(raw["i"]),
                   record=raw.get("r"), previous=raw.get("p"))


_COLLECTION = re.compile(rb'"n":"((?:[^"\\]|\\.)*)"')


def collection_of(body: bytes) -> str:
    """The collection name of a RECORD entry's body, without decoding the rest (most entries go to no
    local subscriber)."""
    found = _COLLECTION.search(body)
    return "" if found is None else str(orjson.loads(b'"' + found.group(1) + b'"'))


async def render(view: SubscriberView, record: Record, records: RecordRepository) -> dict[str, Any]:
    """The JSON of `record` as subscribers of `view` are shown it: without the values their field rules
    hide (decisions.md, Field rules), its expansion loaded (one that fails is logged and left out; the
    related records redacted for them too) and its fields chosen (`fields`). Reads `records` only to
    expand."""
    record = view.access.redact(record)
    expanded: tuple[Any, ...] = ()
    if view.expansion.segments:
        try:
            expanded = await view.expansion.load(records, [record])
        except CmsError as exc:
            log.info("realtime expand of %s skipped: %s", record.id, exc.detail)
    return represent.record_json(record, view.view, expanded)


@dataclass
class EventRenderings:
    """One record `entry` (its decoded `change`, of `collection`) for every subscriber: documents for the
    rules, rendered bodies and whole messages, each computed once and shared (`records` for expansions)."""

    entry: Entry
    change: RecordChange
    collection: Collection
    records: RecordRepository
    _records: dict[str, Record | None] = field(default_factory=dict)
    _documents: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    _bodies: dict[tuple[str, str, frozenset[str]], dict[str, Any]] = field(default_factory=dict)
    _messages: dict[tuple[str, str, str, str, frozenset[str]], Message] = field(default_factory=dict)

    def json_of(self, which: str) -> dict[str, Any] | None:
        """The record's JSON `AFTER` the write (as it was, for a delete) or `BEFORE` an update."""
        return self.change.record if which == AFTER else self.change.previous

    def record(self, which: str) -> Record | None:
        """`json_of(which)` as a Record (None when unknown or unreadable)."""
        if which not in self._records:
            body = self.json_of(which)
            try:
                self._records[which] = None if body is None else represent.record_from_json(body, self.collection)
            except (KeyError, ValueError, TypeError):
                self._records[which] = None
        return self._records[which]

    def document(self, which: str) -> dict[str, Any] | None:
        """The record as stored, for the rules (None when unknown)."""
        if which not in self._documents:
            record = self.record(which)
            self._documents[which] = None if record is None else record_document(record)
        return self._documents[which]

    def decide(self, view: SubscriberView, record_id: str | None) -> tuple[str, str] | None:
        """(action, which record) a subscriber of `view` (on one record: `record_id`) receives, or None
        (decisions.md: an update that makes the record leave the view is a delete, enter it a create)."""
        change = self.change
        if record_id is not None and record_id != change.record_id:
            return None
        after = self.document(AFTER)
        if change.action == DELETE:
            if after is None:  # unknown record: only a subscriber who sees everything learns of it
                return (DELETE, AFTER) if view.access.everything and view.condition is None else None
            return (DELETE, AFTER) if view.shows(after) else None
        shown_after = after is not None and view.shows(after)
        if change.action == CREATE:
            return (CREATE, AFTER) if shown_after else None
        before = self.document(BEFORE)
        shown_before = shown_after if before is None else view.shows(before)
        if shown_after:
            return (UPDATE, AFTER) if shown_before else (CREATE, AFTER)
        return (DELETE, BEFORE) if shown_before and before is not None else None

    def message_at_once(self, topic: Topic, view: SubscriberView) -> Message | None | Literal[Pending.RENDERING]:
        """The message `topic`'s subscriber gets (None: nothing) when it needs no I/O, else
        Pending.RENDERING (`message` then renders it): the common path of a fan-out runs without awaiting."""
        decided = self.decide(view, topic.record_id)
        if decided is None:
            return None
        action, which = decided
        hidden = self.hidden(which, view)
        key = (topic.text, action, which, view.render_key, hidden)
        shared = self._messages.get(key)
        if shared is None:
            if view.render_key:
                return Pending.RENDERING
            body = self._plain(which, view)
            if hidden:
                body = {k: v for k, v in body.items() if k not in hidden}
            shared = self._messages[key] = self._message(topic, action, body)
        return shared

    def _plain(self, which: str, view: SubscriberView) -> dict[str, Any]:
        """The record's JSON as written in the entry; only its id when unknown, or when it cannot be
        read as a record and the subscriber's field rules would have to be decided on it."""
        body = self.json_of(which)
        if body is None or view.access.fields.guards and self.document(which) is None:
            return {"id": self.change.record_id}
        return body

    def hidden(self, which: str, view: SubscriberView) -> frozenset[str]:
        """The fields of the record `which` that subscribers of `view` may not see (their field rules):
        subscribers who see the same fields share one message."""
        document = self.document(which)
        return frozenset() if document is None else view.access.fields.hidden(document)

    async def message(self, topic: Topic, view: SubscriberView) -> Message | None:
        """The message `topic`'s subscriber gets (None: nothing), rendered (`render`) once for every
        subscriber that sees it the same way."""
        ready = self.message_at_once(topic, view)
        if ready is not Pending.RENDERING:
            return ready
        action, which = self.decide(view, topic.record_id) or (UPDATE, AFTER)
        hidden = self.hidden(which, view)
        key = (topic.text, action, which, view.render_key, hidden)
        shared = self._messages[key] = self._message(topic, action, await self._body(which, view, hidden))
        return shared

    def _message(self, topic: Topic, action: str, body: dict[str, Any]) -> Message:
        return Message(topic.text, self.entry.id, orjson.dumps({"action": action, "record": body}))

    async def _body(self, which: str, view: SubscriberView, hidden: frozenset[str]) -> dict[str, Any]:
        key = (which, view.render_key, hidden)
        if key not in self._bodies:
            record = self.record(which)
            self._bodies[key] = self._plain(which, view) if record is None else await render(view, record, self.records)
        return self._bodies[key]
