"""Repository of OAuth2 identities (Mongo collection `oauth_identities`): which user of which user
system a provider's account (`provider`, `subject`) signs in as, so a changed email at the provider
still finds the user."""

from __future__ import annotations

from datetime import datetime

from cms.store.client import Database
from cms.store.errors import translate_errors


def identity_id(audience: str, provider: str, subject: str) -> str:
    """The `_id` of an identity: one per user system, provider and provider account."""
    return f"{audience}|{provider}|{subject}"


class OAuthIdentityRepository:
    """Links from provider accounts to users; one link per (user system, provider, subject)."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["oauth_identities"]

    async def ensure_indexes(self) -> None:
        """The index of a user system's links, for clean-up (idempotent)."""
        await self._mongo_coll.create_index("audience")

    async def user_of(self, audience: str, provider: str, subject: str) -> str | None:
        """The id of the user linked to this provider account, or None."""
        doc = await self._mongo_coll.find_one({"_id": identity_id(audience, provider, subject)})
        return str(doc["user_id"]) if doc else None

    async def link(self, audience: str, provider: str, subject: str, user_id: str, email: str | None,
                   now: datetime) -> None:
        """Link the provider account to `user_id`. Raises AlreadyExists when it is linked already
        (a concurrent first login)."""
        async with translate_errors("provider"):
            await self._mongo_coll.insert_one({"_id": identity_id(audience, provider, subject), "audience": audience,
                                               "provider": provider, "subject": subject, "user_id": user_id,
                                               "email": email, "created": now})

    async def unlink(self, audience: str, provider: str, subject: str) -> None:
        """Forget a link (its user is gone)."""
        await self._mongo_coll.delete_one({"_id": identity_id(audience, provider, subject)})

    async def delete_user(self, audience: str, user_id: str) -> int:
        """Forget every link of one user of a user system (its address changed); returns how many."""
        return (await self._mongo_coll.delete_many({"audience": audience, "user_id": user_id})).deleted_count

    async def delete_audience(self, audience: str) -> int:
        """Forget every link of a deleted user system; returns how many."""
        return (await self._mongo_coll.delete_many({"audience": audience})).deleted_count
