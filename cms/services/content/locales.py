"""Localized fields (decisions.md, Localized fields): the `locales` setting checked and read, what one
request asks for (`Localization`: the locale answered, its fallback chain), a record's localized values
resolved for it, and the values of a write shaped for storage.

A localized field stores an object of locale code to value (`{"en": "Hi", "de": "Hallo"}`); a locale
without a value has no key (a null written for it removes the key). Reading a locale answers its value,
else the first value along its fallback chain, else null; `*` answers the object, keeping only the
configured locales (a locale removed from the setting keeps its values in storage, but they are not
served, matched or sorted on). Filters, sorts and searches resolve the same chain in the engine
(`filters.conditions.localized`), so a record never matches on a value its answer does not show.

Pure: no I/O.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Container, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cms.errors import BadRequest
from cms.models import DEFAULT_LOCALES, Collection, Locale, Locales, Record
from cms.services.content.fields import ALL_LOCALES, DEFAULT_LOCALE, OTHER_LOCALE

log = logging.getLogger("cms.locales")

ALL = "*"
"""`?locale=*`: localized fields as objects of locale code to value."""
MAX_LOCALES = 100
"""Most entries of the `locales` setting."""
MAX_CODE_LENGTH = 35
"""Longest locale code, in characters (BCP 47's advice for what a tag reader should take)."""
_TAG = re.compile(r"[A-Za-z]{2,8}(?:-[A-Za-z0-9]{1,8})*\Z")
"""A BCP 47 tag, as far as its shape goes: a 2 to 8 letter language, then subtags of 1 to 8 letters
or digits joined by `-` (`en`, `de-AT`, `zh-Hant-TW`, `es-419`)."""


def parse_locales(text: str) -> Locales:
    """The `locales` setting from its JSON text: a list of 1..MAX_LOCALES objects `{"code", "fallback"?}`,
    codes BCP 47 tags (MAX_CODE_LENGTH characters at most), distinct ignoring case; a fallback names
    another configured code, and following fallbacks never comes back to a code (no cycle). Raises
    ValueError with a message for the client."""
    try:
        raw = json.loads(text)
    except ValueError:
        raise ValueError("Must be a JSON list of {\"code\", \"fallback\"} objects.") from None
    if not isinstance(raw, list) or not raw:
        raise ValueError("Must be a non-empty JSON list of {\"code\", \"fallback\"} objects.")
    if len(raw) > MAX_LOCALES:
        raise ValueError(f"At most {MAX_LOCALES} locales.")
    entries: list[Locale] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or "code" not in item or set(item) - {"code", "fallback"}:
            raise ValueError(f"Entry {index} must be an object {{\"code\", \"fallback\"}} (code required).")
        code, fallback = item["code"], item.get("fallback")
        if not _is_tag(code):
            raise ValueError(f"Entry {index}: code must be a BCP 47 tag such as \"en\" or \"de-AT\".")
        if fallback is not None and not _is_tag(fallback):
            raise ValueError(f"Entry {index}: fallback must be a locale code or null.")
        entries.append(Locale(code, fallback))
    codes = [entry.code.lower() for entry in entries]
    for index, code in enumerate(codes):
        if code in codes[:index]:
            raise ValueError(f"Entry {index}: the code '{entries[index].code}' is listed twice.")
    spelled = {entry.code: entry.code for entry in entries}
    for index, entry in enumerate(entries):
        if entry.fallback is not None and entry.fallback not in spelled:
            raise ValueError(f"Entry {index}: the fallback '{entry.fallback}' is not a configured code.")
        if entry.fallback == entry.code:
            raise ValueError(f"Entry {index}: '{entry.code}' cannot fall back to itself.")
    _check_cycles(entries)
    return Locales(tuple(entries))


def _is_tag(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_CODE_LENGTH and _TAG.match(value) is not None


def _check_cycles(entries: list[Locale]) -> None:
    fallbacks = {entry.code: entry.fallback for entry in entries}
    for entry in entries:
        seen = [entry.code]
        following = entry.fallback
        while following is not None:
            if following in seen:
                cycle = " -> ".join([*seen[seen.index(following):], following])
                raise ValueError(f"The fallbacks form a cycle: {cycle}.")
            seen.append(following)
            following = fallbacks.get(following)


def locales_text(locales: Locales) -> str:
    """The canonical JSON text of `locales` (what the setting stores): `[{"code": "en"}, {"code": "de",
    "fallback": "en"}]`."""
    return json.dumps([{"code": e.code, **({"fallback": e.fallback} if e.fallback else {})} for e in locales.entries],
                      separators=(", ", ": "))


def normalized(text: str) -> str:
    """The `locales` setting's text rule (settings.TEXT_SETTINGS): the canonical text of a valid value.
    Raises ValueError (the client's 422) as `parse_locales`."""
    return locales_text(parse_locales(text))


def stored_locales(value: Any) -> Locales:
    """The setting as stored (its text; None: never set) as `Locales`; a stored value that no longer
    parses (written around the API) reads as the default, logged. Raises nothing."""
    if value is None:
        return DEFAULT_LOCALES
    try:
        return parse_locales(str(value))
    except ValueError as exc:
        log.error("the stored locales setting is not valid (%s); using %s", exc, locales_text(DEFAULT_LOCALES))
        return DEFAULT_LOCALES


@dataclass(frozen=True)
class Localization:
    """How one request reads and writes the localized fields of one collection (`localization`).

    `locale` is the locale asked, as configured (None: `*`); `chain` it and its fallbacks, what answers,
    filters, sorts and searches resolve through (for `*`: the default locale's chain); `rule_chain` the
    default locale's chain, which rules resolve through whatever the request asks; `codes` the configured
    codes (what `*` objects keep); `fields` the collection's localized fields; `language` the answer's
    `Content-Language`."""

    locale: str | None
    chain: tuple[str, ...]
    rule_chain: tuple[str, ...]
    codes: tuple[str, ...]
    fields: tuple[str, ...]
    language: str

    @property
    def objects(self) -> bool:
        """`?locale=*`: localized fields answer their objects."""
        return self.locale is None

    @property
    def write_locale(self) -> str | None:
        """The locale a write's values are for (None: `*`, objects replacing the stored ones)."""
        return self.locale

    def key_parts(self) -> list[Any]:
        """What distinguishes this localization in a read cache key: nothing for a collection without
        localized fields, else the locale asked, its chain and the configured codes."""
        return [self.locale, self.chain, self.codes] if self.fields else []

    def localize(self, record: Record) -> Record:
        """`record` as answered in this localization: each localized field it holds its resolved value
        (null when the chain holds none), or with `*` its object without the locales no longer configured;
        a field it does not hold (never set, or hidden from the caller) stays out, as any field without a
        value. The same object when nothing changes. Raises nothing."""
        if not self.fields:
            return record
        data = record.data
        if self.objects:
            changed = {name: served_object(data[name], self.codes) for name in self.fields
                       if isinstance(data.get(name), dict) and not set(data[name]) <= set(self.codes)}
            if not changed:
                return record
            return Record(id=record.id, created=record.created, updated=record.updated, data={**data, **changed},
                          state=record.state)
        resolved = {name: resolve(data[name], self.chain) for name in self.fields if name in data}
        return Record(id=record.id, created=record.created, updated=record.updated, data={**data, **resolved},
                      state=record.state)


def served_object(stored: Mapping[str, Any], codes: tuple[str, ...]) -> dict[str, Any]:
    """A stored localized object without the locales that are not in `codes`, in `codes`' order."""
    return {code: stored[code] for code in codes if code in stored}


def resolve(stored: Any, chain: tuple[str, ...]) -> Any:
    """The value a localized field's stored object answers along `chain`: the first locale's value that
    is not null, else None (also for a value that is not an object)."""
    if not isinstance(stored, dict):
        return None
    for code in chain:
        value = stored.get(code)
        if value is not None:
            return value
    return None


def localization(collection: Collection, locale: str | None) -> Localization:
    """What `?locale=<locale>` (None: not given, the default locale; `*`: objects) asks of `collection`,
    under the locales its definition was looked up with. A code matches a configured one ignoring case.
    Raises BadRequest (400 `bad_request`) for a locale that is not configured."""
    return _localization(collection.locales, collection.localized_fields, locale)


@lru_cache(maxsize=1024)
def _localization(locales: Locales, fields: tuple[str, ...], locale: str | None) -> Localization:
    rule_chain = locales.chain(locales.default)
    if locale == ALL:
        return Localization(None, rule_chain, rule_chain, locales.codes, fields, ", ".join(locales.codes))
    code = locales.default if locale is None else _configured(locales, locale)
    chain = locales.chain(code)
    return Localization(code, chain, rule_chain, locales.codes, fields, code)


def _configured(locales: Locales, asked: str) -> str:
    lowered = asked.lower()
    for code in locales.codes:
        if code.lower() == lowered:
            return code
    shown = asked if len(asked) <= MAX_CODE_LENGTH else asked[:MAX_CODE_LENGTH] + "..."
    raise BadRequest(f"Unknown locale '{shown}'; the configured locales are {', '.join(locales.codes)} "
                     f"(or * for every locale)")


def stored_create(localized: Container[str], values: Mapping[str, Any], locale: str | None) -> dict[str, Any]:
    """The values of a create as stored: `values` (validated, None for no value) with each localized
    field's value (names in `localized`) as an object `{locale: value}` (`locale` None: the value is
    already the object, `*`); fields without a value are left out."""
    stored: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        stored[name] = {locale: value} if name in localized and locale is not None else value
    return stored


def stored_changes(localized: Container[str], values: Mapping[str, Any],
                   locale: str | None) -> tuple[dict[str, Any], list[str]]:
    """The `$set` and `$unset` of an update from its validated `values` (None clears): a localized
    field's value under `locale` sets (or, null, unsets) only `field.<locale>`, so writers of different
    locales never overwrite each other; with `locale` None (`*`) its object replaces the stored one."""
    set_values: dict[str, Any] = {}
    unset: list[str] = []
    for name, value in values.items():
        path = f"{name}.{locale}" if name in localized and locale is not None else name
        if value is None:
            unset.append(path)
        else:
            set_values[path] = value
    return set_values, unset


def write_mode(collection: Collection, locale: str | None) -> tuple[str, str | None]:
    """How a write's localized values are read (`fields.build_record_schema`'s mode) and the locale they
    are for (None: `*`). Raises BadRequest for a locale that is not configured."""
    write_locale = localization(collection, locale).write_locale
    if write_locale is None:
        return ALL_LOCALES, None
    return (DEFAULT_LOCALE if write_locale == collection.locales.default else OTHER_LOCALE), write_locale


def path_value(data: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted `path` of record data (`title.de`: a localized field's locale), or None."""
    value: Any = data
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def unique_writes(collection: Collection, set_values: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The (path, value) pairs an update's `$set` writes into unique indexes (decisions.md, Localized
    fields: `unique` holds per locale): a unique field's value, a localized one's `field.<code>` (or,
    set whole with `*`, each locale of its object)."""
    pairs: list[tuple[str, Any]] = []
    for spec in collection.fields:
        if not spec.validation.unique:
            continue
        for path, value in set_values.items():
            if path == spec.name and spec.localized and isinstance(value, dict):
                pairs.extend((f"{path}.{code}", item) for code, item in value.items())
            elif path == spec.name or spec.localized and path.startswith(f"{spec.name}."):
                pairs.append((path, value))
    return pairs
