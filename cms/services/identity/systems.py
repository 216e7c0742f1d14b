"""User systems: the seam between the identity flows, written once, and where users live (issue 13).

Two kinds of user system exist (spec: Admin authentication, Auth collection endpoints; decisions.md:
Identity and tokens):
- the admin table (`AdminUsers`): users with a role, audience `admin`;
- each auth collection (`CollectionUsers`): users are records of the collection holding `email`
  and `verified` next to its schema fields, audience `collection:<id>`; their password hashes are
  stored apart, so no record read can return one. Their changes emit record events.

A `UserSystem` owns what differs: storage, the token audience, who counts as its principal and how a
user is created from registration data. The flows (`registration`, `login`, `verification`,
`password_reset`, `email_change`, `sessions`, `credentials`) take a system and work on any.
`UserSystems` finds the system of a collection name, a collection id or a token audience.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from cms.clock import Clock, new_id, utcnow
from cms.errors import NotFound, Unauthorized
from cms.models import (
    ADMIN_AUDIENCE,
    ROLE_USER,
    AdminUser,
    Collection,
    CollectionUser,
    Principal,
    Record,
    audience_collection_id,
    collection_audience,
)
from cms.security.passwords import is_unicode_text
from cms.services.access import ADMIN_TABLE_TOKEN_ONLY, AUTH_TYPE, COLLECTION_TOKEN_ONLY
from cms.services.caching.catalog import Catalog
from cms.services.content.fields import RecordSchemas
from cms.services.content.record_writer import RecordWriter, emit_changed
from cms.services.delivery.events import CREATE, DELETE, UPDATE, CollectionEvent, EventBus, RecordEvent
from cms.services.identity.credentials import check_text, new_password_hash, normalize_email
from cms.services.identity.session_tokens import SessionService
from cms.services.operations.settings import SettingsService
from cms.store.admin_users import AdminUserRepository
from cms.store.collection_users import CollectionUserRepository
from cms.store.records import RecordRepository

log = logging.getLogger("cms.identity")

class User(Protocol):
    """What every flow reads of a user, whatever its system."""

    @property
    def id(self) -> str: ...  # noqa: D102

    @property
    def email(self) -> str: ...  # noqa: D102

    @property
    def verified(self) -> bool: ...  # noqa: D102

    @property
    def password_hash(self) -> str: ...  # noqa: D102


U = TypeVar("U", bound=User)


class UserSystem(Protocol[U]):
    """Where the users of one system live and what their tokens look like. Every method raises
    CmsError subclasses only."""

    @property
    def audience(self) -> str:
        """The `aud` of its tokens and the key of its sessions and one-time tokens."""
        ...

    @property
    def collection_name(self) -> str | None:
        """The auth collection's name (for links in emails), None for the admin table."""
        ...

    def owns(self, principal: Principal) -> bool:
        """Whether `principal` is a signed-in user of this system."""
        ...

    @property
    def foreign_token_message(self) -> str:
        """The 401 detail for a principal this system does not own."""
        ...

    async def get(self, user_id: str) -> U | None:
        """The user with this id, or None."""
        ...

    async def find_by_email(self, email: str) -> U | None:
        """The user with this address (compared trimmed and lower-cased), or None."""
        ...

    async def create(self, email: str, password: str, data: dict[str, Any], *, verified: bool) -> U:
        """Validate `data` (the system's own fields), hash `password` and store a new user with the
        normalised `email`. Raises ValidationFailed, AlreadyExists (address taken) or NotFound."""
        ...

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        """Store a new password hash."""
        ...

    async def set_verified(self, user: U) -> U:
        """The user with `verified` true (stored if it was false)."""
        ...

    async def set_email(self, user_id: str, email: str) -> U | None:
        """Change the address (normalised) and mark it verified; None when the user is gone.
        Raises AlreadyExists (the address was taken meanwhile)."""
        ...

    def principal(self, user: U, session_id: str | None) -> Principal:
        """`user` as the caller of a request (session `session_id`, None outside a request)."""
        ...

    async def mfa_enabled(self) -> bool:
        """Whether the system's users with 2FA on must give a second factor at login."""
        ...

    async def oauth_enabled(self) -> bool:
        """Whether the system's users may log in with OAuth2 / OIDC providers."""
        ...


