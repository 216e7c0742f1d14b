"""Realtime topics (decisions.md, Realtime): `<collection>/*` or `<collection>/<record id>`, each
with optional `?filter=<expr>&expand=<paths>&fields=<names>&locale=<code>`. Pure parsing here; the hub
checks a topic against the collections (`check_topics`) and binds it to a subscriber.

A filter holds `&&` of the grammar: the query is cut only before `filter=`, `expand=`, `fields=` or
`locale=`, so `posts/*?filter=a=1 && b=2&expand=author` reads as meant; values are percent-decoded
(`%26` is `&`). A topic without `locale` shows localized fields as objects (`*`, decisions.md, Localized
fields), its filter reading the default locale's values; with one, as a read with that `?locale=`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from cms.errors import CmsError, NotFound, ValidationFailed
from cms.models import Collection, Principal
from cms.services.access import Condition, compile_filter
from cms.services.caching.catalog import Catalog
from cms.services.content.expansion import resolve
from cms.services.content.locales import ALL, localization
from cms.services.representation.record_view import RecordView, view_of

MAX_TOPICS = 1_000
"""Topics one client may hold (decisions.md)."""
MAX_TOPIC_LENGTH = 2_500
"""Characters one topic may have (decisions.md)."""
OPTIONS = ("filter", "expand", "fields", "locale")
_OPTION_CUT = re.compile(r"&(?=(?:filter|expand|fields|locale)=)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Topic:
    """One parsed topic: its `text` as subscribed (the SSE event name), the `collection` name, the
    `record_id` (None for `*`), the `filter` expression (None: none) and the `view` (expand, fields)."""

    text: str
    collection: str
    record_id: str | None
    filter: str | None
    view: RecordView

    @property
    def action(self) -> str:
        """The rule that decides what the subscriber sees: `list` for `*`, `view` for one record."""
        return "list" if self.record_id is None else "view"

    def condition(self, collection: Collection, principal: Principal | None) -> Condition | None:
        """The filter compiled over `collection` for `principal` (matched in memory; None: no filter).
        Raises InvalidFilter."""
        if self.filter is None:
            return None
        return compile_filter(collection, self.filter, principal, locale=self.view.locale)


def parse_topic(text: str) -> Topic:
    """The topic `text`. Raises ValueError with a message for the client: too long, control
    characters, no `/`, an empty collection or record part, an unknown or repeated option, or a bad
    `expand`/`fields` (their InvalidFilter's detail)."""
    if len(text) > MAX_TOPIC_LENGTH:
        raise ValueError(f"at most {MAX_TOPIC_LENGTH} characters, {len(text)} given")
    if _CONTROL.search(text):
        raise ValueError("control characters are not allowed")
    path, _, query = text.partition("?")
    collection, slash, record = path.partition("/")
    if not slash or not collection or not record or "/" in record:
        raise ValueError("expected '<collection>/*' or '<collection>/<record id>'")
    options: dict[str, str] = {}
    for part in _OPTION_CUT.split(query) if query else []:
        name, equals, value = part.partition("=")
        if not equals or name not in OPTIONS:
            raise ValueError(f"unknown option '{name[:40]}' (allowed: {', '.join(OPTIONS)})")
        if name in options:
            raise ValueError(f"option '{name}' given twice")
        options[name] = unquote(value)
    try:
        view = view_of(options.get("expand"), options.get("fields"), options.get("locale") or ALL)
    except CmsError as exc:
        raise ValueError(exc.detail) from exc
    filter_text = options.get("filter")
    return Topic(text=text, collection=unquote(collection), record_id=None if record == "*" else unquote(record),
                 filter=filter_text if filter_text and filter_text.strip() else None, view=view)


async def check_topics(catalog: Catalog, texts: Sequence[Any], principal: Principal | None) -> list[Topic]:
    """The topics `texts` (a JSON array from a client) once each is valid: a string that parses,
    naming an existing collection that is not a view (decisions.md, Aggregation and view collections),
    with a filter and expand paths that fit it. Raises
    ValidationFailed (422) with `errors: {"subscriptions.<index>": [message]}` naming every bad one
    (the dotted keys of every validation error), or `{"subscriptions": [...]}` for more than MAX_TOPICS."""
    if len(texts) > MAX_TOPICS:
        raise ValidationFailed(f"At most {MAX_TOPICS} subscriptions, {len(texts)} given",
                               errors={"subscriptions": [f"At most {MAX_TOPICS} subscriptions."]})
    topics: list[Topic] = []
    failures: dict[str, list[str]] = {}
    for index, text in enumerate(texts):
        try:
            if not isinstance(text, str):
                raise ValueError("a topic is a string")
            topic = parse_topic(text)
            collection = await catalog.by_name(topic.collection)
            if collection.view is not None:
                raise ValueError(f"'{collection.name}' is a view: its records change with its source's; subscribe "
                                 f"to '{collection.view.source}' and read the view again")
            localization(collection, topic.view.locale)
            topic.condition(collection, principal)
            await resolve(catalog, collection, topic.view, principal)
        except NotFound:
            failures[f"subscriptions.{index}"] = [f"'{str(text)[:80]}': unknown collection"]
            continue
        except CmsError as exc:
            if exc.status >= 500:
                raise
            failures[f"subscriptions.{index}"] = [f"'{str(text)[:80]}': {exc.detail}"]
            continue
        except ValueError as exc:
            failures[f"subscriptions.{index}"] = [f"'{str(text)[:80]}': {exc}"]
            continue
        topics.append(topic)
    if failures:
        raise ValidationFailed("Invalid subscriptions", errors=failures)
    return topics
