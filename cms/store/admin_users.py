"""Repository of the built-in users table (Mongo collection `admin_users`)."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from cms.models import ROLE_ADMIN, AdminUser
from cms.store.client import Database
from cms.store.documents import from_document
from cms.store.repository import Repository


class AdminUserRepository(Repository[AdminUser]):
    """Admin-table users; emails are stored lower-cased and unique (`insert` raises AlreadyExists
    when the email is taken)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db["admin_users"], partial(from_document, AdminUser), unique="email")

    async def get(self, user_id: str) -> AdminUser | None:
        """The user with this id, or None."""
        return await self._find_one({"_id": user_id})

    async def get_by_email(self, email: str) -> AdminUser | None:
        """The user with this (lower-cased) email, or None."""
        return await self._find_one({"email": email})

    async def count_admins(self) -> int:
        """How many users have role `admin`."""
        return await self._mongo_coll.count_documents({"role": ROLE_ADMIN})

    async def update(self, user_id: str, updated: datetime, **values: Any) -> None:
        """Set `values` (e.g. verified=True, password_hash=...) and `updated` on one user."""
        await self._mongo_coll.update_one({"_id": user_id}, {"$set": {**values, "updated": updated}})