class AdminUsers:
    """The admin table as a user system (UserSystem[AdminUser]). `data` at creation: `name`, and
    `role` (ROLE_USER unless the bootstrap path says ROLE_ADMIN; clients never set it)."""

    audience = ADMIN_AUDIENCE
    collection_name = None
    foreign_token_message = ADMIN_TABLE_TOKEN_ONLY

    def __init__(self, users: AdminUserRepository, settings: SettingsService, *, clock: Clock = utcnow,
                 changed: Callable[[], Awaitable[None]] | None = None) -> None:
        self._users = users
        self._settings = settings
        self._clock = clock
        self._changed = changed

    async def _after_change(self) -> None:
        """A user changed: principals cached from the old values go (`SessionService.invalidate`)."""
        if self._changed is not None:
            await self._changed()

    async def mfa_enabled(self) -> bool:
        """The global `mfa_enabled` setting."""
        return (await self._settings.auth()).mfa_enabled

    async def oauth_enabled(self) -> bool:
        """The global `oauth_enabled` setting."""
        return (await self._settings.auth()).oauth_enabled

    def owns(self, principal: Principal) -> bool:
        """Admin-table users (not API keys acting for them)."""
        return principal.kind == "admin_user"

    async def get(self, user_id: str) -> AdminUser | None:
        """The user with this id, or None."""
        return await self._users.get(user_id)

    async def find_by_email(self, email: str) -> AdminUser | None:
        """The user with this address, or None."""
        email = normalize_email(email)
        return await self._users.get_by_email(email) if is_unicode_text(email) else None

    async def count_admins(self) -> int:
        """How many users have role admin."""
        return await self._users.count_admins()

    async def create(self, email: str, password: str, data: dict[str, Any], *, verified: bool) -> AdminUser:
        """Store a new user (see the class). Raises ValidationFailed (name not Unicode text) or AlreadyExists."""
        name = str(data.get("name", ""))
        check_text(name=name)
        now = self._clock()
        user = AdminUser(id=new_id(), email=normalize_email(email), role=str(data.get("role", ROLE_USER)),
                         verified=verified, name=name, created=now, updated=now,
                         password_hash=await new_password_hash(password))
        await self._users.insert(user)
        return user

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        """Store a new password hash."""
        await self._users.update(user_id, self._clock(), password_hash=password_hash)
        await self._after_change()

    async def set_verified(self, user: AdminUser) -> AdminUser:
        """The user, verified."""
        if user.verified:
            return user
        now = self._clock()
        await self._users.update(user.id, now, verified=True)
        await self._after_change()
        return replace(user, verified=True, updated=now)

    async def set_email(self, user_id: str, email: str) -> AdminUser | None:
        """Change and verify the address. Raises AlreadyExists."""
        await self._users.update(user_id, self._clock(), email=normalize_email(email), verified=True)
        await self._after_change()
        return await self._users.get(user_id)

    def principal(self, user: AdminUser, session_id: str | None) -> Principal:
        """An `admin_user` principal with the user's current role."""
        return Principal(kind="admin_user", user_id=user.id, role=user.role, session_id=session_id,
                         email=user.email, verified=user.verified)

    async def principal_of(self, user_id: str) -> Principal | None:
        """The user `user_id` as a principal (current role, email, verified; no session), or None
        when there is no such user. Applies access rules on a user's behalf outside a request
        (webhook deliveries)."""
        user = await self._users.get(user_id)
        return None if user is None else self.principal(user, None)


class CollectionUsers:
    """One auth collection as a user system (UserSystem[CollectionUser]); `data` at creation is the
    collection's schema fields. Creating, verifying and changing the address emit record events."""

    foreign_token_message = COLLECTION_TOKEN_ONLY

    def __init__(self, collection: Collection, users: CollectionUserRepository, records: RecordRepository,
                 schemas: RecordSchemas, collections: Catalog, events: EventBus, *,
                 clock: Clock = utcnow) -> None:
        self.collection = collection
        self._users = users
        self._records = records
        self._schemas = schemas
        self._collections = collections
        self._events = events
        self._clock = clock
        self._writer = RecordWriter(collections, records, schemas, events, clock=clock)

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
        record = await self._users.update_record(self.collection.id, user_id, values, self._clock())
        if record is not None:
            await self._emit(UPDATE, record)
        return record

    async def _emit(self, kind: str, record: Record) -> None:
        await emit_changed(self._events, kind, self.collection, [record], self._clock())


