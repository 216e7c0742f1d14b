"""Repository of collection definitions (Mongo collection `collections`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo import DeleteOne, ReplaceOne, ReturnDocument
from pymongo.errors import BulkWriteError

from cms.errors import Conflict
from cms.models import AccessRules, Collection, FieldSpec, IndexDeclaration, Validation, ViewDefinition, default_rules
from cms.store.bulk import DUPLICATE_KEY
from cms.store.client import Database
from cms.store.errors import already_exists, translate_errors
from cms.store.repository import Repository
from cms.store.transactions import current_session


def _field_document(spec: FieldSpec) -> dict[str, Any]:
    doc = dataclasses.asdict(spec)
    for flag in ("cascade_delete", "localized", "protected"):
        if not doc[flag]:
            del doc[flag]
    for rule in ("view_rule", "write_rule"):
        if doc[rule] == "":
            del doc[rule]
        elif doc[rule] is None:
            doc[rule] = _ADMINS_ONLY
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in doc.items() if v is not None}


def _field_from_document(doc: dict[str, Any]) -> FieldSpec:
    values = doc.get("values")
    return FieldSpec(
        name=doc["name"],
        type=doc["type"],
        validation=Validation(**doc.get("validation", {})),
        values=tuple(values) if values is not None else None,
        max_select=doc.get("max_select"),
        collection_id=doc.get("collection_id"),
        cascade_delete=bool(doc.get("cascade_delete", False)),
        view_rule=_rule_from_document(doc.get("view_rule", "")),
        write_rule=_rule_from_document(doc.get("write_rule", "")),
        localized=bool(doc.get("localized", False)),
        max_size=doc.get("max_size"),
        mime_types=_strings(doc.get("mime_types")),
        thumbs=_strings(doc.get("thumbs")),
        protected=bool(doc.get("protected", False)),
    )


def _strings(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(v) for v in value)


_ADMINS_ONLY = {"admins_only": True}
"""How a field rule of None (admins only) is stored: `_field_document` drops None values."""


def _rule_from_document(value: Any) -> str | None:
    return None if value == _ADMINS_ONLY else str(value)


def collection_document(collection: Collection) -> dict[str, Any]:
    """`collection` as its stored document (the one conversion: the repository, the schema journal)."""
    return {
        "_id": collection.id,
        "name": collection.name,
        "name_lower": collection.name.lower(),
        "type": collection.type,
        "fields": [_field_document(f) for f in collection.fields],
        "otp_enabled": collection.otp_enabled,
        "mfa_enabled": collection.mfa_enabled,
        "oauth_enabled": collection.oauth_enabled,
        "rules": dataclasses.asdict(collection.rules),
        "indexes": [{"fields": list(i.fields), "unique": i.unique} for i in collection.indexes],
        "versions": collection.versions,
        "drafts": collection.drafts,
        **({"view": dataclasses.asdict(collection.view)} if collection.view is not None else {}),
        "version": collection.version,
        "created": collection.created,
        "updated": collection.updated,
    }


def collection_from_document(doc: dict[str, Any]) -> Collection:
    """The Collection a stored document (`collection_document`) holds."""
    return Collection(
        id=doc["_id"],
        name=doc["name"],
        type=doc["type"],
        fields=tuple(_field_from_document(f) for f in doc.get("fields", [])),
        otp_enabled=doc.get("otp_enabled", False),
        mfa_enabled=doc.get("mfa_enabled", False),
        oauth_enabled=doc.get("oauth_enabled", False),
        rules=_rules_from_document(doc),
        indexes=tuple(IndexDeclaration(fields=tuple(i["fields"]), unique=bool(i.get("unique", False)))
                      for i in doc.get("indexes", [])),
        versions=int(doc.get("versions", 0)),
        drafts=bool(doc.get("drafts", False)),
        view=ViewDefinition(**doc["view"]) if isinstance(doc.get("view"), dict) else None,
        version=doc.get("version", 1),
        created=doc["created"],
        updated=doc["updated"],
    )


def _rules_from_document(doc: dict[str, Any]) -> AccessRules:
    """The stored rules; a collection stored before rules existed has its type's defaults."""
    stored = doc.get("rules")
    if not isinstance(stored, dict):
        return default_rules(doc["type"])
    defaults = dataclasses.asdict(default_rules(doc["type"]))
    return AccessRules(**{key: stored.get(key, default) for key, default in defaults.items()})


