"""Repository of auth-collection users.

A user is a record of its collection (in `records_<collection id>`, the Mongo collection of
RecordRepository) carrying `email` (lower-cased, unique per collection through the partial
unique index `auth_email`) and `verified`. The password hash is kept apart, in the Mongo
collection `auth_credentials` (`{_id: user id, collection_id, password_hash}`), so that no
reader of records (list, get, export, webhook payloads) can ever return it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from cms.errors import AlreadyExists
from cms.models import CollectionUser, Record
from cms.store.client import Database
from cms.store.documents import record_from_document, record_to_document, records_mongo_name
from cms.store.errors import translate_errors
from cms.store.records import update_guarded
from cms.store.transactions import current_session

EMAIL_INDEX = "auth_email"
"""Not `unique_email`: RecordRepository.sync_indexes drops `unique_*` indexes the schema does not name."""


class CollectionUserRepository:
    """Users of auth collections: their records plus their credentials."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._credentials = db["auth_credentials"]
        self._indexed: set[str] = set()

    def _records(self, collection_id: str) -> AsyncCollection[dict[str, Any]]:
        return self._db[records_mongo_name(collection_id)]

    async def ensure_indexes(self) -> None:
        """Create the indexes of `auth_credentials` (idempotent)."""
        await self._credentials.create_index("collection_id")

    async def ensure_email_index(self, collection_id: str) -> None:
        """Make `email` unique in the collection's records (partial: records without an email do
        not collide). Done once per collection and process."""
        if collection_id in self._indexed:
            return
        await self._records(collection_id).create_index(
            "email", name=EMAIL_INDEX, unique=True, partialFilterExpression={"email": {"$exists": True}}
        )
        self._indexed.add(collection_id)

    async def delete_collection(self, collection_id: str) -> int:
        """Remove the credentials of every user of a deleted collection. Returns how many."""
        self._indexed.discard(collection_id)
        result = await self._credentials.delete_many({"collection_id": collection_id})
        return result.deleted_count

    async def insert(self, user: CollectionUser) -> None:
        """Store a new user (record and credentials), inside the transaction open in this task if
        one is (`current_session`). Raises AlreadyExists when the email is taken in the collection;
        then nothing is stored (in a transaction, its abort removes the credentials)."""
        await self.ensure_email_index(user.collection_id)
        session = current_session()
        await self._credentials.replace_one(
            {"_id": user.id},
            {"collection_id": user.collection_id, "password_hash": user.password_hash},
            upsert=True, session=session,
        )
        try:
            async with translate_errors("email"):
                await self._records(user.collection_id).insert_one(record_to_document(user.record), session=session)
        except AlreadyExists:
            if session is None:
                await self._credentials.delete_one({"_id": user.id})
            raise

    async def get(self, collection_id: str, user_id: str) -> CollectionUser | None:
        """The user with this id in the collection, or None. A record without credentials (created
        through the records API) comes back with an empty `password_hash`."""
        doc = await self._records(collection_id).find_one({"_id": user_id})
        return await self._with_credentials(collection_id, doc)

    async def exists(self, collection_id: str, user_id: str) -> bool:
        """Whether the user's record still exists (one indexed read; every authenticated request)."""
        return await self._records(collection_id).find_one({"_id": user_id}, {"_id": 1}) is not None

    async def get_by_email(self, collection_id: str, email: str) -> CollectionUser | None:
        """The user with this (lower-cased) email in the collection, or None."""
        doc = await self._records(collection_id).find_one({"email": email})
        return await self._with_credentials(collection_id, doc)

    async def _with_credentials(self, collection_id: str,
                                doc: dict[str, Any] | None) -> CollectionUser | None:
        if doc is None:
            return None
        credentials = await self._credentials.find_one({"_id": doc["_id"]})
        password_hash = str(credentials["password_hash"]) if credentials else ""
        return CollectionUser(collection_id=collection_id, record=record_from_document(doc),
                              password_hash=password_hash)

    async def set_password_hash(self, collection_id: str, user_id: str, password_hash: str) -> None:
        """Store a new password hash for the user."""
        await self._credentials.update_one(
            {"_id": user_id},
            {"$set": {"collection_id": collection_id, "password_hash": password_hash}},
            upsert=True,
        )

    async def update_record(self, collection_id: str, user_id: str, values: dict[str, Any],
                            updated: datetime) -> tuple[Record, Record] | None:
        """Set `values` (e.g. verified=True, email=...) and `updated` on the user's record; returns the
        record as it was before the change and as it is after it (`record_after_update`), or None if
        the user is gone. Joins the transaction open in this task, if one is. Raises AlreadyExists
        (email taken)."""
        await self.ensure_email_index(collection_id)
        records = self._records(collection_id)
        return await update_guarded(records, {**values, "updated": updated}, (), "email",
                                    lambda: records.find_one({"_id": user_id}, session=current_session()))

    async def delete_credentials(self, user_id: str) -> None:
        """Forget a user's credentials (its record is gone)."""
        await self._credentials.delete_one({"_id": user_id})
