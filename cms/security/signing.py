"""Webhook signatures: HMAC-SHA256 of the raw request body, keyed with the webhook's secret.

The one signer of the project: the delivery worker signs with `sign()`, receivers and tests check with `verify()`.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Webhook-Signature"
SIGNATURE_PREFIX = "sha256="


def sign(secret: str, body: bytes) -> str:
    """The `X-Webhook-Signature` value for `body`: "sha256=" + 64 lowercase hex characters.

    The HMAC-SHA256 is keyed with `secret`'s UTF-8 bytes and computed over the exact bytes sent."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify(secret: str, body: bytes, header_value: str) -> bool:
    """True when `header_value` is the signature `sign(secret, body)`, compared in constant time.

    False, never raises, for a missing "sha256=" prefix, a wrong digest or any other text."""
    if not header_value.startswith(SIGNATURE_PREFIX):
        return False
    return hmac.compare_digest(sign(secret, body).encode("utf-8"), header_value.encode("utf-8"))
