"""File tokens (decisions.md, Files in records, thumbnails and file tokens): what lets an `<img>`,
which sends no header, download a file of a `protected` field.

`POST /api/v1/files/token` (any credentials) answers `{"token", "expires"}`: an HS256 JWT of type
`file` (cms/security/tokens.py), valid FILE_TOKEN_LIFETIME_S seconds, bound to the credential it was
asked with: its session (`sid`, `sub`, and the session's audience in `aud` as `file:<audience>`) or
its API key (`sid` the key's SHA-256, `aud` `file:api_key`). `GET /api/v1/files/{id}?token=...`
downloads as that principal, looked up again on every use (`Authenticator.revalidate`): a token of a
session that was revoked, of a deleted key or of a user who is gone is not valid, whatever its `exp`.
"""

from __future__ import annotations

from datetime import datetime

from cms.errors import Unauthorized
from cms.models import Principal
from cms.security.tokens import FILE, TokenCodec
from cms.services.identity.authn import Authenticator, CredentialRef

FILE_TOKEN_LIFETIME_S = 120
"""Seconds a file token is valid (2 minutes)."""
AUDIENCE_PREFIX = "file:"
API_KEY_AUDIENCE = "api_key"


class FileTokens:
    """Issues and resolves file tokens (module docstring)."""

    def __init__(self, codec: TokenCodec, authenticator: Authenticator) -> None:
        self._codec = codec
        self._authenticator = authenticator

    async def issue(self, credential: str) -> tuple[str, datetime]:
        """A file token for the principal behind `credential` (a bearer token or an API key, as the
        request presented it) and its expiry (aware UTC). Raises Unauthorized when the credential
        is not valid."""
        principal, ref = await self._authenticator.reference(credential)
        if ref.key_hash:
            sub, sid, audience = principal.user_id, ref.key_hash, API_KEY_AUDIENCE
        else:
            sub, sid, audience = ref.user_id, ref.session_id, ref.audience
        token, claims = self._codec.issue(sub=sub, sid=sid, typ=FILE, aud=AUDIENCE_PREFIX + audience,
                                          lifetime_s=FILE_TOKEN_LIFETIME_S)
        return token, claims.exp

    async def principal_of(self, token: str) -> Principal | None:
        """The principal a file token stands for now, or None when it is not valid: malformed,
        signed by another key, of another type, expired, or its session, key or user gone."""
        try:
            audience = self._codec.verified_audience(token)
            if not audience.startswith(AUDIENCE_PREFIX):
                return None
            claims = self._codec.decode(token, typ=FILE, audience=audience)
            credential = audience.removeprefix(AUDIENCE_PREFIX)
            if credential == API_KEY_AUDIENCE:
                ref = CredentialRef(key_hash=claims.sid)
            else:
                ref = CredentialRef(audience=credential, session_id=claims.sid, user_id=claims.sub)
            return await self._authenticator.revalidate(ref)
        except Unauthorized:
            return None


def same_principal(a: Principal, b: Principal) -> bool:
    """Whether two principals are the same caller: the same kind of credential, user and auth
    collection (a file token must be the header's caller's when both are sent)."""
    return (a.kind, a.user_id, a.collection_id) == (b.kind, b.user_id, b.collection_id)
