"""User systems: the seam between the identity flows, written once, and where users live (issue 13).

Two kinds of user system exist (spec: Admin authentication, Auth collection endpoints; decisions.md:
Identity and tokens):
- the admin table (`AdminUsers`, admin_users.py): users with a role, audience `admin`;
- each auth collection (`CollectionUsers`, collection_users.py): users are records of the
  collection holding `email` and `verified` next to its schema fields, audience
  `collection:<id>`; their password hashes are stored apart, so no record read can return one.
  Their changes emit record events.

A `UserSystem` owns what differs: storage, the token audience, who counts as its principal and how a
user is created from registration data. The flows (`registration`, `login`, `verification`,
`password_reset`, `email_change`, `sessions`, `credentials`) take a system and work on any.
This module holds the `UserSystem` protocol and `UserSystems`, which finds the system of a
collection name, a collection id or a token audience.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from cms.clock import Clock, utcnow
from cms.errors import NotFound, Unauthorized
from cms.models import ADMIN_AUDIENCE, Collection, Principal, audience_collection_id, collection_audience
from cms.security.passwords import is_unicode_text
from cms.services.access import AUTH_TYPE, require_admin
from cms.services.caching.catalog import Catalog
from cms.services.content.record_writer import RecordWriter
from cms.services.delivery.events import CREATE, DELETE, CollectionEvent, RecordEvent
from cms.services.identity.admin_users import AdminUsers
from cms.services.identity.collection_users import CollectionUsers
from cms.services.identity.session_tokens import SessionService
from cms.services.operations.settings import SettingsService
from cms.store.admin_users import AdminUserRepository
from cms.store.collection_users import CollectionUserRepository

log = logging.getLogger("cms.identity")

MAX_WHO_CHARS = 320
"""The longest user id or address `UserSystems.stand_in` looks up (an address is at most 320 characters)."""


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


class UserSystems:
    """Finds user systems: the admin table (`admin`), an auth collection by name or id, or the
    system of a token audience; checks a principal against a system (`current`); and cleans up
    after deleted auth collections and user records (event subscribers)."""

    def __init__(self, admin_users: AdminUserRepository, collection_users: CollectionUserRepository,
                 writer: RecordWriter, catalog: Catalog, sessions: SessionService, settings: SettingsService,
                 *, clock: Clock = utcnow) -> None:
        """`writer`: the one record writer, which creates the users of auth collections."""
        self.admin = AdminUsers(admin_users, settings, clock=clock, changed=sessions.invalidate)
        self._users = collection_users
        self._writer = writer
        self._catalog = catalog
        self._sessions = sessions
        self._forgetters: list[Callable[[str], Awaitable[int]]] = []

    def of(self, collection: Collection) -> CollectionUsers:
        """The user system of an auth collection already looked up."""
        return CollectionUsers(collection, self._users, self._writer)

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

    async def stand_in(self, principal: Principal, collection_name: str, who: str) -> Principal:
        """The principal that user `who` (an id, else an address) of the auth collection `collection_name`
        has in its own requests (`CollectionUsers.principal`, as a session gives it), without a session:
        what an admin's "view as" decides with. It carries that user's rights and no more (a
        `collection_user` never bypasses a rule). For admins only (`principal`). Raises Forbidden (not an
        admin) or NotFound (no such auth collection or user)."""
        require_admin(principal)
        system = await self.collection(collection_name)
        user = None
        if 0 < len(who) <= MAX_WHO_CHARS and is_unicode_text(who):
            user = await system.get(who) or await system.find_by_email(who)
        if user is None:
            raise NotFound(f"No user '{who}' in '{collection_name}'")
        return system.principal(user, None)

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

