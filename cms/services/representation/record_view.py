"""How a record is shown: `expand` and `fields` (decisions.md, Relations in one request). Pure: no I/O.

`RecordView` is the one value every record rendering takes (`representation.records`): the expand
paths asked for (relation field names, or back-relations `<collection>_via_<field>`, joined by `.`)
and the keys kept (`fields`). `view_of(expand, fields)` reads the two query parameters; which
segment names a relation is decided against the collections by the services
(`content/expansion.py`), which also load the related records into `Expanded` trees that
`record_json` embeds under `expand`.

    view = view_of("author.team,comments_via_post", "id,title,expand.author.name")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cms.errors import InvalidFilter
from cms.models import Record

MAX_EXPAND_DEPTH = 6
"""Segments one expand path may have (`a.b.c.d.e.f`)."""
MAX_EXPAND_PATHS = 10
"""Comma-separated paths one `expand` may hold, counted as sent (prefixes and repeats included)."""
MAX_VIEW_PARAMETER_LENGTH = 1000
"""Longest `expand` or `fields` value, in characters."""
MAX_FIELD_NAMES = 100
"""Comma-separated names one `fields` may hold."""

Path = tuple[str, ...]


@dataclass(frozen=True)
class Picker:
    """The keys `fields` keeps at one level of a record's JSON: `star` (every key) and `names`
    (name -> the picker of its value, None to keep the value whole). A name with a picker narrows
    its value even under `star` (`*,expand.author.name`)."""

    star: bool = False
    names: tuple[tuple[str, Picker | None], ...] = ()

    def pick(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The keys of `body` this picker keeps, nested values narrowed (lists element by element)."""
        named = dict(self.names)
        kept: dict[str, Any] = {}
        for key, value in body.items():
            if key in named:
                inner = named[key]
                kept[key] = value if inner is None else _narrow(value, inner)
            elif self.star:
                kept[key] = value
        return kept

    def parts(self) -> list[Any]:
        """A nested list of plain values naming this picker (for cache keys)."""
        return [self.star, [[name, None if inner is None else inner.parts()] for name, inner in self.names]]


def _narrow(value: Any, picker: Picker) -> Any:
    if isinstance(value, dict):
        return picker.pick(value)
    if isinstance(value, list):
        return [picker.pick(v) if isinstance(v, dict) else v for v in value]
    return value


@dataclass(frozen=True)
class RecordView:
    """How records are shown: `expand`, the relation paths whose records are embedded (each a tuple
    of segments, in the order sent, repeats dropped), `fields`, the keys kept (None: all), and
    `locale`. `FULL` is every field, relations as ids, no `expand` key, the default locale."""

    expand: tuple[Path, ...] = ()
    fields: Picker | None = None
    locale: str | None = None
    """`?locale=` (decisions.md, Localized fields): the locale localized fields answer (None: the
    default locale; `*`: their objects). Applied to the records before they are shown (the record's
    `Access`), so it takes no part in `full` or `parts`."""

    @property
    def full(self) -> bool:
        """Shown in full: nothing expanded, every key kept (the hot path: no extra work at all)."""
        return not self.expand and self.fields is None

    def parts(self) -> list[Any]:
        """A nested list of plain values naming this view (for cache keys)."""
        return [[list(p) for p in self.expand], None if self.fields is None else self.fields.parts()]


FULL = RecordView()
"""Every field of the record, relations as ids."""


@dataclass(frozen=True)
class Expanded:
    """The records one expand segment embeds: `segment` (the key under `expand`), `many` (an array;
    else the first record alone), `related` (parent record id -> its related records, in order;
    only visible ones) and `children` (the deeper segments, over those related records)."""

    segment: str
    many: bool
    related: Mapping[str, list[Record]] = field(default_factory=dict)
    children: tuple[Expanded, ...] = ()


def view_of(expand: str | None, fields: str | None, locale: str | None = None) -> RecordView:
    """The view the `expand`, `fields` and `locale` query parameters ask for (None or blank: not given).

    Raises InvalidFilter (400 `invalid_filter`), its detail naming the parameter and the bad part:
    a value over MAX_VIEW_PARAMETER_LENGTH, more than MAX_EXPAND_PATHS paths (counted as sent) or
    MAX_FIELD_NAMES names, an empty segment or a path deeper than MAX_EXPAND_DEPTH. Whether a
    segment names a relation is checked against the collection (`content.expansion`), and whether
    the locale is configured by the record's access (`access.check`: 400 `bad_request`)."""
    locale = locale.strip() if locale is not None and locale.strip() else None
    if expand is None and fields is None:  # every read without them: no work, no new object
        return FULL if locale is None else RecordView(locale=locale)
    return RecordView(expand=_expand_paths(expand), fields=_picker(fields), locale=locale)


def _expand_paths(text: str | None) -> tuple[Path, ...]:
    if text is None or not text.strip():
        return ()
    _check_length("expand", text)
    items = text.split(",")
    if len(items) > MAX_EXPAND_PATHS:
        raise InvalidFilter(f"expand: at most {MAX_EXPAND_PATHS} paths, {len(items)} given")
    paths: list[Path] = []
    for item in items:
        if not item.strip():
            continue
        segments = tuple(s.strip() for s in item.strip().split("."))
        for depth, segment in enumerate(segments, start=1):
            if not segment:
                raise InvalidFilter(f"expand: empty segment in '{item.strip()}'")
            if depth > MAX_EXPAND_DEPTH:
                raise InvalidFilter(f"expand: '{segment}' is deeper than {MAX_EXPAND_DEPTH} levels "
                                    f"in '{item.strip()}'")
        if segments not in paths:
            paths.append(segments)
    return tuple(paths)


def _picker(text: str | None) -> Picker | None:
    if text is None or not text.strip():
        return None
    _check_length("fields", text)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if len(names) > MAX_FIELD_NAMES:
        raise InvalidFilter(f"fields: at most {MAX_FIELD_NAMES} names, {len(names)} given")
    tree: dict[str, Any] = {}
    star = False
    for name in names:
        if name == "*":
            star = True
            continue
        level = tree
        *outer, last = name.split(".")
        for part in outer:
            inner = level.get(part)
            if inner is None:  # `expand` then `expand.author`: the deeper name narrows
                inner = level[part] = {}
            level = inner
        level.setdefault(last, None)
    return Picker(star, _names(tree))


def _names(tree: Mapping[str, Any]) -> tuple[tuple[str, Picker | None], ...]:
    return tuple((name, None if inner is None else
                  Picker("*" in inner, _names({k: v for k, v in inner.items() if k != "*"})))
                 for name, inner in tree.items())


def _check_length(parameter: str, text: str) -> None:
    if len(text) > MAX_VIEW_PARAMETER_LENGTH:
        raise InvalidFilter(f"{parameter}: at most {MAX_VIEW_PARAMETER_LENGTH} characters, {len(text)} given")
