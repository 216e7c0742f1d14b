"""The record editor's locales (decisions.md, Localized fields): which locale it edits, the switcher
naming every configured locale with how many localized fields the record fills there, and the value a
field's fallback chain answers where the edited locale has none (shown greyed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cms.admin_ui.common import PageRefused
from cms.models import Collection
from cms.services.content.locales import ALL, Localization, localization


@dataclass(frozen=True)
class LocaleTab:
    """One locale of the editor's switcher: its `code`, how many localized fields the record fills in it
    (`filled` of `total`) and whether it is the one being edited."""

    code: str
    filled: int
    total: int
    current: bool


def locale_tabs(collection: Collection, editing: Localization, record: dict[str, Any] | None) -> list[LocaleTab]:
    """The switcher of a collection with localized fields (empty without): every configured locale."""
    names = collection.localized_fields
    if not names:
        return []
    stored = [(record or {}).get(name) for name in names]
    return [LocaleTab(code, sum(1 for value in stored if isinstance(value, dict) and value.get(code) is not None),
                      len(names), code == editing.locale) for code in collection.locales.codes]


def fallback_of(stored: Any, editing: Localization) -> tuple[Any, str | None]:
    """(the value a localized field's fallback chain answers where `editing.locale` has none, the locale it
    is from); (None, None) when the chain holds none. `stored`: the field's object of locale to value."""
    if not isinstance(stored, dict):
        return None, None
    for code in editing.chain[1:]:
        value = stored.get(code)
        if value is not None:
            return value, code
    return None, None


def editor_locale(request: web.Request, collection: Collection) -> Localization:
    """The locale the editor edits: `?locale=` (default: the default locale). Raises BadRequest (an error
    page) for one that is not configured, or for `*`."""
    asked = request.query.get("locale")
    if asked == ALL:
        raise PageRefused(400, "The editor edits one locale at a time: choose a locale code.")
    return localization(collection, asked)
