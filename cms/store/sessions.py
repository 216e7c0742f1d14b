"""Repository of login sessions (Mongo collection `sessions`), shared by every user system."""

from __future__ import annotations

from datetime import datetime
from functools import partial

from cms.models import Session
from cms.store.client import Database
from cms.store.documents import from_document
from cms.store.repository import Repository


class SessionRepository(Repository[Session]):
    """Sessions keyed by id (`insert` stores a new active one); revocation is a `revoked_at`
    timestamp, so it holds on every replica."""

    def __init__(self, db: Database) -> None:
        super().__init__(db["sessions"], partial(from_document, Session), unique="session")

    async def get(self, session_id: str) -> Session | None:
        """The session with this id (active or revoked), or None."""
        return await self._find_one({"_id": session_id})

    async def list_active(self, user_id: str, audience: str) -> list[Session]:
        """The user's active sessions in one user system, newest first."""
        return await self._find({"user_id": user_id, "audience": audience, "revoked_at": None}, [("created", -1)])

    async def rotate_refresh(self, session_id: str, spent_jti: str, new_jti: str, now: datetime) -> bool:
        """Atomically replace the refresh jti if `spent_jti` is still current and the session is active,
        remembering `spent_jti` as `previous_refresh_jti` and `now` as `refresh_rotated_at`.

        Returns False when the token was already spent (reuse) or the session is revoked."""
        result = await self._mongo_coll.update_one(
            {"_id": session_id, "refresh_jti": spent_jti, "revoked_at": None},
            {"$set": {"refresh_jti": new_jti, "previous_refresh_jti": spent_jti,
                      "refresh_rotated_at": now, "last_used": now}},
        )
        return result.modified_count == 1

    async def get_if_just_rotated(self, session_id: str, spent_jti: str, rotated_since: datetime) -> Session | None:
        """The active session if `spent_jti` is the jti its last rotation spent and that rotation
        happened at or after `rotated_since`; else None.

        One conditional read of one document, so the returned `refresh_jti` is the current one
        that this rotation produced (a later rotation changes `previous_refresh_jti` with it)."""
        doc = await self._mongo_coll.find_one({
            "_id": session_id, "revoked_at": None, "previous_refresh_jti": spent_jti,
            "refresh_rotated_at": {"$gte": rotated_since},
        })
        return from_document(Session, doc) if doc else None

    async def touch(self, session_id: str, now: datetime) -> None:
        """Record use of the session (`last_used`)."""
        await self._mongo_coll.update_one({"_id": session_id}, {"$set": {"last_used": now}})

    async def revoke(self, session_id: str, now: datetime, *, user_id: str | None = None) -> bool:
        """Revoke one active session (of `user_id` when given). Returns False if none matched."""
        query: dict[str, object] = {"_id": session_id, "revoked_at": None}
        if user_id is not None:
            query["user_id"] = user_id
        result = await self._mongo_coll.update_one(query, {"$set": {"revoked_at": now}})
        return result.modified_count == 1

    async def revoke_all(self, user_id: str, audience: str, now: datetime, *, keep: str | None = None) -> int:
        """Revoke every active session of the user in one user system, except `keep`. Returns the count."""
        query: dict[str, object] = {"user_id": user_id, "audience": audience, "revoked_at": None}
        if keep is not None:
            query["_id"] = {"$ne": keep}
        result = await self._mongo_coll.update_many(query, {"$set": {"revoked_at": now}})
        return result.modified_count

    async def revoke_audience(self, audience: str, now: datetime) -> int:
        """Revoke every active session of one user system (a deleted auth collection). Returns the count."""
        result = await self._mongo_coll.update_many({"audience": audience, "revoked_at": None},
                                                    {"$set": {"revoked_at": now}})
        return result.modified_count