class UserSystems:
    """Finds user systems: the admin table (`admin`), an auth collection by name or id, or the
    system of a token audience; checks a principal against a system (`current`); and cleans up
    after deleted auth collections and user records (event subscribers)."""

    def __init__(self, admin_users: AdminUserRepository, collection_users: CollectionUserRepository,
                 records: RecordRepository, schemas: RecordSchemas, collections: Catalog,
                 sessions: SessionService, settings: SettingsService, events: EventBus, *,
                 clock: Clock = utcnow, catalog: Catalog) -> None:
        self.admin = AdminUsers(admin_users, settings, clock=clock, changed=sessions.invalidate)
        self._users = collection_users
        self._records = records
        self._schemas = schemas
        self._collections = collections  # TODO(catalog): the same Catalog as `catalog`
        self._catalog = catalog
        self._sessions = sessions
        self._events = events
        self._clock = clock
        self._forgetters: list[Callable[[str], Awaitable[int]]] = []

    def of(self, collection: Collection) -> CollectionUsers:
        """The user system of an auth collection already looked up."""
        return CollectionUsers(collection, self._users, self._records, self._schemas, self._collections,
                               self._events, clock=self._clock)

    async def collection(self, name: str) -> CollectionUsers:
        """The auth collection called `name`. Raises NotFound (no such collection, or not of type auth)."""
        collection = await self._catalog.by_name(name)
        if collection.type != AUTH_TYPE:
            raise NotFound(f"Collection '{name}' is not an auth collection")
        return self.of(collection)

    async def collection_by_id(self, collection_id: str) -> CollectionUsers:
        """The auth collection with this id. Raises NotFound."""
        collection = await self._catalog.by_id(collection_id)
        if collection.type != AUTH_TYPE:
            raise NotFound("Not an auth collection")
        return self.of(collection)

    async def by_audience(self, audience: str) -> UserSystem[Any] | None:
        """The system whose tokens carry `audience`, or None (unknown audience, or a collection that
        is gone or no longer of type auth)."""
        if audience == ADMIN_AUDIENCE:
            return self.admin
        collection_id = audience_collection_id(audience)
        if collection_id is None:
            return None
        try:
            return await self.collection_by_id(collection_id)
        except NotFound:
            return None

    async def principal(self, audience: str, user_id: str, session_id: str) -> Principal:
        """The principal of an authenticated session of `audience` for `user_id`. For an auth
        collection the user and the collection are read concurrently (two `_id` look-ups). Raises
        Unauthorized (unknown audience, collection or user gone)."""
        if audience == ADMIN_AUDIENCE:
            admin = await self.admin.get(user_id)
            if admin is None:
                raise Unauthorized("User no longer exists")
            return self.admin.principal(admin, session_id)
        collection_id = audience_collection_id(audience)
        if collection_id is None:
            raise Unauthorized("Token is not valid here")
        user, collection = await asyncio.gather(self._users.get(collection_id, user_id),
                                                self._catalog.find_by_id(collection_id))
        if user is None or collection is None:
            raise Unauthorized("User no longer exists")
        return self.of(collection).principal(user, session_id)

    async def current(self, system: UserSystem[U], principal: Principal) -> U:
        """The signed-in user `principal` of `system`. Raises Unauthorized (a principal of another
        system, or the user is gone)."""
        if not system.owns(principal):
            raise Unauthorized(system.foreign_token_message)
        user = await system.get(principal.user_id)
        if user is None:
            raise Unauthorized("User no longer exists")
        return user

    # --- clean-up (event subscribers) ------------------------------------------------------------

    def on_forgotten(self, forget: Callable[[str], Awaitable[int]]) -> None:
        """Also call `forget(audience)` when a user system is deleted (second factors, provider
        links); it returns how many entries it dropped."""
        self._forgetters.append(forget)

    async def on_collection_events(self, events: Sequence[CollectionEvent]) -> None:
        """A deleted auth collection is forgotten: its sessions revoked, its credentials dropped,
        and whatever `on_forgotten` registered called with its audience."""
        if any(event.collection.type == AUTH_TYPE for event in events):
            await self._sessions.invalidate()  # cached principals carry the collection's name
        for event in events:
            if event.event != DELETE or event.collection.type != AUTH_TYPE:
                continue
            collection = event.collection
            audience = collection_audience(collection.id)
            revoked = await self._sessions.revoke_audience(audience)
            dropped = await self._users.delete_collection(collection.id)
            for forget in self._forgetters:
                dropped += await forget(audience)
            log.info("auth collection %s deleted: %d sessions revoked, %d credentials dropped",
                     collection.name, revoked, dropped)

    async def on_record_events(self, events: Sequence[RecordEvent]) -> None:
        """When a user's record is deleted (records API, bulk), its credentials are removed and its
        sessions revoked."""
        systems: dict[str, CollectionUsers | None] = {}
        users_changed = False
        for event in events:
            if event.event == CREATE:
                continue
            if event.collection not in systems:
                try:
                    systems[event.collection] = await self.collection(event.collection)
                except NotFound:
                    systems[event.collection] = None
            system = systems[event.collection]
            if system is None:
                continue
            users_changed = True
            if event.event == DELETE:
                await self._users.delete_credentials(event.record_id)
                await self._sessions.revoke_all(event.record_id, system.audience)
        if users_changed:  # a user's fields (email, verified, ...) are in the principals cached for it
            await self._sessions.invalidate()

