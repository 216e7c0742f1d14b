"""A subscription bound to the subscriber (decisions.md, Realtime): the topic's rule, filter and shape for
one collection definition and one principal, decided through `cms.services.access` only.

`bind` makes a `SubscriberView` once per topic, collection definition and principal (again when either
changes); the fan-out then decides each record event in memory with `SubscriberView.shows` and renders it
by `render_key` (`rendering.render`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from cms.errors import CmsError
from cms.models import Collection, Principal
from cms.services.access import Access, Condition, check, refused
from cms.services.caching.catalog import Catalog
from cms.services.content.expansion import NOTHING, Expansion, resolve
from cms.services.delivery.realtime.topics import Topic
from cms.services.representation.record_view import RecordView

log = logging.getLogger("cms.realtime")


@dataclass(frozen=True)
class SubscriberView:
    """What one subscriber of a topic may see of `collection` as `principal`: the rule's decision
    (`access`), the filter's `condition` (None: no filter), the `expansion` and `view` (expand, fields)
    its records are rendered with, and `render_key`, the same for every subscriber whose records are
    rendered the same way ("" for the record as written: no rendering needed)."""

    collection: Collection
    principal: Principal | None
    access: Access
    condition: Condition | None
    expansion: Expansion
    view: RecordView
    render_key: str

    def shows(self, document: dict[str, Any]) -> bool:
        """Whether the subscriber may see the stored `document` and it matches the filter (a query
        shape the in-memory matcher lacks shows nothing, and is logged)."""
        try:
            return self.access.allows_document(document) and (
                self.condition is None or self.condition.matches(document))
        except ValueError as exc:
            log.error("realtime: a rule or filter of %s cannot be matched in memory (%s)", self.collection.name, exc)
            return False


class Subscription:
    """One topic of a connection and its `view` (None until bound; `bind` again when the collection's
    definition or the principal changed)."""

    __slots__ = ("topic", "view")

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.view: SubscriberView | None = None

    def current_view(self, collection: Collection, principal: Principal | None) -> SubscriberView | None:
        """`view` when it was bound to this `collection` definition and `principal`, else None."""
        view = self.view
        if view is None or view.collection is not collection or view.principal is not principal:
            return None
        return view


async def bind(catalog: Catalog, topic: Topic, collection: Collection, principal: Principal | None) -> SubscriberView:
    """`topic` bound to `collection`'s definition and `principal`: its rule's decision, filter condition,
    expansion and rendering key. A topic that no longer fits the collection (a field it names is gone)
    shows nothing."""
    access = check(principal, collection, topic.action, locale=topic.view.locale)
    try:
        condition = topic.condition(collection, principal)
        expansion = await resolve(catalog, collection, topic.view, principal)
    except CmsError:  # the collection changed since: the topic no longer fits it, it shows nothing
        access, condition, expansion = refused(principal, collection, topic.action), None, NOTHING
    # as written (the event's JSON, localized fields as objects) unless the topic asks for another shape
    as_written = topic.view.full and (access.localization.objects or not access.localization.fields)
    render_key = "" if as_written else orjson.dumps(
        [topic.view.parts(), expansion.key_parts(), access.localization.key_parts()], default=repr,
        option=orjson.OPT_SORT_KEYS).decode()
    return SubscriberView(collection, principal, access, condition, expansion, topic.view, render_key)
