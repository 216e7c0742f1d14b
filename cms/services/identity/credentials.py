"""Credentials of every user system: address normalisation, the password policy, argon2 work off
the event loop, and a signed-in user's password checks and change (spec: Authentication 1-4,
Auth collection endpoints `me/change-password`; decisions.md: Identity and tokens).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from cms.errors import ValidationFailed
from cms.models import Principal
from cms.security.passwords import (
    PasswordPolicy,
    hash_password,
    is_unicode_text,
    needs_rehash,
    verify_dummy,
    verify_password,
)
from cms.services.delivery.events import AuditEvent
from cms.services.identity.deps import IdentityDeps

if TYPE_CHECKING:
    from cms.services.identity.systems import U, UserSystem


def normalize_email(email: str) -> str:
    """Emails are compared and stored trimmed and lower-cased."""
    return email.strip().lower()


def check_password(policy: PasswordPolicy, password: str, confirm: str | None, field: str = "password") -> None:
    """Apply the password policy and the optional confirmation. Raises ValidationFailed (422)."""
    problems = policy.violations(password)
    if problems:
        raise ValidationFailed("Password does not meet the policy", errors={field: problems})
    if confirm is not None and confirm != password:
        raise ValidationFailed("Passwords do not match", errors={"password_confirm": ["Does not match."]})


def check_text(**values: str) -> None:
    """Refuse values that are not valid Unicode text (lone surrogates). Raises ValidationFailed (422)
    naming each such field."""
    bad = {name: ["Must be valid Unicode text."] for name, value in values.items() if not is_unicode_text(value)}
    if bad:
        raise ValidationFailed("Text is not valid Unicode", errors=bad)


async def new_password_hash(password: str) -> str:
    """The argon2 hash of `password`, computed in a thread (about 50 ms of CPU)."""
    return await asyncio.to_thread(hash_password, password)


async def check_login_password(password_hash: str | None, password: str) -> tuple[bool, str | None]:
    """Check a login password with one argon2 verification whether or not the account exists: with
    no hash (unknown email, or an account without a password) `password` is checked against the
    dummy hash, so every failure takes about the same time (no timing oracle).

    Returns `(matches, upgraded)`: `upgraded` is a new hash of `password` when it matched a hash made
    with other hasher parameters (store it while the password is known), else None."""
    if not password_hash:
        await asyncio.to_thread(verify_dummy, password)
        return False, None
    if not await asyncio.to_thread(verify_password, password_hash, password):
        return False, None
    if needs_rehash(password_hash):
        return True, await new_password_hash(password)
    return True, None


class Credentials:
    """The password policy (a setting) and a signed-in user's password checks, for any user system."""

    def __init__(self, deps: IdentityDeps) -> None:
        self._deps = deps

    async def check_policy(self, password: str, confirm: str | None, field: str = "password") -> None:
        """Apply the current password policy (settings) and the confirmation. Raises ValidationFailed."""
        check_password((await self._deps.settings.auth()).password_policy, password, confirm, field)

    async def require_password(self, system: UserSystem[U], user: U, password: str, field: str) -> None:
        """Raise ValidationFailed naming `field` unless `password` is the user's current password; a
        wrong one is audited as `login_failed` (with `during: field`)."""
        matches, _ = await check_login_password(user.password_hash, password)
        if matches:
            return
        await self._deps.events.emit([AuditEvent(
            "login_failed", user_id=user.id,
            details={"email": user.email, "audience": system.audience, "during": field},
        )])
        raise ValidationFailed("The current password is incorrect", errors={field: ["Incorrect password."]})

    async def change_password(self, system: UserSystem[U], principal: Principal, user: U, old_password: str,
                              new_password: str, password_confirm: str | None) -> None:
        """Set a new password for the signed-in `user`; every other session of the user is revoked,
        the caller's (`principal.session_id`) stays. Raises ValidationFailed (policy or confirmation:
        `new_password`; a wrong `old_password`: errors `{"old_password": [...]}`)."""
        await self.check_policy(new_password, password_confirm, field="new_password")
        await self.require_password(system, user, old_password, "old_password")
        await system.set_password_hash(user.id, await new_password_hash(new_password))
        revoked = await self._deps.sessions.revoke_all(user.id, system.audience, keep=principal.session_id)
        await self._deps.events.emit([AuditEvent("password_changed", user_id=user.id,
                                            details={"audience": system.audience, "sessions_revoked": revoked})])
