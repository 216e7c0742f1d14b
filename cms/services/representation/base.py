"""What every representation is built from: `Representation` (a response schema: the serializer and
the OpenAPI document of one shape), `Timestamp`, `Rendered`, `SameObject`, and the two typed dump helpers."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from marshmallow import Schema, fields, missing
from marshmallow.schema import SchemaMeta

from cms.services.content.fields import to_json_value


class _AlwaysPresent(SchemaMeta):
    """Marks each declared field `required`, unless the class's `Meta.optional` names it."""

    @classmethod
    def get_declared_fields(mcs, klass: SchemaMeta, cls_fields: list[tuple[str, fields.Field[Any]]],  # noqa: N804
                            inherited_fields: list[tuple[str, fields.Field[Any]]],
                            dict_cls: type[dict[str, Any]] = dict) -> dict[str, fields.Field[Any]]:
        declared = super().get_declared_fields(klass, cls_fields, inherited_fields, dict_cls)
        optional = set(getattr(klass.Meta, "optional", ()))
        marked = {}
        for name, field in declared.items():
            field = copy.copy(field)  # an inherited field object is shared with the base class
            field.required = name not in optional
            marked[name] = field
        return dict_cls(marked)


class Representation(Schema, metaclass=_AlwaysPresent):
    """A response shape. Dumping a model with it gives the JSON the API sends; apispec documents the
    same class, so the document and the bytes come from one declaration. Every field is always
    present (the document lists it as `required`) unless `Meta.optional` names it, and the document
    allows no other keys unless `Meta.unknown` is INCLUDE (a shape carrying a collection's own fields).
    `required` means nothing else here: these schemas only dump."""


class Timestamp(fields.Field[Any]):
    """An aware datetime rendered as ISO 8601 UTC with milliseconds and `Z` (None stays null)."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return to_json_value(value) if value is not None else None


class Rendered(fields.Field[Any]):
    """A part rendered by its own representation function first (a user, a record): dumped as is,
    documented as the one of `shapes` it is (OpenAPI `oneOf` when there are several; see
    `cms/api/openapi.py`)."""

    def __init__(self, *shapes: type[Schema], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shapes = shapes

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return value


class SameObject(fields.Nested):
    """A nested shape dumped from the object itself rather than one of its attributes (a collection's
    `schema: {fields: [...]}`)."""

    def get_value(self, obj: Any, attr: str, accessor: Any = None, default: Any = missing) -> Any:
        """The object being dumped, whatever `attr` is."""
        return obj


def dump_one(schema: Schema, obj: Any) -> dict[str, Any]:
    """`obj` (a model, or a mapping of the shape's keys) dumped by `schema` (a non-`many` instance)."""
    result: dict[str, Any] = schema.dump(obj)
    return result


def dump_many(schema: Schema, objs: Iterable[Any]) -> list[dict[str, Any]]:
    """Each of `objs` dumped by `schema` (a non-`many` instance), in order."""
    result: list[dict[str, Any]] = schema.dump(list(objs), many=True)
    return result
