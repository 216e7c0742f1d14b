"""Repository of the built-in users table (Mongo collection `admin_users`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cms.models import ROLE_ADMIN, AdminUser
from cms.store.client import Database
from cms.store.documents import from_document, to_document
from cms.store.errors import translate_errors


class AdminUserRepository:
    """Admin-table users; emails are stored lower-cased and unique."""

    def __init__(self, db: Database) -> None:
        self._mongo_coll = db["admin_users"]

    async def insert(self, user: AdminUser) -> None:
        """Store a new user. Raises AlreadyExists when the email is taken."""
        async with translate_errors("email"):
            await self._mongo_coll.insert_one(to_document(user))

    async def get(self, user_id: str) -> AdminUser | None:
        """The user with this id, or None."""
        doc = await self._mongo_coll.find_one({"_id": user_id})
        return from_document(AdminUser, doc) if doc else None

    async def get_by_email(self, email: str) -> AdminUser | None:
        """The user with this (lower-cased) email, or None."""
        doc = await self._mongo_coll.find_one({"email": email})
        return from_document(AdminUser, doc) if doc else None

    async def count_admins(self) -> int:
        """How many users have role `admin`."""
        return await self._mongo_coll.count_documents({"role": ROLE_ADMIN})

    async def update(self, user_id: str, updated: datetime, **values: Any) -> None:
        """Set `values` (e.g. verified=True, password_hash=...) and `updated` on one user."""
        await self._mongo_coll.update_one({"_id": user_id}, {"$set": {**values, "updated": updated}})
