"""Repository of second factors (Mongo collections `mfa_factors` and `mfa_challenges`).

A factor is one user's TOTP secret, keyed by user system and user (`<audience>|<user id>`): a
`pending_secret` between setup and enable, then `secret`, `enabled`, the SHA-256 hashes of the
unused recovery codes and `last_step`, the TOTP time step of the last accepted code (a code is
accepted only for a later step, so none is accepted twice). A challenge is the server side of one
`mfa_token`: its attempts and whether it was spent; a TTL index removes it a day after expiry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ReturnDocument

from cms.store.client import Database


def factor_id(audience: str, user_id: str) -> str:
    """The `_id` of a user's factor."""
    return f"{audience}|{user_id}"


class MfaRepository:
    """Factors and challenges; every change that must happen once is one conditional update."""

    def __init__(self, db: Database) -> None:
        self._factors = db["mfa_factors"]
        self._challenges = db["mfa_challenges"]

    async def ensure_indexes(self) -> None:
        """The challenges' TTL index (idempotent)."""
        await self._challenges.create_index("expires_at", expireAfterSeconds=24 * 3600)

    async def factor(self, audience: str, user_id: str) -> dict[str, Any] | None:
        """The user's factor document, or None."""
        return await self._factors.find_one({"_id": factor_id(audience, user_id)})

    async def set_pending(self, audience: str, user_id: str, secret: str, now: datetime) -> None:
        """Store a new secret awaiting its first code (setup); an enabled factor stays as it is."""
        await self._factors.update_one(
            {"_id": factor_id(audience, user_id)},
            {"$set": {"pending_secret": secret, "updated": now},
             "$setOnInsert": {"audience": audience, "user_id": user_id, "enabled": False}},
            upsert=True,
        )

    async def enable(self, audience: str, user_id: str, secret: str, step: int, recovery_hashes: list[str],
                     now: datetime) -> bool:
        """Turn the factor on with `secret` if it is still the pending one and the factor is off;
        `step` is the time step of the code that proved it. False when another request got there first."""
        result = await self._factors.update_one(
            {"_id": factor_id(audience, user_id), "pending_secret": secret, "enabled": False},
            {"$set": {"secret": secret, "enabled": True, "last_step": step, "recovery_hashes": recovery_hashes,
                      "updated": now},
             "$unset": {"pending_secret": ""}},
        )
        return result.modified_count == 1

    async def claim_step(self, audience: str, user_id: str, step: int) -> bool:
        """Accept a code of time step `step` once: True if the factor is on and no code of this or a
        later step was accepted before."""
        result = await self._factors.update_one(
            {"_id": factor_id(audience, user_id), "enabled": True, "last_step": {"$lt": step}},
            {"$set": {"last_step": step}},
        )
        return result.modified_count == 1

    async def use_recovery_code(self, audience: str, user_id: str, code_hash: str) -> bool:
        """Spend one recovery code (by hash): True if it was unused."""
        result = await self._factors.update_one(
            {"_id": factor_id(audience, user_id), "enabled": True, "recovery_hashes": code_hash},
            {"$pull": {"recovery_hashes": code_hash}},
        )
        return result.modified_count == 1

    async def count_failure(self, audience: str, user_id: str, now: datetime, window_start: datetime) -> None:
        """Count one wrong code against the user's factor: `failures` within the window that began at
        `failures_since`, restarted at `now` when that is before `window_start`."""
        key = factor_id(audience, user_id)
        counted = await self._factors.update_one({"_id": key, "failures_since": {"$gte": window_start}},
                                                 {"$inc": {"failures": 1}})
        if counted.modified_count == 0:
            await self._factors.update_one({"_id": key}, {"$set": {"failures": 1, "failures_since": now}})

    async def clear_failures(self, audience: str, user_id: str) -> None:
        """Forget the wrong codes counted so far (a right one was given)."""
        await self._factors.update_one({"_id": factor_id(audience, user_id)}, {"$set": {"failures": 0}})

    async def delete(self, audience: str, user_id: str) -> None:
        """Forget the user's factor (2FA off)."""
        await self._factors.delete_one({"_id": factor_id(audience, user_id)})

    async def delete_audience(self, audience: str) -> int:
        """Forget every factor of a user system (an auth collection was deleted); returns how many."""
        result = await self._factors.delete_many({"audience": audience})
        return result.deleted_count

    async def insert_challenge(self, challenge_id: str, audience: str, user_id: str, expires_at: datetime) -> None:
        """Record a new challenge (one `mfa_token`)."""
        await self._challenges.insert_one({"_id": challenge_id, "audience": audience, "user_id": user_id,
                                           "attempts": 0, "used_at": None, "expires_at": expires_at})

    async def claim_attempt(self, challenge_id: str, max_attempts: int) -> dict[str, Any] | None:
        """Count one try of an unspent challenge with tries left; the challenge after the count, or
        None (spent, voided or unknown), so parallel guesses cannot get past `max_attempts`."""
        return await self._challenges.find_one_and_update(
            {"_id": challenge_id, "used_at": None, "attempts": {"$lt": max_attempts}},
            {"$inc": {"attempts": 1}}, return_document=ReturnDocument.AFTER,
        )

    async def spend_challenge(self, challenge_id: str, now: datetime) -> bool:
        """Mark the challenge spent; False if it already was."""
        result = await self._challenges.update_one({"_id": challenge_id, "used_at": None},
                                                   {"$set": {"used_at": now}})
        return result.modified_count == 1
