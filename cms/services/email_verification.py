"""`POST /api/v1/auth/verify-email` for every user system (spec: States and transitions, "User
(admin or auth collection)"): the token's audience says whether it verifies an admin-table user or
a user of an auth collection."""

from __future__ import annotations

from cms.errors import NotFound, TokenInvalid
from cms.models import ADMIN_AUDIENCE, audience_collection_id
from cms.services.accounts import AccountService
from cms.services.collection_auth import CollectionAuthService
from cms.services.one_time_tokens import VERIFY_EMAIL, OneTimeTokens


class EmailVerificationService:
    """Routes a verification token to the user system it was issued for."""

    def __init__(self, accounts: AccountService, collection_auth: CollectionAuthService,
                 one_time_tokens: OneTimeTokens) -> None:
        self._accounts = accounts
        self._collection_auth = collection_auth
        self._one_time_tokens = one_time_tokens

    async def verify(self, token: str) -> None:
        """Spend the token and mark its user verified. Raises TokenInvalid (unknown, used, or of a
        collection that no longer exists) or TokenExpired (24 h)."""
        audience = await self._one_time_tokens.audience_of(token, VERIFY_EMAIL)
        collection_id = audience_collection_id(audience) if audience and audience != ADMIN_AUDIENCE else None
        if collection_id is None:
            await self._accounts.verify_email(token)
            return
        try:
            collection = await self._collection_auth.auth_collection_by_id(collection_id)
        except NotFound as exc:  # the collection is gone, and its user system with it
            raise TokenInvalid() from exc
        await self._collection_auth.verify_email_in(collection, token)
