"""Conversions between stored documents and `cms.models` values: `id` <-> `_id`."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def to_document(value: Any) -> dict[str, Any]:
    """A dataclass as a document: its fields, with `id` stored as `_id`."""
    doc = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    doc["_id"] = doc.pop("id")
    return doc


def from_document(cls: type[T], doc: dict[str, Any]) -> T:
    """Build `cls` (a dataclass) from a document, ignoring stored keys the class does not have."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in doc.items() if k in names}
    values["id"] = doc["_id"]
    return cls(**values)
