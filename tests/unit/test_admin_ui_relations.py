"""How the admin UI labels a related record (cms/admin_ui/views/relations.py): the first text-like
field of its collection, else its id; a record `expand` does not hold (hidden or gone) has no label."""

from __future__ import annotations

from datetime import UTC, datetime

from cms.admin_ui.views.relations import LABEL_CHARS, RelationTarget, chosen, label_field
from cms.models import Collection, FieldSpec


def collection(*fields: tuple[str, str]) -> Collection:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Collection(id="c1", name="people", type="base", fields=tuple(FieldSpec(name=n, type=t) for n, t in fields),
                      created=now, updated=now)


def test_the_label_field_is_the_first_text_editor_email_or_url_field():
    assert label_field(collection(("code", "number"), ("site", "url"), ("name", "text"))) == "site"
    assert label_field(collection(("code", "number"), ("flag", "bool"))) is None


def test_labels_come_from_the_expanded_records_and_a_hidden_one_has_none():
    target = RelationTarget("editors", collection(("name", "text")), "name")
    record = {"id": "b1", "editors": ["p1", "p2", "p3"],
              "expand": {"editors": [{"id": "p1", "name": "Ann"}, {"id": "p3", "name": "  "}]}}
    assert chosen(record["editors"], record, target) == [("p1", "Ann"), ("p2", None), ("p3", "p3")]
    assert chosen(["p1"], None, target) == [("p1", None)]
    long = target.label({"id": "p9", "name": "x" * 200})
    assert len(long) == LABEL_CHARS and long.endswith("…")
    assert RelationTarget("author", collection(("code", "number")), None).label({"id": "p1", "code": 3}) == "p1"
