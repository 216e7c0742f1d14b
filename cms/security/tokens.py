"""JWT access and refresh tokens: HS256 only, with `typ` and `aud` checked on every decode.

Claims (decisions.md, Identity and tokens): `sub` (user id), `sid` (session id), `jti` (token id),
`typ` (`access` | `refresh` | `mfa` | `file`), `aud` (`admin` or `collection:<collection id>`; a file
token's `file:` and its credential's), `iat` and `exp`
(integer seconds since the epoch). Whether the session is still active is the caller's check;
this module only proves that a token is authentic, current and meant for the caller.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt

from cms.clock import Clock, new_id, utcnow
from cms.errors import Unauthorized

ACCESS = "access"
REFRESH = "refresh"
MFA = "mfa"
"""The `mfa_token` between a login's first and second factor: valid for `2fa/verify` only."""
FILE = "file"
"""A file token (decisions.md, Files in records, thumbnails and file tokens): `?token=` on a file
download, valid 2 minutes; its `aud` is `file:<the credential's audience>` (or `file:api_key`)."""
TOKEN_TYPES = frozenset({ACCESS, REFRESH, MFA, FILE})

ALGORITHM = "HS256"
_STRING_CLAIMS = ("sub", "sid", "jti", "typ", "aud")
_TIME_CLAIMS = ("iat", "exp")


@dataclass(frozen=True)
class TokenClaims:
    """The verified claims of one token. `iat` and `exp` are aware UTC datetimes in whole seconds."""

    sub: str
    sid: str
    jti: str
    typ: str
    aud: str
    iat: datetime
    exp: datetime


VERIFIED_TOKENS_KEPT = 4096
"""Tokens whose verified payload one codec remembers (least recently used go first)."""


