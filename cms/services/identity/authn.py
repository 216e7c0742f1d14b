"""Authentication: one place that turns a presented credential into a Principal (decisions.md,
Identity and tokens), called once per request by the API's principal middleware.

Credentials: an access token of the admin table (audience `admin`), an access token of an auth
collection (audience `collection:<id>`), or an API key (`cms_...`, in `X-API-Key` or as a bearer
token). A JWT's signature is verified before its audience picks the user system, which then checks
the rest (type, expiry, active session, user still there).
"""

from __future__ import annotations

from cms.models import Principal
from cms.security.tokens import TokenCodec
from cms.services.identity.api_keys import ApiKeyService, is_api_key
from cms.services.identity.sessions import UserSessions


class Authenticator:
    """Resolves credentials of every kind with the user systems and the API key service."""

    def __init__(self, codec: TokenCodec, sessions: UserSessions, api_keys: ApiKeyService) -> None:
        self._codec = codec
        self._sessions = sessions
        self._api_keys = api_keys

    async def authenticate(self, credential: str) -> Principal:
        """The principal behind `credential` (a bearer token or an API key). Raises Unauthorized
        when it is not valid anywhere (bad, expired, revoked, unknown audience)."""
        if is_api_key(credential):
            return await self._api_keys.authenticate(credential)
        return await self._sessions.authenticate(credential, self._codec.verified_audience(credential))
