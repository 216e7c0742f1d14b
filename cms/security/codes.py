"""Random secrets for one-time links, OTP codes and API keys, and how they are stored (SHA-256).

Everything comes from `secrets` (the OS CSPRNG). Only hashes are stored; the plain values go to
the user once and are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

API_KEY_PREFIX = "cms_"
OTP_DIGITS = 6
API_KEY_BYTES = 32


def new_token(nbytes: int = 32) -> str:
    """A URL-safe random string carrying `nbytes` random bytes (about 1.3 characters per byte).

    For one-time links (email verification, password reset, email change); not a JWT."""
    return secrets.token_urlsafe(nbytes)


def hash_token(token: str) -> str:
    """The SHA-256 of `token`'s UTF-8 bytes as 64 lowercase hex characters.

    This is what is stored for one-time tokens and API keys, and what a presented value is looked up by.
    Never raises: lone surrogates in a presented value are encoded as themselves ("surrogatepass"),
    bytes no valid text produces, so such a value simply matches nothing."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_otp_code() -> str:
    """A uniformly random 6-digit decimal code as a string, leading zeros kept (e.g. "004217")."""
    return f"{secrets.randbelow(10**OTP_DIGITS):0{OTP_DIGITS}d}"


def new_api_key() -> str:
    """A new API key secret: "cms_" followed by URL-safe random text (32 random bytes)."""
    return API_KEY_PREFIX + secrets.token_urlsafe(API_KEY_BYTES)


def constant_time_equals(a: str, b: str) -> bool:
    """True when `a == b`, compared with `hmac.compare_digest` on their UTF-8 bytes (no timing leak).

    Never raises; lone surrogates are encoded as in `hash_token`."""
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))
