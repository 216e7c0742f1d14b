"""Changing a signed-in user's email address (spec: Auth collection endpoints
`me/request-email-change`, `me/confirm-email-change`): a link (24 h, single use) goes to the new
address, which replaces the old one only when confirmed; the old address is then told. A confirmed
change ends the user's sessions, unspent links and OAuth2 provider links.
"""

from __future__ import annotations

from cms.errors import AlreadyExists, TokenInvalid, ValidationFailed
from cms.services.identity.credentials import Credentials, check_text, normalize_email
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.one_time_tokens import EMAIL_CHANGE
from cms.services.identity.systems import U, UserSystem
from cms.store.oauth_identities import OAuthIdentityRepository


class EmailChange:
    """Requests and confirmations of address changes, for any user system."""

    def __init__(self, deps: IdentityDeps, credentials: Credentials, identities: OAuthIdentityRepository) -> None:
        self._deps = deps
        self._credentials = credentials
        self._identities = identities

    async def request(self, system: UserSystem[U], user: U, new_email: str, password: str) -> None:
        """Email a confirmation link to `new_email`. Raises ValidationFailed (not Unicode text, a
        wrong current `password`, or the current address) or AlreadyExists (taken in this system)."""
        check_text(new_email=new_email)
        await self._credentials.require_password(system, user, password, "password")
        new_email = normalize_email(new_email)
        if new_email == user.email:
            raise ValidationFailed("This is already your email address",
                                   errors={"new_email": ["Same as the current address."]})
        if await system.find_by_email(new_email) is not None:
            raise AlreadyExists("This email already exists")
        token = await self._deps.one_time_tokens.issue(EMAIL_CHANGE, user.id, system.audience,
                                                  data={"new_email": new_email})
        await self._deps.mailer.send_email_change(new_email, token, system.collection_name)

    async def confirm(self, system: UserSystem[U], token: str) -> U:
        """Spend an email-change token of `system`: the address becomes the new one, verified; every
        session, every other unspent emailed link and every OAuth2 provider link of the user is
        revoked (they were bound to the old address; docs/concepts/auth.md, OAuth2 login) and the old address gets
        a notice. Raises TokenInvalid / TokenExpired, or AlreadyExists (taken meanwhile)."""
        spent = await self._deps.one_time_tokens.consume(token, EMAIL_CHANGE, audience=system.audience)
        before = await system.get(spent.user_id)
        user = await system.set_email(spent.user_id, str(spent.data.get("new_email", ""))) if before else None
        if before is None or user is None:
            raise TokenInvalid("The user of this token no longer exists")
        await self._deps.sessions.revoke_all(user.id, system.audience)
        await self._deps.one_time_tokens.void_all(user.id)  # a reset link mailed to the old address
        await self._identities.delete_user(system.audience, user.id)
        if before.email and before.email != user.email:
            await self._deps.mailer.send_email_changed(before.email, user.email)
        return user
