"""Auth-collection users: register, login, refresh, me, email verification, change password, email
change and sessions (spec: Auth collection endpoints, States and transitions, Authentication 6-9;
decisions.md: Identity and tokens, Response shapes).

Each auth collection is its own user system: its tokens carry the audience `collection:<id>` and
are refused everywhere else. A user is a record of the collection holding `email` (lower-cased,
unique in the collection) and `verified` next to its schema fields; the password hash is stored
apart (see `cms.store.collection_users`), so no record read can return it. Password reset and OTP
login build on this service (`password_resets.py`, `otp.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, NoReturn

from cms.clock import Clock, new_id, utcnow
from cms.errors import (
    AlreadyExists,
    InvalidCredentials,
    NotFound,
    TokenInvalid,
    Unauthorized,
    ValidationFailed,
)
from cms.models import (
    Collection,
    CollectionUser,
    LoginResult,
    Principal,
    Record,
    Session,
    TokenPair,
    audience_collection_id,
    collection_audience,
)
from cms.security.passwords import hash_password, is_unicode_text
from cms.services.accounts import check_login_password, check_password, check_text, normalize_email
from cms.services.audit import AuditService
from cms.services.collections import CollectionService
from cms.services.events import CREATE, DELETE, UPDATE, CollectionEvent, EventBus, RecordEvent
from cms.services.fields import RecordSchemas
from cms.services.mail import Mailer
from cms.services.one_time_tokens import EMAIL_CHANGE, VERIFY_EMAIL, OneTimeTokens
from cms.services.records import check_relations, drop_if_deleted, emit_changed
from cms.services.sessions import SessionService
from cms.services.settings import SettingsService
from cms.store.collection_users import CollectionUserRepository
from cms.store.records import RecordRepository

log = logging.getLogger("cms.collection_auth")

AUTH_TYPE = "auth"


class CollectionAuthService:
    """The user systems of auth collections; every method raises CmsError subclasses only."""

    def __init__(
        self,
        collections: CollectionService,
        users: CollectionUserRepository,
        records: RecordRepository,
        schemas: RecordSchemas,
        sessions: SessionService,
        one_time_tokens: OneTimeTokens,
        mailer: Mailer,
        settings: SettingsService,
        audit: AuditService,
        events: EventBus,
        *,
        clock: Clock = utcnow,
    ) -> None:
        self._collections = collections
        self._users = users
        self._records = records
        self._schemas = schemas
        self._sessions = sessions
        self._one_time_tokens = one_time_tokens
        self._mailer = mailer
        self._settings = settings
        self._audit = audit
        self._events = events
        self._clock = clock

    # --- collections and users ------------------------------------------------------------------

    async def auth_collection(self, name: str) -> Collection:
        """The auth collection called `name`. Raises NotFound (no such collection, or not of type auth)."""
        collection = await self._collections.get_by_name(name)
        if collection.type != AUTH_TYPE:
            raise NotFound(f"Collection '{name}' is not an auth collection")
        return collection

    async def auth_collection_by_id(self, collection_id: str) -> Collection:
        """The auth collection with this id. Raises NotFound."""
        collection = await self._collections.get(collection_id)
        if collection.type != AUTH_TYPE:
            raise NotFound("Not an auth collection")
        return collection

    async def find_by_email(self, collection_id: str, email: str) -> CollectionUser | None:
        """The user with this address (compared lower-cased) in the collection, or None."""
        email = normalize_email(email)
        return await self._users.get_by_email(collection_id, email) if is_unicode_text(email) else None

    # --- register, login, refresh -----------------------------------------------------------------

    async def register(
        self, collection_name: str, email: str, password: str, password_confirm: str | None,
        data: dict[str, Any], *, ip: str = "", user_agent: str = "",
    ) -> CollectionUser:
        """Create an unverified user: a record with `email`, `verified` false and the schema fields in
        `data`; queue its verification email; emit the record's `create` event.

        Raises NotFound (collection), ValidationFailed (password policy or confirmation, schema
        fields of `data`) or AlreadyExists (the address is taken in this collection, in any case)."""
        collection = await self.auth_collection(collection_name)
        policy = (await self._settings.auth()).password_policy
        check_password(policy, password, password_confirm)
        check_text(email=email)
        loaded = self._schemas.load(collection, data, partial=False)
        values = {k: v for k, v in loaded.items() if v is not None}
        await check_relations(self._records, collection, values)
        now = self._clock()
        record = Record(id=new_id(), created=now, updated=now,
                        data={"email": normalize_email(email), "verified": False, **values})
        user = CollectionUser(collection.id, record, await asyncio.to_thread(hash_password, password))
        await self._users.insert(user)
        await self._check_still_there(collection, user)
        await self._send_verification(collection, user)
        await self._audit.record("register", user_id=user.id, ip_address=ip, user_agent=user_agent,
                                 details={"audience": collection_audience(collection.id)})
        await self._emit(CREATE, collection, record)
        return user

    async def _check_still_there(self, collection: Collection, user: CollectionUser) -> None:
        """After storing a new user: if the collection was deleted meanwhile, drop what this
        registration left (record and credentials) and raise NotFound (see `drop_if_deleted`)."""
        try:
            await drop_if_deleted(self._collections, self._records, collection)
        except NotFound:
            await self._users.delete_collection(collection.id)
            raise

    async def login(self, collection_name: str, email: str, password: str, *, ip: str = "",
                    user_agent: str = "") -> LoginResult:
        """Check the password and start a session. Raises NotFound (collection) or InvalidCredentials,
        the same (and in about the same time: one argon2 verification either way) for an unknown
        email and a wrong password. Failures are written to the audit log (`login_failed`)."""
        collection = await self.auth_collection(collection_name)
        email = normalize_email(email)
        user = await self.find_by_email(collection.id, email)
        matches, upgraded = await check_login_password(user.password_hash if user else None, password)
        if user is None or not matches:
            await self._login_failed(collection, email, user.id if user else None, ip, user_agent)
        if upgraded is not None:
            await self._users.set_password_hash(collection.id, user.id, upgraded)
        return await self.start_session(collection, user, method="password", ip=ip, user_agent=user_agent)

    async def _login_failed(self, collection: Collection, email: str, user_id: str | None, ip: str,
                            user_agent: str) -> NoReturn:
        await self._audit.record(
            "login_failed", user_id=user_id, ip_address=ip, user_agent=user_agent,
            details={"email": email if is_unicode_text(email) else "",
                     "audience": collection_audience(collection.id)},
        )
        raise InvalidCredentials()

    async def start_session(self, collection: Collection, user: CollectionUser, *, method: str, ip: str = "",
                            user_agent: str = "") -> LoginResult:
        """Start a session for a user who proved who they are (`method`: password, otp) and return
        the login response; writes `login_success` to the audit log."""
        auth = await self._settings.auth()
        audience = collection_audience(collection.id)
        _, pair = await self._sessions.start(
            user.id, audience, access_lifetime_s=auth.access_lifetime_s,
            refresh_lifetime_s=auth.refresh_lifetime_s, user_agent=user_agent, ip=ip,
        )
        await self._audit.record("login_success", user_id=user.id, ip_address=ip, user_agent=user_agent,
                                 details={"audience": audience, "method": method})
        return LoginResult(user=user, token=pair, message=None, requires_2fa=False)

    async def refresh(self, collection_name: str, refresh_token: str) -> TokenPair:
        """Rotate a refresh token of this collection (see SessionService.refresh). Raises NotFound
        (collection) or Unauthorized (invalid, expired, spent, revoked, or of another audience)."""
        collection = await self.auth_collection(collection_name)
        auth = await self._settings.auth()
        return await self._sessions.refresh(
            refresh_token, collection_audience(collection.id),
            access_lifetime_s=auth.access_lifetime_s, refresh_lifetime_s=auth.refresh_lifetime_s,
            reuse_interval_s=auth.refresh_reuse_interval_s,
        )

    async def authenticate(self, access_token: str, audience: str) -> Principal:
        """The principal (kind `collection_user`) behind an access token of audience
        `collection:<id>`. Raises Unauthorized (bad token, revoked session, user gone)."""
        collection_id = audience_collection_id(audience)
        if collection_id is None:
            raise Unauthorized("Token is not valid here")
        claims, session = await self._sessions.authenticate(access_token, audience)
        user, collection = await asyncio.gather(self._users.get(collection_id, claims.sub),
                                                self._collections.find(collection_id))
        if user is None or collection is None:
            raise Unauthorized("User no longer exists")
        return Principal(kind="collection_user", user_id=claims.sub, session_id=session.id,
                         collection_id=collection_id, collection_name=collection.name, email=user.email,
                         verified=user.verified)

    # --- the current user -------------------------------------------------------------------------

    async def current(self, principal: Principal, collection_name: str) -> tuple[Collection, CollectionUser]:
        """The collection and the calling user. Raises NotFound (collection) or Unauthorized (the
        principal is not a user of this collection, or the user is gone)."""
        collection = await self.auth_collection(collection_name)
        if principal.kind != "collection_user" or principal.collection_id != collection.id:
            raise Unauthorized("Not a token of this collection")
        user = await self._users.get(collection.id, principal.user_id)
        if user is None:
            raise Unauthorized("User no longer exists")
        return collection, user

    async def me(self, principal: Principal, collection_name: str) -> CollectionUser:
        """The calling user (see `current`)."""
        _, user = await self.current(principal, collection_name)
        return user

    async def change_password(
        self, principal: Principal, collection_name: str, old_password: str, new_password: str,
        password_confirm: str | None, *, ip: str = "", user_agent: str = "",
    ) -> None:
        """Set a new password; every other session of the user is revoked, the caller's stays.
        Raises Unauthorized (see `current`) or ValidationFailed (policy, confirmation, or a wrong
        `old_password`: errors `{"old_password": [...]}`)."""
        collection, user = await self.current(principal, collection_name)
        policy = (await self._settings.auth()).password_policy
        check_password(policy, new_password, password_confirm, field="new_password")
        await self._require_password(collection, user, old_password, "old_password", ip, user_agent)
        await self._users.set_password_hash(collection.id, user.id,
                                            await asyncio.to_thread(hash_password, new_password))
        revoked = await self._sessions.revoke_all(user.id, collection_audience(collection.id),
                                                  keep=principal.session_id)
        await self._audit.record("password_changed", user_id=user.id, ip_address=ip, user_agent=user_agent,
                                 details={"audience": collection_audience(collection.id),
                                          "sessions_revoked": revoked})

    async def _require_password(self, collection: Collection, user: CollectionUser, password: str, field: str,
                                ip: str, user_agent: str) -> None:
        """Raise ValidationFailed naming `field` unless `password` is the user's current password; a
        wrong one is audited as `login_failed`."""
        matches, _ = await check_login_password(user.password_hash, password)
        if matches:
            return
        await self._audit.record(
            "login_failed", user_id=user.id, ip_address=ip, user_agent=user_agent,
            details={"email": user.email, "audience": collection_audience(collection.id), "during": field},
        )
        raise ValidationFailed("The current password is incorrect", errors={field: ["Incorrect password."]})

    async def request_email_change(
        self, principal: Principal, collection_name: str, new_email: str, password: str, *, ip: str = "",
        user_agent: str = "",
    ) -> None:
        """Email a confirmation link (24 h, single use) to `new_email`; the address changes only when
        it is confirmed. Raises Unauthorized (see `current`), ValidationFailed (wrong current
        `password`, or `new_email` is the current address) or AlreadyExists (taken in this collection)."""
        collection, user = await self.current(principal, collection_name)
        check_text(new_email=new_email)
        await self._require_password(collection, user, password, "password", ip, user_agent)
        new_email = normalize_email(new_email)
        if new_email == user.email:
            raise ValidationFailed("This is already your email address",
                                   errors={"new_email": ["Same as the current address."]})
        if await self._users.get_by_email(collection.id, new_email) is not None:
            raise AlreadyExists("This email already exists")
        token = await self._one_time_tokens.issue(EMAIL_CHANGE, user.id, collection_audience(collection.id),
                                                  data={"new_email": new_email})
        await self._mailer.send_email_change(new_email, token, collection.name)

    async def confirm_email_change(self, collection_name: str, token: str) -> CollectionUser:
        """Spend an email-change token: the address becomes the new one, verified, and every session
        of the user is revoked (the old tokens named the old address). Raises NotFound (collection),
        TokenInvalid / TokenExpired, or AlreadyExists (the address was taken meanwhile)."""
        collection = await self.auth_collection(collection_name)
        audience = collection_audience(collection.id)
        spent = await self._one_time_tokens.consume(token, EMAIL_CHANGE, audience=audience)
        new_email = str(spent.data.get("new_email", ""))
        record = await self._users.update_record(collection.id, spent.user_id,
                                                 {"email": new_email, "verified": True}, self._clock())
        if record is None:
            raise TokenInvalid("The user of this token no longer exists")
        await self._sessions.revoke_all(spent.user_id, audience)
        await self._emit(UPDATE, collection, record)
        return CollectionUser(collection.id, record)

    # --- email verification -----------------------------------------------------------------------

    async def verify_email(self, collection_name: str, token: str) -> CollectionUser:
        """Spend a verification token of this collection and mark the user verified. Raises NotFound
        (collection), TokenInvalid (unknown, used, replaced, of another user system) or TokenExpired
        (24 h)."""
        return await self.verify_email_in(await self.auth_collection(collection_name), token)

    async def verify_email_in(self, collection: Collection, token: str) -> CollectionUser:
        """As `verify_email`, for a collection already looked up (the admin-path endpoint finds it
        by the token's audience)."""
        audience = collection_audience(collection.id)
        spent = await self._one_time_tokens.consume(token, VERIFY_EMAIL, audience=audience)
        record = await self._set_verified(collection, spent.user_id)
        if record is None:
            raise TokenInvalid("The user of this token no longer exists")
        await self._audit.record("email_verified", user_id=spent.user_id, details={"audience": audience})
        return CollectionUser(collection.id, record)

    async def mark_verified(self, collection: Collection, user: CollectionUser) -> CollectionUser:
        """The user with `verified` true (stored, with an `update` event, if it was false)."""
        if user.verified:
            return user
        record = await self._set_verified(collection, user.id)
        return CollectionUser(collection.id, record, user.password_hash) if record else user

    async def _set_verified(self, collection: Collection, user_id: str) -> Record | None:
        record = await self._users.update_record(collection.id, user_id, {"verified": True}, self._clock())
        if record is not None:
            await self._emit(UPDATE, collection, record)
        return record

    async def resend_verification(self, principal: Principal, collection_name: str) -> bool:
        """Queue a new verification email (older links stop working). False if already verified.
        Raises Unauthorized (see `current`)."""
        collection, user = await self.current(principal, collection_name)
        if user.verified:
            return False
        await self._send_verification(collection, user)
        return True

    async def _send_verification(self, collection: Collection, user: CollectionUser) -> None:
        token = await self._one_time_tokens.issue(VERIFY_EMAIL, user.id, collection_audience(collection.id))
        await self._mailer.send_verification(user.email, token, collection=collection.name)

    # --- password reset (the flow is in password_resets.py) ---------------------------------------

    async def complete_password_reset(self, audience: str, user_id: str, password_hash: str) -> bool:
        """Store the new hash, mark the address verified (the reset link proved it) and revoke every
        session of the user. False when the collection or the user is gone."""
        collection_id = audience_collection_id(audience)
        if collection_id is None:
            return False
        try:
            collection = await self.auth_collection_by_id(collection_id)
        except NotFound:
            return False
        user = await self._users.get(collection.id, user_id)
        if user is None:
            return False
        await self._users.set_password_hash(collection.id, user_id, password_hash)
        await self.mark_verified(collection, user)
        await self._sessions.revoke_all(user_id, audience)
        return True

    # --- sessions ---------------------------------------------------------------------------------

    async def list_sessions(self, principal: Principal, collection_name: str) -> list[Session]:
        """The caller's active sessions, newest first. Raises Unauthorized (see `current`)."""
        collection, user = await self.current(principal, collection_name)
        return await self._sessions.list_active(user.id, collection_audience(collection.id))

    async def revoke_session(self, principal: Principal, collection_name: str, session_id: str, *,
                             ip: str = "", user_agent: str = "") -> None:
        """Revoke one of the caller's sessions (its tokens stop working at once). Raises
        Unauthorized (see `current`) or NotFound (no active session of the caller has this id)."""
        collection, user = await self.current(principal, collection_name)
        audience = collection_audience(collection.id)
        if not await self._sessions.revoke(session_id, user_id=user.id):
            raise NotFound("Session not found")
        await self._audit.record("session_revoked", user_id=user.id, ip_address=ip, user_agent=user_agent,
                                 details={"audience": audience, "session_id": session_id})

    async def revoke_all_sessions(self, principal: Principal, collection_name: str, *, ip: str = "",
                                  user_agent: str = "") -> int:
        """Revoke every session of the caller, the current one included; returns how many.
        Raises Unauthorized (see `current`)."""
        collection, user = await self.current(principal, collection_name)
        audience = collection_audience(collection.id)
        count = await self._sessions.revoke_all(user.id, audience)
        await self._audit.record("session_revoked", user_id=user.id, ip_address=ip, user_agent=user_agent,
                                 details={"audience": audience, "all": True, "count": count})
        return count

    # --- record events ----------------------------------------------------------------------------

    async def on_collection_events(self, events: Sequence[CollectionEvent]) -> None:
        """Subscriber of the collection events: a deleted auth collection is forgotten."""
        for event in events:
            if event.event == DELETE:
                await self.forget_collection(event.collection)

    async def forget_collection(self, collection: Collection) -> None:
        """After an auth collection is deleted: revoke its sessions and drop its credentials."""
        if collection.type != AUTH_TYPE:
            return
        revoked = await self._sessions.revoke_audience(collection_audience(collection.id))
        dropped = await self._users.delete_collection(collection.id)
        log.info("auth collection %s deleted: %d sessions revoked, %d credentials dropped",
                 collection.name, revoked, dropped)

    async def on_record_events(self, events: Sequence[RecordEvent]) -> None:
        """Subscriber of the record events: when a user's record is deleted (records API, bulk),
        its credentials are removed and its sessions revoked."""
        kinds: dict[str, Collection | None] = {}
        for event in events:
            if event.event != DELETE:
                continue
            if event.collection not in kinds:
                try:
                    kinds[event.collection] = await self.auth_collection(event.collection)
                except NotFound:
                    kinds[event.collection] = None
            collection = kinds[event.collection]
            if collection is None:
                continue
            await self._users.delete_credentials(event.record_id)
            await self._sessions.revoke_all(event.record_id, collection_audience(collection.id))

    async def _emit(self, kind: str, collection: Collection, record: Record) -> None:
        await emit_changed(self._events, kind, collection, [record], self._clock())

