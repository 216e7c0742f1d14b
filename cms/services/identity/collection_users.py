"""One auth collection as a user system (`CollectionUsers`; spec: Auth collection endpoints;
decisions.md: Identity and tokens): users are records of the collection, written through the one
record writer, with their password hashes stored apart. The flows take it as a `UserSystem`
(cms.services.identity.systems)."""

from __future__ import annotations

from typing import Any

from cms.models import Collection, CollectionUser, Principal, Record, collection_audience
from cms.security.passwords import is_unicode_text
from cms.services.access import COLLECTION_TOKEN_ONLY
from cms.services.content.record_writer import RecordWriter
from cms.services.identity.credentials import new_password_hash, normalize_email
from cms.store.collection_users import CollectionUserRepository


class CollectionUsers:
    """One auth collection as a user system (UserSystem[CollectionUser]); `data` at creation is the
    collection's schema fields. Creating, verifying and changing the address emit record events."""

    foreign_token_message = COLLECTION_TOKEN_ONLY

    def __init__(self, collection: Collection, users: CollectionUserRepository, writer: RecordWriter) -> None:
        """`writer`: the process's one record writer, which REST creates use too (its transactions
        and outbox included)."""
        self.collection = collection
        self._users = users
        self._writer = writer

    @property
    def audience(self) -> str:
        """`collection:<id>`."""
        return collection_audience(self.collection.id)

    @property
    def collection_name(self) -> str:
        """The collection's name."""
        return self.collection.name

    async def mfa_enabled(self) -> bool:
        """The collection's own `mfa_enabled`."""
        return self.collection.mfa_enabled

    async def oauth_enabled(self) -> bool:
        """The collection's own `oauth_enabled`."""
        return self.collection.oauth_enabled

    def owns(self, principal: Principal) -> bool:
        """Users of this collection."""
        return principal.kind == "collection_user" and principal.collection_id == self.collection.id

    async def get(self, user_id: str) -> CollectionUser | None:
        """The user with this id, or None."""
        return await self._users.get(self.collection.id, user_id)

    async def find_by_email(self, email: str) -> CollectionUser | None:
        """The user with this address, or None."""
        email = normalize_email(email)
        return await self._users.get_by_email(self.collection.id, email) if is_unicode_text(email) else None

    async def create(self, email: str, password: str, data: dict[str, Any], *, verified: bool) -> CollectionUser:
        """Store a new user: a record with `email`, `verified` and the schema fields of `data`, and its
        credentials, through the one record writer (`RecordWriter.create`: validate, relations,
        insert, deleted-collection guard, the record's `create` event). Raises ValidationFailed
        (schema fields, relations), AlreadyExists (address taken in this collection) or NotFound (the collection was
        deleted meanwhile; what was stored is dropped)."""
        collection = self.collection
        hashes: list[str] = []

        async def store(record: Record) -> None:  # hashed once the values passed (argon2 is slow)
            hashes.append(await new_password_hash(password))
            await self._users.insert(CollectionUser(collection.id, record, hashes[0]))

        record = await self._writer.create(collection, data, store=store,
                                           fixed={"email": normalize_email(email), "verified": verified},
                                           undo=lambda: self._users.delete_collection(collection.id))
        return CollectionUser(collection.id, record, hashes[0])

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        """Store a new password hash."""
        await self._users.set_password_hash(self.collection.id, user_id, password_hash)

    async def set_verified(self, user: CollectionUser) -> CollectionUser:
        """The user, verified (an `update` event if it changed)."""
        if user.verified:
            return user
        record = await self._update(user.id, {"verified": True})
        return CollectionUser(self.collection.id, record, user.password_hash) if record else user

    async def set_email(self, user_id: str, email: str) -> CollectionUser | None:
        """Change and verify the address (an `update` event). Raises AlreadyExists."""
        record = await self._update(user_id, {"email": normalize_email(email), "verified": True})
        return None if record is None else CollectionUser(self.collection.id, record)

    def principal(self, user: CollectionUser, session_id: str | None) -> Principal:
        """A `collection_user` principal of this collection."""
        return Principal(kind="collection_user", user_id=user.id, session_id=session_id,
                         collection_id=self.collection.id, collection_name=self.collection.name,
                         email=user.email, verified=user.verified)

    async def _update(self, user_id: str, values: dict[str, Any]) -> Record | None:
        """Set `values` on the user's record and emit its `update` (with the record as it was before
        as `previous`); returns the record after the change, or None if the user is gone. Raises
        AlreadyExists (email taken)."""
        async with await self._writer.unit(self.collection):  # as a REST update: with its outbox entries
            change = await self._users.update_record(self.collection.id, user_id, values, self._writer.clock())
            if change is None:
                return None
            before, record = change
            await self._writer.emit_updated(self.collection, [record], [before])
        return record