class TokenCodec:
    """Issues and decodes HS256 JWTs signed with `secret_key`; `clock` is the time source for `iat` and expiry.

    Raises ValueError when `secret_key` is empty."""

    def __init__(self, secret_key: str, *, clock: Clock = utcnow) -> None:
        if not secret_key:
            raise ValueError("secret_key must not be empty")
        self._secret_key = secret_key
        self._clock = clock
        # A token's signature is checked once per process: the payload of a token that verified is
        # remembered (what fails is not), so the two checks of one request and every later request
        # with the same token cost a dict look-up. Claims are still checked on every use.
        self._verified = functools.lru_cache(maxsize=VERIFIED_TOKENS_KEPT)(self._verify_signature)

    def issue(
        self, *, sub: str, sid: str, typ: str, aud: str, lifetime_s: int, jti: str | None = None
    ) -> tuple[str, TokenClaims]:
        """Sign a new token; returns `(token, claims)`, the claims equal to what `decode` will return.

        `typ` is ACCESS or REFRESH; `lifetime_s` (seconds, > 0) sets `exp = iat + lifetime_s`;
        `iat` is the clock's time truncated to whole seconds (JWT precision); `jti` defaults to a new id.
        Raises ValueError for an unknown `typ` or a non-positive `lifetime_s`."""
        if typ not in TOKEN_TYPES:
            raise ValueError(f"typ must be one of {sorted(TOKEN_TYPES)}, got {typ!r}")
        if lifetime_s <= 0:
            raise ValueError(f"lifetime_s must be positive, got {lifetime_s}")
        iat = self._clock().astimezone(UTC).replace(microsecond=0)
        claims = TokenClaims(
            sub=sub,
            sid=sid,
            jti=jti if jti is not None else new_id(),
            typ=typ,
            aud=aud,
            iat=iat,
            exp=iat + timedelta(seconds=lifetime_s),
        )
        payload = {
            "sub": claims.sub,
            "sid": claims.sid,
            "jti": claims.jti,
            "typ": claims.typ,
            "aud": claims.aud,
            "iat": int(claims.iat.timestamp()),
            "exp": int(claims.exp.timestamp()),
        }
        token = jwt.encode(payload, self._secret_key, algorithm=ALGORITHM)
        return token, claims

    def now(self) -> datetime:
        """The codec's clock reading (aware UTC): what token expiry is checked against."""
        return self._clock()

    def decode(self, token: str, *, typ: str, audience: str, check_expiry: bool = True) -> TokenClaims:
        """Verify `token` and return its claims; it must be of type `typ` and for exactly `audience`.

        Raises Unauthorized for a malformed token, a bad signature, any algorithm but HS256 (`none`
        included), a missing or ill-typed claim, a wrong `typ` (a refresh token is never an access
        token), a wrong `aud`, or expiry ("Token has expired": the clock's time is at or past `exp`;
        not checked with `check_expiry` False, for callers that answer expiry with their own error)."""
        claims = _claims_from_payload(self._verified_payload(token))
        if claims.typ != typ:
            raise Unauthorized(f"Wrong token type: expected '{typ}'")
        if claims.aud != audience:
            raise Unauthorized("Token is not valid for this audience")
        if check_expiry and self._clock() >= claims.exp:
            raise Unauthorized("Token has expired")
        return claims


    def verified_audience(self, token: str) -> str:
        """The `aud` of `token` after checking its signature and algorithm (and nothing else): what
        picks the user system that then decodes the token fully with `decode`. Raises Unauthorized
        for a malformed token, a bad signature, a disallowed algorithm or a missing `aud`."""
        payload = self._verified_payload(token)
        aud = payload.get("aud") if isinstance(payload, dict) else None
        if not isinstance(aud, str) or not aud:
            raise Unauthorized("Token is missing the 'aud' claim")
        return aud

    def _verified_payload(self, token: str) -> dict[str, Any]:
        """The payload of `token` once its signature and pinned algorithm are checked (a copy; the
        check itself is remembered for VERIFIED_TOKENS_KEPT tokens); no claim is checked here.
        Raises Unauthorized (malformed, bad signature, other algorithm)."""
        if not token.isascii():
            # A JWT is base64url and dots; pyjwt would fail to encode lone surrogates (500, not 401).
            raise Unauthorized("Token is malformed")
        return dict(self._verified(token))

    def _verify_signature(self, token: str) -> dict[str, Any]:
        try:
            # pyjwt checks only the signature and the pinned algorithm; every claim is checked by
            # the callers, so the injected clock (not the wall clock) decides expiry.
            payload = jwt.decode(token, self._secret_key, algorithms=[ALGORITHM], options={
                "verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
                "verify_aud": False, "verify_iss": False, "verify_sub": False, "verify_jti": False,
            })
        except jwt.InvalidAlgorithmError as exc:
            raise Unauthorized("Token algorithm is not allowed") from exc
        except jwt.InvalidSignatureError as exc:
            raise Unauthorized("Token signature is invalid") from exc
        except jwt.PyJWTError as exc:
            raise Unauthorized("Token is malformed") from exc
        if not isinstance(payload, dict):
            raise Unauthorized("Token is malformed")
        return payload


def _claims_from_payload(payload: Any) -> TokenClaims:
    """Build TokenClaims from a decoded payload; raises Unauthorized for a missing or ill-typed claim."""
    if not isinstance(payload, dict):
        raise Unauthorized("Token is malformed")
    for name in (*_STRING_CLAIMS, *_TIME_CLAIMS):
        if name not in payload:
            raise Unauthorized(f"Token is missing the '{name}' claim")
    for name in _STRING_CLAIMS:
        if not isinstance(payload[name], str) or not payload[name]:
            raise Unauthorized(f"Token claim '{name}' is invalid")
    claims: dict[str, Any] = {name: payload[name] for name in _STRING_CLAIMS}  # each checked above: a str
    for name in _TIME_CLAIMS:
        value = payload[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Unauthorized(f"Token claim '{name}' is invalid")
        try:
            claims[name] = datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise Unauthorized(f"Token claim '{name}' is invalid") from exc
    return TokenClaims(**claims)
