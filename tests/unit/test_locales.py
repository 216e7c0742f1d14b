"""Localized fields, the pure parts (decisions.md, Localized fields): the `locales` setting checked, the
fallback rendering of a term on a localized field (index-friendly `$or` branches), the sort by a fallback
chain (`$ifNull` stages), what one request asks (`Localization`) and how a record is answered, and the
values of a write shaped for storage."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.errors import BadRequest
from cms.filters.conditions import ResolvedField, localized_term
from cms.filters.mongo import render
from cms.models import Collection, FieldSpec, Locale, Locales, Record, Validation
from cms.services.content.locales import (
    localization,
    normalized,
    parse_locales,
    resolve,
    stored_changes,
    stored_create,
    unique_writes,
)
from cms.store.documents import record_after_update
from cms.store.query_plans import sort_stages

THREE = Locales((Locale("en"), Locale("de", "en"), Locale("de-AT", "de")))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def field(*chain: str, kind: str = "text") -> ResolvedField:
    return ResolvedField("title", kind, locales=chain)


@pytest.mark.parametrize("chain, op, value, expected", [
    (("en",), "=", "x", {"title.en": "x"}),
    (("de", "en"), "=", "x", {"$or": [{"title.de": "x"}, {"$and": [{"title.de": None}, {"title.en": "x"}]}]}),
    (("de-AT", "de", "en"), ">", "m", {"$or": [
        {"title.de-AT": {"$gt": "m"}},
        {"$and": [{"title.de-AT": None}, {"title.de": {"$gt": "m"}}]},
        {"$and": [{"title.de-AT": None}, {"title.de": None}, {"title.en": {"$gt": "m"}}]}]}),
    # null satisfies `!=`: a branch needs its locale to hold a value, but for the last, true on null too
    (("de", "en"), "!=", "x", {"$or": [{"$and": [{"title.de": {"$ne": None}}, {"title.de": {"$ne": "x"}}]},
                                       {"$and": [{"title.de": None}, {"title.en": {"$ne": "x"}}]}]}),
    (("de", "en"), "=", None, {"$and": [{"title.de": None}, {"title.en": None}]}),
    (("de", "en"), "!=", None, {"$or": [{"title.de": {"$ne": None}}, {"title.en": {"$ne": None}}]}),
    (("en",), "!=", None, {"title.en": {"$ne": None}}),
], ids=["one-locale", "fallback-equality", "chain-of-three-range", "not-equal", "is-null", "not-null",
        "one-locale-not-null"])
def test_a_term_on_a_localized_field_renders_one_branch_per_locale(chain: tuple[str, ...], op: str, value: Any,
                                                                   expected: dict[str, Any]) -> None:
    assert render(localized_term(field(*chain), op, value)) == expected


def test_a_contains_term_keeps_its_pattern_on_every_branch() -> None:
    rendered = render(localized_term(field("de", "en"), "~", "ap", re.compile("ap", re.IGNORECASE)))
    assert rendered == {"$or": [{"title.de": {"$regex": "ap", "$options": "i"}},
                                {"$and": [{"title.de": None}, {"title.en": {"$regex": "ap", "$options": "i"}}]}]}


def test_the_sort_path_of_a_fallback_chain_sorts_by_its_first_value() -> None:
    assert field("en").sort_path == "title.en"
    assert field("de", "en").sort_path == ("title.de", "title.en")
    assert sort_stages([("views", -1), ("_id", -1)]) is None
    assert sort_stages([(("title.de-AT", "title.de", "title.en"), 1), ("_id", 1)]) == [
        {"$addFields": {"_sort_0": {"$ifNull": ["$title.de-AT", {"$ifNull": ["$title.de", "$title.en"]}]}}},
        {"$sort": {"_sort_0": 1, "_id": 1}}]


@pytest.mark.parametrize("text, message", [
    ('[{"code": "en", "fallback": "de"}, {"code": "de", "fallback": "en"}]', "cycle: en -> de -> en"),
    ('[{"code": "a1"}]', "BCP 47"),
    ('[{"code": "en"}, {"code": "de-at"}, {"code": "de-AT"}]', "listed twice"),
    ('{"code": "en"}', "non-empty JSON list"),
    ('[{"code": "en", "fallback": 7}]', "fallback must be"),
    ('[{"code": "x' + "y" * 40 + '"}]', "BCP 47"),
], ids=["cycle", "not-a-tag", "case-duplicate", "not-a-list", "bad-fallback", "too-long"])
def test_a_bad_setting_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_locales(text)


def test_the_setting_is_stored_in_a_canonical_form_and_chains_stop_at_a_repeat() -> None:
    assert normalized('[ {"code":"en"},{"fallback": "en", "code":"de"}]') == \
        '[{"code": "en"}, {"code": "de", "fallback": "en"}]'
    assert THREE.chain("de-AT") == ("de-AT", "de", "en") and THREE.chain("en") == ("en",)
    assert Locales((Locale("a"), Locale("b", "a"))).chain("zz") == ("zz",)


def collection(*specs: FieldSpec, locales: Locales = THREE) -> Collection:
    return Collection(id="c", name="posts", type="base", fields=specs, created=NOW, updated=NOW, locales=locales)


POSTS = collection(FieldSpec("title", "text", localized=True), FieldSpec("views", "number"))


def test_a_record_is_answered_in_the_locale_asked() -> None:
    record = Record("r", NOW, NOW, {"title": {"en": "Hi", "de": "Hallo", "fr": "Salut"}, "views": 3})
    assert localization(POSTS, "de-AT").localize(record).data == {"title": "Hallo", "views": 3}
    assert localization(POSTS, None).localize(record).data == {"title": "Hi", "views": 3}
    assert localization(POSTS, "*").localize(record).data == {"title": {"en": "Hi", "de": "Hallo"}, "views": 3}
    plain = Record("r", NOW, NOW, {"views": 1})
    assert localization(POSTS, "*").localize(plain) is plain  # nothing to change: the same record
    assert localization(POSTS, "de").localize(plain).data == {"views": 1}  # never set: stays out
    assert localization(POSTS, "de").language == "de" and localization(POSTS, "*").language == "en, de, de-AT"
    assert localization(POSTS, "DE-at").locale == "de-AT"
    with pytest.raises(BadRequest, match="Unknown locale 'fr'"):
        localization(POSTS, "fr")
    assert resolve({"de": None, "en": 0}, ("de", "en")) == 0 and resolve("legacy", ("en",)) is None


def test_write_values_are_shaped_for_storage() -> None:
    assert stored_create({"title"}, {"title": "Hallo", "views": None}, "de") == {"title": {"de": "Hallo"}}
    assert stored_create({"title"}, {"title": {"en": "Hi"}}, None) == {"title": {"en": "Hi"}}
    assert stored_changes({"title"}, {"title": "Hallo", "views": 2}, "de") == ({"title.de": "Hallo", "views": 2}, [])
    assert stored_changes({"title"}, {"title": None}, "de") == ({}, ["title.de"])
    assert stored_changes({"title"}, {"title": {"en": "Hi"}}, None) == ({"title": {"en": "Hi"}}, [])
    before = Record("r", NOW, NOW, {"title": {"en": "Hi", "de": "Hallo"}})
    after = record_after_update(before, {"title.fr": "Salut"}, ["title.de"])
    assert after.data == {"title": {"en": "Hi", "fr": "Salut"}}
    unique = collection(FieldSpec("slug", "text", localized=True, validation=Validation(unique=True)))
    assert unique_writes(unique, {"slug.de": "a"}) == [("slug.de", "a")]
    assert unique_writes(unique, {"slug": {"en": "a", "de": "b"}}) == [("slug.en", "a"), ("slug.de", "b")]