class CollectionRepository(Repository[Collection]):
    """Collection definitions; names are unique case-insensitively (`insert` raises AlreadyExists
    when the name is taken)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db["collections"], collection_from_document, collection_document, unique="collection name")

    async def get(self, collection_id: str) -> Collection | None:
        """The collection with this id, or None."""
        return await self._find_one({"_id": collection_id})

    async def get_by_name(self, name: str) -> Collection | None:
        """The collection with this exact name, or None."""
        return await self._find_one({"name": name})

    async def list(self) -> list[Collection]:
        """Every collection, by name (case-insensitive)."""
        return await self._find({}, [("name_lower", 1)])

    async def replace(self, collection: Collection, expected_version: int) -> Collection | None:
        """Store `collection` (its version already raised) if the stored version is still
        `expected_version`. Returns None when another writer got there first.
        Raises AlreadyExists when the new name is taken."""
        doc = collection_document(collection)
        del doc["_id"]
        async with translate_errors("collection name"):
            stored = await self._mongo_coll.find_one_and_update(
                {"_id": collection.id, "version": expected_version},
                {"$set": doc},
                return_document=ReturnDocument.AFTER,
            )
        return collection_from_document(stored) if stored else None

    async def fill_rules(self, collection_type: str, rules: AccessRules) -> int:
        """Set `rules` on every collection of `collection_type` stored without rules. Returns how
        many were changed."""
        result = await self._mongo_coll.update_many({"type": collection_type, "rules": {"$exists": False}},
                                                    {"$set": {"rules": dataclasses.asdict(rules)}})
        return result.modified_count

    async def delete(self, collection_id: str) -> bool:
        """Remove the definition. Returns False if it did not exist."""
        return await self._delete_one({"_id": collection_id})

    async def write_all(self, put: Sequence[Collection], delete: Sequence[str] = (), *,
                        expected: Mapping[str, int] | None = None) -> None:
        """Store each of `put` whole (replacing the stored definition of its id, or inserting it) and remove
        the definitions of the ids in `delete`, in one ordered bulk write (deletes first, so a name a
        deleted collection held is free), inside the open transaction if there is one
        (`transactions.current_session`). `expected` maps an id to the version it must still be stored
        at (a collection changed meanwhile is not overwritten). Raises Conflict when one was changed
        meanwhile, AlreadyExists when a name is taken by another collection (the writes before stand
        unless a transaction is open)."""
        versions = expected or {}

        def matching(collection_id: str) -> dict[str, Any]:
            query: dict[str, Any] = {"_id": collection_id}
            if collection_id in versions:
                query["version"] = versions[collection_id]
            return query

        requests: list[DeleteOne | ReplaceOne[dict[str, Any]]] = [DeleteOne(matching(i)) for i in delete]
        requests += [ReplaceOne(matching(c.id), collection_document(c), upsert=True) for c in put]
        if not requests:
            return
        try:
            async with translate_errors("collection name"):
                await self._mongo_coll.bulk_write(requests, ordered=True, session=current_session())
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors") or [{}]
            if errors[0].get("code") != DUPLICATE_KEY:
                raise
            if "_id" in (errors[0].get("keyPattern") or {"_id": 1}):  # an upsert of a changed version
                raise Conflict("A collection was changed by another request meanwhile; retry") from None
            raise already_exists("name_lower", "collection name") from None
