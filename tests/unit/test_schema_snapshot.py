"""The schema snapshot carries every attribute of a collection (decisions.md, Schema as code): each attribute of
the model (`Collection` and what it holds: fields, validation, rules, declared indexes), changed alone, changes
the snapshot, except the few that belong to one instance. An attribute added to the model but not to the
collection's representation (which the snapshot is made of) fails here, named. Pure: no servers."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cms.models import VIEW_TYPE, AccessRules, Collection, FieldSpec, IndexDeclaration, Validation, ViewDefinition
from cms.services.content.schema_snapshot import entries, snapshot, snapshot_hash
from cms.services.representation.schema import canonical_bytes

INSTANCE_ATTRIBUTES = {"Collection.id", "Collection.created", "Collection.updated", "Collection.version",
                       "Collection.locales"}
"""Attributes that are one instance's state, not schema: left out of the snapshot on purpose (`locales` is
the instance's `locales` setting, attached to a definition when it is looked up, not stored with it)."""

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TARGET = Collection(id="target-id", name="people", type="auth", fields=(), created=NOW, updated=NOW)
SUBJECT = Collection(
    id="subject-id", name="posts", type="base", created=NOW, updated=NOW, version=3,
    fields=(
        FieldSpec(name="title", type="text", validation=Validation(required=True, min=1.0, max=80.0, pattern="^a",
                                                                   unique=True),
                  view_rule="id != ''", write_rule=None),
        FieldSpec(name="tags", type="select", values=("a", "b"), max_select=2),
        FieldSpec(name="owner", type="relation", collection_id="target-id", max_select=1, cascade_delete=True),
    ),
    otp_enabled=True, mfa_enabled=True, oauth_enabled=True,
    rules=AccessRules(list_rule="title != ''", view_rule=None, create_rule="", update_rule="id != ''",
                      delete_rule=None, email_view_rule=""),
    indexes=(IndexDeclaration(fields=("title", "-created"), unique=True),),
)


VIEW = Collection(id="view-id", name="daily", type=VIEW_TYPE, created=NOW, updated=NOW,
                  fields=(FieldSpec(name="count", type="number"),),
                  view=ViewDefinition(source="posts", filter="title != ''", group_by="tags", aggregates="count()"))


def mutated(value: Any, hint: Any) -> Any:
    """Another value of the attribute's type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, datetime):
        return value + timedelta(days=1)
    if isinstance(value, tuple):
        return (*value, value[-1]) if value else ("x",)
    if value is None:
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return {str: "x", int: 2, float: 2.5}.get(options[0], ("x",)) if options else "x"
    raise AssertionError(f"no other value for {value!r}")


def variants(value: Any, owner: str) -> Iterator[tuple[str, Any]]:
    """(attribute path, `value` with that one attribute changed) for every attribute reachable from `value`."""
    hints = typing.get_type_hints(type(value))
    for spec in dataclasses.fields(value):
        path = f"{owner}.{spec.name}"
        current = getattr(value, spec.name)
        if path in INSTANCE_ATTRIBUTES:
            yield path, dataclasses.replace(value, **{spec.name: mutated(current, hints[spec.name])}) \
                if not dataclasses.is_dataclass(current) else value
        elif dataclasses.is_dataclass(current):
            for inner, changed in variants(current, type(current).__name__):
                yield inner, dataclasses.replace(value, **{spec.name: changed})
        elif isinstance(current, tuple) and current and dataclasses.is_dataclass(current[0]):
            for position, item in enumerate(current):
                for inner, changed in variants(item, type(item).__name__):
                    items = list(current)
                    items[position] = changed
                    yield inner, dataclasses.replace(value, **{spec.name: tuple(items)})
            yield path, dataclasses.replace(value, **{spec.name: current[:-1]})
        else:
            yield path, dataclasses.replace(value, **{spec.name: mutated(current, hints[spec.name])})


def test_every_attribute_of_a_collection_is_in_the_snapshot() -> None:
    base = snapshot([SUBJECT, TARGET])["hash"]
    shown: dict[str, bool] = {}
    for path, changed in variants(SUBJECT, "Collection"):  # an attribute is shown if any change of it shows
        shown[path] = shown.get(path, False) or snapshot([changed, TARGET])["hash"] != base
    missing = sorted(path for path, seen in shown.items() if not seen and path not in INSTANCE_ATTRIBUTES)
    assert missing == [], f"attributes left out of the schema snapshot: {missing}"
    assert all(not shown[path] for path in INSTANCE_ATTRIBUTES if path != "Collection.id"), shown


def test_every_attribute_of_a_view_is_in_the_snapshot() -> None:
    base = snapshot([SUBJECT, TARGET, VIEW])["hash"]
    assert VIEW.view is not None
    missing = [name for name in ("source", "filter", "group_by", "aggregates") if snapshot([
        SUBJECT, TARGET, dataclasses.replace(VIEW, view=dataclasses.replace(VIEW.view, **{
            name: getattr(VIEW.view, name) + "x"}))])["hash"] == base]
    assert missing == [], f"view attributes left out of the schema snapshot: {missing}"
    (daily,) = [e for e in entries([SUBJECT, TARGET, VIEW]) if e["name"] == "daily"]
    assert daily["view"]["source"] == "posts"  # by name, as stored


def test_instance_state_is_not_in_the_snapshot() -> None:
    base = snapshot([SUBJECT, TARGET])
    moved = dataclasses.replace(SUBJECT, id="elsewhere", version=9, created=NOW - timedelta(days=3), updated=NOW,
                                fields=tuple(dataclasses.replace(f, collection_id="other-target")
                                             if f.collection_id else f for f in SUBJECT.fields))
    target = dataclasses.replace(TARGET, id="other-target")
    assert snapshot([target, moved]) == base  # other ids, same names: the same snapshot, in any order


def test_relations_name_their_target_by_name() -> None:
    (_, posts) = entries([SUBJECT, TARGET])
    owner = posts["schema"]["fields"][2]
    assert owner["collection"] == "people" and "collection_id" not in owner
    assert [e["name"] for e in entries([SUBJECT, TARGET])] == ["people", "posts"]


@pytest.mark.parametrize("value, expected", [
    ({"b": 1, "a": [1.0, None, "é"]}, b'{"a":[1.0,null,"\xc3\xa9"],"b":1}'),
    ({}, b"{}"),
], ids=["sorted-compact-utf8", "empty"])
def test_canonical_bytes(value: Any, expected: bytes) -> None:
    assert canonical_bytes(value) == expected


def test_the_hash_is_of_the_collections_and_the_format() -> None:
    made = snapshot([SUBJECT, TARGET])
    assert made["hash"] == snapshot_hash(made["collections"])
    assert snapshot_hash([]) != snapshot_hash(made["collections"])
